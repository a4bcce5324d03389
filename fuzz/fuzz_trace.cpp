// libFuzzer target for Kineto traces as `trainfit trace` reads them: any input is analysed, or
// refused with an InputError; never a crash, and a truncated or malformed one is a partial answer.
// The figures of whatever is read must hold together (idle splits into its three parts). The
// same input read on several threads (in small chunks, so that threads begin at many places of
// it, and a guess of where an event begins can be wrong) must give the one thread's answer, to the
// byte, or its error.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "trace/trace_data.hpp"
#include "trainfit/error.hpp"
#include "trainfit/trace.hpp"

namespace {

std::string answer(std::string_view text, const trainfit::trace::detail::ReadOptions& options) {
  namespace tt = trainfit::trace;
  try {
    tt::TraceReport report;
    report.ranks.push_back(tt::detail::analyse(tt::detail::read_trace_text(text, "fuzz", options), "fuzz", {}));
    return tt::render_trace(report, nullptr, nullptr, trainfit::Format::json);
  } catch (const trainfit::InputError& e) {
    return std::string("error: ") + e.what();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  {
    const std::size_t chunk = 96 + size % 61;  // blocks fall anywhere relative to the events
    if (answer(text, {1, chunk, 0}) != answer(text, {2, chunk, 1 + size % 2})) __builtin_trap();
  }
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
