// `trainfit bench` for real: the orchestrator runs a stand-in runner (tests/bench_standin_runner.cpp)
// that allocates, computes, crashes, hangs and runs out of memory as each config tells it.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"
#include "bench_test_files.hpp"
#include "run_cli.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Result = trainfit::testing::CliResult;
Result run(const std::string& args) { return trainfit::testing::run_cli(args); }

fs::path fresh_dir(const std::string& name) { return trainfit::testing::fresh_bench_dir(name); }
std::vector<json> rows_of(const fs::path& results) { return trainfit::testing::results_rows(results); }
std::string write_plan(const fs::path& dir, const std::string& body) { return trainfit::testing::write_bench_plan(dir, body); }

const char* kMixedPlan = R"(
name = "mixed"
[run]
steps = 3
warmup = 1
timeout = 3
gpu = "h200"
vram = "4GiB"
[matrix]
model = "qwen2.5-0.5b"
x_do = ["ok", "oom", "crash", "hang", "kill", "fail", "ok-again"]
[[criteria]]
name = "the good ones run"
where = 'x_do == "ok" or x_do == "ok-again"'
expect = 'status == "ok" and peak_allocated <= 0.8 * vram'
[[criteria]]
name = "nothing else did"
expect = 'count(status == "ok") == 2'
)";

TEST(BenchCli, EachFailureGetsItsOwnStatusAndTheRestRun) {
  const fs::path dir = fresh_dir("mixed");
  const std::string plan = write_plan(dir, kMixedPlan);
  const auto r = run("bench " + plan + " --results " + (dir / "out").string() + " --runner " + TRAINFIT_STANDIN_RUNNER);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rows = rows_of(dir / "out");
  ASSERT_EQ(rows.size(), 7u) << r.out;
  auto status = [&](std::size_t i) { return rows[i]["measured"]["status"].get<std::string>(); };
  EXPECT_EQ(status(0), "ok");
  EXPECT_EQ(status(1), "oom");
  EXPECT_EQ(status(2), "crashed");
  EXPECT_EQ(status(3), "timeout");
  EXPECT_EQ(status(4), "crashed");
  EXPECT_EQ(status(5), "error");
  EXPECT_EQ(status(6), "ok");  // "ok-again": anything but a known misbehaviour runs normally
  EXPECT_EQ(rows[0]["verdict"], "fits");
  EXPECT_EQ(rows[1]["verdict"], "oom");
  EXPECT_EQ(rows[2]["verdict"], "error");
  EXPECT_NE(rows[2]["measured"]["error"].get<std::string>().find("signal 11"), std::string::npos);
  EXPECT_NE(rows[4]["measured"]["error"].get<std::string>().find("signal 9"), std::string::npos);
  EXPECT_NE(rows[5]["measured"]["stderr_tail"].get<std::string>().find("failing on purpose"), std::string::npos);
  EXPECT_TRUE(rows[0]["predicted"]["peak_allocated_mib"].is_number());  // the planner beside the measurement
  EXPECT_EQ(rows[0]["config"]["vram_bytes"], 4LL << 30);
  // the end: criteria judged, results.json written
  EXPECT_NE(r.out.find("PASS  the good ones run"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS  nothing else did"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[4/7]"), std::string::npos);
  EXPECT_NE(r.out.find("eta"), std::string::npos);
  std::ifstream f(dir / "out" / "results.json");
  const json doc = json::parse(f);
  EXPECT_EQ(doc["rows"].size(), 7u);
  EXPECT_EQ(doc["environment"]["gpu"], "stand-in");
  EXPECT_EQ(doc["criteria"][0]["outcome"], "pass");
  EXPECT_NE(doc["plan"]["text"].get<std::string>().find("nothing else did"), std::string::npos);
  // a second run has nothing left to do
  const auto again = run("bench " + plan + " --results " + (dir / "out").string() + " --runner " + TRAINFIT_STANDIN_RUNNER);
  EXPECT_EQ(again.code, 0);
  EXPECT_EQ(rows_of(dir / "out").size(), 7u);
  EXPECT_NE(again.out.find("already done"), std::string::npos);
}

// A runner's row is outside input: one that is malformed becomes an error row saying so, the other
// configs run, and a resume does not trip over it.
TEST(BenchCli, AMalformedRunnerRowIsAnErrorRowNotAStop) {
  const fs::path dir = fresh_dir("malformed");
  const std::string plan = write_plan(dir, R"(
name = "malformed"
[run]
timeout = 10
[matrix]
model = "qwen2.5-0.5b"
x_do = "row"
x_row = ['{"measured": {"status": "error", "error": 12345}}', '{"measured": {"status": "oom", "error": {"x": 1}}}',
         '{"measured": {"status": "ok", "peak_allocated_mib": "lots"}}', '{"measured": {"status": 7}}', '[1, 2]',
         '{"measured": {"peak_allocated_mib": 5}}', '{"measured": {"status": "ok", "peak_allocated_mib": 12.5}}']
)");
  const std::string args = "bench " + plan + " --results " + (dir / "out").string() + " --runner " + TRAINFIT_STANDIN_RUNNER;
  const auto r = run(args);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rows = rows_of(dir / "out");
  ASSERT_EQ(rows.size(), 7u) << r.out;
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(rows[i]["measured"]["status"], "error") << rows[i].dump();
    EXPECT_EQ(rows[i]["verdict"], "error") << rows[i].dump();
  }
  EXPECT_NE(rows[0]["measured"]["error"].get<std::string>().find("the runner's row is malformed: field \"error\" must be a string"),
            std::string::npos);
  EXPECT_NE(rows[2]["measured"]["error"].get<std::string>().find("peak_allocated_mib"), std::string::npos);
  EXPECT_NE(rows[5]["measured"]["error"].get<std::string>().find("status"), std::string::npos);
  EXPECT_EQ(rows[0]["measured"]["error_reported"], 12345);  // what the runner wrote is kept beside
  EXPECT_EQ(rows[6]["measured"]["status"], "ok");
  EXPECT_EQ(rows[6]["measured"]["peak_allocated_mib"], 12.5);
  const auto again = run(args);
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_EQ(rows_of(dir / "out").size(), 7u);
  const auto judged = run(args + " --judge-only");
  EXPECT_EQ(judged.code, 0) << judged.out;
}

// Rows measured on one machine are judged on another: nothing runs, results.jsonl is untouched,
// configs without a row are left out, and a directory with no results is an error.
TEST(BenchCli, JudgeOnlyRunsNothing) {
  const fs::path dir = fresh_dir("judge");
  const std::string plan = write_plan(dir, R"(
name = "judge"
[run]
steps = 2
warmup = 1
gpu = "h200"
[matrix]
model = "qwen2.5-0.5b"
x_do = ["ok", "ok-again"]
[[criteria]]
name = "all ran"
expect = 'count(status == "ok") == 2'
)");
  const std::string out = (dir / "out").string();
  ASSERT_EQ(run("bench " + plan + " --results " + out + " --runner " + TRAINFIT_STANDIN_RUNNER).code, 0);
  // Keep the first row only, as if the second config had not run yet.
  const auto rows = rows_of(dir / "out");
  ASSERT_EQ(rows.size(), 2u);
  std::ofstream(dir / "out" / "results.jsonl", std::ios::trunc) << rows[0].dump() << "\n";
  const auto r = run("bench " + plan + " --results " + out + " --judge-only --runner /nonexistent/runner");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("judging the 1 of 2 configs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FAIL  all ran"), std::string::npos) << r.out;
  EXPECT_EQ(rows_of(dir / "out").size(), 1u);
  std::ifstream f(dir / "out" / "results.json");
  EXPECT_EQ(json::parse(f)["rows"].size(), 1u);
  const auto missing = run("bench " + plan + " --results " + (dir / "nothing").string() + " --judge-only");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.out.find("no results to judge"), std::string::npos) << missing.out;
}

// A line of results.jsonl that is not a row (a hand edit's typo in the middle, a torn last line) is
// named by its number: judging says it was not judged; a resume moves it to
// results.set-aside.jsonl, says so, and runs its config again. Before issue 39 both were dropped
// without a word (judging 3 of 4, the bad line left in the file).
TEST(BenchCli, LinesThatAreNotRowsAreNamedAndSetAside) {
  const fs::path dir = fresh_dir("badlines");
  const std::string plan = write_plan(dir, R"(
name = "badlines"
[run]
steps = 2
warmup = 1
gpu = "h200"
[matrix]
model = "qwen2.5-0.5b"
seq = [128, 256, 512, 1024]
)");
  const fs::path out = dir / "out";
  ASSERT_EQ(run("bench " + plan + " --results " + out.string() + " --runner " + TRAINFIT_STANDIN_RUNNER).code, 0);
  const auto rows = rows_of(out);
  ASSERT_EQ(rows.size(), 4u);
  // The second row with a typo (a quote lost), and a torn copy of the fourth after it.
  std::string second = rows[1].dump();
  second.erase(second.find('"'), 1);
  const std::string torn = rows[3].dump().substr(0, 40);
  {
    std::ofstream f(out / "results.jsonl", std::ios::trunc);
    f << rows[0].dump() << "\n" << second << "\n" << rows[2].dump() << "\n" << rows[3].dump() << "\n" << torn;
  }
  const auto judged = run("bench " + plan + " --results " + out.string() + " --judge-only");
  ASSERT_EQ(judged.code, 0) << judged.out;
  EXPECT_NE(judged.out.find("results.jsonl line 2: not JSON ("), std::string::npos) << judged.out;
  EXPECT_NE(judged.out.find("not judged"), std::string::npos) << judged.out;
  EXPECT_NE(judged.out.find("judging the 3 of 4 configs"), std::string::npos) << judged.out;

  const auto resumed = run("bench " + plan + " --results " + out.string() + " --runner " + TRAINFIT_STANDIN_RUNNER);
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("its last line (40 bytes) was cut short"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("results.jsonl line 2: not JSON ("), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("moved to results.set-aside.jsonl"), std::string::npos) << resumed.out;
  // results.jsonl: rows only, every config once (the second ran again, nothing else did).
  const auto after = rows_of(out);
  ASSERT_EQ(after.size(), 4u);
  EXPECT_EQ(after[0], rows[0]);
  EXPECT_EQ(after[1], rows[2]);
  EXPECT_EQ(after[2], rows[3]);
  EXPECT_EQ(after[3]["bench"]["key"], rows[1]["bench"]["key"]);
  // Nothing is lost: the bad line and the torn one, as they were, in the set-aside file.
  std::ifstream aside(out / "results.set-aside.jsonl");
  const std::string kept((std::istreambuf_iterator<char>(aside)), {});
  EXPECT_EQ(kept, torn + "\n" + second + "\n");
  // A second resume finds nothing to set aside or to run.
  const auto again = run("bench " + plan + " --results " + out.string() + " --runner " + TRAINFIT_STANDIN_RUNNER);
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_EQ(again.out.find("warning"), std::string::npos) << again.out;
  EXPECT_EQ(rows_of(out).size(), 4u);
}

// The runner's environment: the runner package first on PYTHONPATH. The built binary imports the
// source's python/trainfit_runner (through the build's share/trainfit/python link), the caller's
// PYTHONPATH stays after it, and $TRAINFIT_PYTHON_DIR replaces the package's folder. An installed
// binary does the same with the installed package (scripts/check-install.sh).
TEST(BenchCli, TheRunnerImportsThePackageBesideTheBinary) {
  const fs::path dir = fresh_dir("pythonpath");
  const std::string plan = write_plan(dir, "name = 'pythonpath'\n[matrix]\nmodel = 'qwen2.5-0.5b'\n");
  int n = 0;
  auto pythonpath_seen = [&](const std::string& env) {
    const fs::path out = dir / ("out" + std::to_string(++n));
    const auto r = trainfit::testing::run_cli(
        "bench " + plan + " --results " + out.string() + " --runner " + TRAINFIT_STANDIN_RUNNER, env);
    EXPECT_EQ(r.code, 0) << r.out;
    const auto rows = rows_of(out);
    if (rows.size() != 1 || !rows[0]["measured"]["standin"]["pythonpath"].is_string()) {
      ADD_FAILURE() << "no PYTHONPATH in the runner's row\n" << r.out;
      return std::string();
    }
    return rows[0]["measured"]["standin"]["pythonpath"].get<std::string>();
  };
  const std::string first = pythonpath_seen("env -u TRAINFIT_PYTHON_DIR PYTHONPATH=/callers/own");
  const auto colon = first.find(':');
  ASSERT_NE(colon, std::string::npos) << first;
  const fs::path package = fs::path(first.substr(0, colon)) / "trainfit_runner";
  EXPECT_TRUE(fs::is_regular_file(package / "__init__.py")) << first;
  EXPECT_TRUE(fs::is_regular_file(package / "run.py")) << first;
  EXPECT_TRUE(fs::equivalent(package, fs::path(TRAINFIT_SOURCE_DIR) / "python" / "trainfit_runner")) << first;
  EXPECT_EQ(first.substr(colon + 1), "/callers/own");
  // An empty PYTHONPATH is none: a trailing ':' would put the current folder on Python's path.
  EXPECT_EQ(pythonpath_seen("env -u TRAINFIT_PYTHON_DIR PYTHONPATH="), first.substr(0, colon));
  EXPECT_EQ(pythonpath_seen("env -u PYTHONPATH TRAINFIT_PYTHON_DIR=/my/runner"), "/my/runner");
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

TEST(BenchCli, SigkillKeepsEveryFinishedRowAndARerunFinishesTheRest) {
  const fs::path dir = fresh_dir("kill");
  const std::string plan = write_plan(dir, R"(
name = "kill"
[run]
steps = 3
timeout = 30
gpu = "h200"
[matrix]
model = "qwen2.5-0.5b"
seq = [128, 256, 512, 1024, 2048]
x_sleep_s = 0.15
)");
  const fs::path out = dir / "out";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execl(TRAINFIT_CLI, TRAINFIT_CLI, "bench", plan.c_str(), "--results", out.c_str(), "--runner",
            TRAINFIT_STANDIN_RUNNER, static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait for the second row, then for the third config's runner to be under way, and SIGKILL.
  std::size_t lines = 0;
  for (int i = 0; i < 600 && lines < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream in(out / "results.jsonl");
    lines = static_cast<std::size_t>(std::count(std::istreambuf_iterator<char>(in), {}, '\n'));
  }
  ASSERT_GE(lines, 2u);
  pid_t runner = 0;
  for (int i = 0; i < 300 && runner == 0; ++i) {
    for (const auto& e : fs::directory_iterator(out / "runs"))
      if (e.path().extension() == ".pid" && e.path().filename().string().rfind("0003-", 0) == 0) std::ifstream(e.path()) >> runner;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const auto kept = rows_of(out);  // every line is whole JSON
  EXPECT_GE(kept.size(), 2u);
  if (runner > 0) {  // the runner in flight dies with the orchestrator (PR_SET_PDEATHSIG)
    for (int i = 0; i < 200 && alive(runner); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_FALSE(alive(runner));
  }
  // A torn line, as if the kill had landed inside write(): cut off, and its config redone.
  { std::ofstream(out / "results.jsonl", std::ios::app) << R"({"config": {"model": "qwen2.5-0.5b", "seq)"; }
  const auto r = run("bench " + plan + " --results " + out.string() + " --runner " + TRAINFIT_STANDIN_RUNNER);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto rows = rows_of(out);
  ASSERT_EQ(rows.size(), 5u) << r.out;
  std::set<std::string> keys;
  for (const auto& row : rows) keys.insert(row["bench"]["key"].get<std::string>());
  EXPECT_EQ(keys.size(), 5u);  // nothing ran twice
  for (std::size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(rows[i], kept[i]);  // the finished rows are untouched
  EXPECT_NE(r.out.find("already done"), std::string::npos);
}

TEST(BenchCli, TimeoutEscalatesToSigkillOfTheWholeGroup) {
  const fs::path dir = fresh_dir("hard");
  trainfit::bench::ExperimentPlan plan = trainfit::bench::parse_experiment_plan(R"(
name = "hard"
[run]
timeout = 0.5
[matrix]
model = "qwen2.5-0.5b"
x_do = ["hang-hard", "ok"]
)", "hard.toml");
  trainfit::bench::RunOptions o;
  o.results_dir = (dir / "out").string();
  o.runner = {TRAINFIT_STANDIN_RUNNER};
  o.kill_grace_seconds = 0.3;
  std::vector<std::string> events;
  o.on_progress = [&](const trainfit::bench::Progress& p) {
    events.push_back(p.event == trainfit::bench::Progress::Event::started ? "start" : "end");
  };
  const auto t0 = std::chrono::steady_clock::now();
  const auto rows = trainfit::bench::run_configs(plan, trainfit::bench::expand_matrix(plan), o);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].measured.status, "timeout");
  EXPECT_EQ(rows[0].run.exit, "timeout");
  EXPECT_EQ(rows[1].measured.status, "ok");
  EXPECT_EQ(events, (std::vector<std::string>{"start", "end", "start", "end"}));
  // a second orchestrator on the same directory at the same time is refused
  const int fd = ::open((dir / "out" / ".lock").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_THROW(trainfit::bench::run_configs(plan, trainfit::bench::expand_matrix(plan), o), trainfit::InputError);
  ::close(fd);
}

TEST(BenchCli, BadPlansExitTwoNamingTheLine) {
  const fs::path dir = fresh_dir("bad");
  auto r = run("bench " + write_plan(dir, "name = 'x'\n[matrix]\nmodel = 'qwen2.5-0.5b'\nbatch = 'two'\n"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("plan.toml:4: matrix.batch: expected a whole number, not a string"), std::string::npos) << r.out;
  r = run("bench " + write_plan(dir, "name = 'x'\n[matrix]\nmodel = 'qwen2.5-0.5b'\n[[criteria]]\nexpect = 'status = 1'\n"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("plan.toml:5: criteria[1].expect"), std::string::npos) << r.out;
  r = run("bench " + (dir / "nope.toml").string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("cannot read experiment plan"), std::string::npos);
  r = run("bench " + std::string(TRAINFIT_SOURCE_DIR) + "/plans/seed-16gb.toml --dry-run");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("8 configs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("qwen2.5-14b qlora r16"), std::string::npos) << r.out;
  r = run("bench " + std::string(TRAINFIT_SOURCE_DIR) + "/plans/wide-h200.toml --dry-run");
  EXPECT_EQ(r.code, 0) << r.out;
}

}  // namespace
