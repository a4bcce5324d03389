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
#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/measurements.hpp"
#include "trainfit/model.hpp"
#include "trainfit/units.hpp"

namespace trainfit::bench {
namespace {

using nlohmann::json;

enum class Type { string, integer, number, boolean, any };

// The plan flags a matrix may vary, in the order the matrix nests them (the last varies fastest).
// Runner-specific fields start with "x_" and pass through untouched.
struct FieldSpec {
  std::string_view name;
  Type type;
};
constexpr FieldSpec kMatrixFields[] = {
    {"model", Type::string},        {"method", Type::string},      {"weights", Type::string},
    {"amp", Type::string},          {"rank", Type::integer},       {"lora_alpha", Type::number},
    {"lora_dropout", Type::number}, {"lora_targets", Type::string}, {"optimizer", Type::string},
    {"attn", Type::string},         {"seq", Type::integer},        {"batch", Type::integer},
    {"grad_accum", Type::integer},  {"grad_ckpt", Type::boolean},  {"gpus", Type::integer},
    {"parallel", Type::string},     {"device", Type::string},
};

std::string field_list() {
  std::vector<std::string_view> names;
  for (const auto& f : kMatrixFields) names.push_back(f.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source) {}

  [[noreturn]] void fail(const toml::node* n, std::string_view field, const std::string& why) const {
    if (n != nullptr && n->source().begin.line > 0)
      throw InputError(fmt::format("{}:{}: {}: {}", source_, n->source().begin.line, field, why));
    throw InputError(fmt::format("{}: {}: {}", source_, field, why));
  }

  std::string text(const toml::node& n, std::string_view field) const {
    if (const auto* s = n.as_string()) return s->get();
    fail(&n, field, "expected a string");
  }
  std::int64_t integer(const toml::node& n, std::string_view field, std::int64_t lo, std::int64_t hi) const {
    const auto* i = n.as_integer();
    if (i == nullptr) fail(&n, field, "expected an integer");
    if (i->get() < lo || i->get() > hi) fail(&n, field, fmt::format("must be between {} and {}", lo, hi));
    return i->get();
  }
  double number(const toml::node& n, std::string_view field, double lo, double hi) const {
    double v = 0;
    if (const auto* i = n.as_integer()) v = static_cast<double>(i->get());
    else if (const auto* f = n.as_floating_point()) v = f->get();
    else fail(&n, field, "expected a number");
    if (!std::isfinite(v) || v < lo || v > hi) fail(&n, field, fmt::format("must be between {} and {}", lo, hi));
    return v;
  }
  std::vector<std::string> strings(const toml::node& n, std::string_view field) const {
    std::vector<std::string> out;
    if (const auto* s = n.as_string()) {
      out.push_back(s->get());
      return out;
    }
    const auto* a = n.as_array();
    if (a == nullptr) fail(&n, field, "expected a string or a list of strings");
    for (const auto& e : *a) out.push_back(text(e, field));
    return out;
  }
  json scalar(const toml::node& n, std::string_view field, Type type) const {
    auto wrong = [&](std::string_view want) { fail(&n, field, fmt::format("expected {}", want)); };
    if (const auto* s = n.as_string()) {
      if (type != Type::any && type != Type::string) wrong(type == Type::boolean ? "true or false" : "a number");
      return s->get();
    }
    if (const auto* i = n.as_integer()) {
      if (type == Type::string) wrong("a string");
      if (type == Type::boolean) wrong("true or false");
      return i->get();
    }
    if (const auto* f = n.as_floating_point()) {
      if (type != Type::any && type != Type::number) wrong(type == Type::integer ? "an integer" : type == Type::string ? "a string" : "true or false");
      return f->get();
    }
    if (const auto* b = n.as_boolean()) {
      if (type != Type::any && type != Type::boolean) wrong(type == Type::string ? "a string" : "a number");
      return b->get();
    }
    fail(&n, field, "expected a value or a list of values");
  }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

toml::table parse_toml(std::string_view text, std::string_view source) {
#if TOML_EXCEPTIONS
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw InputError(fmt::format("{}:{}: invalid TOML: {}", source, e.source().begin.line, e.description()));
  }
#else
  toml::parse_result result = toml::parse(text, source);
  if (!result)
    throw InputError(fmt::format("{}:{}: invalid TOML: {}", source, result.error().source().begin.line,
                                 result.error().description()));
  return std::move(result).table();
#endif
}

void reject_unknown(const Reader& r, const toml::table& t, std::string_view where,
                    std::initializer_list<std::string_view> known) {
  for (const auto& [k, v] : t) {
    if (std::find(known.begin(), known.end(), k.str()) == known.end())
      r.fail(&v, fmt::format("{}{}", where, k.str()),
             fmt::format("unknown field (known: {})", fmt::join(known, ", ")));
  }
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
  reject_unknown(r, t, "run.",
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
  if (const auto* n = t.get("vram")) {
    try {
      p.vram_bytes = n->is_integer() ? r.integer(*n, "run.vram", 1, std::int64_t{1} << 50) : parse_bytes(r.text(*n, "run.vram"));
    } catch (const InputError& e) {
      r.fail(n, "run.vram", e.what());
    }
  }
  if (const auto* n = t.get("overflow")) {
    p.overflow = r.text(*n, "run.overflow");
    if (p.overflow != "oom" && p.overflow != "spill") r.fail(n, "run.overflow", "expected \"oom\" or \"spill\"");
  }
  if (const auto* n = t.get("headroom")) p.headroom = r.number(*n, "run.headroom", 0, 0.99);
  if (const auto* n = t.get("slowdown")) p.slowdown = r.number(*n, "run.slowdown", 1.01, 1e6);
  if (const auto* n = t.get("runner")) p.runner = r.text(*n, "run.runner");
}

void read_matrix(const Reader& r, const toml::table& t, ExperimentPlan& p) {
  std::vector<Axis> extra;
  for (const auto& [k, v] : t) {
    const std::string key(k.str());
    const auto* spec = std::find_if(std::begin(kMatrixFields), std::end(kMatrixFields),
                                    [&](const FieldSpec& f) { return f.name == key; });
    const bool passthrough = key.size() > 2 && key.rfind("x_", 0) == 0;
    if (spec == std::end(kMatrixFields) && !passthrough)
      r.fail(&v, "matrix." + key, fmt::format("unknown field (known: {}; runner-specific fields start with x_)", field_list()));
    const Type type = passthrough ? Type::any : spec->type;
    Axis axis{key, {}};
    if (const auto* a = v.as_array()) {
      if (a->empty()) r.fail(&v, "matrix." + key, "an empty list leaves nothing to run");
      for (const auto& e : *a) axis.values.push_back(r.scalar(e, "matrix." + key, type));
    } else {
      axis.values.push_back(r.scalar(v, "matrix." + key, type));
    }
    if (key == "model") {
      for (std::size_t i = 0; i < axis.values.size(); ++i) {
        try {
          (void)load_model(axis.values[i].get<std::string>());
        } catch (const InputError& e) {
          const toml::node* at = v.is_array() ? v.as_array()->get(i) : &v;
          r.fail(at, "matrix.model", e.what());
        }
      }
    }
    (passthrough ? extra : p.axes).push_back(std::move(axis));
  }
  if (std::none_of(p.axes.begin(), p.axes.end(), [](const Axis& a) { return a.field == "model"; }))
    r.fail(nullptr, "matrix.model", "missing: name at least one model");
  // toml++ keeps keys sorted; the nesting order is the documented one, not the file's.
  std::sort(p.axes.begin(), p.axes.end(), [](const Axis& a, const Axis& b) {
    auto pos = [](const std::string& f) {
      return std::find_if(std::begin(kMatrixFields), std::end(kMatrixFields), [&](const FieldSpec& s) { return s.name == f; }) -
             std::begin(kMatrixFields);
    };
    return pos(a.field) < pos(b.field);
  });
  p.axes.insert(p.axes.end(), extra.begin(), extra.end());
}

void read_criteria(const Reader& r, const toml::node& n, ExperimentPlan& p) {
  const auto* a = n.as_array();
  if (a == nullptr) r.fail(&n, "criteria", "expected [[criteria]] tables");
  for (std::size_t i = 0; i < a->size(); ++i) {
    const auto* t = a->get(i)->as_table();
    const std::string at = fmt::format("criteria[{}].", i + 1);
    if (t == nullptr) r.fail(a->get(i), "criteria", "expected [[criteria]] tables");
    reject_unknown(r, *t, at, {"name", "text", "where", "expect"});
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

std::string value_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// Fills in every default so that the same setup written two ways has one key.
json canonical(const ExperimentPlan& plan, const std::vector<std::pair<std::string, json>>& chosen) {
  json given = json::object();
  for (const auto& [k, v] : chosen) given[k] = v;
  auto get = [&](const char* k, json fallback) { return given.contains(k) ? given[k] : fallback; };
  json c = json::object();
  c["model"] = given["model"];
  const std::string method = get("method", "lora").get<std::string>();
  c["method"] = method;
  c["weights"] = get("weights", method == "qlora" ? "nf4" : "bf16");
  const json amp = get("amp", nullptr);
  c["amp"] = amp.is_string() && amp.get<std::string>() != "none" ? amp : json(nullptr);
  if (method != "full") {
    const std::int64_t rank = get("rank", 16).get<std::int64_t>();
    c["rank"] = rank;
    c["lora_alpha"] = get("lora_alpha", 2.0 * static_cast<double>(rank)).get<double>();
    c["lora_dropout"] = get("lora_dropout", 0.05).get<double>();
    c["lora_targets"] = get("lora_targets", "all-linear");
  }
  c["optimizer"] = get("optimizer", "adamw");
  c["attn"] = get("attn", "sdpa");
  c["seq"] = get("seq", 512);
  c["batch"] = get("batch", 1);
  c["grad_accum"] = get("grad_accum", 1);
  c["grad_ckpt"] = get("grad_ckpt", false);
  const std::int64_t gpus = get("gpus", 1).get<std::int64_t>();
  c["gpus"] = gpus;
  if (gpus > 1) c["parallel"] = get("parallel", "ddp");
  c["device"] = get("device", "cuda");
  if (!plan.gpu.empty()) c["gpu"] = plan.gpu;
  if (plan.vram_bytes) {
    c["vram_bytes"] = *plan.vram_bytes;
    c["overflow"] = plan.overflow;
  }
  c["steps"] = plan.steps;
  c["warmup"] = plan.warmup;
  for (const auto& [k, v] : chosen)
    if (k.rfind("x_", 0) == 0) c[k] = v;
  return c;
}

std::string label_of(const json& c) {
  std::string s = c["model"].get<std::string>() + " " + c["method"].get<std::string>();
  const std::string w = c["weights"].get<std::string>();
  if (!c["amp"].is_null()) s += " fp32+amp";
  else if (!(c["method"] == "qlora" && w == "nf4") && w != "bf16") s += " " + w;
  if (c.contains("rank")) s += fmt::format(" r{}", c["rank"].get<std::int64_t>());
  if (c.contains("lora_targets") && c["lora_targets"] != "all-linear") s += " " + c["lora_targets"].get<std::string>();
  s += fmt::format(" s{} b{}", c["seq"].get<std::int64_t>(), c["batch"].get<std::int64_t>());
  if (c["grad_accum"].get<std::int64_t>() > 1) s += fmt::format("x{}", c["grad_accum"].get<std::int64_t>());
  if (c["grad_ckpt"].get<bool>()) s += " ckpt";
  if (c["attn"] != "sdpa") s += " " + c["attn"].get<std::string>();
  if (c["optimizer"] != "adamw") s += " " + c["optimizer"].get<std::string>();
  if (c["gpus"].get<std::int64_t>() > 1) s += fmt::format(" {}x{}", c["parallel"].get<std::string>(), c["gpus"].get<std::int64_t>());
  for (const auto& [k, v] : c.items())
    if (k.rfind("x_", 0) == 0) s += fmt::format(" {}={}", k.substr(2), value_text(v));
  return s;
}

}  // namespace

ExperimentPlan parse_experiment_plan(std::string_view toml_text, std::string_view source) {
  const Reader r(source);
  const toml::table t = parse_toml(toml_text, source);
  reject_unknown(r, t, "", {"name", "description", "hypotheses", "exclude", "run", "matrix", "criteria"});
  ExperimentPlan p;
  p.source = std::string(source);
  p.text = std::string(toml_text);
  const auto* name = t.get("name");
  if (name == nullptr) r.fail(nullptr, "name", "missing: name the experiment");
  p.name = r.text(*name, "name");
  if (p.name.empty() || p.name.find_first_of("/\\\n") != std::string::npos)
    r.fail(name, "name", "must be non-empty, without slashes or newlines");
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
  const std::string text = detail::read_text_file(path, "experiment plan");
  if (text.size() > (std::size_t{1} << 20)) throw InputError(fmt::format("{}: larger than 1 MiB", path));
  return parse_experiment_plan(text, path);
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
    std::vector<std::pair<std::string, json>> chosen;
    for (std::size_t i = 0; i < plan.axes.size(); ++i) chosen.emplace_back(plan.axes[i].field, plan.axes[i].values[at[i]]);
    for (std::size_t i = plan.axes.size(); i-- > 0;) {  // odometer: the last axis turns fastest
      if (++at[i] < plan.axes[i].values.size()) break;
      at[i] = 0;
    }
    BenchConfig bc;
    bc.config = canonical(plan, chosen);
    bc.label = label_of(bc.config);
    // Checked as `trainfit validate` will read the row: the same parser, the same messages.
    try {
      const auto& c = bc.config;
      if (c["device"] != "cuda" && c["device"] != "cpu") throw InputError("field \"device\" must be cuda or cpu");
      if (c["gpus"].get<std::int64_t>() < 1 || c["gpus"].get<std::int64_t>() > 1024)
        throw InputError("field \"gpus\" must be between 1 and 1024");
      if (c.contains("parallel") && c["parallel"] != "ddp" && c["parallel"] != "fsdp")
        throw InputError("field \"parallel\" must be ddp or fsdp");
      (void)parse_measurements(json{{"config", bc.config}}.dump(), "config");
    } catch (const InputError& e) {
      std::string why = e.what();
      if (why.rfind("config:1: ", 0) == 0) why = why.substr(10);
      throw InputError(fmt::format("{}: matrix config {} ({}): {}", plan.source, n + 1, bc.label, why));
    }
    const Fields f = row_fields(json{{"config", bc.config}});
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
    bc.key = bc.config.dump();
    if (!seen.insert(bc.key).second) continue;
    bc.index = out.size();
    out.push_back(std::move(bc));
  }
  if (out.empty()) throw InputError(fmt::format("{}: every config of the matrix is excluded", plan.source));
  return out;
}

}  // namespace trainfit::bench
