#pragma once
// The setup `trainfit plan ARGS` plans, read as the CLI reads its flags (through the settings
// table): for tests that check a printed command reproduces what it claims.
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "trainfit/settings.hpp"

namespace trainfit::testing {

inline TrainingSetup setup_from_plan_args(const std::vector<std::string>& args) {
  std::vector<GivenSetting> given;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const Setting* row = find_setting_by_flag(args[i]);
    if (row == nullptr) throw std::runtime_error("not a flag of trainfit plan: " + args[i]);
    if (row->type == SettingType::boolean)
      given.emplace_back(row, args[i] == row->flag);
    else
      given.emplace_back(row, parse_setting_text(*row, args.at(++i)));
  }
  return resolve_setup(given);
}

// The setup of settings given by their keys as text ({"model", "qwen2.5-0.5b"}, ...), defaults
// and derived defaults resolved as for flags.
inline TrainingSetup setup_from_settings(const std::vector<std::pair<std::string, std::string>>& settings_text) {
  std::vector<GivenSetting> given;
  for (const auto& [key, text] : settings_text) {
    const Setting* s = find_setting(key);
    if (s == nullptr) throw std::runtime_error("not a setting: " + key);
    given.emplace_back(s, parse_setting_text(*s, text));
  }
  return resolve_setup(given);
}

}  // namespace trainfit::testing
