// The command line as a user runs it: real process, real exit codes, real output.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_cli.hpp"

namespace {

using Result = trainfit::testing::CliResult;
Result run(const std::string& args) { return trainfit::testing::run_cli(args); }

std::size_t lines(const std::string& s) {
  std::size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(Cli, DefaultPlanAnswersTheSeedQuestion) {
  const auto r = run("plan");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* model : {"qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b"})
    EXPECT_NE(r.out.find(model), std::string::npos) << model;
  EXPECT_NE(r.out.find("spills"), std::string::npos);
  EXPECT_NE(r.out.find("RTX 5070 Ti"), std::string::npos);
}

// The argument parser's refusals in trainfit's words, each one line with exit code 2.
TEST(Cli, ParseErrorsSayWhatToDo) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"plan --model qwen2.5-7b --seq 1 --seq 2", "trainfit: --seq was given 2 times: give it once\n"},
      {"plan --model", "trainfit: --model needs a value (NAME|PATH)\n"},
      {"plan --model qwen2.5-7b extra", "trainfit: not an option of `trainfit plan`: extra (its options: `trainfit plan --help`)\n"},
      {"frob", "trainfit: unknown command 'frob'; the commands: plan, advise, gpus, models, schema, validate, watch, "
               "calibrate, bench, serve, trace\n"},
  };
  for (const auto& [args, says] : cases) {
    const auto r = run(args);
    EXPECT_EQ(r.code, 2) << args;
    EXPECT_EQ(r.out, says) << args;
  }
}

TEST(Cli, PlanJsonFollowsTheContract) {
  const auto r = run("plan --model qwen2.5-7b --gpu rtx-5070-ti --method qlora --rank 16 --seq 512 --batch 1 "
                     "--grad-ckpt --format json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "trainfit.plan/1");
  EXPECT_TRUE(j["memory"]["peak_allocated_bytes"].is_number_integer());
  EXPECT_TRUE(j["memory"]["peak_phase"] == "forward" || j["memory"]["peak_phase"] == "backward" ||
              j["memory"]["peak_phase"] == "optimizer");
  EXPECT_EQ(j["device"]["capacity_bytes"], 16303LL * 1024 * 1024);
  EXPECT_EQ(j["verdict"], "fits");
  EXPECT_EQ(j["setup"]["weights"], "nf4");  // qlora defaults to nf4
  EXPECT_GT(j["time"]["step_seconds"].get<double>(), 0.0);
  EXPECT_GT(j["time"]["tokens_per_second"].get<double>(), 0.0);
  EXPECT_TRUE(j["time"]["bottleneck"].is_string());
  EXPECT_TRUE(j["time"]["breakdown"].contains("matmul"));
}

TEST(Cli, PlanForSeveralGpusIsPerGpu) {
  const auto one = run("plan --model qwen2.5-7b --gpu h200 --method full --seq 2048 --no-suggest --format json");
  const auto fsdp =
      run("plan --model qwen2.5-7b --gpu h200 --method full --seq 2048 --gpus 2 --parallel fsdp --no-suggest --format json");
  ASSERT_EQ(one.code, 0) << one.out;
  ASSERT_EQ(fsdp.code, 0) << fsdp.out;
  const auto a = nlohmann::json::parse(one.out);
  const auto b = nlohmann::json::parse(fsdp.out);
  EXPECT_EQ(b["setup"]["gpus"], 2);
  EXPECT_EQ(b["setup"]["parallel"], "fsdp");
  EXPECT_TRUE(b["memory"]["breakdown"].contains("gathered_weights"));
  EXPECT_TRUE(b["time"]["breakdown"].contains("communication"));
  EXPECT_LT(b["memory"]["peak_allocated_bytes"].get<double>(), 0.75 * a["memory"]["peak_allocated_bytes"].get<double>());
  const auto text = run("plan --model qwen2.5-7b --gpu h200 --gpus 2 --no-suggest");
  EXPECT_NE(text.out.find("2 GPUs with DDP"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("gradient buckets"), std::string::npos) << text.out;
  const auto bad = run("plan --model qwen2.5-7b --gpu h200 --gpus 2 --parallel zero4");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find("ddp, fsdp"), std::string::npos) << bad.out;
  EXPECT_EQ(run("plan --model qwen2.5-7b --gpu h200 --gpus 0").code, 2);
}

// The setup trainfit writes goes back in: `plan --setup FILE` with the plan's JSON plans the same
// setup, flags beside it override it, and a file's bad key is named.
TEST(Cli, ASetupFileGoesBackIn) {
  const auto first = run("plan --model llama3.1-8b --gpu a100-40gb --method lora --seq 2048 --grad-ckpt --batch 4 "
                         "--lora-targets q,v --format json");
  ASSERT_EQ(first.code, 0) << first.out;
  const std::string plan_file = testing::TempDir() + "/plan.json";
  std::ofstream(plan_file) << first.out;
  const auto again = run("plan --setup " + plan_file + " --format json");
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_EQ(again.out, first.out);
  // Only its setup object, and a flag beside it.
  const std::string setup_file = testing::TempDir() + "/setup.json";
  std::ofstream(setup_file) << nlohmann::json::parse(first.out)["setup"].dump();
  const auto bigger = run("plan --setup " + setup_file + " --batch 8 --format json");
  ASSERT_EQ(bigger.code, 0) << bigger.out;
  const auto bigger_setup = nlohmann::json::parse(bigger.out)["setup"];
  EXPECT_EQ(bigger_setup["batch"], 8);
  EXPECT_EQ(bigger_setup["lora_targets"], nlohmann::json::parse(first.out)["setup"]["lora_targets"]);
  EXPECT_TRUE(bigger_setup["grad_ckpt"].get<bool>());
  // A model named only in the file is no seed scenario; advise reads the file's card text too.
  const std::string partial = testing::TempDir() + "/partial.json";
  std::ofstream(partial) << R"({"model": "qwen2.5-7b", "gpu": "rtx-4090", "method": "qlora"})";
  const auto one = run("plan --setup " + partial + " --format json");
  ASSERT_EQ(one.code, 0) << one.out;
  EXPECT_EQ(nlohmann::json::parse(one.out)["setup"]["method"], "qlora");
  const auto advised = run("advise --setup " + partial + " --top 1 --format json");
  ASSERT_EQ(advised.code, 0) << advised.out;
  EXPECT_EQ(nlohmann::json::parse(advised.out)["results"][0]["setup"]["gpu"], "rtx-4090");
  const std::string bad = testing::TempDir() + "/bad-setup.json";
  std::ofstream(bad) << R"({"model": "qwen2.5-7b", "colour": "red"})";
  const auto refused = run("plan --setup " + bad);
  EXPECT_EQ(refused.code, 2);
  EXPECT_NE(refused.out.find("colour: unknown setting"), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find(bad), std::string::npos) << refused.out;
  const auto missing = run("plan --setup " + testing::TempDir() + "/no-such.json");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.out.find("cannot read setup file"), std::string::npos) << missing.out;
}

TEST(Cli, CalibrateWritesAProfileThatPlanUses) {
  const std::string profile = testing::TempDir() + "/profile.toml";
  const auto r = run(std::string("calibrate ") + TRAINFIT_SOURCE_DIR +
                     "/data/reference/h200-hf-peft-calibration.jsonl --fit host_seconds_per_op -o " + profile);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("host_seconds_per_op"), std::string::npos);
  std::ofstream(profile, std::ios::app) << "";  // exists
  const auto plan = run("plan --model qwen2.5-0.5b --gpu h200 --format json --profile " + profile);
  ASSERT_EQ(plan.code, 0) << plan.out;
  EXPECT_EQ(nlohmann::json::parse(plan.out)["time"]["profile"], "calibrated");
  const std::string bad = testing::TempDir() + "/bad-profile.toml";
  std::ofstream(bad) << "matmul_efficiency = 7\n";
  EXPECT_EQ(run("plan --model qwen2.5-0.5b --gpu h200 --profile " + bad).code, 2);
  // A card known only by its memory has no rates: the time is unknown, not invented.
  const auto vram = run("plan --model qwen2.5-0.5b --vram 24GiB --format json");
  ASSERT_EQ(vram.code, 0);
  EXPECT_TRUE(nlohmann::json::parse(vram.out)["time"].is_null());
}

// A profile file that names itself and nothing else plans exactly as no profile: the rates it
// leaves out are the shipped ones (Qwen2.5-7B LoRA on an H200: 0.186 s a step).
TEST(Cli, ProfileWithOnlyANamePlansAsNoProfile) {
  const std::string profile = testing::TempDir() + "/name-only.toml";
  std::ofstream(profile) << "name = \"x\"\n";
  const auto plain = run("plan --model qwen2.5-7b --gpu h200 --format json");
  const auto named = run("plan --model qwen2.5-7b --gpu h200 --format json --profile " + profile);
  ASSERT_EQ(plain.code, 0) << plain.out;
  ASSERT_EQ(named.code, 0) << named.out;
  const auto a = nlohmann::json::parse(plain.out)["time"];
  const auto b = nlohmann::json::parse(named.out)["time"];
  EXPECT_NEAR(a["step_seconds"].get<double>(), 0.186, 0.0005);
  EXPECT_EQ(b["step_seconds"].get<double>(), a["step_seconds"].get<double>());
  EXPECT_EQ(b["profile"], "x");
}

TEST(Cli, MarkdownAndVramAndGpuSpec) {
  auto r = run("plan --model qwen2.5-0.5b --vram 8GiB --format markdown");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| memory | bytes | MiB |"), std::string::npos);
  const std::string spec = testing::TempDir() + "/card.toml";
  std::ofstream(spec) << "name = \"my card\"\nmemory = \"12GiB\"\n";
  r = run("plan --model qwen2.5-1.5b --gpu-spec " + spec);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("my card"), std::string::npos);
}

TEST(Cli, ModelFromAConfigFolder) {
  const std::string dir = testing::TempDir() + "/tiny-model";
  std::system(("mkdir -p " + dir).c_str());
  std::ofstream(dir + "/config.json") << R"({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512, "vocab_size": 1000})";
  const auto r = run("plan --model " + dir + " --gpu t4 --format json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["verdict"], "fits");
}

// A setting that does not apply is not dropped without a word (issue 39: `--gpus 1 --nodes 4096`).
TEST(Cli, ASettingThatDoesNotApplyIsAWarning) {
  const Result r = run("plan --model qwen2.5-0.5b --gpu h200 --gpus 1 --nodes 4096");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("--nodes is ignored: it applies only when --gpus is at least 2"), std::string::npos) << r.out;
  const Result lora = run("plan --model qwen2.5-0.5b --gpu h200 --method full --rank 64");
  EXPECT_NE(lora.out.find("--rank is ignored: it applies only when --method is not full"), std::string::npos)
      << lora.out;
  EXPECT_EQ(run("plan --model qwen2.5-0.5b --gpu h200 --gpus 2 --nodes 2").out.find("is ignored"), std::string::npos);
}

TEST(Cli, BadInputGetsOneLineAndExitCodeTwo) {
  for (const std::string args : {
           "plan --model qwen2.5-7b --gpu rtx-9999",
           "plan --model no-such-model --gpu h200",
           "plan --model qwen2.5-7b --gpu h200 --seq -5",
           "plan --model qwen2.5-7b --gpu h200 --seq 0",
           "plan --model qwen2.5-7b --gpu h200 --seq 99999999999999999999999",
           "plan --model qwen2.5-7b --gpu h200 --batch abc",
           "plan --model qwen2.5-7b --gpu h200 --method dora",
           "plan --model qwen2.5-7b --gpu h200 --headroom 1.5",
           "plan --model qwen2.5-7b --vram -16GiB",
           "plan --model qwen2.5-7b --vram 99999PiB",
           "plan --model qwen2.5-7b --gpu h200 --vram 16GiB",
           "plan --model qwen2.5-7b",
           "plan --model qwen2.5-7b --gpu h200 --format yaml",
           "plan --model /nonexistent/config.json --gpu h200",
           "plan --no-such-flag",
           "validate /nonexistent.jsonl",
       }) {
    const auto r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(lines(r.out), 1u) << args << "\n" << r.out;
    EXPECT_EQ(r.out.rfind("trainfit: ", 0), 0u) << args << "\n" << r.out;
  }
}

TEST(Cli, MalformedConfigNamesTheField) {
  const std::string path = testing::TempDir() + "/bad-config.json";
  std::ofstream(path) << R"({"model_type": "qwen2", "hidden_size": -3})";
  const auto r = run("plan --model " + path + " --gpu h200");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("hidden_size"), std::string::npos) << r.out;
}

TEST(Cli, ListsAndHelp) {
  auto r = run("gpus");
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("h200"), std::string::npos);
  EXPECT_NE(r.out.find("rtx-5070-ti"), std::string::npos);
  r = run("models --format json");
  ASSERT_EQ(r.code, 0);
  EXPECT_GE(nlohmann::json::parse(r.out).size(), 15u);
  r = run("plan --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--grad-ckpt"), std::string::npos);
  r = run("");
  EXPECT_NE(r.code, 0);
}

TEST(Cli, ValidateReportsErrorsAgainstMeasurements) {
  const auto r = run(std::string("validate ") + TRAINFIT_SOURCE_DIR + "/data/reference/h200-hf-peft-calibration.jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("28 rows: median |error|"), std::string::npos) << r.out;
  const std::string bad = testing::TempDir() + "/bad.jsonl";
  std::ofstream(bad) << "{\"config\": {\"model\": \"qwen2.5-0.5b\", \"seq\": \"long\"}}\n";
  const auto e = run("validate " + bad);
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.out.find(":1:"), std::string::npos) << e.out;
}

// validate --published: the runs frameworks published, from any directory (the card files the
// rows name by relative paths are found beside the data file), in text and JSON.
TEST(Cli, ValidatePublishedPutsThePlanBesideThePublishedRuns) {
  const std::string runs = std::string(TRAINFIT_SOURCE_DIR) + "/data/published/runs.jsonl";
  const auto r = run("validate --published " + runs);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("452 published runs in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Not expressed, by what no setting describes (runs): Megatron Core"), std::string::npos)
      << r.out;
  const auto j = run("validate --published " + runs + " --format json");
  ASSERT_EQ(j.code, 0) << j.out;
  const nlohmann::json summary = nlohmann::json::parse(j.out);
  EXPECT_EQ(summary.at("runs"), 452);
  EXPECT_EQ(summary.at("rows").size(), summary.at("expressed").get<std::size_t>());
  EXPECT_EQ(run("validate --published " + runs + " --format html").code, 2);
  // A measurements file is not a file of published runs: the first line says what it lacks.
  const auto e = run(std::string("validate --published ") + TRAINFIT_SOURCE_DIR +
                     "/data/reference/h200-hf-peft-calibration.jsonl");
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.out.find(":1: field \"id\" is missing"), std::string::npos) << e.out;
}

}  // namespace
