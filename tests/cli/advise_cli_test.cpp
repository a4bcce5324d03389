// `trainfit advise` as a user runs it: the answer, its JSON contract, and one-line errors.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "run_cli.hpp"

namespace {

using Result = trainfit::testing::CliResult;
Result run(const std::string& args) {
  return trainfit::testing::run_cli(args);
}

TEST(AdviseCli, JsonCarriesEachResultAsACommandWithItsFigures) {
  const auto r =
      run("advise --model mistral-7b --gpu a100-40gb --seq 2048 --tokens-per-step 16384 --gpus-max 2 "
          "--tokens 1e8 --format json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "trainfit.advise/1");
  EXPECT_EQ(j["goal"], "fastest");
  ASSERT_EQ(j["results"].size(), 5u);
  for (const auto& x : j["results"]) {
    for (const char* key : {"args", "setup", "verdict", "peak_allocated_bytes", "step_seconds", "tokens_per_second",
                            "hours", "cost", "command", "why"})
      EXPECT_TRUE(x.contains(key)) << key;
    EXPECT_EQ(x["verdict"], "fits");
    EXPECT_NEAR(x["hours"].get<double>(), 1e8 / x["tokens_per_second"].get<double>() / 3600, 1e-9);
    // The command plans to the same bytes.
    std::string args;
    for (const auto& a : x["args"]) args += " '" + a.get<std::string>() + "'";
    const auto p = run("plan" + args + " --no-suggest --format json");
    ASSERT_EQ(p.code, 0) << p.out;
    EXPECT_EQ(nlohmann::json::parse(p.out)["memory"]["peak_allocated_bytes"], x["peak_allocated_bytes"]);
  }
  EXPECT_FALSE(j["pareto"].empty());
  EXPECT_GT(j["judged"].get<int>(), 0);
}

TEST(AdviseCli, VerboseSaysHowManySetupsWereJudgedAndHowLong) {
  const auto r = run("advise --model qwen2.5-7b --gpu any --seq 1024 --free rank --verbose --top 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("1. trainfit plan --model qwen2.5-7b --gpu "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("judged "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" ms\n"), std::string::npos) << r.out;
}

TEST(AdviseCli, NothingFitsIsOneLineNamingTheNearest) {
  const auto r = run("advise --model llama3.1-70b --gpu rtx-4090 --method full --seq 4096");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out.rfind("trainfit: nothing fits: the nearest, `trainfit plan --model llama3.1-70b", 0), 0u) << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << r.out;
}

TEST(AdviseCli, BadFlagsAreOneLineErrors) {
  for (const char* args :
       {"advise --model qwen2.5-7b --gpu h100-sxm --goal quickest",
        "advise --model qwen2.5-7b --gpu h100-sxm --free dropout",
        "advise --model qwen2.5-7b --gpu h100-sxm --goal cheapest",
        "advise --model qwen2.5-7b --gpu h100-sxm --tokens -5", "advise --model qwen2.5-7b --gpu h100-sxm --tokens nan",
        "advise --model qwen2.5-7b --gpu h100-sxm --gpus-max 0", "advise --model qwen2.5-7b --gpu h100-sxm --top 0",
        "advise --model qwen2.5-7b --gpu nosuchcard,h100-sxm", "advise --gpu h100-sxm"}) {
    const auto r = run(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << args << "\n" << r.out;
  }
}

}  // namespace

namespace {

// docs/advise.md answers five questions with commands and their output: each command still runs,
// and every result line the page shows ("1. trainfit plan ...") is still what it prints.
TEST(AdviseCli, TheDocsPageShowsWhatTheCommandsPrint) {
  std::ifstream in(std::string(TRAINFIT_SOURCE_DIR) + "/docs/advise.md");
  std::string line, command;
  std::vector<std::string> shown;
  int checked = 0;
  const auto check = [&] {
    if (command.empty()) return;
    const auto r = run(command.substr(std::string("trainfit ").size()));
    EXPECT_EQ(r.code, 0) << command << "\n" << r.out;
    // A command broken with the shell's continuation (" \\" and an indented next line) is one line.
    const std::string out = std::regex_replace(r.out, std::regex(" \\\\\n +"), " ");
    for (const std::string& s : shown) EXPECT_NE(out.find(s), std::string::npos) << command << "\nlacks: " << s;
    ++checked;
    command.clear();
    shown.clear();
  };
  bool continued = false;  // the last shown line ended with " \\"
  while (std::getline(in, line)) {
    if (continued) {
      shown.back() += " " + line.substr(line.find_first_not_of(' '));
      continued = shown.back().size() >= 2 && shown.back().compare(shown.back().size() - 2, 2, " \\") == 0;
      if (continued) shown.back().resize(shown.back().size() - 2);
      continue;
    }
    if (line.rfind("$ trainfit ", 0) == 0) {
      check();
      command = line.substr(2);
    } else if (line == "```") {
      check();
    } else if (!command.empty() && line.size() > 3 && std::isdigit(static_cast<unsigned char>(line[0])) &&
               line.find(". trainfit plan ") != std::string::npos) {
      continued = line.size() >= 2 && line.compare(line.size() - 2, 2, " \\") == 0;
      shown.push_back(continued ? line.substr(0, line.size() - 2) : line);
    }
  }
  EXPECT_EQ(checked, 6);
}

// A token budget no micro-batch and accumulation can make says why nothing was judged (before
// issue 39: "no setup of the search is valid" and nothing else).
TEST(AdviseCli, ABudgetNoStepCanMakeSaysWhy) {
  const Result r = run("advise --model qwen2.5-0.5b --gpu h100-sxm --tokens-per-step 9223372036854775807");
  EXPECT_NE(r.out.find("9223372036854775807 tokens a step is no whole number of micro-batches of 512 tokens"),
            std::string::npos)
      << r.out;
  // A budget that needs more accumulation than the setting takes is refused for that reason too.
  const Result big = run("advise --model qwen2.5-0.5b --gpu h100-sxm --seq 1024 --tokens-per-step 4611686018427387904");
  EXPECT_NE(big.out.find("at most 1000000 accumulation steps"), std::string::npos) << big.out;
}

// Issue 35, advise as users drive it. --gpus-max alone (no --tokens-per-step) searches more GPUs:
// before, the setup's 512 tokens a step made no micro-batch on 2 GPUs or more, and a 70B full
// fine-tune that needs 4 H100s was "nothing fits" with a 1-GPU nearest.
TEST(AdviseCli, GpusMaxImpliesTheTokenBudgetItNeeds) {
  const Result r = run("advise --model llama3.1-70b --gpu h100-sxm --method full --goal fewest-gpus --gpus-max 64 "
                       "--top 1 --format json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens_per_step"], 512 * 64);
  EXPECT_EQ(j["tokens_per_step_implied"], true);
  ASSERT_EQ(j["results"].size(), 1u);
  EXPECT_GT(j["results"][0]["setup"]["gpus"].get<int>(), 1);
  const Result text = run("advise --model llama3.1-70b --gpu h100-sxm --method full --goal fewest-gpus --gpus-max 64");
  EXPECT_NE(text.out.find("Tokens a step: 32768 (the setup's sequences a GPU on 64 GPUs"), std::string::npos)
      << text.out;
}

// Nothing fits, --format json: the object still comes on stdout (no results, the nearest and by
// how much, what was searched), the exit code and stderr's line say so; hours unknown are null.
TEST(AdviseCli, NothingFitsStillPrintsItsJsonAndUnknownHoursAreNull) {
  const auto r = trainfit::testing::run_line(std::string(TRAINFIT_CLI) +
                                             " advise --model llama3.1-70b --gpu rtx-4090 --method full --format json "
                                             "2>/dev/null");
  EXPECT_EQ(r.code, 2);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["results"].empty());
  EXPECT_NE(j["nearest"]["command"].get<std::string>().find("trainfit plan --model llama3.1-70b"), std::string::npos);
  EXPECT_GT(j["nearest_over_bytes"].get<double>(), 300e9);
  EXPECT_GT(j["judged"].get<int>(), 0);
  EXPECT_TRUE(j["nearest"]["hours"].is_null());
  const Result fits = run("advise --model qwen2.5-0.5b --gpu h200 --top 1 --format json");
  ASSERT_EQ(fits.code, 0) << fits.out;
  EXPECT_TRUE(nlohmann::json::parse(fits.out)["results"][0]["hours"].is_null());
}

// plan's "To fit" lists the fixes that keep the method first: Mixtral LoRA on two H100s was offered
// only QLoRA though FSDP with checkpointing fits; an fp32-master full fine-tune only LoRA and QLoRA
// though pure bf16 fits.
TEST(AdviseCli, ToFitListsTheFixesThatKeepTheMethodFirst) {
  const Result mixtral =
      run("plan --model mixtral-8x7b --gpu h100-sxm --gpus 2 --method lora --lora-dropout 0 --format json");
  const auto m = nlohmann::json::parse(mixtral.out)["suggestions"];
  ASSERT_GE(m.size(), 2u) << mixtral.out;
  EXPECT_EQ(m[0]["keeps_method"], true);
  EXPECT_EQ(m[0]["setup"]["method"], "lora");
  EXPECT_EQ(m[0]["setup"]["parallel"], "fsdp");
  EXPECT_EQ(m[0]["verdict"], "fits");
  EXPECT_EQ(m.back()["keeps_method"], false);  // QLoRA still offered, after
  const Result fp32 = run("plan --model llama3.1-8b --gpu h100-sxm --method full --weights fp32 --amp bf16");
  EXPECT_NE(fp32.out.find("--weights bf16 --amp none: pure bf16"), std::string::npos) << fp32.out;
  EXPECT_LT(fp32.out.find("--weights bf16 --amp none"), fp32.out.find("--method lora")) << fp32.out;
}

// The boundary (issue 35): every integer searched, not powers of two. The largest batch that runs
// at all plans as running (under pressure or not) and one more fails; advise's largest-batch is
// the largest that fits the headroom policy, one more does not, and the boundary comes beside it.
TEST(AdviseCli, TheLargestBatchAndSequenceAreSearchedEveryInteger) {
  const std::string setup = "--model qwen2.5-1.5b --method full --seq 1024 --vram 25757220864";
  const Result r = run("plan " + setup + " --largest batch --no-suggest --format json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto b = nlohmann::json::parse(r.out)["boundary"];
  const std::int64_t at_all = b["largest_at_all"], runs = b["largest_runs"], fits = b["largest_fits"];
  EXPECT_GE(at_all, runs);
  EXPECT_GE(runs, fits);
  EXPECT_GE(fits, 1);
  const auto state = [&](std::int64_t batch) {
    const Result p = run("plan " + setup + " --batch " + std::to_string(batch) + " --no-suggest --format json");
    return nlohmann::json::parse(p.out)["run_state"].get<std::string>();
  };
  EXPECT_NE(state(at_all), "fails");
  EXPECT_EQ(state(at_all + 1), "fails");
  EXPECT_EQ(state(runs), "runs");
  EXPECT_NE(state(runs + 1), "runs");
  const Result seq = run("plan --model qwen2.5-7b --method qlora --grad-ckpt --vram 25757220864 --largest seq");
  EXPECT_NE(seq.out.find("The largest sequence (all else as given):"), std::string::npos) << seq.out;
  EXPECT_EQ(run("plan " + setup + " --largest rank").code, 2);

  // advise: a micro-batch of 9 fits a Mistral 7B LoRA on an 80 GB card (powers of two stopped at 8).
  const Result a = run("advise --model mistral-7b --method lora --vram 85520809984 --goal largest-batch "
                       "--fix grad-ckpt,attn,optimizer,gpus --top 1 --format json");
  ASSERT_EQ(a.code, 0) << a.out;
  const auto j = nlohmann::json::parse(a.out);
  const std::int64_t best = j["results"][0]["setup"]["batch"];
  // Here it is no power of two (9 at this commit), which the old grid could not name.
  EXPECT_NE(best & (best - 1), 0) << best;
  const Result next = run("plan --model mistral-7b --method lora --vram 85520809984 --batch " +
                          std::to_string(best + 1) + " --no-suggest --format json");
  EXPECT_NE(nlohmann::json::parse(next.out)["verdict"], "fits");
  EXPECT_GE(j["boundary"]["largest_at_all"].get<std::int64_t>(), best);
}

}  // namespace
