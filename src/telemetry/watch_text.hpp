#pragma once
// The text `trainfit watch` shows: the live view, the verdicts over time and the summary. The
// library renders; the caller puts it on the terminal.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>

#include "trainfit/telemetry.hpp"

namespace trainfit::telemetry::detail {

// One screen of the live view (ANSI: each line clears its rest, the end clears below). `latest[i]`
// is the newest reading of gpus[i] (null: none yet); `verdicts` the current one of each GPU, by
// index; `job` the job's process tree, whose memory is shown beside the GPU's.
std::string live_view_text(std::span<const GpuInfo> gpus, std::span<const GpuReading* const> latest,
                           const std::map<int, Diagnosis>& verdicts, std::span<const std::uint32_t> job,
                           double interval_seconds, double window_seconds, double elapsed_seconds,
                           const PlanReference* plan = nullptr);

// The verdicts over time (VerdictTimeline's spans) of each GPU in `watched`, then its warnings over
// time, times relative to `t0`.
std::string timeline_text(const VerdictTimeline& timeline, std::span<const GpuInfo> gpus, double t0,
                          const std::set<int>& watched, double window_seconds);

// The end of a watch: how long it ran (and the job's exit), the verdicts over time, the cost.
struct SummaryFacts {
  std::string_view command;      // the job's command line; empty without a job
  std::optional<int> exit_code;  // the job's, once it has ended
  double wall_seconds = 0;
  SamplerCost sampler;
  double process_core_fraction = 0;  // all of this process's CPU time over the wall time
  std::string beside_plan;           // --plan: the run's measurements beside the prediction (lines)
};
std::string summary_text(const SummaryFacts& facts, const VerdictTimeline& timeline, std::span<const GpuInfo> gpus,
                         double t0, const std::set<int>& watched, double window_seconds);

}  // namespace trainfit::telemetry::detail
