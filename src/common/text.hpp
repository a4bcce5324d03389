#pragma once
// Small text helpers shared by the catalogues.
#include <cstddef>
#include <string>
#include <string_view>

namespace trainfit::detail {

// Levenshtein distance: how many single-character edits turn `a` into `b`. The catalogues use it
// to suggest the names closest to one the user mistyped.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The whole of a file the user named, or an InputError "cannot read <what> '<path>'".
std::string read_text_file(std::string_view path, std::string_view what);

}  // namespace trainfit::detail
