// `trainfit bench --devices`: configs run concurrently, one group of GPUs each, with the stand-in
// runner (tests/bench_standin_runner.cpp), which records the CUDA_VISIBLE_DEVICES it saw and when
// it started and ended. Overlap is shown, not timed: two configs that each wait for the other
// (x_rendezvous) both finish only if they ran at the same time.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_test_files.hpp"
#include "run_cli.hpp"
#include "trainfit/bench.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Result = trainfit::testing::CliResult;

Result run(const std::string& args, const std::string& env = "") {
  return trainfit::testing::run_cli(args, env);
}

fs::path fresh_dir(const std::string& name) { return trainfit::testing::fresh_bench_dir("dev-" + name); }
std::vector<json> rows_of(const fs::path& results) { return trainfit::testing::results_rows(results); }
std::string write_plan(const fs::path& dir, const std::string& body) { return trainfit::testing::write_bench_plan(dir, body); }

std::string bench_args(const std::string& plan, const fs::path& out, const std::string& more = "") {
  return "bench " + plan + " --results " + out.string() + " --runner " + TRAINFIT_STANDIN_RUNNER + " " + more;
}

// The stand-in runner's record of itself.
const json& standin(const json& row) {
  return row["measured"]["standin"];
}
double started(const json& row) {
  return standin(row)["started_unix"].get<double>();
}
double ended(const json& row) {
  return standin(row)["ended_unix"].get<double>();
}

// Rows by their config's seq (the tests' plans vary it).
std::map<int, json> by_seq(const std::vector<json>& rows) {
  std::map<int, json> m;
  for (const auto& r : rows) m[r["config"]["seq"].get<int>()] = r;
  return m;
}

// A process that is gone or a zombie is not alive.
bool alive(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z';
}

// Reaps `pid`, a child of this process; true when SIGKILL ended it. Gives up (killing it) after 10 s.
bool reaped_after_sigkill(pid_t pid) {
  int st = 0;
  for (int i = 0; i < 1000; ++i) {
    if (::waitpid(pid, &st, WNOHANG) == pid) return WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &st, 0);
  return false;
}

pid_t read_pid(const fs::path& p) {
  pid_t pid = 0;
  std::ifstream(p) >> pid;
  return pid;
}

TEST(BenchDevicesCli, TwoConfigsRunAtOnceOnDifferentGpus) {
  const fs::path dir = fresh_dir("overlap");
  const std::string plan = write_plan(dir, R"(
name = "overlap"
[run]
steps = 3
timeout = 120
gpu = "h200"
[matrix]
model = "qwen2.5-0.5b"
x_tag = ["a", "b"]
x_rendezvous = ")" + (dir / "rendezvous").string() +
                                               R"("
x_peers = 2
x_sleep_s = 0.05
)");
  // NCCL_NVLS_ENABLE stands for what the GPU machine sets: it must reach the runner.
  const auto r = run(bench_args(plan, dir / "out", "--devices 0,1"), "NCCL_NVLS_ENABLE=0");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rows = rows_of(dir / "out");
  ASSERT_EQ(rows.size(), 2u) << r.out;
  const json& a = rows[0]["config"]["x_tag"] == "a" ? rows[0] : rows[1];
  const json& b = rows[0]["config"]["x_tag"] == "a" ? rows[1] : rows[0];
  // Each waited for the other: both ok means they ran at the same time.
  EXPECT_EQ(a["measured"]["status"], "ok") << a["measured"].dump();
  EXPECT_EQ(b["measured"]["status"], "ok") << b["measured"].dump();
  EXPECT_LT(started(b), ended(a));
  EXPECT_LT(started(a), ended(b));
  const std::set<std::string> visible = {standin(a)["cuda_visible_devices"].get<std::string>(),
                                         standin(b)["cuda_visible_devices"].get<std::string>()};
  EXPECT_EQ(visible, (std::set<std::string>{"0", "1"}));
  EXPECT_EQ(a["config"]["x_tag"], "a");
  EXPECT_EQ(a["bench"]["devices"], json::array({standin(a)["cuda_visible_devices"] == "0" ? 0 : 1}));
  EXPECT_EQ(b["bench"]["devices"], json::array({standin(b)["cuda_visible_devices"] == "0" ? 0 : 1}));
  for (const json* row : {&a, &b}) {
    EXPECT_EQ(standin(*row)["cuda_device_order"], "PCI_BUS_ID");
    EXPECT_EQ(standin(*row)["nccl_nvls_enable"], "0");
  }
  EXPECT_NE(r.out.find("on GPUs 0,1, up to 2 configs at once"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" on GPU 1"), std::string::npos) << r.out;
  // Resume by key as before: nothing left to run.
  const auto again = run(bench_args(plan, dir / "out", "--devices 0,1"));
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_EQ(rows_of(dir / "out").size(), 2u);
  EXPECT_NE(again.out.find("already done"), std::string::npos);
}

// In plan order: A (1 GPU), X (3 GPUs: more than listed), B (2 GPUs), C (1 GPU).
const char* kGroupsPlan = R"(
name = "groups"
exclude = ['not ((seq == 128 and gpus == 1) or (seq == 256 and gpus == 3) or (seq == 512 and gpus == 2) or (seq == 1024 and gpus == 1))']
[run]
steps = 3
timeout = 60
gpu = "h200"
[matrix]
model = "qwen2.5-0.5b"
seq = [128, 256, 512, 1024]
gpus = [1, 2, 3]
x_sleep_s = 0.1
)";

TEST(BenchDevicesCli, EachConfigTakesItsGpusInPlanOrderAndOneThatCannotFitIsAnError) {
  const fs::path dir = fresh_dir("groups");
  const std::string plan = write_plan(dir, kGroupsPlan);
  const auto r = run(bench_args(plan, dir / "out", "--devices 0,1"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto lines = rows_of(dir / "out");
  ASSERT_EQ(lines.size(), 4u) << r.out;
  // Appended as each ended: X's row needs no run, and is written while A still runs.
  EXPECT_EQ(lines[0]["config"]["seq"], 256);
  auto rows = by_seq(lines);
  ASSERT_EQ(rows.size(), 4u);  // each config once
  const json &a = rows[128], &x = rows[256], &b = rows[512], &c = rows[1024];
  EXPECT_EQ(x["measured"]["status"], "error");
  EXPECT_NE(x["measured"]["error"].get<std::string>().find("needs 3 GPUs but --devices lists 2"), std::string::npos);
  EXPECT_EQ(x["verdict"], "error");
  EXPECT_EQ(x["bench"]["devices"], json::array());
  for (const json* row : {&a, &b, &c}) EXPECT_EQ((*row)["measured"]["status"], "ok") << (*row).dump();
  EXPECT_EQ(standin(a)["cuda_visible_devices"], "0");
  EXPECT_EQ(standin(b)["cuda_visible_devices"], "0,1");
  EXPECT_EQ(b["bench"]["devices"], json::array({0, 1}));
  EXPECT_EQ(standin(c)["cuda_visible_devices"], "0");
  EXPECT_EQ(c["bench"]["devices"], json::array({0}));
  // B waited for A's GPU, and C, which would have fitted beside A, waited behind B.
  EXPECT_GE(started(b), ended(a));
  EXPECT_GE(started(c), ended(b));
  // results.json has the four rows in plan order
  std::ifstream f(dir / "out" / "results.json");
  const json doc = json::parse(f);
  ASSERT_EQ(doc["rows"].size(), 4u);
  EXPECT_EQ(doc["rows"][1]["config"]["seq"], 256);
}

TEST(BenchDevicesCli, WithoutTheOptionOneConfigAtATimeSeesEveryGpu) {
  const fs::path dir = fresh_dir("nodevices");
  const std::string plan = write_plan(dir, kGroupsPlan);
  const auto r = run(bench_args(plan, dir / "out"));
  ASSERT_EQ(r.code, 0) << r.out;
  const auto lines = rows_of(dir / "out");
  ASSERT_EQ(lines.size(), 4u) << r.out;
  const char* inherited = std::getenv("CUDA_VISIBLE_DEVICES");
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const json& row = lines[i];
    EXPECT_EQ(row["bench"]["index"], i);         // plan order
    EXPECT_EQ(row["measured"]["status"], "ok");  // the 3-GPU config too: no pool to check it against
    EXPECT_FALSE(row["bench"].contains("devices"));
    EXPECT_EQ(standin(row)["cuda_visible_devices"], inherited ? json(inherited) : json(nullptr));
    if (i > 0) {
      EXPECT_GE(started(row), ended(lines[i - 1]));
    }
  }
}

TEST(BenchDevicesCli, BadListsExitTwoWithOneLine) {
  const fs::path dir = fresh_dir("bad");
  const std::string plan = write_plan(dir, "name = 'bad'\n[matrix]\nmodel = 'qwen2.5-0.5b'\nx_sleep_s = 0.01\n");
  const std::string no_driver = "TRAINFIT_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1";
  for (const std::string list : {"x", "0,0", "1,-1", "''"}) {
    const auto r = run(bench_args(plan, dir / "out", "--devices " + list), no_driver);
    EXPECT_EQ(r.code, 2) << list << ": " << r.out;
    EXPECT_EQ(r.out.rfind("trainfit: ", 0), 0u) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  }
  EXPECT_NE(run(bench_args(plan, dir / "out", "--devices 0,0"), no_driver).out.find("GPU 0 is listed twice"),
            std::string::npos);
  EXPECT_EQ(run(bench_args(plan, dir / "out", "--devices x --dry-run")).code, 2);
  const auto all = run(bench_args(plan, dir / "out", "--devices all"), no_driver);
  EXPECT_EQ(all.code, 2) << all.out;
  EXPECT_NE(all.out.find("NVML is not available"), std::string::npos) << all.out;
  EXPECT_FALSE(fs::exists(dir / "out" / "results.jsonl"));  // nothing ran
  // Without NVML the indices are taken as given: the stand-in needs no GPU.
  const auto ok = run(bench_args(plan, dir / "out", "--devices 7"), no_driver);
  ASSERT_EQ(ok.code, 0) << ok.out;
  const auto rows = rows_of(dir / "out");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["bench"]["devices"], json::array({7}));
  EXPECT_EQ(standin(rows[0])["cuda_visible_devices"], "7");
}

std::string fake_nvml_env(const fs::path& dir) {
  const fs::path script = dir / "fake_nvml.txt";
  // GPU 0 is busier than GPU 1: a sampler reading both reports GPU 0's memory.
  std::ofstream(script) << "count 2\ngpu0.memory_used 5368709120\ngpu1.memory_used 1073741824\n";
  return "FAKE_NVML_SCRIPT=" + script.string() + " TRAINFIT_NVML_LIBRARY=" + TRAINFIT_FAKE_NVML;
}

TEST(BenchDevicesCli, NvmlChecksTheIndicesAndEachConfigIsSampledOnItsOwnGpus) {
  const fs::path dir = fresh_dir("nvml");
  const std::string env = fake_nvml_env(dir);
  // Each config runs at least 0.9 s (3 steps of 0.3 s): the sampler (every 0.5 s) reads at least once.
  const std::string plan = write_plan(dir,
                                      "name = 'nvml'\n[run]\nsteps = 3\n[matrix]\nmodel = 'qwen2.5-0.5b'\n"
                                      "x_sleep_s = 0.3\n");
  const auto missing = run(bench_args(plan, dir / "out", "--devices 0,2"), env);
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_NE(missing.out.find("there is no GPU 2; NVML lists 0,1"), std::string::npos) << missing.out;

  const auto one = run(bench_args(plan, dir / "one", "--devices 1"), env);
  ASSERT_EQ(one.code, 0) << one.out;
  auto rows = rows_of(dir / "one");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(standin(rows[0])["cuda_visible_devices"], "1");
  ASSERT_TRUE(rows[0]["telemetry"].contains("device_used_max_mib")) << rows[0]["telemetry"].dump();
  EXPECT_EQ(rows[0]["telemetry"]["device_used_max_mib"], 1024.0);  // GPU 1 only

  const auto every = run(bench_args(plan, dir / "every"), env);
  ASSERT_EQ(every.code, 0) << every.out;
  rows = rows_of(dir / "every");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["telemetry"]["device_used_max_mib"], 5120.0);  // without --devices: all GPUs

  const auto all = run(bench_args(plan, dir / "all", "--devices all"), env);
  ASSERT_EQ(all.code, 0) << all.out;
  EXPECT_NE(all.out.find("on GPUs 0,1"), std::string::npos) << all.out;
  rows = rows_of(dir / "all");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["bench"]["devices"], json::array({0}));
  EXPECT_EQ(rows[0]["telemetry"]["device_used_max_mib"], 5120.0);
}

// The library: a sampler per running config for its devices, progress with the running count and
// an ETA spread over the pool.
TEST(BenchDevicesCli, ProgressAndSamplersFollowEachConfig) {
  const fs::path dir = fresh_dir("progress");
  const trainfit::bench::ExperimentPlan plan = trainfit::bench::parse_experiment_plan(R"(
name = "progress"
[run]
steps = 2
timeout = 60
[matrix]
model = "qwen2.5-0.5b"
seq = [128, 256, 512, 1024]
x_sleep_s = 0.05
)",
                                                                                      "progress.toml");
  struct Recorder : trainfit::bench::ConfigSampler {
    std::vector<int> devices;
    explicit Recorder(std::vector<int> d) : devices(std::move(d)) {}
    void tick() override {}
    // The sampler's summary says which devices it was made for: the first one, -1 for all.
    trainfit::bench::ConfigTelemetry summary() override {
      trainfit::bench::ConfigTelemetry t;
      t.samples = devices.empty() ? -1 : devices.front();
      return t;
    }
  };
  for (const bool pooled : {false, true}) {
    trainfit::bench::RunOptions o;
    o.results_dir = (dir / (pooled ? "pooled" : "plain")).string();
    o.runner = {TRAINFIT_STANDIN_RUNNER};
    if (pooled) o.devices = {3, 1};
    std::size_t most_running = 0, started = 0, finished = 0;
    std::vector<std::vector<int>> sampled;
    o.make_sampler = [&](const std::vector<int>& d) {
      sampled.push_back(d);
      return std::make_unique<Recorder>(d);
    };
    std::vector<trainfit::bench::Progress> ends;
    std::vector<trainfit::bench::BenchRow> end_rows;
    o.on_progress = [&](const trainfit::bench::Progress& p) {
      most_running = std::max(most_running, p.running);
      EXPECT_EQ(p.devices != nullptr, pooled);
      if (p.event == trainfit::bench::Progress::Event::started) ++started;
      if (p.event == trainfit::bench::Progress::Event::finished) {
        ++finished;
        ends.push_back(p);
        end_rows.push_back(*p.row);
      }
    };
    const auto rows = trainfit::bench::run_configs(plan, trainfit::bench::expand_matrix(plan), o);
    ASSERT_EQ(rows.size(), 4u);
    EXPECT_EQ(started, 4u);
    EXPECT_EQ(finished, 4u);
    EXPECT_EQ(most_running, pooled ? 2u : 1u);
    ASSERT_EQ(sampled.size(), 4u);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(rows[i].run.index, i);  // returned in plan order
      ASSERT_TRUE(rows[i].telemetry.has_value());
      if (pooled) {
        ASSERT_TRUE(rows[i].run.devices.has_value());
        ASSERT_EQ(rows[i].run.devices->size(), 1u);
        EXPECT_EQ(rows[i].telemetry->samples, rows[i].run.devices->front());
      } else {
        EXPECT_EQ(rows[i].telemetry->samples, -1);
      }
    }
    if (pooled) {
      for (const auto& d : sampled) EXPECT_TRUE(d == std::vector<int>{3} || d == std::vector<int>{1});
    }
    // The first end: its wall time for each of the three configs left, over the slots.
    ASSERT_TRUE(ends[0].eta_seconds.has_value());
    EXPECT_NEAR(*ends[0].eta_seconds, end_rows[0].run.wall_seconds * 3 / (pooled ? 2 : 1), 0.02);
    EXPECT_EQ(*ends[3].eta_seconds, 0.0);
  }
}

TEST(BenchDevicesCli, SigkillWithTwoConfigsRunningThenARerunKillsTheirLeftoversAndFinishesTheRest) {
  const fs::path dir = fresh_dir("kill");
  const fs::path gate = dir / "gate";
  // In plan order: 1 (no gate), 2 (gate), 3 (no gate), 4 (gate). On two GPUs, 1 and 3 finish while
  // 2 waits; then 2 and 4 both wait for the gate. Every runner leaves a child in its group.
  const std::string plan = write_plan(dir, R"(
name = "kill"
[run]
steps = 2
timeout = 60
gpu = "h200"
[matrix]
model = "qwen2.5-0.5b"
seq = [128, 256]
x_gate = ["", ")" + gate.string() + R"("]
x_spawn_child = true
x_sleep_s = 0.05
)");
  const fs::path out = dir / "out";
  // This test adopts the orphans (a subreaper) and reaps the runners once they die, so that their
  // groups' leaders are gone, as under an init that reaps at once: the rerun must find what they
  // left without them.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  struct Unset {
    ~Unset() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
  } unset;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execl(TRAINFIT_CLI, TRAINFIT_CLI, "bench", plan.c_str(), "--results", out.c_str(), "--runner",
            TRAINFIT_STANDIN_RUNNER, "--devices", "0,1", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  auto file_of = [&](const std::string& prefix, const std::string& suffix) -> fs::path {
    std::error_code ec;
    for (fs::directory_iterator it(out / "runs", ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.rfind(prefix, 0) == 0 && name.size() > suffix.size() &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        return it->path();
    }
    return {};
  };
  // Wait for the two rows, and for configs 2 and 4 to be waiting at the gate.
  std::size_t lines = 0;
  pid_t left2 = 0, left4 = 0;
  for (int i = 0; i < 3000 && (lines < 2 || left2 <= 0 || left4 <= 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream in(out / "results.jsonl");
    lines = static_cast<std::size_t>(std::count(std::istreambuf_iterator<char>(in), {}, '\n'));
    left2 = read_pid(file_of("0002-", ".child.pid"));
    left4 = read_pid(file_of("0004-", ".child.pid"));
  }
  ASSERT_EQ(lines, 2u);
  const pid_t runner2 = read_pid(file_of("0002-", ".json.pid")), runner4 = read_pid(file_of("0004-", ".json.pid"));
  ASSERT_GT(runner2, 0);
  ASSERT_GT(runner4, 0);
  ASSERT_GT(left2, 0);
  ASSERT_GT(left4, 0);
  // .running lists both groups.
  std::set<pid_t> listed;
  {
    std::ifstream running(out / ".running");
    std::string line;
    while (std::getline(running, line)) {
      long pgid = 0;
      std::istringstream(line) >> pgid;
      listed.insert(static_cast<pid_t>(pgid));
    }
  }
  EXPECT_EQ(listed, (std::set<pid_t>{runner2, runner4}));

  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const auto kept = rows_of(out);  // every line is whole JSON
  ASSERT_EQ(kept.size(), 2u);
  // Both runners die with the orchestrator (PR_SET_PDEATHSIG): adopted, they are reaped here.
  EXPECT_TRUE(reaped_after_sigkill(runner2));
  EXPECT_TRUE(reaped_after_sigkill(runner4));
  EXPECT_TRUE(alive(left2));  // but what they started lives on, in their groups
  EXPECT_TRUE(alive(left4));

  { std::ofstream(gate) << "open\n"; }
  { std::ofstream(out / "results.jsonl", std::ios::app) << R"({"config": {"model": "qwen2.5-0.5b", "seq)"; }
  const auto r = run(bench_args(plan, out, "--devices 0,1"));
  ASSERT_EQ(r.code, 0) << r.out;
  // The rerun killed both slots' leftovers (adopted too: children of this process by now).
  EXPECT_TRUE(reaped_after_sigkill(left2));
  EXPECT_TRUE(reaped_after_sigkill(left4));
  const auto rows = rows_of(out);
  ASSERT_EQ(rows.size(), 4u) << r.out;
  std::set<std::string> keys;
  for (const auto& row : rows) keys.insert(row["bench"]["key"].get<std::string>());
  EXPECT_EQ(keys.size(), 4u);                                                 // nothing ran twice
  for (std::size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(rows[i], kept[i]);  // the finished rows are untouched
  for (const auto& row : rows) EXPECT_EQ(row["measured"]["status"], "ok");
  EXPECT_NE(r.out.find("already done"), std::string::npos);
  EXPECT_FALSE(fs::exists(out / ".running"));
}

}  // namespace
