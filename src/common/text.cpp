#include "common/text.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "trainfit/error.hpp"

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

std::string read_text_file(std::string_view path, std::string_view what) {
  std::ifstream in{std::string(path), std::ios::binary};
  if (!in) throw InputError(fmt::format("cannot read {} '{}'", what, path));
  std::ostringstream text;
  text << in.rdbuf();
  return std::move(text).str();
}

}  // namespace trainfit::detail
