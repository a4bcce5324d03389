// Experiment plans: the matrix, the criteria, the verdicts, and bad files with clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"

namespace trainfit::bench {
namespace {

using nlohmann::json;

const char* kPlan = R"(
name = "t"
hypotheses = ["checkpointing lowers the peak"]
exclude = ['model == "qwen2.5-3b" and grad_ckpt']

[run]
steps = 3
warmup = 1
timeout = 60
gpu = "h200"
vram = "16303MiB"
overflow = "spill"

[matrix]
model = ["qwen2.5-1.5b", "qwen2.5-3b"]
method = "qlora"
rank = 16
lora_targets = "q,v"
grad_ckpt = [false, true]
x_note = "hello"

[[criteria]]
name = "runs"
where = 'model == "qwen2.5-3b"'
expect = 'status == "ok"'

[[criteria]]
name = "ceiling"
expect = 'max(params_b, grad_ckpt and verdict == "fits") > max(params_b, not grad_ckpt and verdict == "fits")'
)";

std::string error_of(const std::string& text) {
  try {
    (void)expand_matrix(parse_experiment_plan(text, "bad.toml"));
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(BenchPlan, MatrixExpandsInDocumentedOrderWithDefaultsFilled) {
  const ExperimentPlan p = parse_experiment_plan(kPlan, "t.toml");
  EXPECT_EQ(p.steps, 3);
  EXPECT_EQ(*p.vram_bytes, 16303LL * 1024 * 1024);
  EXPECT_EQ(p.overflow, "spill");
  ASSERT_EQ(p.criteria.size(), 2u);
  const auto configs = expand_matrix(p);
  ASSERT_EQ(configs.size(), 3u);  // 2 x 2, less 3b with checkpointing
  EXPECT_EQ(configs[0].setup.model, "qwen2.5-1.5b");
  EXPECT_FALSE(configs[0].setup.grad_ckpt);
  EXPECT_TRUE(configs[1].setup.grad_ckpt);  // the last axis turns fastest
  EXPECT_EQ(configs[2].setup.model, "qwen2.5-3b");
  const json c = config_to_json(configs[0]);
  EXPECT_EQ(c["weights"], "nf4");  // qlora's default
  EXPECT_EQ(c["lora_alpha"], 32.0);
  EXPECT_EQ(c["lora_targets"], json::array({"q_proj", "v_proj"}));
  EXPECT_EQ(c["gpu"], "h200");
  EXPECT_EQ(c["x_note"], "hello");
  EXPECT_EQ(c["double_quant"], true);  // QLoRA's own settings apply; LoRA's apply; data parallelism does not
  EXPECT_FALSE(c.contains("parallel"));
  EXPECT_FALSE(c.contains("headroom"));  // the run's, not the config's
  EXPECT_EQ(configs[0].key, c.dump());
  EXPECT_EQ(configs[0].label, "qwen2.5-1.5b qlora r16 q,v s512 b1 note=hello");
  // What a row stores reads back as the same config, with the same key.
  const BenchConfig back = config_from_json(c);
  EXPECT_EQ(back.key, configs[0].key);
  EXPECT_EQ(back.label, configs[0].label);
}

TEST(BenchPlan, TheSameSetupWrittenTwoWaysHasOneKey) {
  const auto a = expand_matrix(parse_experiment_plan("name='a'\n[matrix]\nmodel='qwen2.5-0.5b'\n", "a"));
  const auto b = expand_matrix(parse_experiment_plan(
      "name='b'\n[matrix]\nmodel='qwen2.5-0.5b'\nmethod='lora'\nrank=16\nlora_alpha=32\nseq=512\nattn='sdpa'\n", "b"));
  EXPECT_EQ(a[0].key, b[0].key);
}

TEST(BenchPlan, BadFilesNameTheLineAndField) {
  EXPECT_NE(error_of("name = 'x'\n[matrix]\nmodel = 'qwen2.5-0.5b'\nsqe = 512\n").find("bad.toml:4: matrix.sqe: unknown field"),
            std::string::npos);
  EXPECT_NE(error_of("name = 'x'\n[matrix]\nmodel = 'qwen2.5-0.5b'\nseq = '512'\n").find("bad.toml:4: matrix.seq: expected a whole number"),
            std::string::npos);
  EXPECT_NE(error_of("name = 'x'\n[matrix]\nmodel = ['qwen2.5-0.5b', 'gpt-17']\n").find("bad.toml:3: matrix.model"),
            std::string::npos);
  EXPECT_NE(error_of("name = 'x'\n[matrix]\nmodel = 'qwen2.5-0.5b'\nseq = []\n").find("empty list"), std::string::npos);
  EXPECT_NE(error_of("name = 'x'\n[matrix\n").find("bad.toml:2: invalid TOML"), std::string::npos);
  EXPECT_NE(error_of("name = 'x'\n").find("matrix: missing"), std::string::npos);
  EXPECT_NE(error_of("[matrix]\nmodel='qwen2.5-0.5b'\n").find("name: missing"), std::string::npos);
  EXPECT_NE(error_of("name='x'\n[run]\nsteps=2\nwarmup=2\n[matrix]\nmodel='qwen2.5-0.5b'\n").find("run.warmup"),
            std::string::npos);
  EXPECT_NE(error_of("name='x'\n[run]\nvram='lots'\n[matrix]\nmodel='qwen2.5-0.5b'\n").find("bad.toml:3: run.vram"),
            std::string::npos);
  EXPECT_NE(error_of("name='x'\n[run]\noverflow='swap'\n[matrix]\nmodel='qwen2.5-0.5b'\n").find("run.overflow"),
            std::string::npos);
  // A value the setting does not know is caught where it is written; a config whose settings do
  // not go together, by its place in the matrix.
  EXPECT_NE(error_of("name='x'\n[matrix]\nmodel='qwen2.5-0.5b'\nmethod=['lora','fulll']\n")
                .find("bad.toml:4: matrix.method: unknown value 'fulll'; expected one of: full, lora, qlora"),
            std::string::npos);
  const std::string mixed = error_of("name='x'\n[matrix]\nmodel='qwen2.5-0.5b'\nmethod=['lora','qlora']\nweights='bf16'\n");
  EXPECT_NE(mixed.find("matrix config 2"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("`method` qlora needs `weights` nf4"), std::string::npos) << mixed;
  EXPECT_NE(error_of("name='x'\n[matrix]\nmodel='qwen2.5-0.5b'\nheadroom=0.1\n").find("matrix.headroom: is set for the whole run"),
            std::string::npos);
  const std::string crit = error_of("name='x'\n[matrix]\nmodel='qwen2.5-0.5b'\n[[criteria]]\nexpect = 'peak <= 0.8 * vram'\n");
  EXPECT_NE(crit.find("bad.toml:5: criteria[1].expect"), std::string::npos) << crit;
  EXPECT_NE(crit.find("column 1: unknown field 'peak'"), std::string::npos) << crit;
  EXPECT_NE(error_of("name='x'\n[matrix]\nmodel='qwen2.5-0.5b'\n[[criteria]]\nexpect = 'count(status == \"ok\") > seq'\n")
                .find("mixes aggregates"),
            std::string::npos);
  EXPECT_NE(error_of("name='x'\n[matrix]\nmodel='qwen2.5-0.5b'\n[[criteria]]\nwhere='seq > 1'\n").find("criteria[1].expect: missing"),
            std::string::npos);
  EXPECT_NE(error_of("name='x'\nexclude=['seq >']\n[matrix]\nmodel='qwen2.5-0.5b'\n").find("bad.toml:2: exclude"),
            std::string::npos);
  EXPECT_NE(error_of("name='x'\nexclude=['seq > 1']\n[matrix]\nmodel='qwen2.5-0.5b'\n").find("every config"), std::string::npos);
}

BenchRow row(const std::string& model, bool ckpt, const std::string& status, double peak, double seconds,
             const std::string& gpu = "rtx-5070-ti") {
  json c = {{"model", model}, {"method", "qlora"}, {"weights", "nf4"}, {"amp", nullptr}, {"rank", 16},
            {"lora_alpha", 32.0}, {"lora_dropout", 0.05}, {"lora_targets", "q,v"}, {"optimizer", "adamw"},
            {"attn", "sdpa"}, {"seq", 512}, {"batch", 1}, {"grad_accum", 1}, {"grad_ckpt", ckpt}, {"gpus", 1},
            {"device", "cuda"}, {"gpu", gpu}, {"steps", 3}, {"warmup", 1}};
  json m = {{"status", status}};
  if (status == "ok") {
    m["peak_allocated_mib"] = peak;
    m["step_seconds_median"] = seconds;
  }
  return row_from_json({{"config", c}, {"measured", m}, {"bench", {{"label", model}}}});
}

// The seed's own figures, judged as the seed should have judged them.
TEST(BenchJudge, TheSeedsFourteenBRanButSpilled) {
  ExperimentPlan p = parse_experiment_plan(R"(
name = "seed"
[matrix]
model = "qwen2.5-7b"
[[criteria]]
name = "14b-runs"
where = 'model == "qwen2.5-14b"'
expect = 'status == "ok"'
[[criteria]]
name = "ckpt-raises-ceiling"
expect = 'max(params_b, grad_ckpt and verdict == "fits") > max(params_b, not grad_ckpt and verdict == "fits")'
[[criteria]]
name = "14b-fits"
where = 'model == "qwen2.5-14b"'
expect = 'verdict == "fits"'
)", "seed.toml");
  std::vector<BenchRow> rows = {row("qwen2.5-1.5b", false, "ok", 4000.7, 0.2),  row("qwen2.5-1.5b", true, "ok", 2855.5, 0.25),
                            row("qwen2.5-3b", false, "ok", 6749.0, 0.3),    row("qwen2.5-3b", true, "ok", 4490.8, 0.375),
                            row("qwen2.5-7b", false, "ok", 11897.9, 0.425), row("qwen2.5-7b", true, "ok", 9709.9, 0.425),
                            row("qwen2.5-14b", false, "ok", 22189.8, 21.7), row("qwen2.5-14b", true, "ok", 17470.9, 34.5)};
  const BenchReport r = judge_results(p, rows);
  EXPECT_EQ(r.rows[4].verdict, "fits");  // 73% of the card
  EXPECT_EQ(r.rows[6].verdict, "spilled");
  EXPECT_EQ(r.rows[7].verdict, "spilled");
  ASSERT_EQ(r.criteria.size(), 3u);
  EXPECT_EQ(r.criteria[0].outcome, "pass");  // as written, the 14B "ran"
  EXPECT_EQ(r.criteria[0].deciding, (std::vector<std::size_t>{6, 7}));
  EXPECT_EQ(r.criteria[1].outcome, "fail");  // checkpointing did not lift the ceiling
  EXPECT_EQ(r.criteria[2].outcome, "fail");
  EXPECT_GT(r.compared, 0u);
  // A step that crawls with memory to spare is caught by its neighbours.
  std::vector<BenchRow> slow = {row("qwen2.5-7b", false, "ok", 9000, 0.4, "h200"),
                                row("qwen2.5-14b", false, "ok", 12000, 20.0, "h200")};
  const BenchReport rs = judge_results(p, slow);
  EXPECT_EQ(rs.rows[0].verdict, "fits");
  EXPECT_EQ(rs.rows[1].verdict, "spilled");
  EXPECT_TRUE(std::any_of(rs.rows[1].verdict_reasons.begin(), rs.rows[1].verdict_reasons.end(),
                          [](const std::string& why) { return why.find("slower for its work") != std::string::npos; }));
  const std::string text = render_report(p, r);
  EXPECT_NE(text.find("FAIL  ckpt-raises-ceiling"), std::string::npos) << text;
  EXPECT_NE(text.find("spilled"), std::string::npos);
  EXPECT_EQ(report_to_json(p, r)["schema"], "trainfit.bench/1");
}

TEST(BenchJudge, FailuresGetTheirOwnVerdicts) {
  const ExperimentPlan p = parse_experiment_plan("name='x'\n[matrix]\nmodel='qwen2.5-0.5b'\n", "x");
  std::vector<BenchRow> rows = {row("qwen2.5-0.5b", false, "oom", 0, 0), row("qwen2.5-0.5b", false, "timeout", 0, 0),
                            row("qwen2.5-0.5b", false, "crashed", 0, 0), row("qwen2.5-0.5b", false, "ok", 15000, 0.1)};
  const BenchReport r = judge_results(p, rows);
  EXPECT_EQ(r.rows[0].verdict, "oom");
  EXPECT_EQ(r.rows[1].verdict, "error");
  EXPECT_EQ(r.rows[2].verdict, "error");
  EXPECT_EQ(r.rows[3].verdict, "tight");  // 92% of a 16,303 MiB card
}

TEST(BenchCommand, SplitsLikeAShell) {
  EXPECT_EQ(split_command("python3 -m trainfit_runner"), (std::vector<std::string>{"python3", "-m", "trainfit_runner"}));
  EXPECT_EQ(split_command("'/a b/run' --x \"1 2\""), (std::vector<std::string>{"/a b/run", "--x", "1 2"}));
  EXPECT_THROW(split_command("'open"), InputError);
}


// The name is the results directory's: results/<name>. "." and ".." would put results.jsonl,
// runs/ and .lock in results/ itself or in the current folder; a control character makes a file
// name no terminal shows as it is.
TEST(BenchPlan, TheNameIsAFileName) {
  for (const std::string name : {"'..'", "'.'", "'a/b'", "'/'", "'a\\b'", "\"a\\nb\"", "\"a\\tb\"", "\"\\u001b[31mred\"",
                                 "\"a\\u007fb\"", "\"a\\rb\"", "''"}) {
    const std::string e = error_of("name = " + name + "\n[matrix]\nmodel = 'qwen2.5-0.5b'\n");
    EXPECT_NE(e.find("bad.toml:1: name: must be a file name"), std::string::npos) << name << ": " << e;
  }
  for (const std::string name : {"'seed-16gb'", "'a.b'", "'..a'", "'a b'", "'wide_h200 (v2)'", "'äöü'"})
    EXPECT_EQ(error_of("name = " + name + "\n[matrix]\nmodel = 'qwen2.5-0.5b'\n"), "") << name;
}

// TOML has nan and inf; a setup has no use for them, and JSON (the config the runner gets, the
// row's key) cannot carry them: refused where they are written, with the line and the field.
TEST(BenchPlan, NanAndInfinityAreRefusedWithTheLineAndField) {
  const std::string head = "name = 'x'\n[matrix]\nmodel = 'qwen2.5-0.5b'\nmethod = 'lora'\n";
  const std::pair<std::string, std::string> cases[] = {
      {"lora_alpha = nan\n", "bad.toml:5: matrix.lora_alpha: must be"},
      {"lora_alpha = [16.0, nan]\n", "bad.toml:5: matrix.lora_alpha: must be"},
      {"lora_dropout = inf\n", "bad.toml:5: matrix.lora_dropout: must be"},
      {"lora_dropout = -inf\n", "bad.toml:5: matrix.lora_dropout: must be"},
      {"x_scale = nan\n", "bad.toml:5: matrix.x_scale: must be a finite number"},
      {"x_scale = [1.0, inf]\n", "bad.toml:5: matrix.x_scale: must be a finite number"},
  };
  for (const auto& [line, want] : cases) {
    const std::string e = error_of(head + line);
    EXPECT_NE(e.find(want), std::string::npos) << line << e;
  }
  const std::string matrix = "[matrix]\nmodel = 'qwen2.5-0.5b'\n";
  const std::pair<std::string, std::string> run_cases[] = {
      {"timeout = nan\n", "bad.toml:3: run.timeout: must be a finite number"},
      {"timeout = inf\n", "bad.toml:3: run.timeout: must be a finite number"},
      {"headroom = inf\n", "bad.toml:3: run.headroom: must be a finite number"},
      {"headroom = nan\n", "bad.toml:3: run.headroom: must be a finite number"},
      {"slowdown = nan\n", "bad.toml:3: run.slowdown: must be a finite number"},
      {"slowdown = -inf\n", "bad.toml:3: run.slowdown: must be a finite number"},
  };
  for (const auto& [line, want] : run_cases) {
    const std::string e = error_of("name = 'x'\n[run]\n" + line + matrix);
    EXPECT_NE(e.find(want), std::string::npos) << line << e;
  }
}

}  // namespace
}  // namespace trainfit::bench
