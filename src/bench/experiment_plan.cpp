// Experiment plans (TOML) and their matrix. Every error names the file, the line and the field:
// a plan is written by hand, and a typo must not cost a night of GPU time.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "common/text.hpp"
#include "common/toml_reader.hpp"
#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/measurements.hpp"
#include "trainfit/model.hpp"
#include "trainfit/settings.hpp"
#include "trainfit/units.hpp"

namespace trainfit::bench {
namespace {

using nlohmann::json;

// The fields a matrix may vary besides the settings (settings.hpp): where the runner runs the steps,
// and runner-specific fields (x_...), passed through untouched.
constexpr std::string_view kDeviceField = "device";
bool is_runner_field(std::string_view key) { return key.size() > 2 && key.rfind("x_", 0) == 0; }

std::string matrix_field_list() {
  std::vector<std::string_view> names;
  for (const Setting& s : settings())
    if (s.in_matrix) names.push_back(s.key);
  names.push_back(kDeviceField);
  return fmt::format("{}", fmt::join(names, ", "));
}

using Reader = detail::TomlReader;

// A TOML scalar as a setting's raw value (checked against the setting by the caller).
SettingValue setting_value(const Reader& r, const toml::node& n, std::string_view field) {
  if (const auto* v = n.as_string()) return v->get();
  if (const auto* v = n.as_integer()) return v->get();
  if (const auto* v = n.as_floating_point()) return v->get();
  if (const auto* v = n.as_boolean()) return v->get();
  r.fail(&n, field, "expected a value or a list of values");
}

Expression expression(const Reader& r, const toml::node& n, std::string_view field) {
  const std::string s = r.text(n, field);
  try {
    return Expression::parse(s, [](std::string_view name) { return is_row_field(name); });
  } catch (const InputError& e) {
    r.fail(&n, field, fmt::format("'{}': {}", s, e.what()));
  }
}

void read_run(const Reader& r, const toml::table& t, ExperimentPlan& p) {
  r.reject_unknown(t, "run.",
                 {"steps", "warmup", "timeout", "gpu", "vram", "overflow", "headroom", "slowdown", "runner"});
  if (const auto* n = t.get("steps")) p.steps = static_cast<int>(r.integer(*n, "run.steps", 1, 10000));
  if (const auto* n = t.get("warmup")) p.warmup = static_cast<int>(r.integer(*n, "run.warmup", 0, 10000));
  if (p.warmup >= p.steps)
    r.fail(t.get("warmup"), "run.warmup", fmt::format("must be below run.steps ({}): a step must be timed", p.steps));
  if (const auto* n = t.get("timeout")) p.timeout_seconds = r.number(*n, "run.timeout", 0.1, 7 * 86400.0);
  if (const auto* n = t.get("gpu")) {
    p.gpu = r.text(*n, "run.gpu");
    try {
      p.gpu = find_gpu(p.gpu).id;
    } catch (const InputError& e) {
      r.fail(n, "run.gpu", e.what());
    }
  }
  if (const auto* n = t.get("vram")) p.vram_bytes = r.bytes(*n, "run.vram", 1, std::int64_t{1} << 50);
  if (const auto* n = t.get("overflow")) {
    p.overflow = r.text(*n, "run.overflow");
    if (p.overflow != "oom" && p.overflow != "spill") r.fail(n, "run.overflow", "expected \"oom\" or \"spill\"");
  }
  if (const auto* n = t.get("headroom")) p.headroom = r.number(*n, "run.headroom", 0, 0.99);
  if (const auto* n = t.get("slowdown")) p.slowdown = r.number(*n, "run.slowdown", 1.01, 1e6);
  if (const auto* n = t.get("runner")) p.runner = r.text(*n, "run.runner");
}

void read_matrix(const Reader& r, const toml::table& t, ExperimentPlan& p) {
  std::vector<Axis> runner_axes;
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    const std::string field = "matrix." + key;
    const Setting* setting = find_setting(key);
    const bool runner = is_runner_field(key);
    if ((setting == nullptr || !setting->in_matrix) && key != kDeviceField && !runner) {
      const std::string why = setting != nullptr
                                  ? fmt::format("is set for the whole run, not per config (see [run]); matrix fields: {}",
                                                matrix_field_list())
                                  : fmt::format("unknown field (known: {}; runner-specific fields start with x_)",
                                                matrix_field_list());
      r.fail(&v, field, why);
    }
    Axis axis{key, {}};
    auto add = [&](const toml::node& n) {
      SettingValue value = setting_value(r, n, field);
      try {
        if (setting != nullptr) value = check_setting_value(*setting, value);
        else if (const auto* d = std::get_if<double>(&value); d != nullptr && !std::isfinite(*d))
          throw InputError("must be a finite number (the config goes to the runner as JSON, which has no nan or inf)");
        else if (key == kDeviceField && value != SettingValue(std::string("cuda")) && value != SettingValue(std::string("cpu")))
          throw InputError("expected \"cuda\" or \"cpu\"");
        if (key == "model") (void)load_model(std::get<std::string>(value));
      } catch (const SettingError& e) {
        r.fail(&n, field, e.reason());
      } catch (const InputError& e) {
        r.fail(&n, field, e.what());
      }
      axis.values.push_back(std::move(value));
    };
    if (const auto* a = v.as_array()) {
      if (a->empty()) r.fail(&v, field, "an empty list leaves nothing to run");
      for (const auto& e : *a) add(e);
    } else {
      add(v);
    }
    (runner ? runner_axes : p.axes).push_back(std::move(axis));
  }
  if (std::none_of(p.axes.begin(), p.axes.end(), [](const Axis& a) { return a.field == "model"; }))
    r.fail(nullptr, "matrix.model", "missing: name at least one model");
  // toml++ keeps keys sorted; the nesting order is the settings table's, then the device.
  auto position = [](const std::string& f) {
    const auto& table = settings();
    const auto it = std::find_if(table.begin(), table.end(), [&](const Setting& s) { return s.key == f; });
    return static_cast<std::size_t>(it - table.begin());
  };
  std::stable_sort(p.axes.begin(), p.axes.end(), [&](const Axis& a, const Axis& b) { return position(a.field) < position(b.field); });
  p.axes.insert(p.axes.end(), runner_axes.begin(), runner_axes.end());
}

void read_criteria(const Reader& r, const toml::node& n, ExperimentPlan& p) {
  const auto* a = n.as_array();
  if (a == nullptr) r.fail(&n, "criteria", "expected [[criteria]] tables");
  for (std::size_t i = 0; i < a->size(); ++i) {
    const auto* t = a->get(i)->as_table();
    const std::string at = fmt::format("criteria[{}].", i + 1);
    if (t == nullptr) r.fail(a->get(i), "criteria", "expected [[criteria]] tables");
    r.reject_unknown(*t, at, {"name", "text", "where", "expect"});
    const auto* expect = t->get("expect");
    if (expect == nullptr) r.fail(a->get(i), at + "expect", "missing: the condition that must hold");
    Criterion c{fmt::format("criterion {}", i + 1), "", std::nullopt, expression(r, *expect, at + "expect"),
                static_cast<int>(expect->source().begin.line)};
    if (const auto* v = t->get("name")) c.name = r.text(*v, at + "name");
    if (const auto* v = t->get("text")) c.text = r.text(*v, at + "text");
    if (const auto* v = t->get("where")) {
      c.where = expression(r, *v, at + "where");
      if (c.where->has_aggregates()) r.fail(v, at + "where", "selects rows one by one: no aggregates here");
    }
    if (c.expect.has_aggregates() && c.expect.uses_row_fields())
      r.fail(expect, at + "expect",
             "mixes aggregates with fields outside them: either a condition on each row, or one over all rows "
             "through count/any/all/max/min/sum/mean");
    if (c.where && c.expect.has_aggregates())
      r.fail(expect, at + "expect", "an aggregate criterion selects its rows inside the aggregate, not with 'where'");
    p.criteria.push_back(std::move(c));
  }
}

// The short form of a runner field's value in a label.
std::string runner_value_text(const SettingValue& v) {
  const json j = setting_value_to_json(v);
  return j.is_string() ? j.get<std::string>() : j.dump();
}

std::string label_of(const BenchConfig& c) {
  std::string s = setup_label(c.setup);
  if (c.device != "cuda") s += " " + c.device;
  for (const auto& [k, v] : c.runner_fields) s += fmt::format(" {}={}", k.substr(2), runner_value_text(v));
  return s;
}

}  // namespace

ExperimentPlan parse_experiment_plan(std::string_view toml_text, std::string_view source) {
  const Reader r(source);
  const toml::table t = detail::parse_toml(toml_text, source);
  r.reject_unknown(t, "", {"name", "description", "hypotheses", "exclude", "run", "matrix", "criteria"});
  ExperimentPlan p;
  p.source = std::string(source);
  p.text = std::string(toml_text);
  const auto* name = t.get("name");
  if (name == nullptr) r.fail(nullptr, "name", "missing: name the experiment");
  p.name = r.text(*name, "name");
  // The name is a file-name component: the default results directory is results/<name>, so "."
  // or ".." would put results.jsonl, runs/ and .lock in results/ itself or the current folder.
  const bool control = std::any_of(p.name.begin(), p.name.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
  if (p.name.empty() || p.name == "." || p.name == ".." || control ||
      p.name.find_first_of("/\\") != std::string::npos)
    r.fail(name, "name",
           "must be a file name (the results go to results/<name>): non-empty, not '.' or '..', without slashes "
           "or control characters");
  if (const auto* n = t.get("description")) p.description = r.text(*n, "description");
  if (const auto* n = t.get("hypotheses")) p.hypotheses = r.strings(*n, "hypotheses");
  if (const auto* n = t.get("run")) {
    if (!n->is_table()) r.fail(n, "run", "expected a [run] table");
    read_run(r, *n->as_table(), p);
  }
  const auto* matrix = t.get("matrix");
  if (matrix == nullptr || !matrix->is_table()) r.fail(matrix, "matrix", "missing: a [matrix] table of plan flags");
  read_matrix(r, *matrix->as_table(), p);
  if (const auto* n = t.get("exclude")) {
    const auto* a = n->as_array();
    if (a == nullptr && !n->is_string()) r.fail(n, "exclude", "expected a list of conditions");
    auto add = [&](const toml::node& e) {
      Expression x = expression(r, e, "exclude");
      if (x.has_aggregates()) r.fail(&e, "exclude", "a condition on one config: no aggregates");
      p.exclude.push_back(std::move(x));
    };
    if (a != nullptr) {
      for (const auto& e : *a) add(e);
    } else {
      add(*n);
    }
  }
  if (const auto* n = t.get("criteria")) read_criteria(r, *n, p);
  return p;
}

ExperimentPlan load_experiment_plan(std::string_view path) {
  const std::string text = detail::read_text_file(path, "experiment plan", std::size_t{1} << 20);
  return parse_experiment_plan(text, path);
}

json config_to_json(const BenchConfig& c) {
  json j = setup_to_json(c.setup, {.matrix_only = true});
  if (!c.setup.gpu.empty()) j["gpu"] = c.setup.gpu;
  j[kDeviceField] = c.device;
  if (c.vram_bytes) {
    j["vram_bytes"] = *c.vram_bytes;
    j["overflow"] = c.overflow;
  }
  j["steps"] = c.steps;
  j["warmup"] = c.warmup;
  for (const auto& [k, v] : c.runner_fields) j[k] = setting_value_to_json(v);
  return j;
}

BenchConfig config_from_json(const json& j) {
  if (!j.is_object()) throw InputError("field \"config\" must be an object");
  BenchConfig c;
  auto integer = [&](const char* key, std::int64_t lo, std::int64_t hi) -> std::optional<std::int64_t> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_number_integer() || j[key].get<std::int64_t>() < lo || j[key].get<std::int64_t>() > hi)
      throw InputError(fmt::format("field \"{}\" must be a whole number from {} to {}", key, lo, hi));
    return j[key].get<std::int64_t>();
  };
  auto text = [&](const char* key) -> std::optional<std::string> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_string()) throw InputError(fmt::format("field \"{}\" must be a string", key));
    return j[key].get<std::string>();
  };
  c.setup = setup_from_json(j, [](std::string_view key) {
    return key == kDeviceField || key == "vram_bytes" || key == "overflow" || key == "steps" || key == "warmup" ||
           is_runner_field(key);
  });
  if (c.setup.model.empty()) throw InputError("field \"model\" is missing");
  c.device = text("device").value_or("cuda");
  if (c.device != "cuda" && c.device != "cpu") throw InputError("field \"device\" must be cuda or cpu");
  c.vram_bytes = integer("vram_bytes", 1, std::int64_t{1} << 50);
  c.overflow = text("overflow").value_or("oom");
  c.steps = static_cast<int>(integer("steps", 1, 10000).value_or(4));
  c.warmup = static_cast<int>(integer("warmup", 0, 10000).value_or(1));
  for (const auto& [k, v] : j.items())
    if (is_runner_field(k)) c.runner_fields.emplace_back(k, setting_value_from_json(v));
  c.key = config_to_json(c).dump();
  c.label = label_of(c);
  return c;
}

// Whether an exclude condition holds on the values a matrix config was given (the settings as
// written, the device and the runner's fields); a condition naming anything else is false.
bool excluded_as_given(const ExperimentPlan& plan, const std::vector<GivenSetting>& given, const BenchConfig& c) {
  Fields f;
  for (const auto& g : given) {
    const SettingValue& v = g.value;
    if (const auto* b = std::get_if<bool>(&v)) f[g.setting->key] = *b;
    else if (const auto* i = std::get_if<std::int64_t>(&v)) f[g.setting->key] = static_cast<double>(*i);
    else if (const auto* d = std::get_if<double>(&v)) f[g.setting->key] = *d;
    else if (std::holds_alternative<std::monostate>(v)) f[g.setting->key] = std::monostate{};
    else f[g.setting->key] = setting_text(*g.setting, v);
  }
  f[std::string(kDeviceField)] = c.device;
  for (const auto& x : plan.exclude) {
    try {
      const Value v = x.evaluate(&f).value;
      if (std::holds_alternative<bool>(v) && std::get<bool>(v)) return true;
    } catch (const InputError&) {
      // a field this config was not given: the condition does not decide it
    }
  }
  return false;
}

std::vector<BenchConfig> expand_matrix(const ExperimentPlan& plan) {
  std::size_t total = 1;
  for (const auto& a : plan.axes) {
    total *= a.values.size();
    if (total > 100000) throw InputError(fmt::format("{}: the matrix has more than 100000 configs", plan.source));
  }
  std::vector<BenchConfig> out;
  std::unordered_set<std::string> seen;
  std::vector<std::size_t> at(plan.axes.size(), 0);
  for (std::size_t n = 0; n < total; ++n) {
    BenchConfig bc;
    std::vector<GivenSetting> given;
    for (std::size_t i = 0; i < plan.axes.size(); ++i) {
      const Axis& axis = plan.axes[i];
      const SettingValue& value = axis.values[at[i]];
      if (const Setting* s = find_setting(axis.field)) given.push_back({s, value});
      else if (axis.field == kDeviceField) bc.device = std::get<std::string>(value);
      else bc.runner_fields.emplace_back(axis.field, value);
    }
    for (std::size_t i = plan.axes.size(); i-- > 0;) {  // odometer: the last axis turns fastest
      if (++at[i] < plan.axes[i].values.size()) break;
      at[i] = 0;
    }
    std::string described;  // the config in words, for a message about it
    for (const auto& g : given) described += fmt::format("{}{}={}", described.empty() ? "" : " ", g.setting->key, setting_text(*g.setting, g.value));
    try {
      bc.setup = resolve_setup(given);
    } catch (const InputError& e) {
      // A combination the settings refuse (qlora over bf16) is no error when the plan excludes it:
      // judged on the values the matrix gave, since it has no setup to judge.
      if (excluded_as_given(plan, given, bc)) continue;
      throw InputError(fmt::format("{}: matrix config {} ({}): {}", plan.source, n + 1, described, e.what()));
    }
    bc.setup.gpu = plan.gpu;
    bc.vram_bytes = plan.vram_bytes;
    if (plan.vram_bytes) bc.overflow = plan.overflow;
    bc.steps = plan.steps;
    bc.warmup = plan.warmup;
    bc.label = label_of(bc);
    BenchRow row;
    row.config = bc;
    const Fields f = row_fields(row);
    bool excluded = false;
    for (const auto& x : plan.exclude) {
      try {
        const Value v = x.evaluate(&f).value;
        excluded = excluded || (std::holds_alternative<bool>(v) && std::get<bool>(v));
      } catch (const InputError& e) {
        throw InputError(fmt::format("{}: exclude '{}': {}", plan.source, x.text(), e.what()));
      }
    }
    if (excluded) continue;
    bc.key = config_to_json(bc).dump();
    if (!seen.insert(bc.key).second) continue;
    bc.index = out.size();
    out.push_back(std::move(bc));
  }
  if (out.empty()) throw InputError(fmt::format("{}: every config of the matrix is excluded", plan.source));
  return out;
}

}  // namespace trainfit::bench
