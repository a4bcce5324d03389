// Every text the command line prints keeps to a terminal's 100 columns (issue 38): the tables, the
// sentences under them and --help, for each command as a user runs it on the repository's own data.
// A line past 100 columns wraps in the terminal and breaks the table's columns apart.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "run_cli.hpp"

namespace {

namespace fs = std::filesystem;

std::string source(const std::string& path) {
  return std::string(TRAINFIT_SOURCE_DIR) + "/" + path;
}

void expect_fits(const std::string& args) {
  const auto r = trainfit::testing::run_cli(args);
  ASSERT_EQ(r.code, 0) << args << "\n" << r.out;
  std::istringstream lines(r.out);
  int count = 0;
  for (std::string line; std::getline(lines, line); ++count)
    EXPECT_LE(line.size(), 100u) << "trainfit " << args << ":\n" << line;
  EXPECT_GT(count, 3) << args;
}

TEST(TextWidth, HelpOfEveryCommand) {
  for (const char* command :
       {"", "plan", "advise", "gpus", "models", "schema", "validate", "watch", "calibrate", "bench", "serve", "trace"})
    expect_fits(std::string(command) + (*command ? " " : "") + "--help");
}

TEST(TextWidth, PlansAdviceAndCatalogues) {
  for (const std::string args : {"plan", "plan --model qwen2.5-7b --gpu rtx-4090 --method full",
                                 "plan --model llama3.1-8b --gpu a100-40gb --largest seq",
                                 "plan --model mixtral-8x7b --gpu h100 --gpus 8 --parallel fsdp --grad-ckpt",
                                 "advise --model llama3.1-8b --gpu a100-40gb --seq 2048", "gpus",
                                 "gpus --for --model qwen2.5-72b --method full", "models"})
    expect_fits(args);
}

TEST(TextWidth, ReadersOfMeasurements) {
  expect_fits("validate " + source("data/reference/h200-hf-peft-calibration.jsonl"));
  expect_fits("trace " + source("data/trace/loader/trace.json.gz"));
  expect_fits("trace " + source("data/trace/ddp"));
  expect_fits("trace --snapshot " + source("data/trace/snapshot/peak.pickle.json"));
  expect_fits("bench " + source("plans/seed-16gb.toml") + " --dry-run");
  int snapshots = 0;
  for (const auto& e : fs::directory_iterator(source("data/bench/h200-boundary-2026-12-05/snapshots")))
    if (e.path().string().ends_with(".pickle.gz") && snapshots++ < 3)
      expect_fits("trace --snapshot " + e.path().string());
  EXPECT_EQ(snapshots >= 3, true);
  for (const auto& e : fs::directory_iterator(source("data/watch")))
    if (e.path().extension() == ".jsonl") expect_fits("watch --replay " + e.path().string());
}

}  // namespace
