// The objectives on the command line: what a plan says about them, and the refusals (exit 2, the
// flag and the reason on one line).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "run_cli.hpp"

namespace {

using Result = trainfit::testing::CliResult;
Result run(const std::string& args) {
  return trainfit::testing::run_cli(args);
}

const std::string kBase = "plan --model qwen2.5-1.5b --gpu h200 --seq 1024 --batch 2 ";

TEST(ObjectiveCli, DpoPlanSaysItsSequencesAndWhatTheReferenceCosts) {
  const auto r = run(kBase + "--method full --objective dpo --grad-accum 3 --format json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  const auto& o = j["objective"];
  EXPECT_EQ(o["name"], "dpo");
  EXPECT_EQ(o["reference"], "copy");  // TRL's default under full fine-tuning
  EXPECT_EQ(o["trained_sequences_per_micro_batch"], 4);
  EXPECT_EQ(o["sequences_per_step"], 12);
  EXPECT_EQ(o["no_grad_sequences_per_micro_batch"], 4);
  EXPECT_EQ(o["reference_weights_bytes"], j["memory"]["breakdown"]["reference_weights"]);
  EXPECT_EQ(j["memory"]["breakdown"]["reference_weights"], j["memory"]["breakdown"]["weights"]);
  EXPECT_EQ(j["setup"]["objective"], "dpo");
  EXPECT_EQ(j["setup"]["reference"], "copy");

  const auto text = run(kBase + "--method full --objective dpo");
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_NE(
      text.out.find("Objective dpo: 4 sequences a micro-batch with gradients, 4 without, reference: a frozen copy"),
      std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("reference model weights"), std::string::npos) << text.out;
}

TEST(ObjectiveCli, SftPlansAsBefore) {
  const auto plain = run(kBase + "--method full");
  const auto sft = run(kBase + "--method full --objective sft --reference precomputed --generations 3");
  ASSERT_EQ(plain.code, 0) << plain.out;
  // The objective's settings do not apply to sft: the same plan, and a warning for each.
  const std::string warned =
      "Warning: --reference is ignored: it applies only when --objective is dpo or kto or ppo or grpo.\n\n"
      "Warning: --generations is ignored: it applies only when --objective is grpo.\n\n";
  std::string expected = plain.out;
  expected.insert(expected.find("Memory at the peak"), warned);
  EXPECT_EQ(expected, sft.out);
  EXPECT_EQ(plain.out.find("Objective"), std::string::npos);
  const auto j = nlohmann::json::parse(run(kBase + "--method full --format json").out);
  EXPECT_EQ(j["objective"]["name"], "sft");
  EXPECT_EQ(j["objective"]["trained_sequences_per_micro_batch"], 2);
  EXPECT_FALSE(j["memory"]["breakdown"].contains("reference_weights"));
}

TEST(ObjectiveCli, PpoSaysWhatItsValueAndRewardModelsCost) {
  const auto r = run(kBase + "--method lora --objective ppo --format json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  const auto& o = j["objective"];
  EXPECT_EQ(o["reference"], "adapter-off");
  EXPECT_GT(o["value_model"]["weights_bytes"].get<std::int64_t>(), 3'000'000'000);  // 1.5B in bf16
  EXPECT_EQ(o["value_model"]["weights_bytes"], o["reward_weights_bytes"]);
  EXPECT_EQ(o["completion_len"], 512);  // half the sequence
  EXPECT_NE(o["excluded"].get<std::string>().find("generation"), std::string::npos);
}

TEST(ObjectiveCli, RefusalsSayWhy) {
  struct Case {
    std::string args;
    std::string says;
  };
  const Case cases[] = {
      {"--method full --objective dpo --reference adapter-off", "--reference: adapter-off disables LoRA adapters"},
      {"--method lora --objective kto --batch 1", "--batch: kto needs at least 2 sequences"},
      {"--method lora --objective grpo", "--generations: the generation batch"},
      {"--method qlora --objective ppo", "--objective: ppo trains every weight of its value model"},
      {"--method lora --objective grpo --generations 2 --reference precomputed", "--reference: grpo scores"},
      {"--method lora --objective dpo --reference none", "--reference: dpo needs the reference"},
      {"--method lora --objective ppo --completion-len 1024", "--completion-len: the completion (1024 tokens)"},
      {"--method lora --objective simpo", "--objective: unknown value 'simpo'"},
  };
  for (const auto& c : cases) {
    const bool own_batch = c.args.find("--batch") != std::string::npos;
    const auto r = run((own_batch ? "plan --model qwen2.5-1.5b --gpu h200 --seq 1024 " : kBase) + c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.says), std::string::npos) << c.args << "\n" << r.out;
  }
  // A copy under LoRA is what TRL runs when given a ref_model: accepted, and it costs the base's weights.
  const auto copy = run(kBase + "--method lora --objective dpo --reference copy --format json");
  ASSERT_EQ(copy.code, 0) << copy.out;
  const auto j = nlohmann::json::parse(copy.out);
  EXPECT_EQ(j["memory"]["breakdown"]["reference_weights"], j["memory"]["breakdown"]["weights"]);
}

TEST(ObjectiveCli, TheSchemaCarriesTheDerivedReference) {
  const auto r = run("schema");
  ASSERT_EQ(r.code, 0);
  const auto j = nlohmann::json::parse(r.out);
  const auto& cases = j["properties"]["reference"]["x-derived-default"]["cases"];
  ASSERT_EQ(cases.size(), 2u);
  EXPECT_EQ(cases[0]["when"]["one_of"], nlohmann::json::array({"grpo"}));
  EXPECT_EQ(cases[0]["value"], "none");
  EXPECT_EQ(cases[1]["value"], "copy");
  EXPECT_EQ(j["properties"]["completion_len"]["x-derived-default"]["times"], "seq");
}

}  // namespace
