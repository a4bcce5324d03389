// A setup as JSON (plans, bench configs and rows, probe rows, `validate` input) and the JSON Schema
// of the vocabulary (`trainfit schema`), both from the settings table.
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "common/text.hpp"
#include "trainfit/error.hpp"
#include "trainfit/model.hpp"
#include "trainfit/settings.hpp"

namespace trainfit {
namespace {

using nlohmann::json;

json condition_to_json(const SettingCondition& c) {
  json j = {{"setting", c.setting}};
  if (!c.one_of.empty()) j["one_of"] = c.one_of;
  if (!c.none_of.empty()) j["none_of"] = c.none_of;
  if (c.at_least) j["at_least"] = *c.at_least;
  return j;
}

json property_of(const Setting& s) {
  json p = json::object();
  using enum SettingType;
  switch (s.type) {
    case choice: {
      json names = s.choices;
      if (s.nullable) names.push_back(nullptr);
      p["type"] = s.nullable ? json::array({"string", "null"}) : json("string");
      p["enum"] = names;
      break;
    }
    case integer: p["type"] = "integer"; break;
    case number: p["type"] = "number"; break;
    case boolean: p["type"] = "boolean"; break;
    case list:
      // An array of names, or the same names in one comma-separated string.
      p["type"] = json::array({"array", "string"});
      p["items"] = {{"type", "string"}};
      break;
    case text: p["type"] = "string"; break;
    case bytes: p["type"] = json::array({"integer", "string"}); break;
  }
  // Bounds of whole numbers as whole numbers.
  auto bound = [&](double v) { return s.type == integer || s.type == bytes ? json(static_cast<std::int64_t>(v)) : json(v); };
  if (s.minimum) p[s.exclusive_minimum ? "exclusiveMinimum" : "minimum"] = bound(*s.minimum);
  if (s.maximum) p[s.exclusive_maximum ? "exclusiveMaximum" : "maximum"] = bound(*s.maximum);
  p["default"] = setting_value_to_json(s.get(TrainingSetup{}));
  p["description"] = s.description;
  p["x-flag"] = s.flag;
  p["x-matrix"] = s.in_matrix;
  if (!s.group.empty()) p["x-group"] = s.group;
  if (!s.default_rule.empty()) p["x-default-rule"] = s.default_rule;
  if (s.derived_default) {
    const DerivedDefault& d = *s.derived_default;
    json dd = json::object();
    if (d.model_types) {
      dd["model_types"] = d.model_types();
      dd["value"] = setting_value_to_json(d.value);
    } else if (!d.times.empty()) {
      dd["times"] = d.times;
      dd["factor"] = d.factor;
    } else if (!d.cases.empty()) {
      json cases = json::array();
      for (const auto& c : d.cases) cases.push_back({{"when", condition_to_json(c.when)}, {"value", setting_value_to_json(c.value)}});
      dd["cases"] = cases;
    } else {
      if (d.when) dd["when"] = condition_to_json(*d.when);
      dd["value"] = setting_value_to_json(d.value);
    }
    p["x-derived-default"] = dd;
  }
  if (s.applies_when) p["x-applies-when"] = condition_to_json(*s.applies_when);
  if (s.key == "lora_targets") {
    json shorthands = json::object();
    for (const auto& [shorthand, full] : lora_target_shorthands()) shorthands[shorthand] = full;
    p["x-shorthands"] = shorthands;
  }
  return p;
}

}  // namespace

json setting_value_to_json(const SettingValue& v) {
  switch (v.index()) {
    case 1: return std::get<bool>(v);
    case 2: return std::get<std::int64_t>(v);
    case 3: return std::get<double>(v);
    case 4: return std::get<std::string>(v);
    case 5: return std::get<std::vector<std::string>>(v);
    default: return nullptr;
  }
}

SettingValue setting_value_from_json(const json& j) {
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) {
    if (j.is_number_unsigned() && j.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)) return j.get<double>();
    return j.get<std::int64_t>();
  }
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) return j.get<std::string>();
  if (j.is_array()) {
    std::vector<std::string> items;
    for (const auto& e : j) {
      if (!e.is_string()) throw InputError("expected a list of strings");
      items.push_back(e.get<std::string>());
    }
    return items;
  }
  if (j.is_null()) return std::monostate{};
  throw InputError("expected a value, not an object");
}

json setup_to_json(const TrainingSetup& setup, const SetupJsonOptions& options) {
  json j = json::object();
  for (const Setting& row : settings()) {
    if (options.matrix_only && !row.in_matrix) continue;
    if (!applies(row, setup)) continue;
    const SettingValue v = row.get(setup);
    // An unnamed card or file is not part of the setup; "none" (amp off) is.
    const bool unset = (row.type == SettingType::text && std::get<std::string>(v).empty()) ||
                       (row.type == SettingType::bytes && std::holds_alternative<std::monostate>(v));
    if (!unset) j[row.key] = setting_value_to_json(v);
  }
  return j;
}

std::vector<GivenSetting> given_from_json(const json& object, const std::function<bool(std::string_view)>& other_key) {
  if (!object.is_object()) throw InputError("a setup must be a JSON object");
  std::vector<GivenSetting> given;
  for (const auto& [key, value] : object.items()) {
    const Setting* row = find_setting(key);
    if (row == nullptr) {
      if (other_key && !other_key(key)) throw SettingError(key, "unknown setting (see `trainfit schema`)");
      continue;
    }
    if (value.is_null() && !row->nullable) continue;  // null: not given
    SettingValue raw;
    try {
      raw = setting_value_from_json(value);
    } catch (const InputError& e) {
      throw SettingError(key, e.what());
    }
    // A number's JSON text, so that a range error shows what the file says.
    given.push_back({row, check_setting_value(*row, raw, value.is_number() ? value.dump() : std::string())});
  }
  return given;
}

TrainingSetup setup_from_json(const json& object, const std::function<bool(std::string_view)>& other_key) {
  return resolve_setup(given_from_json(object, other_key));
}

std::vector<GivenSetting> load_setup_file(const std::string& path) {
  // A setup is a few hundred bytes; a plan with its suggestions a few KiB.
  const std::string text = detail::read_text_file(path, "setup file", std::size_t{4} << 20);
  json object;
  try {
    object = json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("setup file '{}' is not JSON: {}", path, e.what()));
  }
  if (!object.is_object())
    throw InputError(fmt::format("setup file '{}': a JSON object of settings, or the plan trainfit wrote", path));
  // The whole plan (`plan --format json`, schema trainfit.plan/1): its setup.
  if (object.contains("schema") && object.contains("setup") && object["setup"].is_object()) object = object["setup"];
  try {
    return given_from_json(object, [](std::string_view) { return false; });
  } catch (const SettingError& e) {
    throw SettingError(e.setting(), fmt::format("{} (in the setup file '{}')", e.reason(), path));
  }
}

json setup_schema() {
  json properties = json::object();
  json order = json::array();
  for (const Setting& row : settings()) {
    properties[row.key] = property_of(row);
    order.push_back(row.key);
  }
  // What each family (config.json's model_type) calls its decoder layers' linear modules, by role:
  // model/families.cpp's table, for the runner's tensor-parallel plan and for users' own tools.
  json module_names = json::object();
  for (const ModelFamily* f : model_families()) {
    json by_role = json::object();
    for (std::size_t i = 0; i < kModuleRoles; ++i) by_role[to_string(static_cast<ModuleRole>(i))] = f->names.at(i);
    module_names[f->model_type] = by_role;
  }
  return {{"$schema", "https://json-schema.org/draft/2020-12/schema"},
          {"$id", "trainfit.setup/1"},
          {"title", "trainfit training setup"},
          {"description",
           "The settings of one training run, as `trainfit plan` takes them (x-flag), as JSON setups and bench "
           "configs carry them (the keys) and as bench matrices vary them (x-matrix). A setting left out takes its "
           "default; x-derived-default gives a default that depends on another setting (the first of its cases "
           "that holds, when it has cases), or on the model (its value when the model's config.json model_type is one "
           "of its model_types); x-applies-when says when "
           "a setting means anything (JSON written by trainfit leaves out what does not apply); x-order is the "
           "order in which defaults are resolved; x-shorthands are module names users may abbreviate; x-group is where the page shows a setting's control; "
           "x-module-names gives, for each model family (config.json's model_type), the name of the module "
           "that plays each role in a decoder layer (the end of its path, which PEFT matches a LoRA target "
           "against)."},
          {"type", "object"},
          // The table's order: a derived default depends only on settings before it.
          {"x-order", order},
          {"properties", properties},
          {"x-module-names", module_names}};
}

}  // namespace trainfit
