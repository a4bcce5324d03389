// libFuzzer target for experiment plans and the criteria language: any input either parses (and
// then evaluates against a row and a run of rows without crashing) or is an InputError.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  using namespace trainfit::bench;
  const Fields row = {{"status", std::string("ok")}, {"peak_allocated", 9709.9}, {"vram", 16303.0},
                      {"grad_ckpt", true}, {"params_b", 7.6}, {"verdict", std::string("fits")}, {"error", Value{}}};
  const std::vector<Fields> rows = {row, {{"status", std::string("oom")}, {"grad_ckpt", false}}};
  try {
    const Expression e = Expression::parse(text, [](std::string_view f) { return is_row_field(f); });
    try {
      (void)e.evaluate(e.has_aggregates() ? nullptr : &row, &rows);
    } catch (const trainfit::InputError&) {
    }
  } catch (const trainfit::InputError&) {
  }
  try {
    const ExperimentPlan p = parse_experiment_plan(text, "fuzz.toml");
    if (p.name.empty() || p.axes.empty() || p.steps <= p.warmup) __builtin_trap();
    (void)expand_matrix(p);
  } catch (const trainfit::InputError&) {
  }
  return 0;
}
