#include "help_formatter.hpp"

#include <string_view>

#include "common/text.hpp"

namespace trainfit::cli {
namespace {

// A name in the left column and its description wrapped beside it; a name as wide as the column
// puts the description on the next line, as CLI11 does. The description's own line breaks stay.
std::string name_and_words(const std::string& name, const std::string& words, std::size_t column) {
  std::string out = "  " + name;
  if (words.empty()) return out + "\n";
  out += out.size() >= column ? "\n" + std::string(column, ' ') : std::string(column - out.size(), ' ');
  const std::string indent(column, ' ');
  std::string_view rest = words;
  for (bool first = true;; first = false) {
    const std::size_t end = rest.find('\n');
    if (!first) out += "\n" + indent;
    out += detail::wrapped_at(rest.substr(0, end), column);
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end + 1);
  }
  return out + "\n";
}

}  // namespace

std::string HelpFormatter::make_option(const CLI::Option* opt, bool is_positional) const {
  return name_and_words(make_option_name(opt, is_positional) + make_option_opts(opt), make_option_desc(opt),
                        get_column_width());
}

std::string HelpFormatter::make_subcommand(const CLI::App* sub) const {
  return name_and_words(sub->get_display_name(), sub->get_description(), get_column_width());
}

std::string HelpFormatter::make_description(const CLI::App* app) const {
  return detail::fitted_lines(CLI::Formatter::make_description(app), 0);
}

std::string HelpFormatter::make_footer(const CLI::App* app) const {
  return detail::fitted_lines(CLI::Formatter::make_footer(app), 0);
}

}  // namespace trainfit::cli
