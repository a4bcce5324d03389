#include "setup_flags.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace trainfit::cli {
namespace {

// "full | lora | qlora; default lora", "1-65536; default 16", "default off".
std::string help_of(const Setting& s) {
  const SettingValue d = s.get(TrainingSetup{});
  std::string allowed;
  switch (s.type) {
    case SettingType::choice:
      allowed = fmt::format("{}{}", fmt::join(s.choices, " | "), s.nullable ? " | none" : "");
      break;
    case SettingType::integer:
      if (s.minimum && s.maximum) allowed = fmt::format("{:.0f}-{:.0f}", *s.minimum, *s.maximum);
      break;
    default:
      break;
  }
  std::string def;
  if (s.type == SettingType::boolean) def = std::get<bool>(d) ? "on" : "off";
  else if (!std::holds_alternative<std::monostate>(d) && !setting_text(s, d).empty()) def = setting_text(s, d);
  else if (s.type == SettingType::choice) def = "none";
  if (!s.default_rule.empty()) def += (def.empty() ? "" : "; ") + s.default_rule;
  std::vector<std::string> parts;
  if (!allowed.empty()) parts.push_back(allowed);
  if (!def.empty()) parts.push_back("default " + def);
  return parts.empty() ? s.description : fmt::format("{} ({})", s.description, fmt::join(parts, "; "));
}

std::string type_name(const Setting& s) {
  switch (s.type) {
    case SettingType::choice: return "NAME";
    case SettingType::integer: return "INT";
    case SettingType::number: return "NUMBER";
    case SettingType::list: return "LIST";
    case SettingType::bytes: return "SIZE";
    default: return s.key == "model" || s.key == "gpu_spec" ? "NAME|PATH" : "NAME";
  }
}

}  // namespace

SetupFlags::SetupFlags(CLI::App& cmd) : cmd_(&cmd) {
  for (const Setting& s : settings()) {
    if (s.type == SettingType::boolean) {
      bool& value = switch_[s.key];
      cmd.add_flag(fmt::format("{},!--no-{}", s.flag, s.flag.substr(2)), value, help_of(s));
    } else {
      cmd.add_option(s.flag, text_[s.key], help_of(s))->type_name(type_name(s));
    }
  }
  cmd.add_option("--setup", setup_file_,
                 "a setup as JSON: the plan `plan --format json` wrote (its \"setup\"), or an object of settings by "
                 "their JSON keys (`trainfit schema`); flags given beside it override it")
      ->type_name("FILE");
  cmd.add_option("--recipe", recipe_file_,
                 "a training recipe in its own field names, read with its project's defaults: a TRL CLI config "
                 "(YAML or JSON, as `trl sft --config` reads it; --objective names the trainer), a LLaMA-Factory or "
                 "an axolotl YAML; --setup and flags override it (docs/setup.md, \"Recipes\")")
      ->type_name("FILE");
}

bool SetupFlags::on_command_line(std::string_view key) const {
  const Setting* s = find_setting(key);
  const bool has_flag = text_.count(key) > 0 || switch_.count(key) > 0;  // rows added after the flags were made have none
  return s != nullptr && has_flag && cmd_->count(s->flag) > 0;
}

const Recipe* SetupFlags::recipe() const {
  if (recipe_file_.empty()) return nullptr;
  if (!from_recipe_) {
    // The trainer a TRL config is for is the command line's --objective, as `trl <trainer>` names it.
    std::optional<Objective> objective;
    if (on_command_line("objective")) objective = parse_objective(text_.at("objective"));
    from_recipe_ = load_recipe(recipe_file_, objective);
  }
  return &*from_recipe_;
}

const GivenSetting* SetupFlags::in_file(std::string_view key) const {
  if (!setup_file_.empty()) {
    if (!from_file_) from_file_ = load_setup_file(setup_file_);
    for (const GivenSetting& g : *from_file_)
      if (g.setting->key == key) return &g;
  }
  if (const Recipe* r = recipe())
    for (const GivenSetting& g : r->settings)
      if (g.setting->key == key) return &g;
  return nullptr;
}

std::vector<std::string> SetupFlags::recipe_lines() const {
  const Recipe* r = recipe();
  return r != nullptr ? recipe_warnings(*r) : std::vector<std::string>{};
}

bool SetupFlags::was_given(std::string_view key) const { return on_command_line(key) || in_file(key) != nullptr; }

std::string SetupFlags::text_of(std::string_view key) const {
  if (on_command_line(key)) {
    const auto it = text_.find(key);
    return it != text_.end() ? it->second : std::string();
  }
  const GivenSetting* g = in_file(key);
  return g != nullptr && g->setting->type != SettingType::boolean ? setting_text(*g->setting, g->value) : std::string();
}

std::vector<GivenSetting> SetupFlags::given() const { return given({}); }

std::vector<GivenSetting> SetupFlags::given(const std::vector<std::string>& except) const {
  std::vector<GivenSetting> out;
  for (const Setting& s : settings()) {
    if (std::find(except.begin(), except.end(), s.key) != except.end()) continue;
    if (!on_command_line(s.key)) {
      if (const GivenSetting* g = in_file(s.key)) out.push_back(*g);
      continue;
    }
    GivenSetting g;
    g.setting = &s;
    if (s.type == SettingType::boolean) g.value = switch_.at(s.key);
    else g.value = parse_setting_text(s, text_.at(s.key));
    out.push_back(std::move(g));
  }
  return out;
}

std::string flag_message(const SettingError& e) {
  std::string reason = e.reason();
  for (const Setting& s : settings()) {
    const std::string quoted = "`" + s.key + "`";
    for (std::size_t at = reason.find(quoted); at != std::string::npos; at = reason.find(quoted, at + s.flag.size()))
      reason.replace(at, quoted.size(), s.flag);
  }
  const Setting* s = find_setting(e.setting());
  return fmt::format("{}: {}", s != nullptr ? s->flag : e.setting(), reason);
}

}  // namespace trainfit::cli
