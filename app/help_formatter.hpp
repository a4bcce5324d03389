#pragma once
// `--help` in trainfit's 100 columns: CLI11's layout (names in a column, descriptions beside them),
// with every description, the commands' own and the footer wrapped at spaces instead of running on.
#include <CLI/CLI.hpp>
#include <string>

namespace trainfit::cli {

class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option(const CLI::Option* opt, bool is_positional) const override;
  std::string make_subcommand(const CLI::App* sub) const override;
  std::string make_description(const CLI::App* app) const override;
  std::string make_footer(const CLI::App* app) const override;
};

}  // namespace trainfit::cli
