#include "common/text.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "trainfit/error.hpp"
#include "trainfit/units.hpp"

namespace trainfit::detail {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // One row of the dynamic-programming table at a time.
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0U : 1U)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

namespace {

// The length of the UTF-8 sequence at the start of `s` (2 to 4), or 0 when it does not start with
// a well-formed one (a stray continuation byte, a truncated sequence, an overlong form, a
// surrogate, past U+10FFFF).
std::size_t utf8_sequence(std::string_view s) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char b = byte(0);
  const std::size_t n = b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
  if (n == 0 || s.size() < n) return 0;
  for (std::size_t i = 1; i < n; ++i)
    if ((byte(i) & 0xc0) != 0x80) return 0;
  if (b == 0xe0 && byte(1) < 0xa0) return 0;   // overlong
  if (b == 0xed && byte(1) > 0x9f) return 0;   // surrogates
  if (b == 0xf0 && byte(1) < 0x90) return 0;   // overlong
  if (b == 0xf4 && byte(1) > 0x8f) return 0;   // past U+10FFFF
  return n;
}

}  // namespace

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += s[i++];
    } else if (c == '\n') {
      out += "\\n";
      ++i;
    } else if (c == '\r') {
      out += "\\r";
      ++i;
    } else if (c == '\t') {
      out += "\\t";
      ++i;
    } else if (const std::size_t n = c >= 0x80 ? utf8_sequence(s.substr(i)) : 0; n == 0) {
      out += fmt::format("\\x{:02x}", c);  // a C0 control, DEL, or a byte that is not UTF-8
      ++i;
    } else if (n == 2 && c == 0xc2 && static_cast<unsigned char>(s[i + 1]) <= 0x9f) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(s[i + 1]));  // a C1 control
      i += 2;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string read_text_file(std::string_view path, std::string_view what, std::optional<std::size_t> max_bytes) {
  const std::filesystem::path p{std::string(path)};
  std::error_code ec;
  const auto status = std::filesystem::status(p, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw InputError(fmt::format("cannot read {} '{}': {}", what, path, ec.message()));
  if (!std::filesystem::exists(status)) throw InputError(fmt::format("cannot read {} '{}': no such file", what, path));
  // A directory opens like a file and reads as empty: say what it is instead.
  if (std::filesystem::is_directory(status))
    throw InputError(fmt::format("cannot read {} '{}': it is a directory", what, path));
  std::ifstream in{p, std::ios::binary};
  if (!in) throw InputError(fmt::format("cannot read {} '{}'", what, path));
  std::string text;
  std::array<char, 1 << 16> chunk{};
  while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
    text.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
    if (max_bytes && text.size() > *max_bytes) {
      throw InputError(fmt::format("{} '{}' is larger than {}", what, path,
                                   format_bytes(static_cast<std::int64_t>(*max_bytes))));
    }
  }
  if (in.bad()) throw InputError(fmt::format("cannot read {} '{}'", what, path));
  return text;
}

std::string read_file_tail(const std::string& path, std::size_t max_bytes) {
  std::ifstream in{path, std::ios::binary};
  if (!in) return {};
  // /proc files report a size of 0 (and seek oddly): they are read from the start, and are small.
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > max_bytes) in.seekg(static_cast<std::streamoff>(size - max_bytes));
  std::string text;
  std::array<char, 1 << 16> chunk{};
  while (text.size() < max_bytes && (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0))
    text.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
  if (text.size() > max_bytes) text.erase(0, text.size() - max_bytes);
  return text;
}

}  // namespace trainfit::detail
