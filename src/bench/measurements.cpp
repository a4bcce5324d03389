// Reading measured steps and putting the planner's prediction beside them.
#include "trainfit/measurements.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "bench/bench_row.hpp"
#include "common/statistics.hpp"
#include "common/text.hpp"
#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/host_probe.hpp"
#include "trainfit/memory.hpp"
#include "trainfit/model.hpp"
#include "trainfit/settings.hpp"

namespace trainfit {
namespace {

using nlohmann::json;

[[noreturn]] void fail(std::string_view source, int line, const std::string& what) {
  throw InputError(fmt::format("{}:{}: {}", source, line, what));
}

std::optional<double> get_number(const json& o, const char* key) {
  if (!o.contains(key) || o[key].is_null()) return std::nullopt;
  if (!o[key].is_number()) throw InputError(fmt::format("field \"{}\" must be a number", key));
  const double v = o[key].get<double>();
  if (!std::isfinite(v) || v < 0) throw InputError(fmt::format("field \"{}\" must be a non-negative number", key));
  return v;
}

std::string get_string(const json& o, const char* key, std::string_view fallback) {
  if (!o.contains(key) || o[key].is_null()) return std::string(fallback);
  if (!o[key].is_string()) throw InputError(fmt::format("field \"{}\" must be a string", key));
  return o[key].get<std::string>();
}

}  // namespace

Measurement measurement_from_json(const json& r) {
  if (!r.is_object()) throw InputError("field \"measured\" must be an object");
  Measurement m;
  m.status = get_string(r, "status", "ok");
  m.error = get_string(r, "error", "");
  m.peak_allocated_mib = get_number(r, "peak_allocated_mib");
  m.peak_reserved_mib = get_number(r, "peak_reserved_mib");
  m.device_used_mib = get_number(r, "device_used_mib");
  m.weights_loaded_mib = get_number(r, "weights_loaded_mib");
  // The steady-state median: measure_memory.py named it after the steps it took (2 to 4, 2 to n).
  for (const char* key : {"step_seconds_median_2_4", "step_seconds_median_2_n", "step_seconds_median"})
    if (!m.step_seconds) m.step_seconds = get_number(r, key);
  m.tokens_per_second = get_number(r, "tokens_per_second");
  m.alloc_retries = get_number(r, "num_alloc_retries");
  m.ooms = get_number(r, "num_ooms");
  m.oom_at_step = get_number(r, "oom_at_step");
  // The row's own host figure: a probe that failed or cannot be read leaves the row's measurement
  // standing, with the reason beside it.
  if (r.contains("host_probe") && !r["host_probe"].is_null()) {
    try {
      const HostDispatch d = host_dispatch_from_probe(r["host_probe"]);
      if (d.device == "cuda") m.host_seconds_per_op = d.seconds_per_op;
      else m.host_probe_note = "its host probe ran on the CPU, not a GPU";
    } catch (const std::exception& e) {
      m.host_probe_note = e.what();
    }
  }
  return m;
}

namespace {

// One line of a measurements file: a row, or nothing for a blank line. `rows` so far, for the cap.
std::optional<MeasuredStep> parse_row(std::string_view raw, std::string_view source, int line, std::size_t rows) {
  if (raw.size() > kMaxMeasurementLineBytes) throw InputError(detail::line_too_long(source, line, kMaxMeasurementLineBytes));
  if (raw.find_first_not_of(" \t\r") == std::string_view::npos) return std::nullopt;
  if (rows >= kMaxMeasurementRows)
    fail(source, line, fmt::format("more than {} rows; split the file (docs/model.md, \"Measurement files\")", kMaxMeasurementRows));
  const json row = json::parse(raw, nullptr, false);
  if (row.is_discarded() || !row.is_object()) fail(source, line, "not a JSON object");
  if (!row.contains("config") || !row["config"].is_object()) fail(source, line, "missing object \"config\"");
  MeasuredStep m;
  m.source = std::string(source);
  m.line = line;
  try {
    // A row's config also holds what the runner needed (steps, device...) and what the user's
    // own code recorded: only the settings are read.
    m.setup = setup_from_json(row["config"]);
    if (bench::built_text_model_alone(row)) m.setup.vision_tower = VisionTowerUse::dropped;
    if (m.setup.model.empty()) throw InputError("field \"model\" is missing");
    if (m.setup.model.ends_with(".json")) m.setup.model = bench::beside_the_file(m.setup.model, source);
    if (row.contains("measured")) {
      m.measured = measurement_from_json(row["measured"]);
      m.has_measurement = true;
    }
  } catch (const InputError& e) {
    fail(source, line, e.what());
  }
  return m;
}

// Runs `f` for one row; an InputError it raises (an unknown model or card, a setup the model
// refuses) names the row's file and line, as an error in the row's own text does.
template <typename F>
void for_row(const MeasuredStep& m, F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    if (m.source.empty()) throw;
    fail(m.source, m.line, e.what());
  }
}

}  // namespace

std::vector<MeasuredStep> parse_measurements(std::string_view text, std::string_view source) {
  std::vector<MeasuredStep> rows;
  detail::for_each_line_in(text, source, kMaxMeasurementLineBytes, [&](int line, std::string_view raw) {
    if (auto row = parse_row(raw, source, line, rows.size())) rows.push_back(std::move(*row));
  });
  return rows;
}

std::vector<MeasuredStep> load_measurements(std::string_view path) {
  std::vector<MeasuredStep> rows;
  detail::for_each_line(path, "measurements file", {kMaxMeasurementLineBytes, kMaxMeasurementFileBytes},
                        [&](int line, std::string_view raw) {
                          if (auto row = parse_row(raw, path, line, rows.size())) rows.push_back(std::move(*row));
                        });
  return rows;
}

ComparisonSummary compare_with_measurements(const std::vector<MeasuredStep>& steps, const TimeProfile* profile,
                                            const CompareOptions& options) {
  ComparisonSummary out;
  std::vector<double> errors, step_errors, reserved_errors;
  for (const auto& m : steps) {
    const Measurement& r = m.measured;
    if (!m.has_measurement || r.status != "ok" || !r.peak_allocated_mib || *r.peak_allocated_mib <= 0) continue;
    if (!r.host_probe_note.empty()) out.host_probe_notes.push_back(fmt::format("line {}: {}", m.line, r.host_probe_note));
    for_row(m, [&] {
      const ModelSpec model = load_model(m.setup.model);
      // Rows that do not name their card were measured on the H200 (data/reference/).
      const GpuSpec& gpu = find_gpu(m.setup.gpu.empty() ? "h200" : m.setup.gpu);
      const MemoryEstimate est = estimate_memory(model, m.setup, gpu);
      Comparison c;
      c.measured = m;
      c.predicted_allocated = est.peak_allocated_bytes;
      c.predicted_reserved = est.peak_reserved_bytes;
      c.predicted_device_used = est.device_used_bytes;
      c.predicted_peak_phase = to_string(est.peak_phase) + ": " + est.peak_moment;
      c.allocated_error = static_cast<double>(est.peak_allocated_bytes) / (*r.peak_allocated_mib * 1048576.0) - 1.0;
      errors.push_back(std::abs(c.allocated_error));
      if (r.peak_reserved_mib && *r.peak_reserved_mib > 0)
        reserved_errors.push_back(std::abs(static_cast<double>(est.peak_reserved_bytes) / (*r.peak_reserved_mib * 1048576.0) - 1.0));
      TimeProfile rates = profile ? *profile : default_profile(gpu);
      if (options.row_host && r.host_seconds_per_op) {
        rates.host_seconds_per_op = *r.host_seconds_per_op;
        c.host_from_row = true;
      }
      c.host_seconds_per_op = rates.host_seconds_per_op;
      const TimeEstimate t = estimate_time(model, m.setup, gpu, rates, false);
      if (t.predicted) {
        if (c.host_from_row && r.step_seconds && *r.step_seconds > 0) ++out.rows_with_own_host;
        c.predicted_step_seconds = t.step_seconds;
        c.predicted_bottleneck = to_string(t.bottleneck);
        if (r.step_seconds && *r.step_seconds > 0) {
          c.step_error = t.step_seconds / *r.step_seconds - 1.0;
          step_errors.push_back(std::abs(c.step_error));
        }
      }
      out.rows.push_back(std::move(c));
    });
  }
  out.median_abs_error = detail::median(errors).value_or(0);
  out.max_abs_error = detail::max_abs(errors);
  out.median_abs_reserved_error = detail::median(reserved_errors).value_or(0);
  out.max_abs_reserved_error = detail::max_abs(reserved_errors);
  out.timed_rows = step_errors.size();
  out.median_abs_step_error = detail::median(step_errors).value_or(0);
  out.max_abs_step_error = detail::max_abs(step_errors);
  return out;
}

std::vector<TimedStep> timed_steps(const std::vector<MeasuredStep>& steps) {
  std::vector<TimedStep> out;
  for (const auto& m : steps) {
    const Measurement& r = m.measured;
    if (!m.has_measurement || r.status != "ok" || !r.step_seconds || *r.step_seconds <= 0) continue;
    for_row(m, [&] {
      out.push_back({load_model(m.setup.model), m.setup, find_gpu(m.setup.gpu.empty() ? "h200" : m.setup.gpu),
                     *r.step_seconds});
    });
  }
  return out;
}

}  // namespace trainfit
