// `--recipe FILE` as a user runs it: the repository's example recipes plan, flags override them,
// the ignored keys are listed in the plan's JSON, and a bad recipe is one line and exit 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_cli.hpp"

namespace {

using trainfit::testing::run_cli;
const std::string kRecipes = std::string(TRAINFIT_SOURCE_DIR) + "/recipes/";

nlohmann::json plan_json(const std::string& args) {
  const auto r = run_cli("plan " + args + " --gpu h100-sxm --format json");
  EXPECT_EQ(r.code, 0) << r.out;
  return nlohmann::json::parse(r.out);
}

bool warned(const nlohmann::json& plan, const std::string& text) {
  for (const auto& w : plan["warnings"])
    if (w.get<std::string>().find(text) != std::string::npos) return true;
  return false;
}

TEST(RecipeCli, EveryExampleRecipePlans) {
  for (const auto& entry : std::filesystem::directory_iterator(kRecipes)) {
    const std::string path = entry.path().string();
    const std::string objective = path.find("-dpo-") != std::string::npos    ? " --objective dpo"
                                  : path.find("-grpo-") != std::string::npos ? " --objective grpo"
                                                                             : "";
    const auto j = plan_json("--recipe " + path + objective);
    // TRL's configs run TRL's trainers; LLaMA-Factory and axolotl train through transformers' Trainer.
    EXPECT_EQ(j["setup"]["trainer"], path.find("/trl-") != std::string::npos ? "trl" : "transformers") << path;
    EXPECT_TRUE(warned(j, "recipe keys that change neither memory nor time, ignored: ")) << path;
  }
}

TEST(RecipeCli, TheRecipesSettingsAndTrlsDefaultsAndFlagsOverThem) {
  const auto j = plan_json("--recipe " + kRecipes + "trl-sft-qlora-7b.yaml");
  const auto& s = j["setup"];
  EXPECT_EQ(s["model"], "Qwen/Qwen2.5-7B-Instruct");
  EXPECT_EQ(s["method"], "qlora");
  EXPECT_EQ(s["weights"], "nf4");
  EXPECT_EQ(s["batch"], 4);
  EXPECT_EQ(s["grad_accum"], 4);
  EXPECT_EQ(s["seq"], 2048);
  EXPECT_EQ(s["optimizer"], "adamw-8bit");
  EXPECT_EQ(s["loss"], "chunked");  // SFTConfig's default loss_type
  EXPECT_TRUE(warned(j, "ignored: dataset_name, learning_rate, lr_scheduler_type"));
  // A flag beside the recipe wins, and the plan is the same as the flags alone would give.
  const auto flagged = plan_json("--recipe " + kRecipes + "trl-sft-qlora-7b.yaml --batch 1 --loss whole");
  EXPECT_EQ(flagged["setup"]["batch"], 1);
  EXPECT_EQ(flagged["setup"]["loss"], "whole");
  const auto by_flags = plan_json(
      "--model qwen2.5-7b --trainer trl --method qlora --weights nf4 --double-quant --rank 16 --lora-alpha 32 "
      "--lora-targets all-linear --batch 1 --grad-accum 4 --seq 2048 --optimizer adamw-8bit --loss whole");
  EXPECT_EQ(flagged["memory"]["peak_allocated_bytes"], by_flags["memory"]["peak_allocated_bytes"]);
  EXPECT_EQ(flagged["time"]["step_seconds"], by_flags["time"]["step_seconds"]);
}

TEST(RecipeCli, UseLigerKernelPlansLigersKernelsAndItsLossWhateverNllSays) {
  const auto j = plan_json("--recipe " + kRecipes + "trl-sft-liger.yaml");
  EXPECT_EQ(j["setup"]["kernels"], "liger");
  EXPECT_EQ(j["setup"]["loss"], "fused");
  const auto by_flags =
      plan_json("--model qwen2.5-1.5b --trainer trl --method full --kernels liger --batch 4 --grad-accum 8 --seq 2048");
  EXPECT_EQ(j["memory"]["peak_allocated_bytes"], by_flags["memory"]["peak_allocated_bytes"]);
  // SFTTrainer refuses chunked_nll with use_liger_kernel; so does the recipe, naming the key.
  const std::string path = ::testing::TempDir() + "trainfit-liger-chunked.yaml";
  {
    std::ofstream f(path);
    f << "model_name_or_path: Qwen/Qwen2.5-0.5B\nuse_liger_kernel: true\nloss_type: chunked_nll\n";
  }
  const auto r = run_cli("plan --recipe " + path + " --gpu h100-sxm");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find(": loss_type: chunked_nll with use_liger_kernel"), std::string::npos) << r.out;
}

TEST(RecipeCli, ABadRecipeIsOneLineNamingTheFileAndTheKey) {
  const std::string path = ::testing::TempDir() + "trainfit-bad-recipe.yaml";
  {
    std::ofstream f(path);
    f << "model_name_or_path: Qwen/Qwen2.5-0.5B\ncompletion_only_loss: true\n";
  }
  const auto r = run_cli("plan --recipe " + path + " --gpu h100-sxm");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(
      r.out,
      "trainfit: " + path +
          ": completion_only_loss: a completion-only loss is not planned yet; plan without it (remove the key) for "
          "the step it replaces\n");
  const auto missing = run_cli("plan --recipe /nonexistent/recipe.yaml --gpu h100-sxm");
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(missing.out, "trainfit: cannot read recipe '/nonexistent/recipe.yaml': no such file\n");
}

}  // namespace
