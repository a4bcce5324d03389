#pragma once
// Small text helpers shared by the catalogues.
#include <cstddef>
#include <string_view>

namespace trainfit::detail {

// Levenshtein distance: how many single-character edits turn `a` into `b`. The catalogues use it
// to suggest the names closest to one the user mistyped.
std::size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace trainfit::detail
