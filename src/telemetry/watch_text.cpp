#include "telemetry/watch_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "common/text.hpp"
#include "trainfit/units.hpp"

namespace trainfit::telemetry {
namespace detail {
namespace {

std::string opt_pct(const std::optional<double>& v) {
  return v ? fmt::format("{:.0f}%", *v) : "?";
}
std::string opt_rate(const std::optional<double>& v) {
  return v ? fmt::format("{:.2f}", *v / 1e9) : "?";
}
std::string opt_num(const std::optional<double>& v, const char* unit) {
  return v ? fmt::format("{:.0f}{}", *v, unit) : "?";
}

}  // namespace

std::string live_view_text(std::span<const GpuInfo> gpus, std::span<const GpuReading* const> latest,
                           const std::map<int, Diagnosis>& verdicts, std::span<const std::uint32_t> job,
                           double interval_seconds, double window_seconds, double elapsed_seconds,
                           const PlanReference* plan) {
  std::string out = fmt::format(
      "trainfit watch: {} GPU{}, a sample every {:.2g} s, verdicts over the last {:.0f} s, "
      "{:.0f} s in (Ctrl-C to stop)\x1b[K\n",
      gpus.size(), gpus.size() == 1 ? "" : "s", interval_seconds, window_seconds, elapsed_seconds);
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const GpuInfo& info = gpus[i];
    const GpuReading* g = latest[i];
    out += fmt::format("\x1b[K\nGPU {}  {}\x1b[K\n", info.index, trainfit::detail::printable(info.name));
    if (!g) continue;
    std::string mem = "  memory   ?";
    if (g->memory_used_bytes && g->memory_total_bytes && *g->memory_total_bytes > 0) {
      const auto total = static_cast<double>(*g->memory_total_bytes);
      const double in_use = g->memory_free_bytes ? total - static_cast<double>(*g->memory_free_bytes)
                                                 : static_cast<double>(*g->memory_used_bytes);
      mem = fmt::format("  memory   {} used of {} ({:.0f}% of the card in use)", format_bytes(*g->memory_used_bytes),
                        format_bytes(*g->memory_total_bytes), 100 * in_use / total);
    }
    if (!job.empty() && g->processes) {
      std::int64_t mine = 0;
      for (const auto& p : *g->processes)
        if (std::find(job.begin(), job.end(), p.pid) != job.end()) mine += p.used_bytes.value_or(0);
      mem += fmt::format("   job {}", format_bytes(mine));
    }
    out += mem + "\x1b[K\n";
    out += fmt::format("  util     {} (memory {})   SM {} of {} MHz   memory clock {} MHz\x1b[K\n",
                       opt_pct(g->gpu_util_percent), opt_pct(g->memory_util_percent), opt_num(g->sm_clock_mhz, ""),
                       opt_num(info.sm_clock_max_mhz, ""), opt_num(g->memory_clock_mhz, ""));
    out += fmt::format("  links    PCIe rx {} tx {} GB/s   NVLink rx {} tx {} GB/s\x1b[K\n",
                       opt_rate(g->pcie_rx_bytes_per_s), opt_rate(g->pcie_tx_bytes_per_s),
                       opt_rate(g->nvlink_rx_bytes_per_s), opt_rate(g->nvlink_tx_bytes_per_s));
    out += fmt::format("  power    {} of {}   {}   throttle: {}\x1b[K\n", opt_num(g->power_watts, " W"),
                       opt_num(g->power_limit_watts, " W"), opt_num(g->temperature_c, " °C"),
                       g->throttle_reasons ? describe_throttle(*g->throttle_reasons) : "?");
    if (const auto it = verdicts.find(info.index); it != verdicts.end()) {
      out += fmt::format("  verdict  {}: {}\x1b[K\n", watch_verdict(it->second.primary().kind),
                         it->second.primary().evidence);
      if (!it->second.primary().advice.empty())
        out += fmt::format("  try      {}\x1b[K\n", it->second.primary().advice);
      if (plan)
        if (const std::string beside =
                beside_plan_text(it->second.stats.step_seconds_median, it->second.stats.memory_used_max, *plan);
            !beside.empty())
          out += fmt::format("  plan     {}\x1b[K\n", beside);
      for (std::size_t v = 1; v < it->second.verdicts.size(); ++v)
        out += fmt::format("  also     {}: {}\x1b[K\n", watch_verdict(it->second.verdicts[v].kind),
                           it->second.verdicts[v].evidence);
    }
  }
  return out + "\x1b[J";
}

// One span of the timeline: when, the verdict and its windows on a line, then its evidence and what
// to try as sentences wrapped under it, inside 100 columns.
std::string span_lines(const std::string& when, std::string_view verdict, int windows, const std::string& evidence,
                       const std::string& advice) {
  constexpr std::string_view indent = "      ";
  std::string out = fmt::format("  {:>14} {:<22} {:>3} window{}\n", when, verdict, windows, windows == 1 ? "" : "s");
  for (const std::string& words : {evidence, advice.empty() ? std::string() : "try: " + advice})
    if (!words.empty())
      out += std::string(indent) + trainfit::detail::wrapped_at(words, indent.size()) + "\n";
  return out;
}

std::string timeline_text(const VerdictTimeline& timeline, std::span<const GpuInfo> gpus, double t0,
                          const std::set<int>& watched, double window_seconds) {
  const std::vector<VerdictSpan>& spans = timeline.spans();
  std::string out;
  for (const GpuInfo& g : gpus) {
    if (!watched.count(g.index)) continue;
    out += fmt::format("GPU {} ({}), verdicts over time ({:.0f} s windows, every second):\n", g.index,
                       trainfit::detail::printable(g.name), window_seconds);
    bool any = false;
    for (const VerdictSpan& v : spans) {
      if (v.gpu != g.index) continue;
      any = true;
      out += span_lines(fmt::format("{:.1f}-{:.1f} s", v.begin - t0, v.end - t0), watch_verdict(v.verdict.kind), v.windows,
                        v.verdict.evidence, v.verdict.advice);
    }
    if (!any) out += "  (too short to judge: under one window of samples)\n";
    bool warned = false;
    for (const WarningSpan& w : timeline.warnings()) {
      if (w.gpu != g.index) continue;
      if (!warned) out += "  warnings over time:\n";
      warned = true;
      std::string what = w.verdict.evidence;
      if (w.kind == Bottleneck::memory_growth)
        what = fmt::format("used memory rising {:.0f} MiB/s on average (up to {:.0f} MiB/s); last window: {}",
                           w.growth_rate_mean() / (1024.0 * 1024.0), w.growth_rate_max / (1024.0 * 1024.0),
                           w.verdict.evidence);
      out += span_lines(fmt::format("{:.1f}-{:.1f} s", w.begin - t0, w.end - t0), watch_verdict(w.kind), w.windows, what,
                        w.verdict.advice);
    }
  }
  return out;
}

std::string summary_text(const SummaryFacts& facts, const VerdictTimeline& timeline, std::span<const GpuInfo> gpus,
                         double t0, const std::set<int>& watched, double window_seconds) {
  std::string out;
  if (!facts.command.empty())
    out += fmt::format("\ntrainfit watch: `{}` exited with code {} after {:.1f} s\n",
                       trainfit::detail::printable(facts.command), facts.exit_code.value_or(-1), facts.wall_seconds);
  else
    out += fmt::format("\ntrainfit watch: {:.1f} s\n", facts.wall_seconds);
  out += timeline_text(timeline, gpus, t0, watched, window_seconds);
  out += facts.beside_plan;
  out += fmt::format(
      "cost: sampler thread {:.3f} s CPU over {:.1f} s ({} samples) = {:.3f}% of a core; "
      "trainfit watch in all {:.3f}% of a core\n",
      facts.sampler.cpu_seconds, facts.sampler.wall_seconds, facts.sampler.samples, 100 * facts.sampler.core_fraction(),
      100 * facts.process_core_fraction);
  return out;
}

}  // namespace detail

namespace {
// A measured step this many times the planned one (or its inverse) is a gap worth naming: the
// planner's step-time bar is 25% at worst on a measured GPU, so 1.5x is well outside its error.
constexpr double kStepGap = 1.5;
// Memory off the plan by more than this share: the planner's device-memory bar is 5%.
constexpr double kMemoryGap = 0.10;
}  // namespace

std::string beside_plan_text(std::optional<double> step_seconds, std::optional<std::int64_t> memory_used_bytes,
                             const PlanReference& plan) {
  std::string out;
  if (step_seconds && *step_seconds > 0 && plan.step_seconds > 0) {
    const double ratio = *step_seconds / plan.step_seconds;
    out += fmt::format("step {:.3f} s measured vs {:.3f} s planned ({:.2f}x", *step_seconds, plan.step_seconds, ratio);
    if (ratio >= kStepGap)
      out +=
          ": time goes to something outside the model's step: data, the host, throttling or another process; "
          "the verdict says which";
    else if (ratio <= 1 / kStepGap)
      out += ": faster than planned: is the plan's setup the job's (--seq, --batch, --grad-accum, --gpus)?";
    else
      out += ": as planned";
    out += ")";
  }
  if (memory_used_bytes && plan.device_used_bytes > 0) {
    const double ratio = static_cast<double>(*memory_used_bytes) / static_cast<double>(plan.device_used_bytes);
    if (!out.empty()) out += "; ";
    out += fmt::format("memory {} used vs {} planned ({:.2f}x", format_bytes(*memory_used_bytes),
                       format_bytes(plan.device_used_bytes), ratio);
    if (ratio > 1 + kMemoryGap)
      out +=
          ": more than the step needs: another process on the GPU, something kept across steps, or a setup that "
          "is not the job's";
    else if (ratio < 1 - kMemoryGap)
      out += ": less than planned: is the plan's setup the job's?";
    out += ")";
  }
  return out;
}

void check_window(double window_seconds) {
  if (!(window_seconds >= 1 && window_seconds <= 600)) throw InputError("--window must be between 1 and 600 seconds");
}

std::string render_replay(const Recording& recording, std::string_view source, double window_seconds) {
  check_window(window_seconds);
  // Merged as they come: a long recording keeps its spans, not a diagnosis per GPU per second.
  VerdictTimeline timeline;
  for_each_recording_window(recording, window_seconds, 1.0, [&](std::span<const Diagnosis> per_gpu, int windows) {
    for (const Diagnosis& d : per_gpu) timeline.add(d, windows);
  });
  // The job's GPUs when the recording's summary names them (for_each_recording_window judges only those).
  std::set<int> judged(recording.job_gpus.begin(), recording.job_gpus.end());
  if (judged.empty())
    for (const GpuInfo& g : recording.gpus) judged.insert(g.index);
  std::string out = fmt::format("{}: {} samples, {} probe steps", trainfit::detail::printable(source),
                                recording.samples.size(), recording.steps.size());
  if (!recording.host.empty()) out += fmt::format(", {} host readings", recording.host.size());
  out = trainfit::detail::wrapped_at(out, 2) + '\n';
  return out + detail::timeline_text(timeline, recording.gpus,
                                     recording.samples.empty() ? 0 : recording.samples.front().time, judged,
                                     window_seconds);
}

}  // namespace trainfit::telemetry
