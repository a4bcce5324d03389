// libFuzzer target for memory snapshots' JSON (trainfit.snapshot/1) as `trainfit trace --snapshot`
// reads them: analysed, or an InputError; never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainfit/error.hpp"
#include "trainfit/trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto s = trainfit::trace::analyse_snapshot_text(text, "fuzz");
    (void)trainfit::trace::render_snapshot(s, nullptr, trainfit::Format::table);
  } catch (const trainfit::InputError&) {
  }
  return 0;
}
