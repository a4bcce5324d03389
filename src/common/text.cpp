#include "common/text.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
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

std::vector<std::string> split_names(std::string_view list) {
  std::vector<std::string> out;
  for (std::size_t from = 0; from <= list.size();) {
    const std::size_t comma = std::min(list.find(',', from), list.size());
    if (comma > from) out.emplace_back(list.substr(from, comma - from));
    from = comma + 1;
  }
  return out;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string quoted(std::string_view s) {
  return "'" + printable(s, 80) + "'";
}

std::string printable(std::string_view s, std::size_t max_bytes) {
  if (s.size() <= max_bytes) return printable(s);
  std::size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xc0) == 0x80) --cut;  // inside a character
  return fmt::format("{}... ({} bytes)", printable(s.substr(0, cut)), s.size());
}

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

namespace {

// A file the user named, open for reading, or the InputError that says why not.
std::ifstream open_user_file(std::string_view path, std::string_view what) {
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
  return in;
}

[[noreturn]] void too_large(std::string_view path, std::string_view what, std::size_t max_bytes) {
  throw InputError(fmt::format("{} '{}' is larger than {}", what, path, format_bytes(static_cast<std::int64_t>(max_bytes))));
}

}  // namespace

std::string read_text_file(std::string_view path, std::string_view what, std::optional<std::size_t> max_bytes) {
  std::ifstream in = open_user_file(path, what);
  std::string text;
  std::array<char, 1 << 16> chunk{};
  while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
    text.append(chunk.data(), static_cast<std::size_t>(in.gcount()));
    if (max_bytes && text.size() > *max_bytes) too_large(path, what, *max_bytes);
  }
  if (in.bad()) throw InputError(fmt::format("cannot read {} '{}'", what, path));
  return text;
}

void for_each_line_in(std::string_view text, std::string_view source, std::size_t max_line_bytes,
                      const std::function<void(int, std::string_view)>& on_line) {
  int line = 0;
  for (std::size_t from = 0; from < text.size();) {
    const std::size_t newline = std::min(text.find('\n', from), text.size());
    const std::string_view raw = text.substr(from, newline - from);
    ++line;
    if (raw.size() > max_line_bytes) throw InputError(line_too_long(source, line, max_line_bytes));
    on_line(line, raw);
    from = newline + 1;
  }
}

std::string line_too_long(std::string_view source, int line, std::size_t max_line_bytes) {
  return fmt::format("{}:{}: line {} is longer than {}", source, line, line,
                     format_bytes(static_cast<std::int64_t>(max_line_bytes)));
}

void for_each_line(std::string_view path, std::string_view what, const LineLimits& limits,
                   const std::function<void(int, std::string_view)>& on_line) {
  std::ifstream in = open_user_file(path, what);
  std::string line;  // the line being read: never more than max_line_bytes
  int number = 1;
  std::size_t total = 0;
  std::array<char, 1 << 16> chunk{};
  while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
    const std::size_t got = static_cast<std::size_t>(in.gcount());
    total += got;
    if (total > limits.max_file_bytes) too_large(path, what, limits.max_file_bytes);
    std::string_view rest(chunk.data(), got);
    while (!rest.empty()) {
      const std::size_t newline = rest.find('\n');
      const std::string_view piece = rest.substr(0, newline);
      // Checked before the piece is kept, so the line never grows past the cap.
      if (line.size() + piece.size() > limits.max_line_bytes)
        throw InputError(line_too_long(path, number, limits.max_line_bytes));
      if (newline == std::string_view::npos) {
        line.append(piece);
        break;
      }
      if (line.empty()) {
        on_line(number, piece);  // the whole line is in the chunk: no copy
      } else {
        line.append(piece);
        on_line(number, line);
        line.clear();
      }
      ++number;
      rest.remove_prefix(newline + 1);
    }
  }
  if (in.bad()) throw InputError(fmt::format("cannot read {} '{}'", what, path));
  if (!line.empty()) on_line(number, line);
}

void write_text_file(const std::string& path, std::string_view text) {
  auto fail = [&path](int err) {
    throw SystemError(fmt::format("cannot write '{}': {}", path, std::strerror(err)));
  };
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(errno);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      ::close(fd);
      fail(err);
    }
    done += static_cast<std::size_t>(w);
  }
  // Some file systems (NFS, a full quota) report a failed write only when the file is closed.
  if (::close(fd) != 0) fail(errno);
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

std::size_t json_nesting_depth(std::string_view text) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// Text inside an HTML element or a quoted attribute.
std::string html_escaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string wrapped(std::string_view text, std::size_t width, std::string_view indent) {
  std::string out;
  std::size_t column = 0;
  while (!text.empty()) {
    const std::size_t space = text.find(' ');
    const std::string_view word = text.substr(0, space);
    text = space == std::string_view::npos ? std::string_view() : text.substr(space + 1);
    if (word.empty()) continue;
    if (column > 0 && column + 1 + word.size() > width) {
      out += '\n';
      out += indent;
      column = indent.size();
    } else if (column > 0) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
  }
  return out;
}

std::string wrapped_at(std::string_view text, std::size_t column) {
  const std::size_t width = kTextColumns > column + 20 ? kTextColumns - column : 20;
  std::string out;
  for (const char ch : wrapped(text, width)) {
    out += ch;
    if (ch == '\n') out.append(column, ' ');
  }
  return out;
}

std::string fitted_lines(std::string_view text, std::size_t hanging) {
  std::string out;
  for (std::size_t at = 0;;) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    if (line.size() <= kTextColumns) {
      out += line;
    } else {
      // A line this long holds a word; its leading spaces are its margin, kept on every part of it.
      const std::string margin(std::min(line.find_first_not_of(' '), kTextColumns - 20), ' ');
      out += margin;
      for (const char ch : wrapped(line.substr(margin.size()), kTextColumns - margin.size(), std::string(hanging, ' '))) {
        out += ch;
        if (ch == '\n') out += margin;
      }
    }
    if (end == text.size()) return out;
    out += '\n';
    at = end + 1;
  }
}

}  // namespace trainfit::detail
