// Reading measured steps and putting the planner's prediction beside them.
#include "common/text.hpp"
#include "trainfit/measurements.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/memory.hpp"
#include "trainfit/model.hpp"

namespace trainfit {
namespace {

using nlohmann::json;

[[noreturn]] void fail(std::string_view source, int line, const std::string& what) {
  throw InputError(fmt::format("{}:{}: {}", source, line, what));
}

std::int64_t get_int(const json& o, const char* key, std::int64_t fallback, std::string_view source, int line) {
  if (!o.contains(key) || o[key].is_null()) return fallback;
  if (!o[key].is_number_integer()) fail(source, line, fmt::format("field \"{}\" must be an integer", key));
  return o[key].get<std::int64_t>();
}

std::optional<double> get_number(const json& o, const char* key, std::string_view source, int line) {
  if (!o.contains(key) || o[key].is_null()) return std::nullopt;
  if (!o[key].is_number()) fail(source, line, fmt::format("field \"{}\" must be a number", key));
  const double v = o[key].get<double>();
  if (!std::isfinite(v) || v < 0) fail(source, line, fmt::format("field \"{}\" must be a non-negative number", key));
  return v;
}

std::string get_string(const json& o, const char* key, std::string_view fallback, std::string_view source, int line) {
  if (!o.contains(key) || o[key].is_null()) return std::string(fallback);
  if (!o[key].is_string()) fail(source, line, fmt::format("field \"{}\" must be a string", key));
  return o[key].get<std::string>();
}

TrainingSetup setup_from(const json& c, std::string_view source, int line) {
  TrainingSetup s;
  try {
    s.method = parse_method(get_string(c, "method", "lora", source, line));
    s.weights = parse_dtype(get_string(c, "weights", s.method == Method::qlora ? "nf4" : "bf16", source, line));
    const std::string amp = get_string(c, "amp", "", source, line);
    if (!amp.empty()) s.amp = parse_dtype(amp);
    s.optimizer = parse_optimizer(get_string(c, "optimizer", "adamw", source, line));
    s.attention = parse_attention(get_string(c, "attn", "sdpa", source, line));
    s.lora.rank = get_int(c, "rank", 16, source, line);
    s.lora.alpha = get_number(c, "lora_alpha", source, line).value_or(2.0 * static_cast<double>(s.lora.rank));
    s.lora.dropout = get_number(c, "lora_dropout", source, line).value_or(0.05);
    s.lora.targets = parse_lora_targets(get_string(c, "lora_targets", "all-linear", source, line));
    s.seq = get_int(c, "seq", 512, source, line);
    s.batch = get_int(c, "batch", 1, source, line);
    s.grad_accum = get_int(c, "grad_accum", 1, source, line);
    if (c.contains("grad_ckpt") && !c["grad_ckpt"].is_null()) {
      if (!c["grad_ckpt"].is_boolean()) fail(source, line, "field \"grad_ckpt\" must be true or false");
      s.grad_ckpt = c["grad_ckpt"].get<bool>();
    }
    s.gpus = get_int(c, "gpus", 1, source, line);
    s.parallel = parse_parallel(get_string(c, "parallel", "ddp", source, line));
    validate(s);
  } catch (const InputError& e) {
    fail(source, line, e.what());
  }
  return s;
}

}  // namespace

std::vector<MeasuredStep> parse_measurements(std::string_view text, std::string_view source) {
  std::vector<MeasuredStep> rows;
  std::istringstream in{std::string(text)};
  std::string raw;
  int line = 0;
  while (std::getline(in, raw)) {
    ++line;
    if (raw.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json row = json::parse(raw, nullptr, false);
    if (row.is_discarded() || !row.is_object()) fail(source, line, "not a JSON object");
    if (!row.contains("config") || !row["config"].is_object()) fail(source, line, "missing object \"config\"");
    const json& c = row["config"];
    MeasuredStep m;
    m.line = line;
    m.model = get_string(c, "model", "", source, line);
    if (m.model.empty()) fail(source, line, "field \"model\" is missing");
    m.gpu = get_string(c, "gpu", "", source, line);
    m.setup = setup_from(c, source, line);
    if (row.contains("measured")) {
      const json& r = row["measured"];
      if (!r.is_object()) fail(source, line, "field \"measured\" must be an object");
      m.status = get_string(r, "status", "ok", source, line);
      m.peak_allocated_mib = get_number(r, "peak_allocated_mib", source, line);
      m.peak_reserved_mib = get_number(r, "peak_reserved_mib", source, line);
      m.device_used_mib = get_number(r, "device_used_mib", source, line);
      m.step_seconds = get_number(r, "step_seconds_median_2_4", source, line);
      if (!m.step_seconds) m.step_seconds = get_number(r, "step_seconds_median_2_n", source, line);
      if (!m.step_seconds) m.step_seconds = get_number(r, "step_seconds_median", source, line);
    }
    rows.push_back(std::move(m));
  }
  return rows;
}

std::vector<MeasuredStep> load_measurements(std::string_view path) {
  return parse_measurements(detail::read_text_file(path, "measurements file"), path);
}

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

ComparisonSummary compare_with_measurements(const std::vector<MeasuredStep>& steps, const TimeProfile* profile) {
  ComparisonSummary out;
  std::vector<double> errors, step_errors, reserved_errors;
  for (const auto& m : steps) {
    if (m.status != "ok" || !m.peak_allocated_mib || *m.peak_allocated_mib <= 0) continue;
    const ModelSpec model = load_model(m.model);
    const GpuSpec& gpu = find_gpu(m.gpu.empty() ? "h200" : m.gpu);
    const MemoryEstimate est = estimate_memory(model, m.setup, gpu);
    Comparison c;
    c.measured = m;
    c.predicted_allocated = est.peak_allocated_bytes;
    c.predicted_reserved = est.peak_reserved_bytes;
    c.predicted_device_used = est.device_used_bytes;
    c.predicted_peak_phase = to_string(est.peak_phase) + ": " + est.peak_moment;
    c.allocated_error = static_cast<double>(est.peak_allocated_bytes) / (*m.peak_allocated_mib * 1048576.0) - 1.0;
    errors.push_back(std::abs(c.allocated_error));
    if (m.peak_reserved_mib && *m.peak_reserved_mib > 0)
      reserved_errors.push_back(std::abs(static_cast<double>(est.peak_reserved_bytes) / (*m.peak_reserved_mib * 1048576.0) - 1.0));
    const TimeEstimate t = estimate_time(model, m.setup, gpu, profile ? *profile : default_profile(gpu), false);
    if (t.predicted) {
      c.predicted_step_seconds = t.step_seconds;
      c.predicted_bottleneck = to_string(t.bottleneck);
      if (m.step_seconds && *m.step_seconds > 0) {
        c.step_error = t.step_seconds / *m.step_seconds - 1.0;
        step_errors.push_back(std::abs(c.step_error));
      }
    }
    out.rows.push_back(std::move(c));
  }
  out.median_abs_error = median(errors);
  out.max_abs_error = errors.empty() ? 0 : *std::max_element(errors.begin(), errors.end());
  out.median_abs_reserved_error = median(reserved_errors);
  out.max_abs_reserved_error = reserved_errors.empty() ? 0 : *std::max_element(reserved_errors.begin(), reserved_errors.end());
  out.timed_rows = step_errors.size();
  out.median_abs_step_error = median(step_errors);
  out.max_abs_step_error = step_errors.empty() ? 0 : *std::max_element(step_errors.begin(), step_errors.end());
  return out;
}

std::vector<TimedStep> timed_steps(const std::vector<MeasuredStep>& steps) {
  std::vector<TimedStep> out;
  for (const auto& m : steps) {
    if (m.status != "ok" || !m.step_seconds || *m.step_seconds <= 0) continue;
    out.push_back({load_model(m.model), m.setup, find_gpu(m.gpu.empty() ? "h200" : m.gpu), *m.step_seconds});
  }
  return out;
}

}  // namespace trainfit
