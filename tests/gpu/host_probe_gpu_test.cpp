// `trainfit calibrate --host` on a real GPU (label gpu: CI has none), through the real runner
// (python3 -m trainfit_runner: torch, transformers and peft installed). Prints "MEASURED ..." lines.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/shell.hpp"
#include "trainfit/trainfit.hpp"

namespace {

// The trainfit under test: TRAINFIT_CLI from the environment when the binaries were built elsewhere and
// carried to the GPU machine (python/watch_jobs/record.sh sets it), else the one built beside this test.
std::string trainfit_cli() {
  return trainfit::testing::env_or("TRAINFIT_CLI", TRAINFIT_CLI);
}

TEST(GpuHostProbe, MeasuresAHostBoundStepOnThisGpu) {
  const std::string dir = ::testing::TempDir() + "/host-probe-gpu-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const auto [code, out] = trainfit::testing::run_command(trainfit_cli() + " calibrate --host --out " + dir +
                                                          "/host.toml --record " + dir + "/record.json");
  std::cout << out;
  ASSERT_EQ(code, 0) << out;
  const trainfit::TimeProfile p = trainfit::load_profile(dir + "/host.toml");
  // Tens of microseconds an operation on a server CPU; outside 2-300 us the measurement is wrong.
  EXPECT_GT(p.host_seconds_per_op, 2e-6);
  EXPECT_LT(p.host_seconds_per_op, 300e-6);
  std::ifstream f(dir + "/record.json");
  const auto d = trainfit::host_dispatch_from_probe(nlohmann::json::parse(f));
  ASSERT_EQ(d.runs.size(), 2u);
  for (const auto& r : d.runs) {
    ASSERT_TRUE(r.gpu_busy_fraction) << r.name;
    EXPECT_LT(*r.gpu_busy_fraction, trainfit::kMaxHostProbeBusyFraction) << r.name;
    std::cout << "MEASURED host_probe " << r.name << " " << r.seconds_per_op * 1e6 << " us/op, busy "
              << *r.gpu_busy_fraction << ", kernels " << r.gpu_kernels.value_or(-1) << " (counted " << r.kernels
              << ")\n";
  }
  std::cout << "MEASURED host_seconds_per_op " << p.host_seconds_per_op * 1e6 << " us on " << d.cpu << "\n";
}

}  // namespace
