// `trainfit bench` against hostile or broken input, for real (the stand-in runner,
// tests/bench_standin_runner.cpp): long criteria, plan names that are not file names, nan in a
// plan, judging a run in progress, rows edited by hand, configs past the argument limit, runners
// that print escape sequences or write huge rows. Each must end in a clear error or a finished run:
// no crash, no hang, no file outside the results directory, no unbounded memory.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_test_files.hpp"
#include "run_cli.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using trainfit::testing::run_cli;

fs::path fresh_dir(const std::string& name) { return trainfit::testing::fresh_bench_dir(name); }
std::vector<json> rows_of(const fs::path& results) { return trainfit::testing::results_rows(results); }
std::string write_plan(const fs::path& dir, const std::string& body) { return trainfit::testing::write_bench_plan(dir, body); }
std::string bench_args(const std::string& plan, const fs::path& out) {
  return "bench " + plan + " --results " + out.string() + " --runner " + TRAINFIT_STANDIN_RUNNER;
}

// "first op first op ...": `terms` operands.
std::string chain_of(const std::string& first, const std::string& op, std::size_t terms) {
  std::string s = first;
  for (std::size_t i = 1; i < terms; ++i) s += op + first;
  return s;
}

// A criterion of 2041 terms (4 KB, inside the length limit) used to overflow the stack when it was
// judged: one level of recursion per operator, about 250 bytes each (1 KiB under AddressSanitizer),
// past a stack of 512 KiB. Judged now, as any other, on that stack.
TEST(BenchHardening, ALongCriterionIsJudgedNotACrash) {
  const fs::path dir = fresh_dir("long-criterion");
  const std::string sum = chain_of("1", "+", 2041) + " > 0";
  const std::string any = chain_of("status == 'ok'", " or ", 220);
  const std::string count = "count(" + chain_of("seq > 1", " and ", 330) + ") == 1";
  ASSERT_LE(any.size(), 4096u);
  ASSERT_LE(count.size(), 4096u);
  const std::string plan = write_plan(dir, "name = 'long'\n[matrix]\nmodel = 'qwen2.5-0.5b'\n"
                                           "[[criteria]]\nname = 'sum'\nexpect = '" + sum + "'\n"
                                           "[[criteria]]\nname = 'any'\nwhere = \"" + any + "\"\nexpect = \"" + any + "\"\n"
                                           "[[criteria]]\nname = 'count'\nexpect = '" + count + "'\n");
  const auto r = run_cli(bench_args(plan, dir / "out"), "ulimit -s 512 &&");
  ASSERT_EQ(r.code, 0) << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find("PASS  sum"), std::string::npos) << r.out.substr(0, 2000);
  EXPECT_NE(r.out.find("PASS  any"), std::string::npos);
  EXPECT_NE(r.out.find("PASS  count"), std::string::npos);
  // One term past the length limit is a plan error naming the line and field.
  const std::string too_long = write_plan(dir, "name = 'long'\n[matrix]\nmodel = 'qwen2.5-0.5b'\n[[criteria]]\nexpect = '" +
                                                   chain_of("1", "+", 2049) + " > 0'\n");
  const auto e = run_cli("bench " + too_long + " --dry-run");
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.out.find("plan.toml:5: criteria[1].expect"), std::string::npos) << e.out.substr(0, 300);
  EXPECT_NE(e.out.find("longer than 4096 characters"), std::string::npos) << e.out.substr(0, 300);
}

// The default results directory is results/<name>: a plan named ".." used to write results.jsonl,
// runs/ and .lock into the current folder (results/..), one named "." into results/ itself.
TEST(BenchHardening, APlanNameThatIsNoFileNameIsRefused) {
  const fs::path dir = fresh_dir("dotdot");
  fs::create_directories(dir / "cwd" / "results");
  for (const std::string name : {"..", "."}) {
    const std::string plan = write_plan(dir, "name = '" + name + "'\n[matrix]\nmodel = 'qwen2.5-0.5b'\n");
    const auto r = run_cli("bench " + plan + " --runner " + TRAINFIT_STANDIN_RUNNER, "cd " + (dir / "cwd").string() + " &&");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("plan.toml:1: name: must be a file name"), std::string::npos) << r.out;
    for (const fs::path& d : {dir / "cwd", dir / "cwd" / "results"}) {
      EXPECT_FALSE(fs::exists(d / "results.jsonl")) << d;
      EXPECT_FALSE(fs::exists(d / "runs")) << d;
      EXPECT_FALSE(fs::exists(d / ".lock")) << d;
    }
  }
}

// nan and inf in a plan used to pass --dry-run (and run with a null in the key): refused with the
// line and the field.
TEST(BenchHardening, NanInAPlanIsRefusedBeforeAnythingRuns) {
  const fs::path dir = fresh_dir("nan");
  const std::pair<std::string, std::string> cases[] = {
      {"[matrix]\nmodel = 'qwen2.5-0.5b'\nmethod = 'lora'\nlora_alpha = nan\n", "plan.toml:5: matrix.lora_alpha"},
      {"[matrix]\nmodel = 'qwen2.5-0.5b'\nmethod = 'lora'\nlora_dropout = inf\n", "plan.toml:5: matrix.lora_dropout"},
      {"[run]\ntimeout = nan\n[matrix]\nmodel = 'qwen2.5-0.5b'\n", "plan.toml:3: run.timeout"},
      {"[run]\nheadroom = inf\n[matrix]\nmodel = 'qwen2.5-0.5b'\n", "plan.toml:3: run.headroom"},
      {"[run]\nslowdown = nan\n[matrix]\nmodel = 'qwen2.5-0.5b'\n", "plan.toml:3: run.slowdown"},
  };
  for (const auto& [body, want] : cases) {
    const auto r = run_cli("bench " + write_plan(dir, "name = 'nan'\n" + body) + " --dry-run");
    EXPECT_EQ(r.code, 2) << body << r.out;
    EXPECT_NE(r.out.find(want), std::string::npos) << body << r.out;
  }
}

// --judge-only while another bench runs on the directory: it judges the rows finished so far, read
// as whole lines (the one being appended is no row yet), says so, and leaves results.json to the
// run. Once the run is over, the same file is judged whole.
TEST(BenchHardening, JudgeOnlyDuringARunJudgesItsWholeRows) {
  const fs::path dir = fresh_dir("judge-running");
  const std::string plan = write_plan(dir, "name = 'running'\n[run]\nsteps = 2\n[matrix]\nmodel = 'qwen2.5-0.5b'\n"
                                           "x_do = ['ok', 'ok-again']\n");
  const fs::path out = dir / "out";
  ASSERT_EQ(run_cli(bench_args(plan, out)).code, 0);
  const auto rows = rows_of(out);
  ASSERT_EQ(rows.size(), 2u);
  // The second row as a reader can catch it while the orchestrator appends it: no newline yet.
  std::ofstream(out / "results.jsonl", std::ios::trunc) << rows[0].dump() << "\n" << rows[1].dump();
  fs::remove(out / "results.json");
  const int fd = ::open((out / ".lock").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);  // as a running `trainfit bench` holds it
  const auto during = run_cli(bench_args(plan, out) + " --judge-only");
  EXPECT_EQ(during.code, 0) << during.out;
  EXPECT_NE(during.out.find("a `trainfit bench` is running in " + out.string() +
                            ": judging the 1 of 2 configs it has finished so far"),
            std::string::npos)
      << during.out;
  EXPECT_FALSE(fs::exists(out / "results.json"));
  // A second bench is still refused while it runs.
  const auto second = run_cli(bench_args(plan, out));
  EXPECT_EQ(second.code, 2) << second.out;
  EXPECT_NE(second.out.find("another `trainfit bench` is using"), std::string::npos) << second.out;
  ::close(fd);
  const auto after = run_cli(bench_args(plan, out) + " --judge-only");
  EXPECT_EQ(after.code, 0) << after.out;
  EXPECT_NE(after.out.find("judging the 2 of 2 configs"), std::string::npos) << after.out;
  EXPECT_TRUE(fs::exists(out / "results.json"));
}

// Rows edited by hand: a status that is no string, a config field of the wrong type, a config that
// names an unknown model under the key of a real config. None stops a resume (or a judgement): the
// first is an error row, the others are no rows of any config, whose configs run again.
TEST(BenchHardening, HandEditedRowsDoNotStopAResume) {
  const fs::path dir = fresh_dir("hand-edited");
  const std::string plan = write_plan(dir, "name = 'edited'\n[run]\nsteps = 2\ngpu = 'h200'\n[matrix]\n"
                                           "model = 'qwen2.5-0.5b'\nx_do = ['a', 'b', 'c', 'd']\n");
  const fs::path out = dir / "out";
  const std::string args = bench_args(plan, out);
  ASSERT_EQ(run_cli(args).code, 0);
  auto rows = rows_of(out);
  ASSERT_EQ(rows.size(), 4u);
  rows[0]["measured"]["status"] = 7;
  rows[1]["config"]["seq"] = "long";
  rows[2]["config"]["model"] = "no-such-model";
  rows[3]["config"]["rank"] = -3;
  {
    std::ofstream f(out / "results.jsonl", std::ios::trunc);
    for (const auto& row : rows) f << row.dump() << "\n";
  }
  const auto resumed = run_cli(args);
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  auto now = rows_of(out);
  ASSERT_EQ(now.size(), 7u) << resumed.out;  // b, c and d ran again
  for (std::size_t i = 4; i < 7; ++i) EXPECT_EQ(now[i]["measured"]["status"], "ok") << now[i].dump();
  EXPECT_NE(resumed.out.find("already done: error"), std::string::npos) << resumed.out;  // a's row: status 7
  const auto judged = run_cli(args + " --judge-only");
  EXPECT_EQ(judged.code, 0) << judged.out;
  EXPECT_NE(judged.out.find("judging the 4 of 4 configs"), std::string::npos) << judged.out;
  const auto retried = run_cli(args + " --retry-failed");
  ASSERT_EQ(retried.code, 0) << retried.out;
  now = rows_of(out);
  ASSERT_EQ(now.size(), 8u);
  EXPECT_EQ(now[7]["measured"]["status"], "ok");
  EXPECT_EQ(now[7]["config"]["x_do"], "a");
}

// A config longer than one argument may be (128 KiB: a long x_ field) used to fail as "cannot
// execute the runner command" (E2BIG): the config goes in a file beside the row instead.
TEST(BenchHardening, AConfigPastTheArgumentLimitRuns) {
  const fs::path dir = fresh_dir("big-config");
  const std::string big(200 * 1024, 'a');
  const std::string plan = write_plan(dir, "name = 'big'\n[run]\nsteps = 2\n[matrix]\nmodel = 'qwen2.5-0.5b'\nx_big = '" +
                                               big + "'\n");
  const fs::path out = dir / "out";
  const auto r = run_cli(bench_args(plan, out));
  ASSERT_EQ(r.code, 0) << r.out.substr(0, 1000);
  const auto rows = rows_of(out);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["measured"]["status"], "ok") << rows[0]["measured"].dump().substr(0, 1000);
  EXPECT_EQ(rows[0]["measured"]["standin"]["flags"], json::array({"--config-file", "--out"}));
  EXPECT_EQ(rows[0]["config"]["x_big"], big);
  // The file the runner read: the config, beside the row.
  std::vector<fs::path> configs;
  for (const auto& e : fs::directory_iterator(out / "runs"))
    if (e.path().filename().string().find(".config.json") != std::string::npos) configs.push_back(e.path());
  ASSERT_EQ(configs.size(), 1u);
  std::ifstream f(configs[0]);
  EXPECT_EQ(json::parse(f).dump(), rows[0]["bench"]["key"].get<std::string>());
}

// What a runner wrote reaches the terminal with its control characters escaped: an error message
// or a stack string with escape sequences (clear the screen, retitle the window, recolour) in the
// progress lines and in the report.
TEST(BenchHardening, RunnerTextIsEscapedOnTheTerminal) {
  const fs::path dir = fresh_dir("escapes");
  const std::string plan = write_plan(dir, R"(
name = "escapes"
[run]
gpu = "h200"
[matrix]
model = "qwen2.5-0.5b"
x_do = "row"
x_row = ['{"measured": {"status": "error", "error": "\u001b[2J\u001b]0;owned\u0007boom\r\nline two"}, "stack": {"gpu": "\u001b[31mred", "torch": "\u009b31m"}}',
         '{"measured": {"status": "\u001b[5mok"}}']
[[criteria]]
name = "statuses"
where = 'status != "error"'
expect = 'status'
)");
  const auto r = run_cli(bench_args(plan, dir / "out"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\x07'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\xc2\x9b"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\\x1b[2J\\x1b]0;owned\\x07boom\\r\\nline two"), std::string::npos) << r.out;  // progress, report
  EXPECT_NE(r.out.find("stack: \\x1b[31mred"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("torch \\u009b31m"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\\x1b[5mok"), std::string::npos) << r.out;  // a status, in the table and a criterion's detail
  // results.jsonl keeps what the runner wrote, as JSON escapes it.
  const auto rows = rows_of(dir / "out");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1]["measured"]["status"], "\x1b[5mok");
}

// Runs the CLI in a child of its own and returns its peak resident memory (KiB), with the exit
// code: wait4 reports the child's, its own runners' included.
long run_measuring_rss(const std::vector<std::string>& args, int& code) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    std::vector<char*> argv{const_cast<char*>(TRAINFIT_CLI)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(TRAINFIT_CLI, argv.data());
    ::_exit(127);
  }
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return usage.ru_maxrss;
}

// A runner's row is read up to 4 MiB: a bigger one is an error row saying its size and the limit,
// and is not read (it used to be read, up to 64 MiB, and copied into results.jsonl).
TEST(BenchHardening, ARunnersHugeRowIsAnErrorRowSayingItsSize) {
  const fs::path dir = fresh_dir("huge-row");
  auto plan_for = [&](const std::string& name, const std::string& mib) {
    return write_plan(dir, "name = '" + name + "'\n[run]\ngpu = 'h200'\n[matrix]\nmodel = 'qwen2.5-0.5b'\nx_do = 'big-row'\n"
                           "x_row_mib = " + mib + "\n");
  };
  auto run_plan = [&](const std::string& plan, const fs::path& out, int& code) {
    return run_measuring_rss({"bench", plan, "--results", out.string(), "--runner", TRAINFIT_STANDIN_RUNNER}, code);
  };
  int code = -1;
  const long small_rss = run_plan(plan_for("small", "0.01"), dir / "small", code);
  ASSERT_EQ(code, 0);
  const long huge_rss = run_plan(plan_for("huge", "48"), dir / "huge", code);
  ASSERT_EQ(code, 0);
  auto rows = rows_of(dir / "huge");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["measured"]["status"], "error");
  EXPECT_EQ(rows[0]["verdict"], "error");
  EXPECT_EQ(rows[0]["measured"]["error"], "the runner's row is 48.0 MiB, over the limit of 4.0 MiB for a row; not read");
  EXPECT_FALSE(rows[0]["measured"].contains("padding"));
  EXPECT_LT(fs::file_size(dir / "huge" / "results.jsonl"), 64u * 1024);
  // Not read: the orchestrator's memory is that of a small row's run, give or take.
  EXPECT_LT(huge_rss, small_rss + 16 * 1024) << "KiB: " << huge_rss << " against " << small_rss;
  // Under the limit, a big row is a row.
  ASSERT_EQ(run_cli(bench_args(plan_for("big", "3"), dir / "big")).code, 0);
  rows = rows_of(dir / "big");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["measured"]["status"], "ok");
  EXPECT_GT(rows[0]["measured"]["padding"].get<std::string>().size(), 3u * 1024 * 1024 - 100);
}

}  // namespace
