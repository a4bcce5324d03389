// Judging a bench run: the planner's prediction beside each row, a verdict per row, the
// pre-registered criteria, and the closing report. A run without an out-of-memory error has not
// shown that it fits: it must also have stayed inside the card and run at normal speed (the seed).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/measurements.hpp"
#include "trainfit/memory.hpp"
#include "trainfit/model.hpp"
#include "trainfit/plan.hpp"
#include "trainfit/time.hpp"
#include "trainfit/units.hpp"

namespace trainfit::bench {
namespace {

using nlohmann::json;

constexpr std::string_view kFieldNames[] = {
    // the config
    "model", "method", "weights", "amp", "rank", "lora_alpha", "lora_dropout", "lora_targets", "optimizer", "attn",
    "seq", "batch", "grad_accum", "grad_ckpt", "gpus", "parallel", "device", "gpu", "steps", "warmup", "overflow",
    // derived from it
    "vram", "tokens", "params", "params_b",
    // measured
    "status", "peak_allocated", "peak_reserved", "device_used", "weights_loaded", "step_seconds", "tokens_per_second",
    "alloc_retries", "ooms", "gpu_util", "device_used_max",
    // judged and predicted
    "verdict", "predicted_peak_allocated", "predicted_peak_reserved", "predicted_device_used", "predicted_verdict",
    "predicted_step_seconds", "error", "abs_error", "step_error"};

std::optional<double> number(const json& o, const char* key) {
  if (!o.is_object() || !o.contains(key) || !o[key].is_number()) return std::nullopt;
  return o[key].get<double>();
}

json or_null(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

double round_to(double v, double step) { return std::round(v / step) * step; }

// The physical card: the plan's, else the one the runner reports ("NVIDIA H200 (143771 MiB)").
std::optional<GpuSpec> physical_gpu(const json& row) {
  std::string name;
  if (row["config"].contains("gpu")) name = row["config"]["gpu"].get<std::string>();
  else if (row.contains("stack") && row["stack"].contains("gpu") && row["stack"]["gpu"].is_string())
    name = row["stack"]["gpu"].get<std::string>().substr(0, row["stack"]["gpu"].get<std::string>().find(" ("));
  if (name.empty()) return std::nullopt;
  try {
    return find_gpu(name);
  } catch (const InputError&) {
    return std::nullopt;
  }
}

TrainingSetup setup_of(const json& config) {
  return parse_measurements(json{{"config", config}}.dump(), "row").front().setup;
}

// The card the row is judged against, in MiB: the emulated size, else what the runner measured,
// else the catalogue's.
std::optional<double> capacity_mib(const json& row, const std::optional<GpuSpec>& gpu) {
  const json& c = row["config"];
  if (c.contains("vram_bytes")) return to_mib(c["vram_bytes"].get<std::int64_t>());
  if (auto m = number(row.value("stack", json::object()), "gpu_memory_mib")) return *m;
  if (gpu && c.value("device", "cuda") == "cuda") return to_mib(gpu->memory_bytes);
  return std::nullopt;
}

void set_verdict(const ExperimentPlan& plan, json& row, std::vector<std::string> extra_reasons = {}) {
  const json& m = row["measured"];
  const std::string status = m.value("status", "error");
  std::vector<std::string> reasons;
  std::string verdict;
  if (status == "oom") {
    verdict = "oom";
    reasons.push_back("out of memory" + (m.contains("oom_at_step") ? fmt::format(" in step {}", m["oom_at_step"].dump()) : ""));
  } else if (status != "ok") {
    verdict = "error";
    reasons.push_back(fmt::format("{}: {}", status, m.value("error", "")));
  } else if (!number(m, "peak_allocated_mib")) {
    verdict = "error";
    reasons.emplace_back("no peak allocated memory was measured");
  } else {
    const double peak = *number(m, "peak_allocated_mib");
    const auto cap = number(row, "capacity_mib");
    const auto step = number(m, "step_seconds_median");
    const auto predicted_step = number(row["predicted"], "step_seconds");
    verdict = "fits";
    if (cap && peak > *cap) {
      verdict = "spilled";
      reasons.push_back(fmt::format("peak allocated {:.1f} MiB is over the card's {:.0f} MiB ({:.0f}%)", peak, *cap,
                                    100.0 * peak / *cap));
    }
    if (step && predicted_step && *predicted_step > 0 && *step > plan.slowdown * *predicted_step) {
      verdict = "spilled";
      reasons.push_back(fmt::format("a step took {:.3g} s, {:.1f}x the planner's {:.3g} s", *step, *step / *predicted_step,
                                    *predicted_step));
    }
    for (auto& r : extra_reasons) {
      verdict = "spilled";
      reasons.push_back(std::move(r));
    }
    if (verdict == "fits" && cap && peak > (1.0 - plan.headroom) * *cap) {
      verdict = "tight";
      reasons.push_back(fmt::format("peak allocated is {:.0f}% of the card: less than the {:.0f}% headroom left",
                                    100.0 * peak / *cap, 100.0 * plan.headroom));
    }
    if (const auto retries = number(m, "num_alloc_retries"); retries && *retries > 0) {
      if (verdict == "fits") verdict = "tight";
      reasons.push_back(fmt::format("the allocator freed its cache and retried {:.0f} times (memory pressure)", *retries));
    }
  }
  row["verdict"] = verdict;
  row["verdict_reasons"] = reasons;
}

// Rows whose step time, for the work the step does, is `slowdown` times that of a config with less
// work in the same run: a step that "worked" but crawled (the seed's 14B: 51x the 7B's time for 2x
// the work). The work is the planner's in-memory step time when it has one (it counts the host's
// fixed cost per operation, which dominates small steps), else the step's FLOPs.
std::vector<std::vector<std::string>> slow_neighbours(const ExperimentPlan& plan, const std::vector<json>& rows) {
  std::vector<std::vector<std::string>> reasons(rows.size());
  struct Item {
    double work, seconds;
    std::size_t i;
  };
  bool timed = !rows.empty();
  for (const json& r : rows)
    if (r["measured"].value("status", "") == "ok" && !number(r["predicted"], "step_seconds_in_memory")) timed = false;
  const char* work_key = timed ? "step_seconds_in_memory" : "work_flops";
  std::vector<Item> items;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const json& r = rows[i];
    const auto t = number(r["measured"], "step_seconds_median");
    const auto w = number(r["predicted"], work_key);
    if (r["measured"].value("status", "") == "ok" && t && w && *t > 0 && *w > 0) items.push_back({*w, *t, i});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.work < b.work; });
  double best = std::numeric_limits<double>::infinity();
  std::size_t best_i = 0;
  for (const Item& it : items) {
    const double cost = it.seconds / it.work;
    if (std::isfinite(best) && cost > plan.slowdown * best) {
      reasons[it.i].push_back(fmt::format("a step took {:.3g} s: {:.0f}x slower for its work ({}) than row {} ({}, {:.3g} s)",
                                          it.seconds, cost / best, timed ? "the planner's step time" : "its FLOPs",
                                          best_i + 1, rows[best_i]["bench"].value("label", ""),
                                          *number(rows[best_i]["measured"], "step_seconds_median")));
      continue;
    }
    if (cost < best) {
      best = cost;
      best_i = it.i;
    }
  }
  return reasons;
}

std::string percent(const std::optional<double>& e) { return e ? fmt::format("{:+.1f}%", 100.0 * *e) : "-"; }

std::string num_or_dash(const std::optional<double>& v, const char* f) {
  return v ? fmt::vformat(f, fmt::make_format_args(*v)) : "-";
}

}  // namespace

bool is_row_field(std::string_view name) {
  if (name.size() > 2 && name.rfind("x_", 0) == 0) return true;
  return std::find(std::begin(kFieldNames), std::end(kFieldNames), name) != std::end(kFieldNames);
}

Fields row_fields(const json& row) {
  Fields f;
  auto put = [&](const std::string& k, const json& v) {
    if (v.is_boolean()) f[k] = v.get<bool>();
    else if (v.is_number()) f[k] = v.get<double>();
    else if (v.is_string()) f[k] = v.get<std::string>();
    else f[k] = std::monostate{};
  };
  const json& c = row["config"];
  for (const auto& [k, v] : c.items()) put(k, v);
  if (c.contains("vram_bytes")) f["vram"] = to_mib(c["vram_bytes"].get<std::int64_t>());
  else if (auto cap = number(row, "capacity_mib")) f["vram"] = *cap;
  if (c.contains("seq") && c.contains("batch"))
    f["tokens"] = c["seq"].get<double>() * c["batch"].get<double>() * c.value("grad_accum", 1.0);
  const json p = row.value("predicted", json::object());
  if (auto n = number(p, "total_parameters")) {
    f["params"] = *n;
    f["params_b"] = *n / 1e9;
  }
  const json m = row.value("measured", json::object());
  auto measured = [&](const char* field, const char* key) {
    if (m.contains(key)) put(field, m[key]);
  };
  measured("status", "status");
  measured("peak_allocated", "peak_allocated_mib");
  measured("peak_reserved", "peak_reserved_mib");
  measured("device_used", "device_used_mib");
  measured("weights_loaded", "weights_loaded_mib");
  measured("step_seconds", "step_seconds_median");
  measured("tokens_per_second", "tokens_per_second");
  measured("alloc_retries", "num_alloc_retries");
  measured("ooms", "num_ooms");
  const json t = row.value("telemetry", json::object());
  if (auto u = number(t, "gpu_util_mean")) f["gpu_util"] = *u;
  if (auto u = number(t, "device_used_max_mib")) f["device_used_max"] = *u;
  if (row.contains("verdict")) put("verdict", row["verdict"]);
  for (const auto& [field, key] : {std::pair{"predicted_peak_allocated", "peak_allocated_mib"},
                                   {"predicted_peak_reserved", "peak_reserved_mib"},
                                   {"predicted_device_used", "device_used_mib"},
                                   {"predicted_verdict", "verdict"},
                                   {"predicted_step_seconds", "step_seconds"},
                                   {"error", "error"},
                                   {"step_error", "step_error"}})
    if (p.contains(key)) put(field, p[key]);
  if (auto e = number(p, "error")) f["abs_error"] = std::abs(*e);
  return f;
}

void annotate_row(const ExperimentPlan& plan, json& row) {
  const json& c = row["config"];
  json pred = json::object();
  const ModelSpec model = load_model(c["model"].get<std::string>());
  pred["total_parameters"] = count_parameters(model).total;
  const TrainingSetup setup = setup_of(c);
  const StepWork work = step_work(model, setup);
  pred["work_flops"] = work.tensor_flops + work.attention_flops + work.fp32_flops;
  const std::optional<GpuSpec> gpu = physical_gpu(row);
  if (gpu && !c.contains("gpu")) row["config"]["gpu"] = gpu->id;  // so that `trainfit validate` reads the row
  row["capacity_mib"] = or_null(capacity_mib(row, gpu));
  if (gpu && c.value("device", "cuda") == "cuda") {
    GpuSpec card = *gpu;
    if (c.contains("vram_bytes")) {
      card.memory_bytes = c["vram_bytes"].get<std::int64_t>();
      card.name += fmt::format(" as a {:.0f} MiB card", to_mib(card.memory_bytes));
    }
    TrainingSetup s = setup;
    s.headroom = plan.headroom;
    PlanOptions o;
    o.sysmem_fallback = c.value("overflow", "oom") == "spill";
    o.suggest = false;
    const Plan p = make_plan(model, s, card, o);
    const TimeEstimate& t = p.time;  // the plan's own estimate: same card, profile and spill verdict
    pred["card"] = card.name;
    pred["peak_allocated_mib"] = round_to(to_mib(p.memory.peak_allocated_bytes), 0.1);
    pred["peak_reserved_mib"] = round_to(to_mib(p.memory.peak_reserved_bytes), 0.1);
    pred["device_used_mib"] = round_to(to_mib(p.memory.device_used_bytes), 0.1);
    pred["peak_phase"] = to_string(p.memory.peak_phase) + ": " + p.memory.peak_moment;
    pred["verdict"] = to_string(p.verdict);
    if (t.predicted) {
      pred["step_seconds"] = t.step_seconds;
      pred["step_seconds_in_memory"] = t.step_seconds - t.spill_seconds;
      pred["bottleneck"] = to_string(t.bottleneck);
    }
    const json& m = row["measured"];
    if (m.value("status", "") == "ok") {
      if (auto peak = number(m, "peak_allocated_mib"); peak && *peak > 0)
        pred["error"] = to_mib(p.memory.peak_allocated_bytes) / *peak - 1.0;
      if (auto step = number(m, "step_seconds_median"); step && *step > 0 && t.predicted)
        pred["step_error"] = t.step_seconds / *step - 1.0;
    }
  }
  row["predicted"] = pred;
  set_verdict(plan, row);
}

BenchReport judge_results(const ExperimentPlan& plan, std::vector<json> rows) {
  BenchReport out;
  for (auto& r : rows) annotate_row(plan, r);
  const auto slow = slow_neighbours(plan, rows);
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (!slow[i].empty()) set_verdict(plan, rows[i], slow[i]);

  std::vector<Fields> fields;
  for (const auto& r : rows) fields.push_back(row_fields(r));
  for (const Criterion& c : plan.criteria) {
    CriterionResult res{c.name, c.text, c.expect.text(), "fail", "", {}};
    if (c.where) res.expression = fmt::format("{}  where  {}", c.expect.text(), c.where->text());
    try {
      if (c.expect.has_aggregates()) {
        const Evaluation e = c.expect.evaluate(nullptr, &fields);
        if (!std::holds_alternative<bool>(e.value) && !std::holds_alternative<std::monostate>(e.value))
          throw InputError(fmt::format("gives {}, not true or false", to_string(e.value)));
        res.outcome = std::holds_alternative<bool>(e.value) && std::get<bool>(e.value) ? "pass" : "fail";
        res.detail = std::holds_alternative<std::monostate>(e.value) ? "no row to judge it on (null)" : to_string(e.value);
        res.deciding = e.rows;
      } else {
        std::vector<std::size_t> selected, failing;
        for (std::size_t i = 0; i < fields.size(); ++i) {
          if (c.where) {
            const Value w = c.where->evaluate(&fields[i]).value;
            if (!(std::holds_alternative<bool>(w) && std::get<bool>(w))) continue;
          }
          selected.push_back(i);
          const Value v = c.expect.evaluate(&fields[i]).value;
          if (!std::holds_alternative<bool>(v) && !std::holds_alternative<std::monostate>(v))
            throw InputError(fmt::format("gives {} on row {}, not true or false", to_string(v), i + 1));
          if (!(std::holds_alternative<bool>(v) && std::get<bool>(v))) failing.push_back(i);
        }
        if (selected.empty()) {
          res.detail = "no row matches";
        } else {
          res.outcome = failing.empty() ? "pass" : "fail";
          res.detail = fmt::format("{} of {} rows hold", selected.size() - failing.size(), selected.size());
          res.deciding = failing.empty() ? selected : failing;
        }
      }
    } catch (const InputError& e) {
      res.outcome = "error";
      res.detail = e.what();
    }
    out.criteria.push_back(std::move(res));
  }

  std::vector<double> errors;
  for (const auto& r : rows) {
    if (auto e = number(r["predicted"], "error")) errors.push_back(std::abs(*e));
    if (r.contains("stack") && r["stack"].is_object() && !r["stack"].empty()) out.environment = r["stack"];
  }
  if (!errors.empty()) {
    std::sort(errors.begin(), errors.end());
    const std::size_t n = errors.size();
    out.median_abs_error = n % 2 ? errors[n / 2] : 0.5 * (errors[n / 2 - 1] + errors[n / 2]);
    out.max_abs_error = errors.back();
    out.compared = n;
  }
  out.rows = rows;
  return out;
}

json report_to_json(const ExperimentPlan& plan, const BenchReport& report) {
  json criteria = json::array();
  for (const auto& c : report.criteria) {
    json deciding = json::array();
    for (auto i : c.deciding) deciding.push_back(i + 1);
    criteria.push_back({{"name", c.name}, {"text", c.text}, {"expression", c.expression}, {"outcome", c.outcome},
                        {"detail", c.detail}, {"deciding_rows", deciding}});
  }
  json run = {{"steps", plan.steps}, {"warmup", plan.warmup}, {"timeout_seconds", plan.timeout_seconds},
              {"overflow", plan.overflow}, {"headroom", plan.headroom}, {"slowdown", plan.slowdown}};
  if (!plan.gpu.empty()) run["gpu"] = plan.gpu;
  if (plan.vram_bytes) run["vram_bytes"] = *plan.vram_bytes;
  return {{"schema", "trainfit.bench/1"},
          {"plan", {{"name", plan.name}, {"source", plan.source}, {"description", plan.description},
                    {"hypotheses", plan.hypotheses}, {"run", run}, {"text", plan.text}}},
          {"environment", report.environment},
          {"criteria", criteria},
          {"accuracy", {{"rows_compared", report.compared}, {"peak_allocated_median_abs_error", report.median_abs_error},
                        {"peak_allocated_max_abs_error", report.max_abs_error}}},
          {"rows", report.rows}};
}

std::string render_report(const ExperimentPlan& plan, const BenchReport& report) {
  std::string s = fmt::format("\n{}: {} configs\n", plan.name, report.rows.size());
  if (!report.environment.empty()) {
    const json& e = report.environment;
    auto v = [&](const char* k) { return e.contains(k) && e[k].is_string() ? e[k].get<std::string>() : std::string("?"); };
    s += fmt::format("stack: {}, driver {}, torch {}, transformers {}, peft {}\n", v("gpu"), v("driver"), v("torch"),
                     v("transformers"), v("peft"));
  }
  s += fmt::format("\n{:>3}  {:<44}{:<9}{:<9}{:>10}{:>10}{:>8}{:>10}{:>10}{:>9}{:>9}\n", "#", "config", "status", "verdict",
                   "peak MiB", "pred MiB", "error", "reserved", "dev used", "s/step", "pred s");
  for (std::size_t i = 0; i < report.rows.size(); ++i) {
    const json& r = report.rows[i];
    const json& m = r["measured"];
    const json p = r.value("predicted", json::object());
    s += fmt::format("{:>3}  {:<44}{:<9}{:<9}{:>10}{:>10}{:>8}{:>10}{:>10}{:>9}{:>9}\n", i + 1,
                     r["bench"].value("label", ""), m.value("status", "?"), r.value("verdict", "?"),
                     num_or_dash(number(m, "peak_allocated_mib"), "{:.1f}"), num_or_dash(number(p, "peak_allocated_mib"), "{:.1f}"),
                     percent(number(p, "error")), num_or_dash(number(m, "peak_reserved_mib"), "{:.0f}"),
                     num_or_dash(number(m, "device_used_mib"), "{:.0f}"), num_or_dash(number(m, "step_seconds_median"), "{:.3f}"),
                     num_or_dash(number(p, "step_seconds"), "{:.3f}"));
  }
  std::string notes;
  for (std::size_t i = 0; i < report.rows.size(); ++i) {
    const json& r = report.rows[i];
    if (r.value("verdict", "") == "fits") continue;
    for (const auto& why : r.value("verdict_reasons", json::array()))
      notes += fmt::format("  {:>3}  {}: {}\n", i + 1, r.value("verdict", ""), why.get<std::string>().substr(0, 300));
  }
  if (!notes.empty()) s += "\nwhy:\n" + notes;
  if (report.compared > 0)
    s += fmt::format("\npeak allocated, prediction vs measurement: {} rows, median |error| {:.1f}%, max |error| {:.1f}%\n",
                     report.compared, 100.0 * report.median_abs_error, 100.0 * report.max_abs_error);
  if (!report.criteria.empty()) {
    s += fmt::format("\ncriteria (pre-registered in {}):\n", plan.source);
    for (const auto& c : report.criteria) {
      std::vector<std::string> ids;
      for (auto i : c.deciding) ids.push_back(std::to_string(i + 1));
      s += fmt::format("  {:<5} {}{}\n        {}\n        -> {}{}\n", c.outcome == "pass" ? "PASS" : c.outcome == "fail" ? "FAIL" : "ERROR",
                       c.name, c.text.empty() ? "" : ": " + c.text, c.expression, c.detail,
                       ids.empty() ? "" : fmt::format("; decided by rows {}", fmt::join(ids, ", ")));
    }
  }
  return s;
}

std::string render_matrix(const ExperimentPlan& plan, const std::vector<BenchConfig>& configs) {
  std::string s = fmt::format("{}: {} configs, {} steps each ({} warm-up), timeout {:.0f} s{}\n", plan.name, configs.size(),
                              plan.steps, plan.warmup, plan.timeout_seconds,
                              plan.vram_bytes ? fmt::format(", emulated card {:.0f} MiB ({})", to_mib(*plan.vram_bytes), plan.overflow) : "");
  s += fmt::format("{:>3}  {:<44}{:>10}{:>10}{:>10}  {}\n", "#", "config", "pred MiB", "verdict", "pred s", "predicted peak");
  for (const auto& c : configs) {
    json row = {{"config", c.config}, {"measured", json::object()}, {"bench", {{"label", c.label}}}};
    annotate_row(plan, row);
    const json& p = row["predicted"];
    s += fmt::format("{:>3}  {:<44}{:>10}{:>10}{:>10}  {}\n", c.index + 1, c.label,
                     num_or_dash(number(p, "peak_allocated_mib"), "{:.1f}"), p.value("verdict", "-"),
                     num_or_dash(number(p, "step_seconds"), "{:.3f}"), p.value("peak_phase", ""));
  }
  if (plan.gpu.empty()) s += "(no run.gpu in the plan: predictions wait for the card the runner reports)\n";
  return s;
}

}  // namespace trainfit::bench
