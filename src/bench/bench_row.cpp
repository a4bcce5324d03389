// A bench row as a line of results.jsonl: written once when its config ends, read back to resume
// and to judge. What the runner reported is kept whole; the library reads what it judges.
#include "bench/bench_row.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <string_view>

#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"

namespace trainfit::bench {
namespace {

using nlohmann::json;

json optional_number(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

std::optional<double> number(const json& o, const char* key) {
  if (!o.is_object() || !o.contains(key) || !o[key].is_number()) return std::nullopt;
  const double v = o[key].get<double>();
  return std::isfinite(v) ? std::optional<double>(v) : std::nullopt;
}

std::string text(const json& o, const char* key) {
  return o.is_object() && o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : std::string();
}

json prediction_to_json(const Prediction& p) {
  json j = {{"total_parameters", p.total_parameters}, {"work_flops", p.work_flops}};
  if (!p.card.empty()) j["card"] = p.card;
  auto put = [&](const char* key, const std::optional<double>& v) {
    if (v) j[key] = *v;
  };
  put("peak_allocated_mib", p.peak_allocated_mib);
  put("peak_reserved_mib", p.peak_reserved_mib);
  put("device_used_mib", p.device_used_mib);
  if (!p.peak_phase.empty()) j["peak_phase"] = p.peak_phase;
  if (!p.verdict.empty()) j["verdict"] = p.verdict;
  put("step_seconds", p.step_seconds);
  put("step_seconds_in_memory", p.step_seconds_in_memory);
  if (!p.bottleneck.empty()) j["bottleneck"] = p.bottleneck;
  put("error", p.error);
  put("step_error", p.step_error);
  put("host_seconds_per_op", p.host_seconds_per_op);
  return j;
}

Prediction prediction_from_json(const json& j) {
  Prediction p;
  if (j.contains("total_parameters") && j["total_parameters"].is_number_integer())
    p.total_parameters = j["total_parameters"].get<std::int64_t>();
  p.work_flops = number(j, "work_flops").value_or(0);
  p.card = text(j, "card");
  p.peak_allocated_mib = number(j, "peak_allocated_mib");
  p.peak_reserved_mib = number(j, "peak_reserved_mib");
  p.device_used_mib = number(j, "device_used_mib");
  p.peak_phase = text(j, "peak_phase");
  p.verdict = text(j, "verdict");
  p.step_seconds = number(j, "step_seconds");
  p.step_seconds_in_memory = number(j, "step_seconds_in_memory");
  p.bottleneck = text(j, "bottleneck");
  p.error = number(j, "error");
  p.step_error = number(j, "step_error");
  p.host_seconds_per_op = number(j, "host_seconds_per_op");
  return p;
}

}  // namespace

void read_reported_measurement(BenchRow& row) {
  try {
    row.measured = measurement_from_json(row.reported);
    if (!row.reported.contains("status")) throw InputError("field \"status\" is missing");
  } catch (const InputError& e) {
    row.measured = Measurement{};
    row.measured.status = "error";
    row.measured.error = fmt::format("the runner's row is malformed: {}", e.what());
    if (row.reported.is_object() && row.reported.contains("error")) row.reported["error_reported"] = row.reported["error"];
  }
}

json row_to_json(const BenchRow& row) {
  json measured = row.reported.is_object() ? row.reported : json::object();
  measured["status"] = row.measured.status;
  if (!row.measured.error.empty()) measured["error"] = row.measured.error;
  if (!row.output_tail.empty()) measured["stderr_tail"] = row.output_tail;
  const RunRecord& r = row.run;
  json bench = {{"plan", r.plan},   {"key", r.key},           {"index", r.index}, {"label", r.label},
                {"started", r.started}, {"wall_seconds", r.wall_seconds}, {"exit", r.exit}};
  if (!r.log.empty()) bench["log"] = r.log;
  if (r.devices) bench["devices"] = *r.devices;
  json j = {{"config", config_to_json(row.config)}, {"measured", measured}, {"stack", row.stack}, {"bench", bench}};
  if (row.telemetry) {
    const ConfigTelemetry& t = *row.telemetry;
    json tj = {{"source", "nvml"}, {"samples", t.samples}};
    if (t.device_used_max_mib) tj["device_used_max_mib"] = *t.device_used_max_mib;
    if (t.gpu_util_mean) tj["gpu_util_mean"] = *t.gpu_util_mean;
    if (t.gpu_util_max) tj["gpu_util_max"] = *t.gpu_util_max;
    j["telemetry"] = tj;
  }
  if (row.predicted) j["predicted"] = prediction_to_json(*row.predicted);
  if (row.predicted || row.capacity_mib) j["capacity_mib"] = optional_number(row.capacity_mib);
  if (!row.verdict.empty()) {
    j["verdict"] = row.verdict;
    j["verdict_reasons"] = row.verdict_reasons;
  }
  return j;
}

bool built_text_model_alone(const json& row) {
  if (!row.contains("config") || !row["config"].is_object() || row["config"].contains("vision_tower")) return false;
  if (!row.contains("measured") || !row["measured"].is_object()) return false;
  const json& built = row["measured"].value("model_class", json());
  return built.is_string() && built.get_ref<const std::string&>().ends_with("ForCausalLM");
}

void read_built_model_class(BenchConfig& config, const json& row) {
  if (!built_text_model_alone(row)) return;
  config.setup.vision_tower = VisionTowerUse::dropped;
  config.key = config_to_json(config).dump();
}

BenchRow row_from_json(const json& j) {
  if (!j.is_object()) throw InputError("a row must be a JSON object");
  if (!j.contains("config")) throw InputError("missing object \"config\"");
  BenchRow row;
  row.config = config_from_json(j["config"]);
  read_built_model_class(row.config, j);
  if (j.contains("measured") && j["measured"].is_object()) row.reported = j["measured"];
  read_reported_measurement(row);  // a malformed one is kept as written, judged an error
  if (j.contains("stack") && j["stack"].is_object()) row.stack = j["stack"];
  if (j.contains("bench") && j["bench"].is_object()) {
    const json& b = j["bench"];
    RunRecord& r = row.run;
    r.plan = text(b, "plan");
    r.key = text(b, "key");
    if (b.contains("index") && b["index"].is_number_unsigned()) r.index = b["index"].get<std::size_t>();
    r.label = text(b, "label");
    r.started = text(b, "started");
    r.wall_seconds = number(b, "wall_seconds").value_or(0);
    r.exit = text(b, "exit");
    r.log = text(b, "log");
    if (b.contains("devices") && b["devices"].is_array()) {
      std::vector<int> devices;
      for (const auto& d : b["devices"])
        if (d.is_number_integer()) devices.push_back(d.get<int>());
      r.devices = devices;
    }
  }
  if (j.contains("telemetry") && j["telemetry"].is_object()) {
    const json& t = j["telemetry"];
    ConfigTelemetry tel;
    if (t.contains("samples") && t["samples"].is_number_integer()) tel.samples = t["samples"].get<int>();
    tel.device_used_max_mib = number(t, "device_used_max_mib");
    tel.gpu_util_mean = number(t, "gpu_util_mean");
    tel.gpu_util_max = number(t, "gpu_util_max");
    row.telemetry = tel;
  }
  if (j.contains("predicted") && j["predicted"].is_object()) row.predicted = prediction_from_json(j["predicted"]);
  row.capacity_mib = number(j, "capacity_mib");
  row.verdict = text(j, "verdict");
  if (j.contains("verdict_reasons") && j["verdict_reasons"].is_array())
    for (const auto& r : j["verdict_reasons"])
      if (r.is_string()) row.verdict_reasons.push_back(r.get<std::string>());
  return row;
}

std::string beside_the_file(const std::string& path, std::string_view data_file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path given(path);
  if (path.empty() || given.is_absolute() || fs::exists(given, ec)) return path;
  const fs::path beside = fs::path(data_file).parent_path() / given;
  return fs::exists(beside, ec) ? beside.string() : path;
}

}  // namespace trainfit::bench
