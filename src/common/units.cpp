// Byte quantities: parsing user input ("16GiB", "16303MiB", "1.5 TB") and
// formatting for display. Every accepted value is an exact integer byte count.
#include "trainfit/units.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>
#include <system_error>

#include "common/text.hpp"
#include "trainfit/error.hpp"

namespace trainfit {
namespace {

constexpr std::int64_t kTiB = 1024 * kGiB;
constexpr std::int64_t kPiB = 1024 * kTiB;

struct Unit {
  std::string_view name;  // lower-case
  double factor;
};

// Bare K/M/G/T/P are binary: that is what nvidia-smi ("MiB") and PyTorch mean when
// people paste "16G", and reading them as decimal would under-state a card by 7%.
constexpr std::array kUnits{
    Unit{"", 1.0},         Unit{"b", 1.0},         Unit{"byte", 1.0},       Unit{"bytes", 1.0},
    Unit{"k", 0x1p10},     Unit{"kib", 0x1p10},    Unit{"kb", 1e3},
    Unit{"m", 0x1p20},     Unit{"mib", 0x1p20},    Unit{"mb", 1e6},
    Unit{"g", 0x1p30},     Unit{"gib", 0x1p30},    Unit{"gb", 1e9},
    Unit{"t", 0x1p40},     Unit{"tib", 0x1p40},    Unit{"tb", 1e12},
    Unit{"p", 0x1p50},     Unit{"pib", 0x1p50},    Unit{"pb", 1e15},
};

[[noreturn]] void fail(std::string_view text, std::string_view why) {
  throw InputError(fmt::format("invalid byte size {}: {}", detail::quoted(text), why));
}

bool is_space(char c) { return c == ' ' || c == '\t'; }

}  // namespace

std::int64_t parse_bytes(std::string_view text) {
  std::string_view s = text;
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  if (s.empty()) fail(text, "empty");
  if (s.front() == '-') fail(text, "must be positive");

  // Number: digits with an optional fraction. Checked by hand because from_chars
  // would also take "inf", "nan" and exponents, which are not sizes.
  std::size_t i = 0;
  std::size_t int_digits = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) != 0) { ++i; ++int_digits; }
  std::size_t frac_digits = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) != 0) { ++i; ++frac_digits; }
  }
  if (int_digits == 0 || (i > int_digits && frac_digits == 0)) fail(text, "expected a number such as 16GiB");
  // Anything longer than this is above 1 PiB whatever the unit (or absurd precision).
  if (int_digits > 20 || frac_digits > 20) fail(text, "number too long");
  double value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + i, value, std::chars_format::fixed);
  if (ec != std::errc{} || end != s.data() + i) fail(text, "not a number");

  std::string_view rest = s.substr(i);
  while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
  if (rest.size() > 5) fail(text, "unknown unit (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");
  std::string unit;
  for (char c : rest) unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  const Unit* found = nullptr;
  for (const Unit& u : kUnits) {
    if (u.name == unit) found = &u;
  }
  if (found == nullptr) fail(text, "unknown unit (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)");

  const double bytes = std::round(value * found->factor);
  if (!(bytes >= 1.0)) fail(text, "must be positive");
  // Compared as double before converting, so no out-of-range conversion can happen.
  if (bytes > static_cast<double>(kPiB)) fail(text, "larger than 1 PiB");
  return static_cast<std::int64_t>(bytes);
}

std::int64_t count_of(double count) {
  if (std::isnan(count)) throw std::domain_error("a count is not a number");
  if (!(count > 0.0)) return 0;
  // 2^63 is the first double past int64's range (the largest int64 is not a double).
  if (count >= 0x1p63) return kMostBytes;
  return static_cast<std::int64_t>(std::llround(count));
}

std::string format_bytes(std::int64_t bytes) {
  if (bytes == kMostBytes) return "more than 8 EiB";
  // Magnitude as unsigned so INT64_MIN does not overflow on negation.
  const bool negative = bytes < 0;
  const auto magnitude = negative ? 0 - static_cast<std::uint64_t>(bytes) : static_cast<std::uint64_t>(bytes);
  const char* sign = negative ? "-" : "";
  if (magnitude < static_cast<std::uint64_t>(kKiB)) return fmt::format("{}{} B", sign, magnitude);
  static constexpr std::array<const char*, 6> names{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(magnitude) / 1024.0;
  std::size_t k = 0;
  // Move up a unit when one decimal would round to 1024.0 ("1.0 GiB", not "1024.0 MiB").
  while (k + 1 < names.size() && value >= 1023.95) {
    value /= 1024.0;
    ++k;
  }
  return fmt::format("{}{:.1f} {}", sign, value, names[k]);
}

}  // namespace trainfit
