// libFuzzer target for time profiles: any input is either a profile whose rates are usable
// (positive, efficiencies at most 1) and that survives a write/read round trip, or an InputError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainfit/error.hpp"
#include "trainfit/time.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  trainfit::TimeProfile p;
  try {
    p = trainfit::parse_profile(text, "fuzz");
  } catch (const trainfit::InputError&) {
    return 0;
  }
  for (const double v : {p.matmul_efficiency, p.attention_efficiency, p.fp32_efficiency, p.bandwidth_efficiency})
    if (!(v > 0.0 && v <= 1.0)) __builtin_trap();
  if (!(p.host_seconds_per_op > 0.0) || !(p.kernel_floor_seconds > 0.0)) __builtin_trap();
  const trainfit::TimeProfile q = trainfit::parse_profile(trainfit::profile_to_toml(p), "round trip");
  if (q.host_seconds_per_op != p.host_seconds_per_op) __builtin_trap();
  return 0;
}
