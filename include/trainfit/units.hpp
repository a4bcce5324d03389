#pragma once
// Byte quantities. Every memory figure in trainfit is an exact integer number
// of bytes; MiB/GiB exist only for input and display.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace trainfit {

inline constexpr std::int64_t kKiB = 1024;
inline constexpr std::int64_t kMiB = 1024 * kKiB;
inline constexpr std::int64_t kGiB = 1024 * kMiB;

// The largest byte count a figure holds (8 EiB less a byte). A figure computed past it (eager
// attention over millions of tokens keeps a score matrix of 10^19 bytes and more) is held at it:
// such a setup is over every card, its figure reads "more than 8 EiB", and it never wraps to a
// negative count.
inline constexpr std::int64_t kMostBytes = std::numeric_limits<std::int64_t>::max();

// A count (bytes, parameters) computed in double: rounded, 0 below zero, kMostBytes past int64's
// range (a double converted to int64 past it is undefined behaviour, in practice INT64_MIN).
// Throws std::domain_error for NaN, which no figure of a valid setup is.
std::int64_t count_of(double count);

// a + b for byte counts of at least 0, held at kMostBytes.
inline std::int64_t add_bytes(std::int64_t a, std::int64_t b) {
  return a > kMostBytes - b ? kMostBytes : a + b;
}

// Parses "16GiB", "16 GB", "16303MiB", "1.5TiB" or a plain byte count.
// Decimal units (KB, MB, GB, TB) are powers of 1000, binary ones (KiB...) of 1024.
// Throws InputError for anything negative, zero, non-numeric or above 1 PiB.
std::int64_t parse_bytes(std::string_view text);

// "11.6 GiB", "950.2 MiB": one decimal, binary units; kMostBytes is "more than 8 EiB".
std::string format_bytes(std::int64_t bytes);

inline double to_mib(std::int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(kMiB); }

}  // namespace trainfit
