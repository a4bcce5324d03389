// The real jobs recorded on an H200 (data/watch/, README there) replayed through the diagnoser the
// way the live view runs it (5 s windows every second): each job must be named correctly in at
// least 90% of the windows that lie inside its steady state (the job's own "steady" markers).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <map>

#include "trainfit/telemetry.hpp"

namespace {

using namespace trainfit::telemetry;

struct Score {
  int windows = 0, correct = 0;
  std::map<std::string, int> wrong;  // verdict -> windows
};

// Steady phases that are no example of what they expected (data/watch/README.md): in the second
// capacity run the capped phase never retried nor ran out of memory (0 of 141 steps), so it says
// nothing about naming a capacity-bound job; its near-full phase did and counts.
bool excluded(const std::string& file, const std::string& label) {
  return file == "h200_capacity_bound_run2.jsonl" && label.starts_with("allocator capped");
}

Score score(const std::string& file) {
  const Recording r = load_recording(std::string(TRAINFIT_SOURCE_DIR) + "/data/watch/" + file);
  Score s;
  for (const PhaseScore& p : score_recording(r, 5)) {
    if (excluded(file, p.label)) continue;
    std::cout << fmt::format("  {} phase \"{}\": {}/{} windows {}\n", file, p.label, p.right, p.windows,
                             watch_verdict(p.expected));
    s.windows += p.windows;
    s.correct += p.right;
    for (const auto& [verdict, n] : p.wrong) s.wrong[verdict] += n;
  }
  return s;
}

class Recordings : public testing::TestWithParam<const char*> {};

TEST_P(Recordings, NamedCorrectlyInNinetyPercentOfSteadyWindows) {
  const Score s = score(GetParam());
  ASSERT_GE(s.windows, 7) << "too few steady windows to judge";
  const double accuracy = static_cast<double>(s.correct) / s.windows;
  std::string wrong;
  for (const auto& [verdict, n] : s.wrong) wrong += fmt::format(" {} x{}", verdict, n);
  std::cout << fmt::format("{}: {}/{} steady windows right ({:.1f}%){}\n", GetParam(), s.correct, s.windows,
                           100 * accuracy, wrong.empty() ? "" : ", wrong:" + wrong);
  EXPECT_GE(accuracy, 0.90) << wrong;
}

INSTANTIATE_TEST_SUITE_P(H200, Recordings,
                         testing::Values("h200_compute_bound.jsonl", "h200_input_bound.jsonl",
                                         "h200_capacity_bound.jsonl", "h200_capacity_bound_run2.jsonl",
                                         // The second day: the host-bound and leaking jobs, and the
                                         // compute and input jobs again with the one probe and /proc.
                                         "h200_2026-12-01_compute.jsonl", "h200_2026-12-01_input.jsonl",
                                         "h200_2026-12-01_host.jsonl", "h200_2026-12-01_leak.jsonl",
                                         // The sampler reading each metric set at its own period
                                         // (memory and state 1 s, counters 5 s) instead of all at 1 s.
                                         "h200_2026-12-01_cadence_compute.jsonl", "h200_2026-12-01_cadence_leak.jsonl",
                                         // Two H200s: DDP through host memory, and a straggling rank.
                                         "h200x2_2026-12-01_ddp.jsonl", "h200x2_2026-12-01_straggler.jsonl"));

// Without the probe's events the NVML readings alone still name the compute and input jobs.
TEST(Recordings, NvmlAloneNamesComputeAndInputJobs) {
  for (const auto& [file, expected] : {std::pair{"h200_compute_bound.jsonl", Bottleneck::compute},
                                       std::pair{"h200_input_bound.jsonl", Bottleneck::input_pipeline}}) {
    Recording r = load_recording(std::string(TRAINFIT_SOURCE_DIR) + "/data/watch/" + file);
    const auto phases = r.phases;
    r.steps.clear();
    const auto diagnoses = diagnose_recording(r, 5, 1);
    const double begin = phases.at(1).time, end = phases.at(2).time;
    int windows = 0, correct = 0;
    for (const Diagnosis& d : diagnoses)
      if (d.begin >= begin && d.end <= end) {
        ++windows;
        correct += d.primary().kind == expected;
      }
    ASSERT_GT(windows, 15) << file;
    EXPECT_GE(correct, 0.9 * windows) << file;
  }
}

}  // namespace
