// libFuzzer target for the config.json reader. An InputError is the expected answer to
// bad input; any other exception, a crash, a sanitizer report or a broken invariant on
// an accepted config is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainfit/error.hpp"
#include "trainfit/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const trainfit::ModelSpec model = trainfit::parse_model_config(text, "fuzz.json");
    const trainfit::ParameterCounts c = trainfit::count_parameters(model);
    if (c.total <= 0 || c.total != c.embedding + c.lm_head + c.linear + c.norms + c.other) __builtin_trap();
    for (const auto& m : trainfit::layer_linear_modules(model)) {
      if (m.in_features <= 0 || m.out_features <= 0 || m.count <= 0) __builtin_trap();
      if (!(m.token_fraction > 0.0 && m.token_fraction <= 1.0)) __builtin_trap();
    }
    if (model.is_moe() != !trainfit::dense_layer_linear_modules(model).empty()) __builtin_trap();
  } catch (const trainfit::InputError&) {
  }
  return 0;
}
