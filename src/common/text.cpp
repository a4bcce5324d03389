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

// The file the user named, open for reading, or the InputError that says why not.
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

}  // namespace

std::string read_text_file(std::string_view path, std::string_view what, std::optional<std::size_t> max_bytes) {
  std::ifstream in = open_user_file(path, what);
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

bool read_text_lines(std::string_view path, std::string_view what, std::size_t max_line_bytes,
                     std::uint64_t max_total_bytes, const std::function<void(std::string_view)>& on_line) {
  std::ifstream in = open_user_file(path, what);
  std::string partial;  // the line being read, up to max_line_bytes
  std::uint64_t total = 0;
  std::array<char, 1 << 16> chunk{};
  while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
    const auto n = static_cast<std::size_t>(in.gcount());
    total += n;
    if (total > max_total_bytes)
      throw InputError(fmt::format("{} '{}' is larger than {}", what, path,
                                   format_bytes(static_cast<std::int64_t>(max_total_bytes))));
    const std::string_view data(chunk.data(), n);
    std::size_t pos = 0;
    for (std::size_t nl; (nl = data.find('\n', pos)) != std::string_view::npos; pos = nl + 1) {
      if (partial.size() + (nl - pos) > max_line_bytes) return false;
      if (partial.empty()) {
        on_line(data.substr(pos, nl - pos));  // the whole line is in this chunk: no copy
      } else {
        partial.append(data.substr(pos, nl - pos));
        on_line(partial);
        partial.clear();
      }
    }
    if (partial.size() + (n - pos) > max_line_bytes) return false;
    partial.append(data.substr(pos));
  }
  if (in.bad()) throw InputError(fmt::format("cannot read {} '{}'", what, path));
  if (!partial.empty()) on_line(partial);  // a last line without its newline
  return true;
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
