// `trainfit trace` on traces recorded on this GPU now (label gpu: CI has none): record_traces.py's
// toy jobs (python3 with torch), each read by trainfit and by the independent Python reading it
// writes beside the trace (read_trace.py, expected.json). Fresh traces of this machine's stack, not
// the checked-in ones: per-step wall and GPU-busy time within 2%, the verdict the job was built to
// have, and the CUDA graph's host running ahead. Prints "MEASURED ..." lines.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/shell.hpp"
#include "trainfit/trace.hpp"

namespace {

namespace fs = std::filesystem;

using trainfit::testing::env_or;
using trainfit::testing::run_command;

TEST(GpuTrace, TracesRecordedOnThisGpuReadAsThePythonReadingDoes) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("trace-gpu-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  // host: 32 linears 64 wide (launch-bound); graph: a whole step in one CUDA graph (compute, the
  // host running ahead); h2d: 1 GiB of pageable copies a step (offload). The repository is
  // TRAINFIT_SOURCE's when the test was built elsewhere and carried to the GPU machine.
  const auto [code, out] =
      run_command(fmt::format("cd '{}' && python3 python/trace_jobs/record_traces.py '{}' --jobs host,graph,h2d",
                              env_or("TRAINFIT_SOURCE", TRAINFIT_SOURCE_DIR), dir.string()));
  std::cout << out;
  ASSERT_EQ(code, 0) << out;
  for (const char* job : {"host", "graph", "h2d"}) {
    const fs::path expected_path = dir / job / "expected.json";
    ASSERT_TRUE(fs::is_regular_file(expected_path)) << job << ": " << out;
    const auto expected = nlohmann::json::parse(std::ifstream(expected_path));
    const auto& reading = expected["files"]["trace.json.gz"];
    const trainfit::trace::RankTrace r =
        trainfit::trace::analyse_trace((dir / job / "trace.json.gz").string()).ranks.at(0);
    ASSERT_EQ(r.steps.size(), reading["steps"].size()) << job;
    double worst = 0;
    for (std::size_t k = 0; k < r.steps.size(); ++k) {
      const auto& t = reading["steps"][k];
      const double wall = t["wall_s"].get<double>(), busy = t["gpu_busy_s"].get<double>();
      EXPECT_NEAR(r.steps[k].wall_s, wall, 0.02 * wall) << job << " " << r.steps[k].name;
      EXPECT_NEAR(r.steps[k].gpu_busy_s, busy, 0.02 * busy + 1e-9) << job << " " << r.steps[k].name;
      worst = std::max({worst, std::abs(r.steps[k].wall_s - wall) / wall,
                        busy > 0 ? std::abs(r.steps[k].gpu_busy_s - busy) / busy : 0.0});
    }
    EXPECT_EQ(trainfit::trace::verdict_name(r.total.verdict), expected["expect"].get<std::string>())
        << job << ": " << r.total.evidence;
    if (std::string(job) == "graph") {
      EXPECT_TRUE(r.host_ran_ahead) << r.total.evidence;
    }
    std::cout << "MEASURED trace " << job << ": " << r.steps.size() << " steps, wall " << r.total.wall_s
              << " s, GPU busy " << r.total.gpu_busy_s << " s, largest difference from the Python reading " << worst
              << ", verdict " << trainfit::trace::verdict_name(r.total.verdict) << " (" << r.total.evidence << ")"
              << (r.host_ran_ahead ? ", host ran ahead" : "") << "\n";
  }
}

}  // namespace
