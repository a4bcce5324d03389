// The job's processes from /proc (HostCpuReader) on real processes of this machine, the host
// readings in a recording, and what the watch does with the job's GPUs and warnings, against the
// fake libnvidia-ml.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "support/json_lines.hpp"
#include "trainfit/telemetry.hpp"

extern char** environ;

namespace {

using namespace trainfit::telemetry;

std::string temp_path(const std::string& name) {
  return testing::TempDir() + "/watch_host_" + std::to_string(::getpid()) + "_" + name;
}

// A /bin/sh running `script`, killed with its process group at the end of the test.
struct Shell {
  pid_t pid = 0;
  explicit Shell(const std::string& script) {
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // its own group: killed whole
    posix_spawnattr_setpgroup(&attr, 0);
    std::vector<std::string> args{"/bin/sh", "-c", script};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    EXPECT_EQ(posix_spawn(&pid, "/bin/sh", nullptr, &attr, argv.data(), environ), 0);
    posix_spawnattr_destroy(&attr);
  }
  ~Shell() {
    ::kill(-pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  Shell(const Shell&) = delete;
  Shell& operator=(const Shell&) = delete;
};

// Two readings of the shell's tree 1.5 s apart (the tree read once its children have started).
HostSample read_twice(const Shell& shell) {
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto tree = process_tree(static_cast<std::uint32_t>(shell.pid));
  HostCpuReader reader;
  reader.read(1, tree, {});
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  return reader.read(2, tree, {});
}

const HostProcess* find(const HostSample& h, std::uint32_t pid) {
  const auto it = std::find_if(h.processes.begin(), h.processes.end(), [&](const auto& p) { return p.pid == pid; });
  return it == h.processes.end() ? nullptr : &*it;
}

// Thresholds are loose: two cores shared with other builds gave two busy loops 0.4 of a core together;
// a process asleep reads 0.
TEST(HostCpu, AMainThreadBurningCpuIsSeenOnItsMainThread) {
  const Shell burner("while :; do :; done");
  const HostSample h = read_twice(burner);
  const HostProcess* p = find(h, static_cast<std::uint32_t>(burner.pid));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->role, HostRole::training) << "no process on a GPU: the job's root trains";
  EXPECT_GT(p->main_thread_cores, 0.1);
  EXPECT_LE(p->main_thread_cores, 1.2);
  EXPECT_NEAR(p->cpu_cores, p->main_thread_cores, 0.1) << "a shell has one thread";
  EXPECT_EQ(h.time, 2);
}

TEST(HostCpu, WorkersBurningCpuWhileTheMainThreadSleeps) {
  const Shell shell("(while :; do :; done) & (while :; do :; done) & wait");
  const HostSample h = read_twice(shell);
  const HostProcess* root = find(h, static_cast<std::uint32_t>(shell.pid));
  ASSERT_NE(root, nullptr);
  EXPECT_LT(root->main_thread_cores, 0.05);
  EXPECT_EQ(root->main_thread_state, 'S');
  double workers = 0;
  int n = 0;
  for (const HostProcess& p : h.processes)
    if (p.role == HostRole::worker) {
      ++n;
      workers += p.cpu_cores;
      EXPECT_EQ(p.parent, static_cast<std::uint32_t>(shell.pid));
    }
  EXPECT_EQ(n, 2);
  EXPECT_GT(workers, 0.15);
}

TEST(HostCpu, TheProcessesOnAGpuTrainAndTheRootLaunches) {
  const Shell shell("sleep 30 & wait");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto tree = process_tree(static_cast<std::uint32_t>(shell.pid));
  ASSERT_EQ(tree.size(), 2U);
  HostCpuReader reader;
  const HostSample h = reader.read(1, tree, {{tree[1], 3}});
  ASSERT_EQ(h.processes.size(), 2U);
  EXPECT_EQ(h.processes[0].role, HostRole::other);  // a launcher, as torchrun
  EXPECT_EQ(h.processes[1].role, HostRole::training);
  EXPECT_EQ(h.processes[1].gpus, std::vector<int>{3});
  EXPECT_EQ(h.processes[1].cpu_cores, 0) << "the first reading only starts the counts";
}

TEST(HostCpu, HostReadingsRoundTripThroughARecording) {
  HostSample h;
  h.time = 1.8e9;
  h.processes.push_back({100, 1, HostRole::training, {0, 1}, 1.0, 0.6, 0.35, 'R'});
  h.processes.push_back({101, 100, HostRole::worker, {}, 0.9, 0.9, 0, 'S'});
  const std::string text = header_to_json(std::vector<GpuInfo>{{0, "G", 1, {}, {}, {}}}, "", "").dump() + "\n" +
                           host_to_json(h).dump() + "\n" + R"({"type": "summary", "gpus": [1], "timeline": []})" + "\n";
  const Recording r = parse_recording(text, "r.jsonl");
  ASSERT_EQ(r.host.size(), 1U);
  ASSERT_EQ(r.host[0].processes.size(), 2U);
  const HostProcess& p = r.host[0].processes[0];
  EXPECT_EQ(p.pid, 100U);
  EXPECT_EQ(p.role, HostRole::training);
  EXPECT_EQ(p.gpus, (std::vector<int>{0, 1}));
  EXPECT_DOUBLE_EQ(p.main_thread_cores, 0.6);
  EXPECT_DOUBLE_EQ(p.busiest_other_cores, 0.35);
  EXPECT_EQ(p.main_thread_state, 'R');
  EXPECT_EQ(r.host[0].processes[1].role, HostRole::worker);
  EXPECT_EQ(r.job_gpus, std::vector<int>{1});
  // Malformed host lines name their line.
  for (const char* bad :
       {R"({"type": "host", "t": 5, "procs": [{"pid": 1, "role": "boss"}]})",
        R"({"type": "host", "t": 5, "procs": [{"pid": 1, "cpu": -1}]})", R"({"type": "host", "t": 5, "procs": {}})",
        R"({"type": "host", "t": 5})", R"({"type": "host", "t": 5, "procs": [{"pid": 1, "gpus": ["x"]}]})"})
    EXPECT_THROW(parse_recording(std::string(bad) + "\n", "bad.jsonl"), trainfit::InputError) << bad;
}

TEST(HostCpu, ProbeEventsCarryTheirRankAndGpu) {
  std::vector<StepEvent> steps;
  std::vector<PhaseMarker> phases;
  parse_event_line(R"({"t": 5, "step": 1, "step_seconds": 0.5, "rank": 1, "device": 3})", steps, phases);
  ASSERT_EQ(steps.size(), 1U);
  EXPECT_EQ(steps[0].rank, 1);
  EXPECT_EQ(steps[0].device, 3);
  EXPECT_THROW(parse_event_line(R"({"t": 5, "step": 1, "device": -1})", steps, phases), trainfit::InputError);
}

// The fake driver with `gpus` GPUs at 30% utilisation and the script's extra lines.
WatchOptions fake_options(int gpus, const std::string& extra) {
  const std::string script = temp_path("fake_nvml.txt");
  std::ofstream out(script);
  out << "count " << gpus << "\n";
  for (int i = 0; i < gpus; ++i)
    out << "gpu" << i << ".memory_total 20000000000\ngpu" << i << ".util_gpu 30\ngpu" << i << ".power_mw 200000\n";
  out << extra;
  out.close();
  ::setenv("FAKE_NVML_SCRIPT", script.c_str(), 1);
  WatchOptions o;
  o.nvml_library = TRAINFIT_FAKE_NVML;
  return o;
}

WatchResult run(const WatchOptions& o) {
  WatchSession session(o);
  std::atomic<int> no_signal{0};
  return session.run(WatchOutput{}, no_signal);
}

TEST(WatchHost, TheJobsCpuFiguresAreRecordedAndReplayReachesTheSameVerdicts) {
  WatchOptions o = fake_options(1, "");
  o.jsonl_path = temp_path("host.jsonl");
  o.command = {"/bin/sh", "-c", "end=$(($(date +%s) + 4)); while [ $(date +%s) -lt $end ]; do :; done"};
  const WatchResult r = run(o);
  EXPECT_EQ(r.exit_code, 0);
  const auto lines = trainfit::testing::read_jsonl(o.jsonl_path);
  EXPECT_GE(trainfit::testing::count_of_type(lines, "host"), 2);
  // Each live verdict again from the recording (its window's samples and the recorded host
  // readings): the same verdict, and host-bound exactly when the training thread ran near a full core
  // (on a loaded CI box a busy shell may get less of one).
  const Recording rec = load_recording(o.jsonl_path);
  int live = 0;
  for (const auto& line : lines) {
    if (line["type"] != "verdict") continue;
    ++live;
    const double begin = line["begin"], end = line["end"];
    std::vector<Sample> window;
    for (const Sample& s : rec.samples)
      if (s.time >= begin && s.time <= end) window.push_back(s);
    const Diagnosis d = diagnose(window, rec.steps, rec.gpus.at(0), rec.host);
    const std::string verdict = line["verdict"];
    EXPECT_EQ(watch_verdict(d.primary().kind), verdict) << d.primary().evidence;
    EXPECT_EQ(d.primary().evidence, line["evidence"]);
    EXPECT_TRUE(verdict == "host-bound" || verdict == "input-pipeline-bound") << verdict;
    if (d.stats.host_driving_cores) {
      EXPECT_EQ(d.primary().kind == Bottleneck::launch_overhead, *d.stats.host_driving_cores >= 0.8);
      EXPECT_NE(d.primary().evidence.find("training process: main thread"), std::string::npos);
    }
  }
  EXPECT_GE(live, 2);
}

TEST(WatchHost, OnlyTheGpuTheJobsProcessUsesIsReported) {
  WatchOptions o = fake_options(2, "gpu1.procs child:1000000000\n");
  o.jsonl_path = temp_path("job_gpu.jsonl");
  o.command = {"/bin/sh", "-c", "sleep 3"};
  const WatchResult r = run(o);
  EXPECT_EQ(r.summary.find("GPU 0 ("), std::string::npos) << r.summary;
  EXPECT_NE(r.summary.find("GPU 1 ("), std::string::npos) << r.summary;
  const auto lines = trainfit::testing::read_jsonl(o.jsonl_path);
  EXPECT_EQ(lines.back()["gpus"], nlohmann::json::array({1}));
  // A replay judges only the job's GPU, as the summary named it.
  const Recording rec = load_recording(o.jsonl_path);
  EXPECT_EQ(rec.job_gpus, std::vector<int>{1});
  const std::string replay = render_replay(rec, "job_gpu.jsonl", 2);
  EXPECT_EQ(replay.find("GPU 0 ("), std::string::npos) << replay;
  EXPECT_NE(replay.find("GPU 1 ("), std::string::npos) << replay;
}

TEST(WatchHost, CudaVisibleDevicesIsTheHintWhenNvmlShowsNoProcessOfTheJob) {
  WatchOptions o = fake_options(3, "");
  o.command = {"/bin/sh", "-c", "sleep 2.5"};
  ::setenv("CUDA_VISIBLE_DEVICES", "2", 1);
  const WatchResult r = run(o);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(r.summary.find("GPU 0 ("), std::string::npos) << r.summary;
  EXPECT_EQ(r.summary.find("GPU 1 ("), std::string::npos) << r.summary;
  EXPECT_NE(r.summary.find("GPU 2 ("), std::string::npos) << r.summary;
}

TEST(WatchHost, TheSummaryListsMemoryGrowingWithItsRate) {
  // Used memory rises 100 MB a reading (memory is read once a second: ~100 MB/s), cycling every 100 s.
  std::string rising = "gpu0.memory_used";
  for (int i = 0; i < 100; ++i) rising += " " + std::to_string(2000000000LL + 100000000LL * i);
  WatchOptions o = fake_options(1, rising + "\n");
  o.jsonl_path = temp_path("leak.jsonl");
  o.command = {"/bin/sh", "-c", "sleep 3.5"};
  const WatchResult r = run(o);
  EXPECT_NE(r.summary.find("warnings over time:"), std::string::npos) << r.summary;
  EXPECT_NE(r.summary.find("memory-growing"), std::string::npos) << r.summary;
  EXPECT_NE(r.summary.find("MiB/s on average"), std::string::npos) << r.summary;
  const auto lines = trainfit::testing::read_jsonl(o.jsonl_path);
  const auto& warnings = lines.back()["warnings"];
  ASSERT_FALSE(warnings.empty()) << lines.back().dump();
  EXPECT_EQ(warnings[0]["warning"], "memory-growing");
  // ~100 MB/s of growth (the readings are ~1 s apart; their clock, not the driver's, times them).
  EXPECT_GT(warnings[0]["growth_bytes_per_second_mean"].get<double>(), 0.05e9);
  EXPECT_LT(warnings[0]["growth_bytes_per_second_mean"].get<double>(), 0.2e9);
}

TEST(BesidePlan, NamesAGapBetweenTheMeasuredAndThePlannedStep) {
  const PlanReference plan{"qwen2.5-0.5b lora on H200", 0.040, 4LL << 30, "launch-overhead"};
  const std::string slow = beside_plan_text(0.081, 4LL << 30, plan);
  EXPECT_NE(slow.find("step 0.081 s measured vs 0.040 s planned (2.02x: time goes to something outside the model's "
                      "step"),
            std::string::npos)
      << slow;
  EXPECT_NE(slow.find("memory 4.0 GiB used vs 4.0 GiB planned (1.00x)"), std::string::npos) << slow;
  EXPECT_NE(beside_plan_text(0.042, std::nullopt, plan).find("(1.05x: as planned)"), std::string::npos);
  EXPECT_NE(beside_plan_text(0.02, std::nullopt, plan).find("faster than planned"), std::string::npos);
  EXPECT_NE(beside_plan_text(std::nullopt, 6LL << 30, plan).find("another process on the GPU"), std::string::npos);
  EXPECT_EQ(beside_plan_text(std::nullopt, std::nullopt, plan), "");
}

}  // namespace
