#pragma once
// Byte quantities. Every memory figure in trainfit is an exact integer number
// of bytes; MiB/GiB exist only for input and display.
#include <cstdint>
#include <string>
#include <string_view>

namespace trainfit {

inline constexpr std::int64_t kKiB = 1024;
inline constexpr std::int64_t kMiB = 1024 * kKiB;
inline constexpr std::int64_t kGiB = 1024 * kMiB;

// Parses "16GiB", "16 GB", "16303MiB", "1.5TiB" or a plain byte count.
// Decimal units (KB, MB, GB, TB) are powers of 1000, binary ones (KiB...) of 1024.
// Throws InputError for anything negative, zero, non-numeric or above 1 PiB.
std::int64_t parse_bytes(std::string_view text);

// "11.6 GiB", "950.2 MiB": one decimal, binary units.
std::string format_bytes(std::int64_t bytes);

inline double to_mib(std::int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kMiB); }

}  // namespace trainfit
