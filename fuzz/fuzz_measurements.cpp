// libFuzzer target for measurement files (JSON lines): any input is either rows that the planner
// can be compared with, or an InputError naming the line.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainfit/error.hpp"
#include "trainfit/measurements.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto rows = trainfit::parse_measurements(text, "fuzz");
    trainfit::compare_with_measurements(rows);  // unknown models or cards are InputErrors too
  } catch (const trainfit::InputError&) {
  }
  return 0;
}
