// `trainfit watch` as a user runs it: no driver, the fake driver, a job, a replay.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/json_lines.hpp"
#include <sstream>
#include <string>

#include "run_cli.hpp"

namespace {

using Result = trainfit::testing::CliResult;
Result run(const std::string& env, const std::string& args) { return trainfit::testing::run_cli(args, env); }

// One file per test process: ctest runs the tests of this suite in parallel (and other checkouts
// may run it at the same time).
std::string temp_path(const std::string& name) {
  return testing::TempDir() + "/watch_cli_" + std::to_string(::getpid()) + "_" + name;
}

std::string fake_env() {
  const std::string script = temp_path("fake.txt");
  std::ofstream(script) << "gpu0.name Fake H200\ngpu0.memory_total 150000000000\ngpu0.memory_used 20000000000\n"
                           "gpu0.util_gpu 97 99\ngpu0.power_mw 600000\n";
  return "FAKE_NVML_SCRIPT=" + script + " TRAINFIT_NVML_LIBRARY=" + TRAINFIT_FAKE_NVML;
}

using trainfit::testing::read_jsonl;
int count(const std::vector<nlohmann::json>& lines, const char* type) { return trainfit::testing::count_of_type(lines, type); }

TEST(WatchCli, NoDriverIsOneLineAndExitCodeThree) {
  const auto r = run("TRAINFIT_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1", "watch --duration 1");
  EXPECT_EQ(r.code, 3) << r.out;  // the machine lacks something; the input was fine
  EXPECT_EQ(r.out.rfind("trainfit: no NVIDIA driver found: cannot load /nonexistent/libnvidia-ml.so.1 (", 0), 0u)
      << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  // A job is not started when there is nothing to watch it with.
  const std::string marker = temp_path("job_ran");
  std::remove(marker.c_str());
  const auto j =
      run("TRAINFIT_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1", "watch -- /bin/sh -c 'touch " + marker + "'");
  EXPECT_EQ(j.code, 3) << j.out;
  EXPECT_FALSE(std::ifstream(marker).good());
}

TEST(WatchCli, SamplesTheFakeDriverIntoJsonLines) {
  const std::string jsonl = temp_path("watch.jsonl");
  const auto r = run(fake_env(), "watch --duration 2.5 --jsonl " + jsonl);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("GPU 0: compute-bound"), std::string::npos) << r.out;  // plain lines: not a terminal
  EXPECT_EQ(r.out.find("\x1b["), std::string::npos) << "no ANSI codes when stdout is not a TTY";
  EXPECT_NE(r.out.find("% of a core"), std::string::npos) << r.out;
  const auto lines = read_jsonl(jsonl);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.front()["schema"], "trainfit.watch/1");
  EXPECT_EQ(lines.front()["gpus"][0]["name"], "Fake H200");
  EXPECT_GE(count(lines, "sample"), 18);
  EXPECT_GE(count(lines, "verdict"), 1);
  EXPECT_EQ(lines.back()["type"], "summary");
}

TEST(WatchCli, RunsAJobAndReturnsItsExitCode) {
  const std::string jsonl = temp_path("job.jsonl");
  // The job writes probe events where watch tells it to.
  const std::string job =
      "/bin/sh -c 'for i in 1 2 3; do echo \"{\\\"t\\\": $(date +%s.%N), \\\"step\\\": $i, \\\"step_seconds\\\": "
      "0.4}\" "
      ">> \"$TRAINFIT_WATCH_EVENTS\"; sleep 0.4; done; exit 3'";
  const auto r = run(fake_env(), "watch --jsonl " + jsonl + " -- " + job);
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("exited with code 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verdicts over time"), std::string::npos) << r.out;
  const auto lines = read_jsonl(jsonl);
  EXPECT_EQ(count(lines, "event"), 3);
  EXPECT_EQ(lines.back()["exit_code"], 3);

  // Replaying the recording needs no driver.
  const auto replay = run("TRAINFIT_NVML_LIBRARY=/nonexistent", "watch --replay " + jsonl + " --window 1");
  EXPECT_EQ(replay.code, 0) << replay.out;
  EXPECT_NE(replay.out.find("3 probe steps"), std::string::npos) << replay.out;
}

TEST(WatchCli, SignalsAndMissingCommands) {
  EXPECT_EQ(run(fake_env(), "watch -- /bin/sh -c 'kill -TERM $$'").code, 128 + 15);
  const auto r = run(fake_env(), "watch -- /nonexistent/command");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("cannot start '/nonexistent/command'"), std::string::npos) << r.out;
}

TEST(WatchCli, BadFlags) {
  // NaN durations are refused at once (they used to sample or replay forever).
  const std::string recording = std::string(TRAINFIT_SOURCE_DIR) + "/data/watch/h200_compute_bound.jsonl";
  for (const std::string& args : std::vector<std::string>{"watch --interval 0", "watch --prometheus 127.0.0.1:notaport", "watch --pid 999999999",
                                 "watch --replay /nonexistent.jsonl", "watch --pid 1 -- /bin/true",
                                 "watch --interval nan --duration 3", "watch --duration nan", "watch --window inf",
                                 "watch --replay " + recording + " --window nan"}) {
    const auto r = run(fake_env(), args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(r.out.rfind("trainfit: ", 0), 0u) << args << "\n" << r.out;
  }
}

}  // namespace
