// libFuzzer target for parse_bytes/format_bytes: any input either parses to a size in
// [1 B, 1 PiB] that survives a format/parse round trip, or is an InputError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainfit/error.hpp"
#include "trainfit/units.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::int64_t bytes = 0;
  try {
    bytes = trainfit::parse_bytes(text);
  } catch (const trainfit::InputError&) {
    return 0;
  }
  if (bytes < 1 || bytes > 1024 * 1024 * trainfit::kGiB) __builtin_trap();
  // format_bytes rounds to one decimal, so the round trip is approximate (within 5%).
  const std::int64_t again = trainfit::parse_bytes(trainfit::format_bytes(bytes));
  const double ratio = static_cast<double>(again) / static_cast<double>(bytes);
  if (ratio < 0.95 || ratio > 1.05) __builtin_trap();
  return 0;
}
