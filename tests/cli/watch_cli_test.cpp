// `trainfit watch` as a user runs it: no driver, the fake driver, a job, a replay.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "run_cli.hpp"
#include "support/json_lines.hpp"

namespace {

using Result = trainfit::testing::CliResult;
Result run(const std::string& env, const std::string& args) {
  return trainfit::testing::run_cli(args, env);
}

// One file per test process: ctest runs the tests of this suite in parallel (and other checkouts
// may run it at the same time).
std::string temp_path(const std::string& name) {
  return testing::TempDir() + "/watch_cli_" + std::to_string(::getpid()) + "_" + name;
}

std::string fake_script() {
  const std::string script = temp_path("fake.txt");
  std::ofstream(script) << "gpu0.name Fake H200\ngpu0.memory_total 150000000000\ngpu0.memory_used 20000000000\n"
                           "gpu0.util_gpu 97 99\ngpu0.power_mw 600000\n";
  return script;
}

std::string fake_env() {
  return "FAKE_NVML_SCRIPT=" + fake_script() + " TRAINFIT_NVML_LIBRARY=" + TRAINFIT_FAKE_NVML;
}

using trainfit::testing::read_jsonl;
int count(const std::vector<nlohmann::json>& lines, const char* type) {
  return trainfit::testing::count_of_type(lines, type);
}

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

TEST(WatchCli, ThePlanIsSetBesideWhatWasMeasured) {
  const std::string jsonl = temp_path("plan.jsonl");
  const auto r = run(fake_env(), "watch --duration 2.5 --jsonl " + jsonl +
                                     " --plan --model qwen2.5-0.5b --gpu h200 --method lora --seq 128 --batch 1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("beside the plan (qwen2.5-0.5b lora on "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  GPU 0: memory "), std::string::npos) << r.out;  // no probe steps: memory only
  const auto lines = read_jsonl(jsonl);
  const auto& plan = lines.back()["plan"];
  EXPECT_GT(plan["step_seconds"].get<double>(), 0);
  EXPECT_GT(plan["device_used_bytes"].get<double>(), 0);
  EXPECT_EQ(plan["gpus"][0]["gpu"], 0);
  // --plan without a setup, and --score without --replay, are bad input.
  EXPECT_EQ(run(fake_env(), "watch --duration 1 --plan").code, 2);
  EXPECT_EQ(run(fake_env(), "watch --duration 1 --score").code, 2);
}

TEST(WatchCli, AReplayIsScoredPerSteadyPhase) {
  const auto r =
      run("", "watch --replay " + std::string(TRAINFIT_SOURCE_DIR) + "/data/watch/h200_input_bound.jsonl --score");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto score = nlohmann::json::parse(r.out);
  EXPECT_EQ(score["schema"], "trainfit.watch-score/1");
  ASSERT_EQ(score["phases"].size(), 1U);
  EXPECT_EQ(score["phases"][0]["expect"], "input-pipeline-bound");
  EXPECT_GE(score["phases"][0]["windows"].get<int>(), 15);
  EXPECT_GE(score["phases"][0]["share"].get<double>(), 0.9);
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
  for (const std::string& args : std::vector<std::string>{
           "watch --interval 0", "watch --prometheus 127.0.0.1:notaport", "watch --pid 999999999",
           "watch --replay /nonexistent.jsonl", "watch --pid 1 -- /bin/true", "watch --interval nan --duration 3",
           "watch --duration nan", "watch --window inf", "watch --replay " + recording + " --window nan"}) {
    const auto r = run(fake_env(), args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(r.out.rfind("trainfit: ", 0), 0u) << args << "\n" << r.out;
  }
}

// The largest resident set of the processes this test has waited for (run() waits for trainfit), in MiB.
double children_max_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  return static_cast<double>(u.ru_maxrss) / 1024;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(WatchCli, AReplayListingThousandsOfGpusIsRefusedAtOnce) {
  // 400 KB whose header lists 20,000 GPUs took over 4 GB and ended in bad_alloc (exit code 1).
  std::string text = R"({"type": "header", "gpus": [)";
  for (int i = 0; i < 20000; ++i) text += (i ? ", " : "") + std::string(R"({"gpu": )") + std::to_string(i) + "}";
  text += "]}\n";
  for (int i = 0; i < 40; ++i)
    text += R"({"type": "sample", "t": )" + std::to_string(1000 + i) +
            R"(, "gpus": [{"gpu": 0, "util": 99}]})"
            "\n";
  const std::string path = temp_path("wide.jsonl");
  std::ofstream(path) << text;
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run("", "watch --replay " + path);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "trainfit: " + path + ":1: the header lists 20000 GPUs; a recording may list at most 64\n");
  EXPECT_LT(seconds_since(t0), 10);
  EXPECT_LT(children_max_rss_mib(), 512);
}

TEST(WatchCli, AReplayOfADeviceFailsAtOnce) {
  // --replay /dev/zero read until memory ran out.
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run("", "watch --replay /dev/zero");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out, "trainfit: /dev/zero:1: line 1 is longer than 1.0 MiB\n");
  EXPECT_LT(seconds_since(t0), 10);
  EXPECT_LT(children_max_rss_mib(), 512);
}

TEST(WatchCli, ARecordingThatCannotBeWrittenIsExitCodeThree) {
  // It exited 0 having written nothing.
  const auto r = run(fake_env(), "watch --jsonl /dev/full --duration 1");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_EQ(r.out, "trainfit: cannot write '/dev/full': No space left on device\n");
}

TEST(WatchCli, EventsAndJsonlTheSameFileIsRefused) {
  const std::string file = temp_path("self.jsonl");
  const auto r = run(fake_env(), "watch --duration 1 --jsonl " + file + " --events " + file);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out,
            "trainfit: --events and --jsonl name the same file ('" + file + "'): watch would read its own recording\n");
}

TEST(WatchCli, PrometheusOnAnyFreePortSaysWhichPort) {
  const auto r = run(fake_env(), "watch --duration 1 --prometheus 0");
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string prefix = "trainfit watch: serving http://127.0.0.1:";
  const auto at = r.out.find(prefix);
  ASSERT_NE(at, std::string::npos) << r.out;
  const int port = std::atoi(r.out.c_str() + at + prefix.size());
  EXPECT_GT(port, 0) << r.out;
  EXPECT_NE(r.out.find(std::to_string(port) + "/metrics\n", at), std::string::npos) << r.out;
}

// `trainfit watch ARGS...` with the fake driver, in the background in a process group of its own
// (so that a failed test can kill all of it), stdout and stderr to `output`.
pid_t start_watch(const std::vector<std::string>& args, const std::string& output) {
  const std::string script = fake_script();
  std::vector<std::string> argv{TRAINFIT_CLI, "watch"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> ptrs;
  for (auto& a : argv) ptrs.push_back(a.data());
  ptrs.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    const int fd = open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    setenv("FAKE_NVML_SCRIPT", script.c_str(), 1);
    setenv("TRAINFIT_NVML_LIBRARY", TRAINFIT_FAKE_NVML, 1);
    execv(ptrs[0], ptrs.data());
    _exit(127);
  }
  return pid;
}

// The wait status of `pid` once it ends within `seconds`; else its whole group is killed and -1.
int wait_at_most(pid_t pid, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (seconds_since(t0) < seconds) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(-pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

bool wait_for_file(const std::string& path, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < seconds) {
    std::ifstream in(path);
    std::string line;
    if (std::getline(in, line) && !line.empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A job that says which signal reached it: exit 7 for SIGINT, 8 for SIGHUP, 9 for SIGTERM. It
// writes its events file's path to `marker` once its traps are set.
std::string signal_reporting_job(const std::string& marker) {
  return "trap 'kill $p; exit 7' INT; trap 'kill $p; exit 8' HUP; trap 'kill $p; exit 9' TERM; "
         "sleep 30 & p=$!; echo \"$TRAINFIT_WATCH_EVENTS\" > " +
         marker + "; wait";
}

TEST(WatchCli, SignalsSentToWatchAloneReachTheJob) {
  // kill -INT <watch> never reached the job; SIGHUP killed watch, orphaning the job and leaving its
  // events folder behind. SIGTERM was passed on already.
  for (const auto& [sig, code] : {std::pair{SIGINT, 7}, std::pair{SIGHUP, 8}, std::pair{SIGTERM, 9}}) {
    const std::string marker = temp_path("events_path_" + std::to_string(sig));
    const std::string output = temp_path("signal_out_" + std::to_string(sig));
    std::remove(marker.c_str());
    const pid_t pid = start_watch({"--", "/bin/sh", "-c", signal_reporting_job(marker)}, output);
    ASSERT_TRUE(wait_for_file(marker, 10)) << sig;
    std::string events;
    std::getline(std::ifstream(marker), events);
    const auto events_dir = std::filesystem::path(events).parent_path();
    EXPECT_TRUE(std::filesystem::exists(events_dir)) << events;
    kill(pid, sig);
    const int status = wait_at_most(pid, 10);
    std::ostringstream out;
    out << std::ifstream(output).rdbuf();
    ASSERT_TRUE(status != -1 && WIFEXITED(status)) << "signal " << sig << ": watch did not end by itself\n"
                                                   << out.str();
    EXPECT_EQ(WEXITSTATUS(status), code) << "signal " << sig << "\n" << out.str();
    EXPECT_NE(out.str().find("exited with code " + std::to_string(code)), std::string::npos) << out.str();
    EXPECT_FALSE(std::filesystem::exists(events_dir)) << events_dir << " left behind";
  }
}

TEST(WatchCli, CtrlCAtATerminalReachesTheJobOnce) {
  // The terminal sends Ctrl-C to the whole foreground group, job included: watch must not send it
  // again. The job counts its SIGINTs and exits with 40 + that count.
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  const std::string slave = ptsname(master);
  const std::string marker = temp_path("ctrl_c_ready");
  std::remove(marker.c_str());
  const std::string job = "n=0; trap 'n=$((n+1))' INT; echo ready > " + marker +
                          "; i=0; while [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done; exit $((40+n))";
  const std::string script = fake_script();
  std::vector<std::string> argv{TRAINFIT_CLI, "watch", "--", "/bin/sh", "-c", job};
  std::vector<char*> ptrs;
  for (auto& a : argv) ptrs.push_back(a.data());
  ptrs.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    setsid();  // a session of its own, whose controlling terminal is the pty: watch in its foreground
    const int fd = open(slave.c_str(), O_RDWR);
    dup2(fd, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    close(master);
    setenv("FAKE_NVML_SCRIPT", script.c_str(), 1);
    setenv("TRAINFIT_NVML_LIBRARY", TRAINFIT_FAKE_NVML, 1);
    execv(ptrs[0], ptrs.data());
    _exit(127);
  }
  std::string out;
  const auto drain = [&] {
    std::array<char, 4096> buf{};
    pollfd p{master, POLLIN, 0};
    while (poll(&p, 1, 0) > 0 && (p.revents & POLLIN)) {
      const ssize_t n = read(master, buf.data(), buf.size());
      if (n <= 0) break;
      out.append(buf.data(), static_cast<std::size_t>(n));
    }
  };
  ASSERT_TRUE(wait_for_file(marker, 10));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(write(master, "\x03", 1), 1);  // Ctrl-C
  int status = -1;
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds_since(t0) < 15) {
    drain();
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    status = -1;
  }
  if (status == -1) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  drain();
  close(master);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 41) << "40 + the SIGINTs the job got\n" << out;
}

}  // namespace
