// `trainfit trace` as a user runs it: the table, the JSON contract (trainfit.trace/1), --plan
// beside a real plan, --snapshot, and one-line errors for what is not a trace.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_cli.hpp"
#include "support/synthetic_trace.hpp"

namespace {

using trainfit::testing::run_cli;

std::string scratch_file(const std::string& name, const std::string& text) {
  const auto dir = std::filesystem::temp_directory_path() / ("trainfit_trace_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

std::string compute_trace() {
  trainfit::testing::SyntheticTrace t;
  t.kernels = {{"sm90_xmma_gemm_bf16bf16_bf16f32", "kernel", 300},
               {"void at::native::reduce_kernel<512>", "kernel", 40}};
  return scratch_file("compute.json", trainfit::testing::synthetic_trace_text(t));
}

TEST(TraceCli, JsonCarriesTheContractsFields) {
  const auto r = run_cli("trace " + compute_trace() + " --format json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "trainfit.trace/1");
  ASSERT_EQ(j["steps"].size(), 3u);
  for (const auto& s : j["steps"]) {
    for (const char* key : {"name", "wall_s", "gpu_busy_s", "idle_s", "input_wait_s", "categories", "verdict"})
      EXPECT_TRUE(s.contains(key)) << key;
    EXPECT_EQ(s["verdict"], "compute");
    EXPECT_GT(s["categories"]["matmul"].get<double>(), 0);
  }
  EXPECT_EQ(j["verdict"], "compute");
  EXPECT_TRUE(j["evidence"].get<std::string>().find("GPU busy") != std::string::npos);
  EXPECT_EQ(j["kernels_top"][0]["name"], "sm90_xmma_gemm_bf16bf16_bf16f32");
  EXPECT_TRUE(j.contains("overlap"));
  EXPECT_EQ(j["ranks"].size(), 1u);
  EXPECT_TRUE(j["straggler"].is_null());
}

TEST(TraceCli, TableAndMarkdownNameTheVerdictAndTheTopKernels) {
  const std::string path = compute_trace();
  const auto table = run_cli("trace " + path);
  ASSERT_EQ(table.code, 0) << table.out;
  EXPECT_NE(table.out.find("ProfilerStep#1"), std::string::npos);
  EXPECT_NE(table.out.find("verdict: compute"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("top kernels"), std::string::npos);
  const auto md = run_cli("trace " + path + " --format markdown");
  ASSERT_EQ(md.code, 0) << md.out;
  EXPECT_NE(md.out.find("| ProfilerStep#1"), std::string::npos) << md.out;
}

TEST(TraceCli, BesideThePlanEveryTermHasBothFigures) {
  const auto r = run_cli("trace " + compute_trace() +
                         " --plan --model qwen2.5-0.5b --gpu h200 --method lora --seq 1024 --batch 4 --format json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("plan"));
  const auto& terms = j["plan"]["time"];
  ASSERT_GE(terms.size(), 7u);
  EXPECT_EQ(terms[0]["term"], "step");
  EXPECT_GT(terms[0]["predicted"].get<double>(), 0);
  EXPECT_NEAR(terms[0]["measured"].get<double>(), j["steps"][1]["wall_s"].get<double>(), 1e-9);
  EXPECT_EQ(j["plan"]["measured_verdict"], "compute");
  EXPECT_FALSE(j["plan"]["largest_disagreement"].get<std::string>().empty());
  const auto table = run_cli("trace " + compute_trace() + " --plan --model qwen2.5-0.5b --gpu h200");
  ASSERT_EQ(table.code, 0) << table.out;
  EXPECT_NE(table.out.find("beside the plan"), std::string::npos) << table.out;
  const auto without = run_cli("trace " + compute_trace() + " --plan");
  EXPECT_EQ(without.code, 2) << without.out;
  EXPECT_NE(without.out.find("--model"), std::string::npos);
}

TEST(TraceCli, ASnapshotAloneIsRead) {
  const std::string snap = scratch_file("snap.json", R"json({"schema": "trainfit.snapshot/1",
    "allocator": {"max_memory_allocated": 300}, "stacks": ["forward (m.py:1)"],
    "segments": [{"address": 0, "total_size": 1024, "blocks": [{"address": 0, "size": 100, "state": "active_allocated", "stack": 0},
                                                               {"address": 100, "size": 924, "state": "inactive", "stack": -1}]}],
    "history": [["alloc", 0, 100, 0, 1], ["alloc", 500, 200, 0, 2], ["free_completed", 500, 200, 0, 3]]})json");
  const auto r = run_cli("trace --snapshot " + snap + " --format json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["snapshot"]["peak_allocated_bytes"], 300);
  EXPECT_EQ(j["snapshot"]["breakdown"]["activations"], 300);
  const auto table = run_cli("trace --snapshot " + snap);
  ASSERT_EQ(table.code, 0) << table.out;
  EXPECT_NE(table.out.find("+0.00%"), std::string::npos) << table.out;
}

TEST(TraceCli, WhatIsNotATraceIsOneLineAndExitTwo) {
  for (const std::string& text : {std::string("{\"hello\": 1}"), std::string("garbage"), std::string()}) {
    const auto r = run_cli("trace " + scratch_file("bad.json", text));
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
  EXPECT_EQ(run_cli("trace /nonexistent/trace.json").code, 2);
  EXPECT_EQ(run_cli("trace").code, 2);
}

// A gzip file cut inside its header is a cut file (exit 2 naming the cut), not "no traceEvents".
TEST(TraceCli, AGzipCutInsideItsHeaderSaysItIsCut) {
  std::ifstream in(std::string(TRAINFIT_SOURCE_DIR) + "/data/trace/host/trace.json.gz", std::ios::binary);
  std::string head(5, '\0');
  in.read(head.data(), 5);
  const auto r = run_cli("trace " + scratch_file("cut.json.gz", head));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("the gzip stream is cut short before its traceEvents"), std::string::npos) << r.out;
}

// Snapshots: a folder given as one is a file that cannot be read (exit 3, as the docs say); a
// missing one is the user's (exit 2); JSON nested a million deep says so, not "not JSON".
TEST(TraceCli, SnapshotsThatCannotBeReadSayWhy) {
  const auto folder = run_cli("trace --snapshot " + std::filesystem::temp_directory_path().string());
  EXPECT_EQ(folder.code, 3) << folder.out;
  EXPECT_NE(folder.out.find("it is a folder"), std::string::npos) << folder.out;
  EXPECT_EQ(run_cli("trace --snapshot /nonexistent/snapshot.json").code, 2);
  const auto deep =
      run_cli("trace --snapshot " + scratch_file("deep.json", std::string(1000000, '[') + std::string(1000000, ']')));
  EXPECT_EQ(deep.code, 2) << deep.out;
  EXPECT_NE(deep.out.find("nested deeper than 1024 levels"), std::string::npos) << deep.out;
}

}  // namespace
