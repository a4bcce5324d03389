// The watch engine through the library's API, against the fake libnvidia-ml (tests/fake_nvml/):
// what it records and shows, how signals end it or reach the job, and what it refuses.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "support/json_lines.hpp"
#include "trainfit/telemetry.hpp"

namespace {

using namespace trainfit::telemetry;
using Clock = std::chrono::steady_clock;

std::string temp_path(const std::string& name) {
  // One file per test process: ctest runs the tests in parallel.
  return testing::TempDir() + "/watch_session_" + std::to_string(::getpid()) + "_" + name;
}

// A GPU that is busy all the time (compute-bound), through the fake driver.
WatchOptions fake_gpu_options() {
  const std::string script = temp_path("fake_nvml.txt");
  std::ofstream(script) << "gpu0.name Fake H200\ngpu0.memory_total 150000000000\ngpu0.memory_used 20000000000\n"
                           "gpu0.util_gpu 97 99\ngpu0.power_mw 600000\n";
  ::setenv("FAKE_NVML_SCRIPT", script.c_str(), 1);
  WatchOptions o;
  o.nvml_library = TRAINFIT_FAKE_NVML;
  return o;
}

using trainfit::testing::read_jsonl;
int count(const std::vector<nlohmann::json>& lines, const char* type) { return trainfit::testing::count_of_type(lines, type); }

// What a run showed.
struct Shown {
  std::vector<std::string> verdict_lines, frames, warnings;
  WatchOutput output() {
    WatchOutput out;
    out.verdict_line = [this](const std::string& s) { verdict_lines.push_back(s); };
    out.warning = [this](const std::string& s) { warnings.push_back(s); };
    return out;
  }
};

// Runs a session, delivering `signal` to it after `delay`; the run's result and wall time.
struct Timed {
  WatchResult result;
  double seconds = 0;
};
Timed run_with_signal(WatchSession& session, const WatchOutput& output, int signal, std::chrono::milliseconds delay) {
  std::atomic<int> last_signal{0};
  std::thread sender([&] {
    std::this_thread::sleep_for(delay);
    last_signal.store(signal);
  });
  const auto t0 = Clock::now();
  Timed t{session.run(output, last_signal), 0};
  t.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  sender.join();
  return t;
}

TEST(WatchSession, AMissingDriverIsASystemErrorAndNoJobStarts) {
  WatchOptions o;
  o.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  const std::string marker = temp_path("job_ran");
  o.command = {"/bin/sh", "-c", "touch " + marker};
  try {
    WatchSession session(o);
    FAIL() << "expected TelemetryUnavailable";
  } catch (const TelemetryUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("no NVIDIA driver found"), std::string::npos) << e.what();
    const std::exception* as_base = &e;
    EXPECT_NE(dynamic_cast<const trainfit::SystemError*>(as_base), nullptr);
    EXPECT_EQ(dynamic_cast<const trainfit::InputError*>(as_base), nullptr);
  }
  EXPECT_FALSE(std::ifstream(marker).good());
}

TEST(WatchSession, BadOptionsAreInputErrors) {
  WatchOptions o = fake_gpu_options();
  o.interval_seconds = 0;
  EXPECT_THROW(WatchSession{o}, trainfit::InputError);
  o = fake_gpu_options();
  o.window_seconds = 0.5;
  EXPECT_THROW(WatchSession{o}, trainfit::InputError);
  o = fake_gpu_options();
  o.pid = static_cast<int>(::getpid());
  o.command = {"/bin/true"};
  EXPECT_THROW(WatchSession{o}, trainfit::InputError);
  o = fake_gpu_options();
  o.prometheus = "127.0.0.1:notaport";
  EXPECT_THROW(WatchSession{o}, trainfit::InputError);
}

TEST(WatchSession, APlainWatchRecordsEverySampleAndAVerdictEachSecond) {
  WatchOptions o = fake_gpu_options();
  o.duration_seconds = 2.5;
  o.jsonl_path = temp_path("plain.jsonl");
  WatchSession session(o);
  Shown shown;
  std::atomic<int> no_signal{0};
  const WatchResult r = session.run(shown.output(), no_signal);
  EXPECT_FALSE(r.exit_code);
  // Without a job, a line per GPU per verdict (at about 1 and 2 s, and the last pass).
  ASSERT_GE(shown.verdict_lines.size(), 2u);
  for (const auto& line : shown.verdict_lines)
    EXPECT_NE(line.find("] GPU 0: compute-bound: util "), std::string::npos) << line;
  EXPECT_EQ(r.summary.rfind("\ntrainfit watch: 2.", 0), 0u) << r.summary;
  EXPECT_NE(r.summary.find("GPU 0 (Fake H200), verdicts over time (5 s windows, every second):"), std::string::npos)
      << r.summary;
  EXPECT_NE(r.summary.find("% of a core\n"), std::string::npos) << r.summary;
  const auto lines = read_jsonl(o.jsonl_path);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.front()["schema"], "trainfit.watch/1");
  EXPECT_GE(count(lines, "sample"), 18);
  EXPECT_EQ(count(lines, "verdict"), static_cast<int>(shown.verdict_lines.size()));
  EXPECT_EQ(lines.back()["type"], "summary");
  EXPECT_TRUE(lines.back()["exit_code"].is_null());
  EXPECT_TRUE(shown.warnings.empty());
}

TEST(WatchSession, TheLiveViewReplacesTheVerdictLines) {
  WatchOptions o = fake_gpu_options();
  o.duration_seconds = 2.5;
  WatchSession session(o);
  Shown shown;
  WatchOutput output = shown.output();
  output.live_view = [&](const std::string& s) { shown.frames.push_back(s); };
  std::atomic<int> no_signal{0};
  session.run(output, no_signal);
  EXPECT_TRUE(shown.verdict_lines.empty());
  ASSERT_GE(shown.frames.size(), 3u);
  EXPECT_EQ(shown.frames[0], "\x1b[2J");  // the screen cleared once, then each frame drawn over the last
  for (std::size_t i = 1; i < shown.frames.size(); ++i) {
    EXPECT_EQ(shown.frames[i].rfind("\x1b[Htrainfit watch: 1 GPU, a sample every 0.1 s", 0), 0u) << shown.frames[i];
    EXPECT_NE(shown.frames[i].find("GPU 0  Fake H200\x1b[K\n"), std::string::npos);
    EXPECT_NE(shown.frames[i].find("  verdict  compute-bound: util "), std::string::npos) << shown.frames[i];
  }
}

TEST(WatchSession, ASignalEndsAWatchWithoutAJob) {
  WatchOptions o = fake_gpu_options();
  o.duration_seconds = 30;  // the bound if the signal were missed
  WatchSession session(o);
  Shown shown;
  const Timed t = run_with_signal(session, shown.output(), SIGINT, std::chrono::milliseconds(1500));
  EXPECT_GE(t.seconds, 1.4);
  EXPECT_LT(t.seconds, 10);
  EXPECT_FALSE(t.result.exit_code);
}

TEST(WatchSession, TheJobGetsItsEventsFileAndOnlyChangesOfVerdictAreShown) {
  WatchOptions o = fake_gpu_options();
  o.jsonl_path = temp_path("job.jsonl");
  ::setenv("TRAINFIT_WATCH_EVENTS", "/nonexistent/events.jsonl", 1);  // replaced for the job
  o.command = {"/bin/sh", "-c",
               "for i in 1 2 3; do echo \"{\\\"t\\\": $(date +%s.%N), \\\"step\\\": $i, \\\"step_seconds\\\": 0.8}\" "
               ">> \"$TRAINFIT_WATCH_EVENTS\"; sleep 0.8; done; exit 3"};
  WatchSession session(o);
  Shown shown;
  std::atomic<int> no_signal{0};
  const WatchResult r = session.run(shown.output(), no_signal);
  EXPECT_EQ(r.exit_code, 3);
  const auto lines = read_jsonl(o.jsonl_path);
  EXPECT_EQ(count(lines, "event"), 3);
  EXPECT_GE(count(lines, "verdict"), 2);
  EXPECT_EQ(shown.verdict_lines.size(), 1u) << "the verdict stayed compute-bound: one line";
  EXPECT_EQ(lines.back()["exit_code"], 3);
  EXPECT_EQ(lines.front()["command"], o.command[0] + " " + o.command[1] + " " + o.command[2]);
  EXPECT_NE(r.summary.find("` exited with code 3 after "), std::string::npos) << r.summary;
}

TEST(WatchSession, SigtermIsPassedToTheJob) {
  WatchOptions o = fake_gpu_options();
  o.command = {"/bin/sh", "-c", "exec sleep 30"};
  WatchSession session(o);
  Shown shown;
  const Timed t = run_with_signal(session, shown.output(), SIGTERM, std::chrono::milliseconds(800));
  EXPECT_EQ(t.result.exit_code, 128 + SIGTERM);
  EXPECT_LT(t.seconds, 10);
}

TEST(WatchSession, WithAJobSigintWaitsForTheJobToEnd) {
  // At a terminal the job gets the Ctrl-C itself; watch keeps going until it has ended.
  WatchOptions o = fake_gpu_options();
  o.command = {"/bin/sh", "-c", "sleep 2; exit 4"};
  WatchSession session(o);
  Shown shown;
  const Timed t = run_with_signal(session, shown.output(), SIGINT, std::chrono::milliseconds(300));
  EXPECT_EQ(t.result.exit_code, 4);
  EXPECT_GE(t.seconds, 1.9);
}

TEST(WatchSession, MalformedProbeEventsAreOneWarning) {
  WatchOptions o = fake_gpu_options();
  o.duration_seconds = 1.2;
  o.events_path = temp_path("events.jsonl");
  std::ofstream(o.events_path) << "not json\n{\"t\": 1, \"step\": 1}\n{broken\n";
  WatchSession session(o);
  Shown shown;
  std::atomic<int> no_signal{0};
  session.run(shown.output(), no_signal);
  ASSERT_EQ(shown.warnings.size(), 1u);
  EXPECT_EQ(shown.warnings[0], "trainfit watch: ignoring malformed probe events in " + o.events_path + "\n");
}

TEST(WatchSession, ACommandThatCannotStartIsAnInputError) {
  WatchOptions o = fake_gpu_options();
  o.command = {"/nonexistent/command"};
  WatchSession session(o);
  Shown shown;
  std::atomic<int> no_signal{0};
  try {
    session.run(shown.output(), no_signal);
    FAIL() << "expected InputError";
  } catch (const trainfit::InputError& e) {
    EXPECT_STREQ(e.what(), "cannot start '/nonexistent/command': No such file or directory");
  }
}

TEST(WatchSession, AReplayIsRenderedAsItsVerdictsOverTime) {
  std::string jsonl =
      header_to_json(std::vector<GpuInfo>{{0, "Fake H200", 150000000000, 1980.0, 3201.0, 700.0}}, "580", "").dump() +
      "\n";
  for (int i = 0; i < 30; ++i) {
    Sample s;
    s.time = 1000 + 0.1 * i;
    GpuReading g;
    g.memory_total_bytes = 150000000000;
    g.memory_used_bytes = 1000000000;
    g.gpu_util_percent = 0;
    s.gpus.push_back(g);
    jsonl += sample_to_json(s).dump() + "\n";
  }
  const std::string text = render_replay(parse_recording(jsonl, "r.jsonl"), "r.jsonl", 1);
  EXPECT_EQ(text.rfind("r.jsonl: 30 samples, 0 probe steps\nGPU 0 (Fake H200), verdicts over time (1 s windows", 0), 0u)
      << text;
  EXPECT_NE(text.find(" idle "), std::string::npos) << text;
}

}  // namespace
