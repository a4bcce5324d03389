#pragma once
// Small text helpers shared by the catalogues and the readers of the user's files.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace trainfit::detail {

// Levenshtein distance: how many single-character edits turn `a` into `b`. The catalogues use it
// to suggest the names closest to one the user mistyped.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The whole of a file the user named, or an InputError: "cannot read <what> '<path>': <why>" when
// it is missing, a directory or unreadable, and "<what> '<path>' is larger than <max>" past
// `max_bytes`. The cap stops a wrong path (a dataset, a device) from being read whole into memory
// before the parser rejects it; it is checked while reading, so pipes are capped too.
std::string read_text_file(std::string_view path, std::string_view what,
                           std::optional<std::size_t> max_bytes = std::nullopt);

// Each line of a file the user named, without its '\n', handed to `on_line` as it is read: a
// device (/dev/zero), a pipe or a huge file costs at most about `max_line_bytes` of memory. Returns
// false when a line is longer than `max_line_bytes`: reading stops there, and the caller names that
// line, the one after the last handed over. InputError as read_text_file (missing, a directory,
// unreadable), and "<what> '<path>' is larger than <max>" once more than `max_total_bytes` is read.
bool read_text_lines(std::string_view path, std::string_view what, std::size_t max_line_bytes,
                     std::uint64_t max_total_bytes, const std::function<void(std::string_view)>& on_line);

// The last `max_bytes` of a file trainfit or its children wrote (a runner's log, its results file,
// a /proc entry), or "" when it cannot be read: what a caller needs of a file that may have grown
// without bound, without reading all of it.
std::string read_file_tail(const std::string& path, std::size_t max_bytes);

}  // namespace trainfit::detail
