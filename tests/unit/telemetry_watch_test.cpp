// The watch engine through the library's API, against the fake libnvidia-ml (tests/fake_nvml/):
// what it records and shows, how signals end it or reach the job, and what it refuses.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
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
#include "telemetry/watch_text.hpp"
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

TEST(WatchSession, WithAJobATerminalsSigintIsNotSentAgain) {
  // At a terminal the job gets the Ctrl-C itself (the caller marks it): watch does not send it a
  // second time and keeps going until the job has ended.
  WatchOptions o = fake_gpu_options();
  o.command = {"/bin/sh", "-c", "trap 'exit 9' INT; sleep 2; exit 4"};
  WatchSession session(o);
  Shown shown;
  const Timed t = run_with_signal(session, shown.output(), SIGINT | kSignalReachedJob, std::chrono::milliseconds(300));
  EXPECT_EQ(t.result.exit_code, 4);
  EXPECT_GE(t.seconds, 1.9);
}

// A job that exits with 7 on SIGINT (and 30 s later otherwise), stopping its sleep.
const char* kExitsSevenOnSigint = "trap 'kill $p; exit 7' INT; sleep 30 & p=$!; wait";

TEST(WatchSession, ASigintSentToWatchAloneReachesTheJob) {
  // kill -INT <watch> was kept from the job: watch waited for a job that had not been told.
  WatchOptions o = fake_gpu_options();
  o.command = {"/bin/sh", "-c", kExitsSevenOnSigint};
  WatchSession session(o);
  Shown shown;
  const Timed t = run_with_signal(session, shown.output(), SIGINT, std::chrono::milliseconds(800));
  EXPECT_EQ(t.result.exit_code, 7);
  EXPECT_LT(t.seconds, 10);
}

TEST(WatchSession, SighupIsPassedToTheJob) {
  WatchOptions o = fake_gpu_options();
  o.command = {"/bin/sh", "-c", "exec sleep 30"};
  WatchSession session(o);
  Shown shown;
  const Timed t = run_with_signal(session, shown.output(), SIGHUP, std::chrono::milliseconds(800));
  EXPECT_EQ(t.result.exit_code, 128 + SIGHUP);
  EXPECT_LT(t.seconds, 10);
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

TEST(WatchSession, EventsFromADeviceThatNeverEndsALineAreBounded) {
  // --events /dev/zero read until memory ran out, inside one tick: watch never came back.
  WatchOptions o = fake_gpu_options();
  o.duration_seconds = 1.5;
  o.events_path = "/dev/zero";
  WatchSession session(o);
  Shown shown;
  std::atomic<int> no_signal{0};
  const auto t0 = Clock::now();
  const WatchResult r = session.run(shown.output(), no_signal);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5);
  ASSERT_EQ(shown.warnings.size(), 1u);
  EXPECT_EQ(shown.warnings[0], "trainfit watch: dropping probe event lines longer than 64.0 KiB in /dev/zero\n");
  EXPECT_NE(r.summary.find("probe events: 1 line longer than 64.0 KiB dropped\n"), std::string::npos) << r.summary;
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  EXPECT_LT(u.ru_maxrss, 1024 * 1024) << "KiB: a bounded read holds a few MiB";  // under ASan too
}

TEST(WatchSession, AnOverlongEventLineIsDroppedAndTheNextOneKept) {
  WatchOptions o = fake_gpu_options();
  o.duration_seconds = 1.2;
  o.events_path = temp_path("long_events.jsonl");
  o.jsonl_path = temp_path("long_events_recording.jsonl");
  std::ofstream(o.events_path) << "{\"t\": 1, \"note\": \"" << std::string(100 * 1024, 'x') << "\"}\n"
                               << "{\"t\": 2, \"step\": 1}\n";
  WatchSession session(o);
  Shown shown;
  std::atomic<int> no_signal{0};
  const WatchResult r = session.run(shown.output(), no_signal);
  ASSERT_EQ(shown.warnings.size(), 1u);
  EXPECT_NE(shown.warnings[0].find("dropping probe event lines longer than 64.0 KiB"), std::string::npos);
  EXPECT_EQ(count(read_jsonl(o.jsonl_path), "event"), 1);
}

TEST(WatchSession, EventsAndJsonlMustBeDifferentFiles) {
  // Watch read its own recording back as events and wrote each line again, every tick.
  const std::string file = temp_path("same.jsonl");
  std::ofstream(file) << "";
  const std::string link = temp_path("same_link.jsonl");
  std::remove(link.c_str());
  ASSERT_EQ(::symlink(file.c_str(), link.c_str()), 0);
  for (const auto& [events, jsonl] : {std::pair{file, file}, std::pair{link, file}, std::pair{file, link}}) {
    WatchOptions o = fake_gpu_options();
    o.duration_seconds = 1;
    o.events_path = events;
    o.jsonl_path = jsonl;
    try {
      WatchSession session(o);
      FAIL() << events << " " << jsonl;
    } catch (const trainfit::InputError& e) {
      EXPECT_EQ(std::string(e.what()),
                "--events and --jsonl name the same file ('" + jsonl + "'): watch would read its own recording");
    }
  }
  // Not yet there, named two ways: still the same file.
  WatchOptions o = fake_gpu_options();
  o.events_path = temp_path("new.jsonl");
  o.jsonl_path = testing::TempDir() + "/./" + o.events_path.substr(testing::TempDir().size());
  std::remove(o.events_path.c_str());
  EXPECT_THROW(WatchSession{o}, trainfit::InputError);
}

TEST(WatchSession, FifosWithNoOneAtTheOtherEndDoNotHoldTheWatch) {
  // Opening a FIFO blocks until the other end opens it: --jsonl or --events naming one held watch
  // before it sampled anything, for ever.
  const std::string events = temp_path("events.fifo"), recording = temp_path("recording.fifo");
  for (const auto& f : {events, recording}) {
    std::remove(f.c_str());
    ASSERT_EQ(::mkfifo(f.c_str(), 0600), 0);
  }
  WatchOptions o = fake_gpu_options();
  o.duration_seconds = 1.2;
  o.events_path = events;
  const auto t0 = Clock::now();
  {
    WatchSession session(o);
    Shown shown;
    std::atomic<int> no_signal{0};
    session.run(shown.output(), no_signal);
    EXPECT_TRUE(shown.warnings.empty());
  }
  o.jsonl_path = recording;
  EXPECT_THROW(WatchSession{o}, trainfit::InputError);  // "No such device or address": no reader
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5);
}

TEST(WatchSession, ARecordingThatCannotBeWrittenIsASystemError) {
  // --jsonl /dev/full recorded nothing and the watch ended with success.
  WatchOptions o = fake_gpu_options();
  o.duration_seconds = 1;
  o.jsonl_path = "/dev/full";
  const std::string marker = temp_path("full_job_ran");
  std::remove(marker.c_str());
  o.command = {"/bin/sh", "-c", "touch " + marker};
  try {
    WatchSession session(o);
    FAIL() << "expected SystemError";
  } catch (const trainfit::SystemError& e) {
    EXPECT_STREQ(e.what(), "cannot write '/dev/full': No space left on device");
  }
  EXPECT_FALSE(std::ifstream(marker).good()) << "the job is not started";
}

TEST(WatchSession, ARecordingThatFailsLaterStopsTheWatchAndWaitsForTheJob) {
  // A file that takes its header and then refuses (RLIMIT_FSIZE: EFBIG, as a full disk would).
  WatchOptions o = fake_gpu_options();
  o.jsonl_path = temp_path("too_big.jsonl");
  o.command = {"/bin/sh", "-c", "sleep 2; exit 5"};
  WatchSession session(o);
  ::signal(SIGXFSZ, SIG_IGN);
  rlimit old{};
  ::getrlimit(RLIMIT_FSIZE, &old);
  rlimit small = old;
  small.rlim_cur = 4096;
  ::setrlimit(RLIMIT_FSIZE, &small);
  Shown shown;
  std::atomic<int> no_signal{0};
  const auto t0 = Clock::now();
  std::string error;
  try {
    session.run(shown.output(), no_signal);
  } catch (const trainfit::SystemError& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(error.rfind("cannot write '" + o.jsonl_path + "': File too large (sampling and recording stopped at ", 0),
            0u)
      << error;
  EXPECT_NE(error.find("; the job ran on and exited with code 5)"), std::string::npos) << error;
  EXPECT_GE(seconds, 1.9) << "the job is left to run";
  ASSERT_EQ(shown.warnings.size(), 1u);
  EXPECT_NE(shown.warnings[0].find("File too large: sampling and recording stopped; waiting for the job to end"),
            std::string::npos)
      << shown.warnings[0];
}

TEST(WatchSession, NamesFromTheDriverCannotControlTheTerminal) {
  const std::string script = temp_path("fake_nvml_esc.txt");
  std::ofstream(script) << "gpu0.name Fake\x1b]0;pwned\x07H200\x1b[2J\ngpu0.memory_total 150000000000\n"
                           "gpu0.util_gpu 97 99\n";
  ::setenv("FAKE_NVML_SCRIPT", script.c_str(), 1);
  WatchOptions o;
  o.nvml_library = TRAINFIT_FAKE_NVML;
  o.duration_seconds = 1.5;
  WatchSession session(o);
  Shown shown;
  WatchOutput output = shown.output();
  output.live_view = [&](const std::string& s) { shown.frames.push_back(s); };
  std::atomic<int> no_signal{0};
  const WatchResult r = session.run(output, no_signal);
  ASSERT_GE(shown.frames.size(), 2u);
  EXPECT_NE(shown.frames[1].find("GPU 0  Fake\\x1b]0;pwned\\x07H200\\x1b[2J\x1b[K\n"), std::string::npos)
      << shown.frames[1];
  EXPECT_EQ(shown.frames[1].find("\x07"), std::string::npos);
  EXPECT_EQ(r.summary.find('\x1b'), std::string::npos) << r.summary;
  EXPECT_NE(r.summary.find("GPU 0 (Fake\\x1b]0;pwned\\x07H200\\x1b[2J), verdicts over time"), std::string::npos)
      << r.summary;
}

TEST(WatchText, AReplayShowsNamesEscaped) {
  const std::string jsonl =
      header_to_json(std::vector<GpuInfo>{{0, "Evil\x1b]2;title\x07", 150000000000, 1980.0, 3201.0, 700.0}}, "580", "")
          .dump() +
      "\n";
  const std::string text = render_replay(parse_recording(jsonl, "r\x1b[2J.jsonl"), "r\x1b[2J.jsonl", 5);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(text.rfind("r\\x1b[2J.jsonl: 0 samples", 0), 0u) << text;
  EXPECT_NE(text.find("GPU 0 (Evil\\x1b]2;title\\x07)"), std::string::npos) << text;
  const std::string why = [] {
    try {
      parse_recording(R"({"type": "\u001b[2Jx"})"
                      "\n",
                      "r");
    } catch (const trainfit::InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  }();
  EXPECT_EQ(why.find('\x1b'), std::string::npos) << why;
  EXPECT_FALSE(why.empty());
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
