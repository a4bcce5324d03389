#pragma once
// The settings table (trainfit/settings.hpp) as command-line flags: one flag per setting, its
// --help from the row (description, allowed values or range, default), and the settings a command
// line named, checked by the library.
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "trainfit/error.hpp"
#include "trainfit/recipe.hpp"
#include "trainfit/settings.hpp"

namespace trainfit::cli {

class SetupFlags {
 public:
  // Adds a flag for every setting (booleans also get --no-<name>) to `cmd`, in the table's order,
  // --setup FILE: a setup file (load_setup_file) whose settings the flags given beside it override;
  // and --recipe FILE: a training recipe (load_recipe) that a setup file and the flags override.
  explicit SetupFlags(CLI::App& cmd);
  // The settings given on the command line or in the setup file, parsed and checked. Throws
  // SettingError.
  std::vector<GivenSetting> given() const;
  // The same, leaving out the settings in `except` (a command that reads their text itself:
  // advise's `--gpu any`, `--method any`).
  std::vector<GivenSetting> given(const std::vector<std::string>& except) const;
  bool was_given(std::string_view key) const;
  // The recipe's keys that change neither memory nor time, and its readings, as lines for a plan's
  // warnings (none without --recipe).
  std::vector<std::string> recipe_lines() const;
  // What the flag of a setting that is not a switch was given, as written, or the setup file's
  // value as text ("" when neither).
  std::string text_of(std::string_view key) const;

 private:
  bool on_command_line(std::string_view key) const;
  const GivenSetting* in_file(std::string_view key) const;
  CLI::App* cmd_;
  const Recipe* recipe() const;
  std::string setup_file_;
  std::string recipe_file_;
  mutable std::optional<std::vector<GivenSetting>> from_file_;  // read on first use
  mutable std::optional<Recipe> from_recipe_;                   // read on first use
  std::map<std::string, std::string, std::less<>> text_;  // by key: what a flag was given
  std::map<std::string, bool, std::less<>> switch_;       // by key: a boolean's last --x / --no-x
};

// A setting error in the command line's spelling: "--rank: must be between 1 and 65536 (got 0)",
// with every `key` the message names written as its flag.
std::string flag_message(const SettingError& e);

}  // namespace trainfit::cli
