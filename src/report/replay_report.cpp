// `trainfit watch --replay --format html`: a recording's utilisation, memory and verdicts over time
// as data for web/charts.js's "watch" report.
#include <set>

#include "trainfit/telemetry.hpp"

namespace trainfit::telemetry {
namespace {

using json = nlohmann::json;

// Every `stride`-th index of `n`, and the last, so that no more than `limit` remain.
std::size_t stride_for(std::size_t n, std::size_t limit) {
  return n <= limit ? 1 : (n + limit - 1) / limit;
}

json optional_number(const std::optional<double>& v) {
  return v ? json(*v) : json(nullptr);
}
json optional_bytes(const std::optional<std::int64_t>& v) {
  return v ? json(*v) : json(nullptr);
}

}  // namespace

nlohmann::json replay_to_json(const Recording& recording, std::string_view source, double window_seconds) {
  check_window(window_seconds);
  const double t0 = recording.samples.empty() ? 0 : recording.samples.front().time;
  json gpus = json::array();
  std::set<int> indices;
  for (const GpuInfo& g : recording.gpus) indices.insert(g.index);
  for (const Sample& s : recording.samples)
    for (const GpuReading& r : s.gpus) indices.insert(r.index);
  for (const int index : indices) {
    std::string name;
    json total = nullptr;
    for (const GpuInfo& g : recording.gpus)
      if (g.index == index) {
        name = g.name;
        total = optional_bytes(g.memory_total_bytes);
      }
    json time = json::array(), util = json::array(), used = json::array();
    const std::size_t stride = stride_for(recording.samples.size(), kReplaySeriesPoints);
    for (std::size_t i = 0; i < recording.samples.size(); ++i) {
      if (i % stride != 0 && i + 1 != recording.samples.size()) continue;
      const Sample& s = recording.samples[i];
      for (const GpuReading& r : s.gpus) {
        if (r.index != index) continue;
        time.push_back(s.time - t0);
        util.push_back(optional_number(r.gpu_util_percent));
        used.push_back(optional_bytes(r.memory_used_bytes));
        if (total.is_null() && r.memory_total_bytes) total = *r.memory_total_bytes;
      }
    }
    gpus.push_back({{"index", index},
                    {"name", name},
                    {"memory_total_bytes", total},
                    {"time", time},
                    {"gpu_util_percent", util},
                    {"memory_used_bytes", used}});
  }
  json steps = json::array();
  const std::size_t step_stride = stride_for(recording.steps.size(), kReplaySeriesPoints);
  for (std::size_t i = 0; i < recording.steps.size(); i += step_stride) {
    const StepEvent& e = recording.steps[i];
    if (e.step_seconds) steps.push_back({{"time", e.time - t0}, {"step_seconds", *e.step_seconds}});
  }
  VerdictTimeline timeline;
  for_each_recording_window(recording, window_seconds, 1.0, [&](std::span<const Diagnosis> per_gpu, int windows) {
    for (const Diagnosis& d : per_gpu) timeline.add(d, windows);
  });
  json spans = json::array();
  for (const VerdictSpan& v : timeline.spans())
    spans.push_back({{"gpu", v.gpu},
                     {"begin", v.begin - t0},
                     {"end", v.end - t0},
                     {"windows", v.windows},
                     {"verdict", std::string(watch_verdict(v.verdict.kind))},
                     {"evidence", v.verdict.evidence},
                     {"advice", v.verdict.advice}});
  return {{"source", std::string(source)},
          {"samples", recording.samples.size()},
          {"probe_steps", recording.steps.size()},
          {"window_seconds", window_seconds},
          {"gpus", gpus},
          {"steps", steps},
          {"verdicts", spans}};
}

}  // namespace trainfit::telemetry
