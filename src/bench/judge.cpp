// Judging a bench run: the planner's prediction beside each row, a verdict per row, the
// pre-registered criteria, and the closing report. A run without an out-of-memory error has not
// shown that it fits: it must also have stayed inside the card and run at normal speed (the seed).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/statistics.hpp"
#include "common/text.hpp"
#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/measurements.hpp"
#include "trainfit/memory.hpp"
#include "trainfit/model.hpp"
#include "trainfit/settings.hpp"
#include "trainfit/plan.hpp"
#include "trainfit/time.hpp"
#include "trainfit/units.hpp"

namespace trainfit::bench {
namespace {

using nlohmann::json;

// The fields a criterion can name besides the matrix settings (settings.hpp) and runner fields (x_...).
constexpr std::string_view kFieldNames[] = {
    // the run's own (the plan's [run] table and where the runner ran the steps)
    "device", "gpu", "steps", "warmup", "overflow",
    // derived from the config
    "vram", "tokens", "params", "params_b",
    // measured
    "status", "peak_allocated", "peak_reserved", "device_used", "weights_loaded", "step_seconds", "tokens_per_second",
    "alloc_retries", "ooms", "gpu_util", "device_used_max",
    // judged and predicted
    "verdict", "predicted_peak_allocated", "predicted_peak_reserved", "predicted_device_used", "predicted_verdict",
    "predicted_step_seconds", "error", "abs_error", "step_error"};

double round_to(double v, double step) { return std::round(v / step) * step; }

// The physical card: the config's, else the one the runner reports ("NVIDIA H200 (143771 MiB)").
std::optional<GpuSpec> physical_gpu(const BenchRow& row) {
  std::string name = row.config.setup.gpu;
  if (name.empty() && row.stack.contains("gpu") && row.stack["gpu"].is_string()) {
    const std::string reported = row.stack["gpu"].get<std::string>();
    name = reported.substr(0, reported.find(" ("));
  }
  if (name.empty()) return std::nullopt;
  try {
    return find_gpu(name);
  } catch (const InputError&) {
    return std::nullopt;
  }
}

// The card the row is judged against, in MiB: the emulated size, else what the runner measured,
// else the catalogue's.
std::optional<double> capacity_mib(const BenchRow& row, const std::optional<GpuSpec>& gpu) {
  const BenchConfig& c = row.config;
  if (c.vram_bytes) return to_mib(*c.vram_bytes);
  if (row.stack.contains("gpu_memory_mib") && row.stack["gpu_memory_mib"].is_number())
    return row.stack["gpu_memory_mib"].get<double>();
  if (gpu && c.device == "cuda") return to_mib(gpu->memory_bytes);
  return std::nullopt;
}

void set_verdict(const ExperimentPlan& plan, BenchRow& row, std::vector<std::string> extra_reasons = {}) {
  const Measurement& m = row.measured;
  std::vector<std::string> reasons;
  std::string verdict;
  if (m.status == "oom") {
    verdict = "oom";
    reasons.push_back("out of memory" + (m.oom_at_step ? fmt::format(" in step {}", *m.oom_at_step) : ""));
  } else if (m.status != "ok") {
    verdict = "error";
    reasons.push_back(fmt::format("{}: {}", m.status, m.error));
  } else if (!m.peak_allocated_mib) {
    verdict = "error";
    reasons.emplace_back("no peak allocated memory was measured");
  } else {
    const double peak = *m.peak_allocated_mib;
    const auto& cap = row.capacity_mib;
    // 0 when unknown (plain doubles: GCC 12 warns falsely about optionals read in fmt calls).
    const double step = m.step_seconds.value_or(0);
    const double predicted_step = row.predicted ? row.predicted->step_seconds.value_or(0) : 0;
    verdict = "fits";
    if (cap && peak > *cap) {
      verdict = "spilled";
      reasons.push_back(fmt::format("peak allocated {:.1f} MiB is over the card's {:.0f} MiB ({:.0f}%)", peak, *cap,
                                    100.0 * peak / *cap));
    }
    if (step > 0 && predicted_step > 0 && step > plan.slowdown * predicted_step) {
      verdict = "spilled";
      reasons.push_back(fmt::format("a step took {:.3g} s, {:.1f}x the planner's {:.3g} s", step, step / predicted_step,
                                    predicted_step));
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
    if (m.alloc_retries && *m.alloc_retries > 0) {
      if (verdict == "fits") verdict = "tight";
      reasons.push_back(fmt::format("the allocator freed its cache and retried {:.0f} times (memory pressure)", *m.alloc_retries));
    }
  }
  row.verdict = verdict;
  row.verdict_reasons = reasons;
}

// Rows whose step time, for the work the step does, is `slowdown` times that of a config with less
// work in the same run: a step that "worked" but crawled (the seed's 14B: 51x the 7B's time for 2x
// the work). The work is the planner's in-memory step time when it has one (it counts the host's
// fixed cost per operation, which dominates small steps), else the step's FLOPs.
std::vector<std::vector<std::string>> slow_neighbours(const ExperimentPlan& plan, const std::vector<BenchRow>& rows) {
  std::vector<std::vector<std::string>> reasons(rows.size());
  struct Item {
    double work, seconds;
    std::size_t i;
  };
  bool timed = !rows.empty();
  for (const BenchRow& r : rows)
    if (r.measured.status == "ok" && !(r.predicted && r.predicted->step_seconds_in_memory)) timed = false;
  auto work_of = [&](const BenchRow& r) -> std::optional<double> {
    if (!r.predicted) return std::nullopt;
    if (timed) return r.predicted->step_seconds_in_memory;
    return r.predicted->work_flops;
  };
  std::vector<Item> items;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const BenchRow& r = rows[i];
    const auto& t = r.measured.step_seconds;
    const auto w = work_of(r);
    if (r.measured.status == "ok" && t && w && *t > 0 && *w > 0) items.push_back({*w, *t, i});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.work < b.work; });
  double best = std::numeric_limits<double>::infinity();
  std::size_t best_i = 0;
  for (const Item& it : items) {
    const double cost = it.seconds / it.work;
    if (std::isfinite(best) && cost > plan.slowdown * best) {
      reasons[it.i].push_back(fmt::format("a step took {:.3g} s: {:.0f}x slower for its work ({}) than row {} ({}, {:.3g} s)",
                                          it.seconds, cost / best, timed ? "the planner's step time" : "its FLOPs",
                                          best_i + 1, rows[best_i].run.label, *rows[best_i].measured.step_seconds));
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
  if (const Setting* s = find_setting(name); s != nullptr && s->in_matrix) return true;
  return std::find(std::begin(kFieldNames), std::end(kFieldNames), name) != std::end(kFieldNames);
}

Fields row_fields(const BenchRow& row) {
  Fields f;
  auto put = [&](const std::string& k, const SettingValue& v) {
    if (const auto* b = std::get_if<bool>(&v)) f[k] = *b;
    else if (const auto* i = std::get_if<std::int64_t>(&v)) f[k] = static_cast<double>(*i);
    else if (const auto* d = std::get_if<double>(&v)) f[k] = *d;
    else if (const auto* s = std::get_if<std::string>(&v)) f[k] = *s;
    else f[k] = std::monostate{};
  };
  auto put_number = [&](const std::string& k, const std::optional<double>& v) {
    if (v) f[k] = *v;
  };
  const BenchConfig& c = row.config;
  // The matrix settings, as the criteria name them: a list by its short text ("q,v").
  for (const Setting& s : settings()) {
    if (!s.in_matrix || !applies(s, c.setup)) continue;
    const SettingValue v = s.get(c.setup);
    if (std::holds_alternative<std::vector<std::string>>(v)) f[s.key] = setting_text(s, v);
    else put(s.key, v);
  }
  if (!c.setup.gpu.empty()) f["gpu"] = c.setup.gpu;
  f["device"] = c.device;
  f["steps"] = static_cast<double>(c.steps);
  f["warmup"] = static_cast<double>(c.warmup);
  if (c.vram_bytes) f["overflow"] = c.overflow;
  for (const auto& [k, v] : c.runner_fields) put(k, v);
  if (c.vram_bytes) f["vram"] = to_mib(*c.vram_bytes);
  else put_number("vram", row.capacity_mib);
  f["tokens"] = static_cast<double>(c.setup.seq) * static_cast<double>(c.setup.batch) * static_cast<double>(c.setup.grad_accum);
  if (row.predicted) {
    f["params"] = static_cast<double>(row.predicted->total_parameters);
    f["params_b"] = static_cast<double>(row.predicted->total_parameters) / 1e9;
  }
  // What was measured: only once the config has run.
  if (!row.run.exit.empty() || !row.reported.empty()) {
    const Measurement& m = row.measured;
    f["status"] = m.status;
    put_number("peak_allocated", m.peak_allocated_mib);
    put_number("peak_reserved", m.peak_reserved_mib);
    put_number("device_used", m.device_used_mib);
    put_number("weights_loaded", m.weights_loaded_mib);
    put_number("step_seconds", m.step_seconds);
    put_number("tokens_per_second", m.tokens_per_second);
    put_number("alloc_retries", m.alloc_retries);
    put_number("ooms", m.ooms);
  }
  if (row.telemetry) {
    put_number("gpu_util", row.telemetry->gpu_util_mean);
    put_number("device_used_max", row.telemetry->device_used_max_mib);
  }
  if (!row.verdict.empty()) f["verdict"] = row.verdict;
  if (row.predicted) {
    const Prediction& p = *row.predicted;
    put_number("predicted_peak_allocated", p.peak_allocated_mib);
    put_number("predicted_peak_reserved", p.peak_reserved_mib);
    put_number("predicted_device_used", p.device_used_mib);
    if (!p.verdict.empty()) f["predicted_verdict"] = p.verdict;
    put_number("predicted_step_seconds", p.step_seconds);
    put_number("error", p.error);
    put_number("step_error", p.step_error);
    if (p.error) f["abs_error"] = std::abs(*p.error);
  }
  return f;
}

void annotate_row(const ExperimentPlan& plan, BenchRow& row) {
  const BenchConfig& c = row.config;
  Prediction pred;
  const ModelSpec model = load_model(c.setup.model);
  pred.total_parameters = count_parameters(model).total;
  const StepWork work = step_work(model, c.setup);
  pred.work_flops = work.tensor_flops + work.attention_flops + work.fp32_flops;
  const std::optional<GpuSpec> gpu = physical_gpu(row);
  if (gpu && row.config.setup.gpu.empty()) row.config.setup.gpu = gpu->id;  // so that `trainfit validate` reads the row
  row.capacity_mib = capacity_mib(row, gpu);
  if (gpu && c.device == "cuda") {
    GpuSpec card = *gpu;
    if (c.vram_bytes) {
      card.memory_bytes = *c.vram_bytes;
      card.name += fmt::format(" as a {:.0f} MiB card", to_mib(card.memory_bytes));
    }
    TrainingSetup s = c.setup;
    s.headroom = plan.headroom;
    s.platform = c.overflow == "spill" && c.vram_bytes ? Platform::on_windows : Platform::on_linux;
    PlanOptions o;
    o.suggest = false;
    // A row that measured this host's dispatch time (--host-probe) is priced with it, as
    // `validate` prices it.
    if (row.measured.host_seconds_per_op) {
      o.profile = default_profile(card);
      o.profile->host_seconds_per_op = *row.measured.host_seconds_per_op;
      pred.host_seconds_per_op = row.measured.host_seconds_per_op;
    }
    const Plan p = make_plan(model, s, card, o);
    const TimeEstimate& t = p.time;  // the plan's own estimate: same card, profile and spill verdict
    pred.card = card.name;
    pred.peak_allocated_mib = round_to(to_mib(p.memory.peak_allocated_bytes), 0.1);
    pred.peak_reserved_mib = round_to(to_mib(p.memory.peak_reserved_bytes), 0.1);
    pred.device_used_mib = round_to(to_mib(p.memory.device_used_bytes), 0.1);
    pred.peak_phase = to_string(p.memory.peak_phase) + ": " + p.memory.peak_moment;
    pred.verdict = to_string(p.verdict);
    if (t.predicted) {
      pred.step_seconds = t.step_seconds;
      pred.step_seconds_in_memory = t.step_seconds - t.spill_seconds;
      pred.bottleneck = to_string(t.bottleneck);
    }
    const Measurement& m = row.measured;
    if (m.status == "ok") {
      if (m.peak_allocated_mib && *m.peak_allocated_mib > 0)
        pred.error = to_mib(p.memory.peak_allocated_bytes) / *m.peak_allocated_mib - 1.0;
      if (m.step_seconds && *m.step_seconds > 0 && t.predicted) pred.step_error = t.step_seconds / *m.step_seconds - 1.0;
    }
  }
  row.predicted = pred;
  set_verdict(plan, row);
}

BenchReport judge_results(const ExperimentPlan& plan, std::vector<BenchRow> rows) {
  BenchReport out;
  for (auto& r : rows) annotate_row(plan, r);
  const auto slow = slow_neighbours(plan, rows);
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (!slow[i].empty()) set_verdict(plan, rows[i], slow[i]);

  std::vector<Fields> fields;
  fields.reserve(rows.size());
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
    if (r.predicted && r.predicted->error) errors.push_back(std::abs(*r.predicted->error));
    if (r.stack.is_object() && !r.stack.empty()) out.environment = r.stack;
  }
  out.median_abs_error = detail::median(errors).value_or(0);
  out.max_abs_error = detail::max_abs(errors);
  out.compared = errors.size();
  out.rows = std::move(rows);
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
  json rows = json::array();
  for (const auto& r : report.rows) rows.push_back(row_to_json(r));
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
          {"rows", rows}};
}

// The closing text goes to a terminal: every string in it that a runner wrote or a row holds (the
// stack's versions, status, labels, reasons, a criterion's detail quoting a row's value) is printed
// with its control characters escaped (printable).
std::string render_report(const ExperimentPlan& plan, const BenchReport& report) {
  using detail::printable;
  std::string s = fmt::format("\n{}: {} configs\n", plan.name, report.rows.size());
  if (!report.environment.empty()) {
    const json& e = report.environment;
    auto v = [&](const char* k) { return e.contains(k) && e[k].is_string() ? printable(e[k].get<std::string>()) : std::string("?"); };
    s += fmt::format("stack: {}, driver {}, torch {}, transformers {}, peft {}\n", v("gpu"), v("driver"), v("torch"),
                     v("transformers"), v("peft"));
  }
  s += fmt::format("\n{:>3}  {:<44}{:<9}{:<9}{:>10}{:>10}{:>8}{:>10}{:>10}{:>9}{:>9}\n", "#", "config", "status", "verdict",
                   "peak MiB", "pred MiB", "error", "reserved", "dev used", "s/step", "pred s");
  auto fixed = [](const std::optional<double>& v, const char* f) { return num_or_dash(v, f); };
  for (std::size_t i = 0; i < report.rows.size(); ++i) {
    const BenchRow& r = report.rows[i];
    const Measurement& m = r.measured;
    const Prediction p = r.predicted.value_or(Prediction{});
    s += fmt::format("{:>3}  {:<44}{:<9}{:<9}{:>10}{:>10}{:>8}{:>10}{:>10}{:>9}{:>9}\n", i + 1, printable(r.run.label), printable(m.status),
                     r.verdict.empty() ? "?" : printable(r.verdict), fixed(m.peak_allocated_mib, "{:.1f}"),
                     fixed(p.peak_allocated_mib, "{:.1f}"), percent(p.error), fixed(m.peak_reserved_mib, "{:.0f}"),
                     fixed(m.device_used_mib, "{:.0f}"), fixed(m.step_seconds, "{:.3f}"), fixed(p.step_seconds, "{:.3f}"));
  }
  std::string notes;
  for (std::size_t i = 0; i < report.rows.size(); ++i) {
    const BenchRow& r = report.rows[i];
    if (r.verdict == "fits") continue;
    for (const auto& why : r.verdict_reasons) notes += fmt::format("  {:>3}  {}: {}\n", i + 1, printable(r.verdict), printable(why.substr(0, 300)));
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
                       printable(c.name), c.text.empty() ? "" : ": " + printable(c.text), printable(c.expression),
                       printable(c.detail),
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
    BenchRow row;
    row.config = c;
    row.run.label = c.label;
    annotate_row(plan, row);
    const Prediction& p = *row.predicted;
    s += fmt::format("{:>3}  {:<44}{:>10}{:>10}{:>10}  {}\n", c.index + 1, detail::printable(c.label), num_or_dash(p.peak_allocated_mib, "{:.1f}"),
                     p.verdict.empty() ? "-" : p.verdict, num_or_dash(p.step_seconds, "{:.3f}"), p.peak_phase);
  }
  if (plan.gpu.empty()) s += "(no run.gpu in the plan: predictions wait for the card the runner reports)\n";
  return s;
}

}  // namespace trainfit::bench
