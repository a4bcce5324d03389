#include <gtest/gtest.h>

#include <string>

#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

TEST(Verdict, ThresholdsFollowCapacityAndHeadroom) {
  const std::int64_t cap = 16 * kGiB;
  EXPECT_EQ(judge(cap / 2, cap / 2 + kGiB, cap, 0.2, Platform::on_linux), Verdict::fits);
  EXPECT_EQ(judge(cap * 85 / 100, cap * 95 / 100, cap, 0.2, Platform::on_linux), Verdict::tight);
  EXPECT_EQ(judge(cap * 85 / 100, cap * 95 / 100, cap, 0.1, Platform::on_linux), Verdict::fits);
  EXPECT_EQ(judge(cap + 1, cap + 2, cap, 0.2, Platform::on_linux), Verdict::oom);
  EXPECT_EQ(judge(cap + 1, cap + 2, cap, 0.2, Platform::on_windows), Verdict::spills);
  // The whole device (reserved + CUDA context) over capacity is over, even if tensors fit.
  EXPECT_EQ(judge(cap * 9 / 10, cap + 1, cap, 0.0, Platform::on_linux), Verdict::oom);
  EXPECT_THROW(judge(1, 1, 0, 0.2, Platform::on_linux), InputError);
}

std::string targets_error(const char* model, const char* targets) {
  TrainingSetup s;
  s.lora.targets = parse_lora_targets(targets);
  try {
    (void)make_plan(load_model(model), s, find_gpu("h200"));
  } catch (const SettingError& e) {
    EXPECT_EQ(e.setting(), "lora_targets");
    return e.reason();
  }
  return "(accepted)";
}

// A target that names no module of the model planned a LoRA run without adapters (0 trainable
// parameters that "fit"); PEFT refuses it, and so does the plan, with the model's module names.
TEST(Plan, LoraTargetsMustNameModulesOfTheModel) {
  EXPECT_EQ(targets_error("qwen2.5-7b", "nonexistent_proj"),
            "'nonexistent_proj' names no module of qwen2.5-7b (qwen2); its layers' linear modules are q_proj, k_proj, "
            "v_proj, o_proj, gate_proj, up_proj, down_proj, or all-linear");
  EXPECT_EQ(targets_error("qwen2.5-7b", "q,nonexistent_proj").rfind("'nonexistent_proj' names no module", 0), 0u);
  EXPECT_EQ(targets_error("qwen2.5-7b", "all-linear"), "(accepted)");
  EXPECT_EQ(targets_error("qwen2.5-7b", "q,k,v,o,gate,up,down"), "(accepted)");
  // Phi-3 fuses q, k and v (and gate and up): PEFT's Qwen default q_proj,v_proj names nothing there.
  EXPECT_NE(targets_error("phi3-mini", "q,v").find("qkv_proj, o_proj, gate_up_proj, down_proj"), std::string::npos);
  EXPECT_EQ(targets_error("phi3-mini", "qkv_proj"), "(accepted)");
  // Mixture-of-experts: the routed experts and the router by their paths' ends.
  EXPECT_EQ(targets_error("mixtral-8x7b", "w1,w2,w3"), "(accepted)");
  EXPECT_EQ(targets_error("mixtral-8x7b", "experts.w1,block_sparse_moe.gate"), "(accepted)");
  EXPECT_EQ(targets_error("qwen3-30b-a3b", "gate_proj"), "(accepted)");  // the experts' gate_proj
  EXPECT_NE(targets_error("mixtral-8x7b", "gate_proj").find("experts.w1"), std::string::npos);
  // Full fine-tuning has no adapters: its targets mean nothing and are not checked.
  TrainingSetup full;
  full.method = Method::full;
  full.lora.targets = {"nonexistent_proj"};
  EXPECT_NO_THROW((void)estimate_memory(load_model("qwen2.5-0.5b"), full, find_gpu("h200")));
  // The time model meets the same check (validate and calibrate price steps without a plan).
  TrainingSetup lora;
  lora.lora.targets = {"nonexistent_proj"};
  EXPECT_THROW((void)step_work(load_model("qwen2.5-0.5b"), lora), SettingError);
}

TEST(Plan, OverCapacityComesWithAlternativesThatFit) {
  TrainingSetup s;
  s.method = Method::full;
  s.seq = 2048;
  const Plan p = make_plan(load_model("qwen2.5-7b"), s, find_gpu("rtx-4090"));
  EXPECT_EQ(p.verdict, Verdict::oom);
  EXPECT_GT(p.over_capacity_bytes, 0);
  ASSERT_FALSE(p.suggestions.empty());
  EXPECT_EQ(p.suggestions.front().verdict, Verdict::fits);
  EXPECT_LT(p.suggestions.front().peak_allocated_bytes, p.gpu.memory_bytes);
  for (const auto& alt : p.suggestions) EXPECT_FALSE(alt.change.empty());
}

// 7B full fine-tuning with DDP on two 80 GB cards does not fit (every GPU holds weights, gradients,
// buckets and AdamW states: about 90 GB); sharding the same run with FSDP does.
TEST(Plan, DdpThatDoesNotFitIsOfferedFsdp) {
  TrainingSetup s;
  s.method = Method::full;
  s.seq = 2048;
  s.gpus = 2;
  const Plan p = make_plan(load_model("qwen2.5-7b"), s, find_gpu("h100-sxm"));
  EXPECT_NE(p.verdict, Verdict::fits);
  bool offered = false;
  for (const auto& alt : p.suggestions) {
    if (alt.change.find("--parallel fsdp") == std::string::npos) continue;
    offered = true;
    EXPECT_EQ(alt.verdict, Verdict::fits);
  }
  EXPECT_TRUE(offered);
}

TEST(Plan, FittingSetupHasNoSuggestionsAndPositiveHeadroom) {
  TrainingSetup s;
  const Plan p = make_plan(load_model("qwen2.5-0.5b"), s, find_gpu("h200"));
  EXPECT_EQ(p.verdict, Verdict::fits);
  EXPECT_TRUE(p.suggestions.empty());
  EXPECT_GT(p.headroom_fraction, 0.9);
  EXPECT_EQ(p.over_capacity_bytes, 0);
}

TEST(Report, JsonCarriesTheContractFields) {
  TrainingSetup s;
  const Plan p = make_plan(load_model("qwen2.5-7b"), s, find_gpu("rtx-5070-ti"));
  const auto j = plan_to_json(p);
  EXPECT_EQ(j["schema"], "trainfit.plan/1");
  for (const char* key : {"peak_allocated_bytes", "peak_reserved_bytes", "device_used_bytes", "peak_phase", "breakdown"})
    EXPECT_TRUE(j["memory"].contains(key)) << key;
  EXPECT_TRUE(j["memory"]["peak_allocated_bytes"].is_number_integer());
  EXPECT_EQ(j["device"]["capacity_bytes"], std::int64_t{16303} * kMiB);
  EXPECT_EQ(j["verdict"], to_string(p.verdict));
  std::int64_t sum = 0;
  for (const auto& [k, v] : j["memory"]["breakdown"].items()) sum += v.get<std::int64_t>();
  EXPECT_NEAR(static_cast<double>(sum), static_cast<double>(j["memory"]["peak_allocated_bytes"].get<std::int64_t>()), 16.0);
}

TEST(Report, TableAndMarkdownNameTheVerdictAndThePeak) {
  TrainingSetup s;
  const Plan p = make_plan(load_model("qwen2.5-0.5b"), s, find_gpu("h200"));
  const std::string table = render_plan(p, Format::table);
  EXPECT_NE(table.find("FITS"), std::string::npos);
  EXPECT_NE(table.find("torch.cuda.max_memory_allocated()"), std::string::npos);
  const std::string md = render_plan(p, Format::markdown);
  EXPECT_NE(md.find("| memory | bytes | MiB |"), std::string::npos);
  EXPECT_THROW(parse_format("yaml"), InputError);
}

}  // namespace
}  // namespace trainfit
