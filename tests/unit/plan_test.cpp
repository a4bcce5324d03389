#include <gtest/gtest.h>

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
