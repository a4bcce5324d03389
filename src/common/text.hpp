#pragma once
// Small text helpers shared by the catalogues and the readers of the user's files.
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>
#include <string_view>

namespace trainfit::detail {

// `s` with its ASCII letters in lower case: names users write in either case ("BF16", "True").
std::string ascii_lower(std::string_view s);

// Levenshtein distance: how many single-character edits turn `a` into `b`. The catalogues use it
// to suggest the names closest to one the user mistyped.
std::size_t edit_distance(std::string_view a, std::string_view b);

// `s` fit to print on a terminal: text that another program wrote (a runner's error message, the
// versions its stack reported) or a hand-edited file holds can carry escape sequences that recolour
// the terminal, move its cursor, retitle its window or hide what follows. The C0 controls are
// escaped (\n, \r, \t, \xHH), and so are DEL (\x7f), the C1 controls U+0080-U+009F (\u0080...:
// U+009B is a CSI to some terminals) and bytes that are not UTF-8 (\xHH: a lone 0x9b is a CSI to
// an 8-bit terminal); everything else, UTF-8 text included, is kept as it is.
std::string printable(std::string_view s);
// printable() of at most the first `max_bytes` of `s` (cut where a UTF-8 character starts), and
// "... (N bytes)" after it when it was cut: what an error quotes of a value the user gave, which
// may be 200 KiB long.
std::string printable(std::string_view s, std::size_t max_bytes);
// A value the user gave, as an error quotes it: in single quotes, printable, at most 80 bytes of it
// (a NUL stays "\x00" rather than ending the message where a C string would).
std::string quoted(std::string_view s);
// The columns text output keeps to (a terminal's, or a pasted issue's): sentences wrap there.
inline constexpr std::size_t kTextColumns = 100;
// `text` broken at spaces into lines of at most `width` columns (a word longer than that stands
// alone), each line after the first starting with `indent`; no trailing newline.
std::string wrapped(std::string_view text, std::size_t width, std::string_view indent = "");
// `text` set at `column` (its first line after what precedes it there, the others after `column`
// spaces), wrapped so that no line runs past kTextColumns.
std::string wrapped_at(std::string_view text, std::size_t column);
// Each line of `text` that runs past kTextColumns wrapped at spaces, its continuation lines indented
// `hanging` more than the line's own leading spaces; the lines that fit (a table's) stay as they are.
std::string fitted_lines(std::string_view text, std::size_t hanging);
// Text inside an HTML element or a quoted attribute: & < > " escaped.
std::string html_escaped(std::string_view text);
// The deepest nesting of arrays and objects in a JSON text, counted without parsing it (brackets
// inside strings do not count): a reader refuses a text of 100,000 '[' before nlohmann's parser
// and dump, which recurse once a level, see it.
std::size_t json_nesting_depth(std::string_view text);

// The names of a comma-separated list ("q,v", "batch,grad-ckpt"), as written; empty items
// ("a,,b", a trailing comma) are skipped.
std::vector<std::string> split_names(std::string_view list);

// The whole of a file the user named, or an InputError: "cannot read <what> '<path>': <why>" when
// it is missing, a directory or unreadable, and "<what> '<path>' is larger than <max>" past
// `max_bytes`. The cap stops a wrong path (a dataset, a device) from being read whole into memory
// before the parser rejects it; it is checked while reading, so pipes are capped too.
std::string read_text_file(std::string_view path, std::string_view what,
                           std::optional<std::size_t> max_bytes = std::nullopt);

// The lines of a file the user named, one at a time, for files of many rows (measurements): the
// file is read in chunks and only the line being read is held, so memory stays under
// `max_line_bytes` plus a chunk whatever the file holds (/dev/zero, one 100 MB line, a dataset
// named by mistake). `on_line(number, text)` gets each line without its '\n' (1-based numbers; a
// last line without '\n' counts; a '\r' stays). The same errors as read_text_file when the file
// cannot be opened, and InputErrors "<path>:<n>: line <n> is longer than <max_line_bytes>" and
// "<what> '<path>' is larger than <max_file_bytes>" past the caps (checked while reading: pipes
// and devices are capped too).
struct LineLimits {
  std::size_t max_line_bytes = 0;
  std::size_t max_file_bytes = 0;
};
void for_each_line(std::string_view path, std::string_view what, const LineLimits& limits,
                   const std::function<void(int, std::string_view)>& on_line);
// The same over text already in memory: each line a view into it (no copy, whatever its size),
// and a line past `max_line_bytes` refused by number as the file reader refuses it.
void for_each_line_in(std::string_view text, std::string_view source, std::size_t max_line_bytes,
                      const std::function<void(int, std::string_view)>& on_line);
// The message for a line past `max_line_bytes`, shared by the file reader above and the parsers
// of text already in memory, so that both refuse the same line with the same words.
std::string line_too_long(std::string_view source, int line, std::size_t max_line_bytes);

// Writes `text` to a file the user named (a profile from `calibrate -o`), replacing it, and
// checks every step (open, each write, close): a full disk, /dev/full or a file system that
// fails on close is a SystemError "cannot write '<path>': <why>", never a silent success.
void write_text_file(const std::string& path, std::string_view text);

// The last `max_bytes` of a file trainfit or its children wrote (a runner's log, its results file,
// a /proc entry), or "" when it cannot be read: what a caller needs of a file that may have grown
// without bound, without reading all of it.
std::string read_file_tail(const std::string& path, std::size_t max_bytes);

}  // namespace trainfit::detail
