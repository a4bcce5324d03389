// libFuzzer target for Kineto traces as `trainfit trace` reads them: any input is analysed, or
// refused with an InputError; never a crash, and a truncated or malformed one is a partial answer.
// The figures of whatever is read must hold together (idle splits into its three parts).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "trainfit/error.hpp"
#include "trainfit/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const trainfit::trace::RankTrace r = trainfit::trace::analyse_trace_text(text, "fuzz");
    for (const auto& s : r.steps) {
      const double parts = s.input_wait_s + s.sync_wait_s + s.host_wait_s;
      if (s.gpu_busy_s < 0 || s.gpu_busy_s > s.wall_s + 1e-9 || std::fabs(parts - s.idle_s) > 1e-6 * (1 + s.wall_s))
        __builtin_trap();
    }
    (void)trainfit::trace::render_trace({{r}, -1, ""}, nullptr, nullptr, trainfit::Format::json);
  } catch (const trainfit::InputError&) {
  }
  return 0;
}
