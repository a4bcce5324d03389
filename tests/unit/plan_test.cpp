#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/plan_args.hpp"
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
  // Mixture-of-experts: the routed experts and the router by their paths' ends, as transformers 5
  // names them (Mixtral's checkpoint names w1, w2, w3 are gone once the model is built).
  EXPECT_EQ(targets_error("mixtral-8x7b", "gate_up_proj,down_proj"), "(accepted)");
  EXPECT_EQ(targets_error("mixtral-8x7b", "experts.gate_up_proj,mlp.gate"), "(accepted)");
  EXPECT_EQ(targets_error("qwen3-30b-a3b", "gate_proj"), "(accepted)");  // the experts' gate_proj
  EXPECT_NE(targets_error("mixtral-8x7b", "w1").find("experts.gate_up_proj"), std::string::npos);
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

TEST(Plan, AShortCardNameSaysWhichCardItTookAndNamesTheOthers) {
  const auto warned = [](const std::string& gpu) {
    TrainingSetup s;
    s.gpu = gpu;
    const Plan p = make_plan(load_model("qwen2.5-0.5b"), s, resolve_card(s));
    for (const std::string& w : p.warnings)
      if (w.find("is taken as") != std::string::npos) return w;
    return std::string();
  };
  const std::string a100 = warned("a100");
  EXPECT_NE(a100.find("a100-80gb"), std::string::npos) << a100;
  EXPECT_NE(a100.find("a100-40gb"), std::string::npos) << a100;
  EXPECT_EQ(warned("A100-40GB"), "") << "a card's own id names one card";
  EXPECT_EQ(warned("h200"), "") << "no other h200";
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

namespace trainfit {
namespace {


// The flags whose value differs between two argument lists (added, removed or changed), among
// the settings that apply to `before` (switching full fine-tuning to LoRA brings back the LoRA
// settings the user gave, unchanged).
std::set<std::string> changed_flags(const TrainingSetup& before, const std::vector<std::string>& a,
                                    const std::vector<std::string>& b) {
  const auto values = [](const std::vector<std::string>& args) {
    std::map<std::string, std::string> out;
    for (std::size_t i = 0; i < args.size(); ++i) {
      const Setting* row = find_setting_by_flag(args[i]);
      if (row->type == SettingType::boolean) out[row->flag] = args[i];
      else out[row->flag] = args[++i];
    }
    return out;
  };
  const auto va = values(a), vb = values(b);
  std::set<std::string> out;
  for (const auto& [flag, v] : va)
    if (!vb.count(flag) || vb.at(flag) != v) out.insert(flag);
  for (const auto& [flag, v] : vb)
    if (!va.count(flag) && applies(*find_setting_by_flag(flag), before)) out.insert(flag);
  return out;
}

// Every suggestion is a whole command: planning its arguments on their own gives exactly the
// figures printed beside it. Over a thousand random setups that do not fit (seeded: the same
// setups every run).
TEST(PlanSuggestions, EveryOneReproducesFromItsCommand) {
  std::mt19937 rng(20261130);
  const auto pick = [&](const auto& options) { return options[rng() % options.size()]; };
  const std::vector<std::string> models = builtin_model_names();
  const std::vector<std::string> cards = {"rtx-3060-12gb", "rtx-4090", "rtx-5070-ti", "l4", "a100-40gb",
                                          "a100-80gb", "h100-sxm", "h200"};
  std::size_t checked_plans = 0, checked_suggestions = 0, combined = 0;
  for (int attempt = 0; checked_plans < 1000 && attempt < 20000; ++attempt) {
    std::vector<std::string> args = {"--model", pick(models), "--gpu", pick(cards)};
    const std::vector<std::vector<std::string>> extras = {
        {"--method", pick(std::vector<std::string>{"full", "lora", "qlora"})},
        {"--seq", pick(std::vector<std::string>{"512", "1024", "2048", "4096", "8192"})},
        {"--batch", pick(std::vector<std::string>{"1", "2", "4", "8"})},
        {"--optimizer", pick(std::vector<std::string>{"adamw", "adamw-8bit", "sgd"})},
        {"--gpus", pick(std::vector<std::string>{"1", "1", "2", "4"})},
        {"--lora-targets", pick(std::vector<std::string>{"all-linear", "q,v", "q,k,v,o"})},
        {"--attn", pick(std::vector<std::string>{"sdpa", "eager"})}};
    for (const auto& e : extras) args.insert(args.end(), e.begin(), e.end());
    TrainingSetup setup;
    Plan p;
    try {
      setup = testing::setup_from_plan_args(args);
      p = make_plan(load_model(setup.model), setup, resolve_card(setup));
    } catch (const InputError&) {
      continue;  // an inconsistent draw (targets the model does not have...)
    }
    if (p.verdict == Verdict::fits) continue;
    ++checked_plans;
    for (const Suggestion& s : p.suggestions) {
      ++checked_suggestions;
      if (s.change.find(" + ") != std::string::npos) ++combined;
      EXPECT_EQ(s.args, setup_to_args(s.setup));
      for (const std::string& flag : changed_flags(setup, setup_to_args(setup), s.args))
        EXPECT_NE(s.change.find(flag), std::string::npos) << s.change << " changes " << flag;
      const TrainingSetup again = testing::setup_from_plan_args(s.args);
      PlanOptions alone;
      alone.suggest = false;
      const Plan q = make_plan(load_model(again.model), again, resolve_card(again), alone);
      ASSERT_EQ(q.memory.peak_allocated_bytes, s.peak_allocated_bytes) << s.change << "\n" << plan_command(s.args);
      EXPECT_EQ(q.memory.device_used_bytes, s.device_used_bytes) << plan_command(s.args);
      EXPECT_EQ(q.verdict, s.verdict) << plan_command(s.args);
      EXPECT_EQ(q.time.predicted ? q.time.step_seconds : 0.0, s.step_seconds) << plan_command(s.args);
    }
  }
  EXPECT_EQ(checked_plans, 1000u);
  EXPECT_GT(checked_suggestions, 2000u);
  EXPECT_GT(combined, 100u);  // the search combines changes when none fits alone
}

// Issue 10's two reports: a row named only its own change but carried --grad-ckpt with it. Each
// suggestion now changes exactly what its text names.
TEST(PlanSuggestions, EachChangesOnlyWhatItNames) {
  const auto check = [](const char* model, const TrainingSetup& base, const char* card) {
    const Plan p = make_plan(load_model(model), base, find_gpu(card));
    EXPECT_FALSE(p.suggestions.empty());
    for (const Suggestion& s : p.suggestions)
      for (const std::string& flag : changed_flags(base, setup_to_args(base), s.args))
        EXPECT_NE(s.change.find(flag), std::string::npos) << s.change << " changes " << flag;
    return p;
  };
  TrainingSetup mistral;
  mistral.seq = 2048;
  mistral.batch = 4;
  const Plan a = check("mistral-7b", mistral, "a100-40gb");
  // micro-batch 1 alone is 36,183 MiB, tight on the 40 GB card: only checkpointing fits.
  ASSERT_EQ(a.suggestions.size(), 1u);
  EXPECT_TRUE(a.suggestions[0].setup.grad_ckpt);
  EXPECT_EQ(a.suggestions[0].setup.batch, 4);
  TrainingSetup llama;
  llama.method = Method::full;
  llama.seq = 4096;
  const Plan b = check("llama3.1-8b", llama, "h100-sxm");
  const auto adam8 = std::find_if(b.suggestions.begin(), b.suggestions.end(),
                                  [](const Suggestion& s) { return s.setup.optimizer == Optimizer::adamw_8bit; });
  ASSERT_NE(adam8, b.suggestions.end());
  EXPECT_FALSE(adam8->setup.grad_ckpt);
  EXPECT_NEAR(to_mib(adam8->peak_allocated_bytes), 61974, 1);  // planned on its own: 61,974 MiB, 0.421 s
  EXPECT_NEAR(adam8->step_seconds, 0.421, 0.001);
}

}  // namespace
}  // namespace trainfit
