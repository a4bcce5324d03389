// libFuzzer target for files of published runs (JSON lines, `validate --published`): any input is
// runs that the planner can be compared with, or an InputError naming the line.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainfit/error.hpp"
#include "trainfit/measurements.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto runs = trainfit::parse_published_runs(text, "fuzz");
    trainfit::compare_with_published(runs);  // unknown models or cards are InputErrors too
  } catch (const trainfit::InputError&) {
  }
  return 0;
}
