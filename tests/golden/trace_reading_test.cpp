// `trainfit trace` against the independent Python reading (python/trace_jobs/read_trace.py, which
// shares no code with it): per-step wall and GPU-busy time within 2% (the bar; they agree
// to rounding), the input wait, and the top kernel. On synthetic traces of each kind now; on the
// real recordings in data/trace/ (each job's folder: its trace files and the reading's
// expected.json, written by python/trace_jobs/record.sh on the GPU machine) once they are there,
// with the verdict each job was built to have.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "support/shell.hpp"
#include "support/synthetic_trace.hpp"
#include "trainfit/trace.hpp"

namespace {

using namespace trainfit::trace;
using trainfit::testing::SyntheticTrace;
namespace fs = std::filesystem;

nlohmann::json python_reading(const std::string& path) {
  const auto [code, out] = trainfit::testing::run_command(
      fmt::format("python3 {}/python/trace_jobs/read_trace.py '{}'", TRAINFIT_SOURCE_DIR, path));
  EXPECT_EQ(code, 0) << out;
  return nlohmann::json::parse(out, nullptr, false);
}

void expect_agreement(const RankTrace& ours, const nlohmann::json& theirs, const std::string& what) {
  ASSERT_TRUE(theirs.is_object()) << what;
  ASSERT_EQ(ours.steps.size(), theirs["steps"].size()) << what;
  for (std::size_t k = 0; k < ours.steps.size(); ++k) {
    const auto& t = theirs["steps"][k];
    const StepTrace& s = ours.steps[k];
    EXPECT_EQ(s.name, t["name"].get<std::string>()) << what;
    const double wall = t["wall_s"].get<double>(), busy = t["gpu_busy_s"].get<double>();
    EXPECT_NEAR(s.wall_s, wall, 0.02 * wall) << what << " " << s.name;
    EXPECT_NEAR(s.gpu_busy_s, busy, 0.02 * busy + 1e-9) << what << " " << s.name;
    EXPECT_NEAR(s.input_wait_s, t["input_wait_s"].get<double>(), 0.02 * wall) << what << " " << s.name;
    EXPECT_NEAR(s.communication_s, t["communication_s"].get<double>(), 0.02 * wall) << what << " " << s.name;
    if (t.contains("device_wall_s")) {
      const double span = t["device_wall_s"].get<double>();
      EXPECT_NEAR(s.device_wall_s, span, 0.02 * span) << what << " " << s.name;
    }
  }
  if (!ours.kernels_top.empty() && !theirs["kernels_top"].empty()) {
    EXPECT_EQ(ours.kernels_top[0].name, theirs["kernels_top"][0]["name"].get<std::string>()) << what;
  }
}

TEST(TraceReading, SyntheticTracesAgreeWithThePythonReading) {
  const fs::path dir = fs::temp_directory_path() / ("trainfit_trace_golden_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  SyntheticTrace compute;
  compute.kernels = {{"sm90_xmma_gemm", "kernel", 120},
                     {"void at::native::vectorized_elementwise_kernel<4>", "kernel", 9}};
  SyntheticTrace loader;
  loader.loader_us = 20000;
  SyntheticTrace launch;
  launch.kernels = {{"void at::native::vectorized_elementwise_kernel<4>", "kernel", 2}};
  launch.repeats = 300;
  launch.launch_gap_us = 18;
  launch.synchronise = false;
  SyntheticTrace comm;
  comm.collective_us = 900;
  SyntheticTrace plain;
  plain.annotate_steps = false;
  int k = 0;
  for (const SyntheticTrace* t : {&compute, &loader, &launch, &comm, &plain}) {
    const fs::path path = dir / fmt::format("trace{}.json", k++);
    std::ofstream(path) << trainfit::testing::synthetic_trace_text(*t);
    expect_agreement(analyse_trace(path.string()).ranks.at(0), python_reading(path.string()), path.string());
  }
}

// The recordings of python/trace_jobs/record.sh, checked in under data/trace/<job>/ (its README).
TEST(TraceReading, RecordedTracesAgreeWithTheirExpectedFigures) {
  const fs::path root = fs::path(TRAINFIT_SOURCE_DIR) / "data" / "trace";
  if (!fs::is_directory(root)) GTEST_SKIP() << "no recordings in data/trace/ yet (python/trace_jobs/record.sh)";
  int checked = 0;
  for (const auto& job : fs::directory_iterator(root)) {
    const fs::path expected_path = job.path() / "expected.json";
    if (!fs::is_regular_file(expected_path)) continue;
    const auto expected = nlohmann::json::parse(std::ifstream(expected_path));
    const std::string expect =
        expected.value("expect", nlohmann::json(nullptr)).is_string() ? expected["expect"].get<std::string>() : "";
    std::set<std::string> processes;  // the reading's: distributedInfo's rank, else the host steps' pid
    std::size_t steps = 0;
    for (const auto& [file, reading] : expected["files"].items()) {
      const RankTrace r = analyse_trace((job.path() / file).string()).ranks.at(0);
      expect_agreement(r, reading, file);
      if (!expect.empty()) {
        EXPECT_NE(("|" + expect + "|").find("|" + verdict_name(r.total.verdict) + "|"), std::string::npos)
            << job.path() << ": " << r.total.evidence;
      }
      // The host ran ahead when the GPU's spans of the steps far pass their host windows (the CUDA
      // graph job's 25x), and did not when they are shorter: the rule's 1.5 lies between.
      std::vector<double> ratios;
      for (const auto& t : reading["steps"])
        if (t.contains("device_wall_s")) ratios.push_back(t["device_wall_s"].get<double>() / t["wall_s"].get<double>());
      if (!ratios.empty() && ratios.size() == reading["steps"].size()) {
        std::sort(ratios.begin(), ratios.end());
        const double median = ratios[ratios.size() / 2];
        if (median > 3) {
          EXPECT_TRUE(r.host_ran_ahead) << file;
        } else if (median < 1.2) {
          EXPECT_FALSE(r.host_ran_ahead) << file;
        }
      }
      if (reading.contains("process")) {
        const auto& p = reading["process"];
        processes.insert(p["rank"].is_number() ? fmt::format("rank {}", p["rank"].get<int>())
                                               : fmt::format("pid {}", p["pid"].dump()));
      }
      steps += reading["steps"].size();
      ++checked;
    }
    // The folder: one rank a process (a tensorboard folder's cycles are one), with every file's steps.
    if (expected["files"].size() > 1 && !processes.empty()) {
      const TraceReport folder = analyse_trace(job.path().string());
      EXPECT_EQ(folder.ranks.size(), processes.size()) << job.path();
      std::size_t folder_steps = 0;
      for (const RankTrace& r : folder.ranks) folder_steps += r.steps.size();
      EXPECT_EQ(folder_steps, steps) << job.path();
    }
    // A memory snapshot: the peak within 2% of the allocator's own figure (the bar), and
    // explained: at most 2% of it in no category of the planner's (untracked or transient).
    const fs::path snapshot = job.path() / "peak.pickle.json";
    if (fs::is_regular_file(snapshot) && expected.contains("allocator_max_memory_allocated")) {
      const SnapshotReport r = analyse_snapshot(snapshot.string());
      const double allocator = expected["allocator_max_memory_allocated"].get<double>();
      EXPECT_NEAR(static_cast<double>(r.peak_allocated_bytes), allocator, 0.02 * allocator) << snapshot;
      std::int64_t unexplained = 0;
      for (const auto& t : r.breakdown)
        if (t.category == "untracked" || t.category == "transient") unexplained += t.bytes;
      EXPECT_LE(static_cast<double>(unexplained), 0.02 * static_cast<double>(r.peak_allocated_bytes)) << snapshot;
      ++checked;
    }
  }
  // Six single-file jobs, two DDP ranks and the snapshot of 2026-11-30/12-01; eight single-file jobs
  // and the tensorboard folder's two cycles held out on 2026-12-02; less any one.
  EXPECT_GE(checked, 18);
}

}  // namespace
