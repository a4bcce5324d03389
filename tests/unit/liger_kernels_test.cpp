// Liger's kernels and its fused linear cross-entropy (docs/model.md, "Liger's kernels"): what they
// keep and hold against transformers' operations and TRL's losses, and the settings' rules.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "support/memory_checks.hpp"
#include "support/plan_args.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

using trainfit::testing::setup_from_settings;

TEST(LigerKernels, TheLossFollowsTheKernelsAndTrlsRefusalsHold) {
  // use_liger_kernel: the patched forward runs Liger's fused loss, under TRL or transformers.
  EXPECT_EQ(setup_from_settings({{"model", "qwen2.5-0.5b"}, {"kernels", "liger"}}).loss, Loss::fused);
  EXPECT_EQ(setup_from_settings({{"model", "qwen2.5-0.5b"}, {"trainer", "trl"}, {"kernels", "liger"}}).loss, Loss::fused);
  EXPECT_EQ(setup_from_settings({{"model", "qwen2.5-0.5b"}, {"trainer", "trl"}}).loss, Loss::chunked);
  // SFTTrainer refuses chunked_nll with use_liger_kernel.
  EXPECT_THROW(setup_from_settings({{"model", "qwen2.5-0.5b"}, {"trainer", "trl"}, {"kernels", "liger"}, {"loss", "chunked"}}),
               SettingError);
  // TRL's other trainers run Liger's losses of their own, not planned.
  EXPECT_THROW(setup_from_settings({{"model", "qwen2.5-0.5b"}, {"kernels", "liger"}, {"objective", "dpo"}}), SettingError);
}

TEST(LigerKernels, FamiliesLigerDoesNotPatchAreRefusedByName) {
  // transformers' use_liger_kernel only warns where Liger has no patch and trains unpatched; and
  // Liger's patches of the MoE families it knows (Mixtral, Qwen3-MoE) are not planned.
  TrainingSetup s = setup_from_settings({{"model", "qwen2.5-0.5b"}, {"kernels", "liger"}});
  for (const char* name : {"qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v2-lite"}) {
    s.model = name;
    try {
      (void)estimate_memory(load_model(name), s, find_gpu("h200"));
      ADD_FAILURE() << name << " planned under Liger";
    } catch (const SettingError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("Liger-Kernel patches no kernel of ") + name), std::string::npos)
          << e.what();
    }
  }
}

TEST(LigerKernels, KeepTheNormsInputsAndNoActivationOutput) {
  // Qwen2.5-1.5B full fine-tuning without checkpointing: per token, transformers' RMSNorms keep
  // 4h (fp32 input) + 2h (normalised input) each, Liger's 2h + 4 bytes (two a layer, and the final
  // norm); Liger's SiLU-and-multiply drops the activation's output (2 I a layer).
  const ModelSpec m = load_model("qwen2.5-1.5b");
  const double h = static_cast<double>(m.hidden_size), I = static_cast<double>(m.intermediate_size);
  const double L = static_cast<double>(m.num_layers);
  const TrainingSetup torch_ops =
      setup_from_settings({{"model", "qwen2.5-1.5b"}, {"method", "full"}, {"batch", "1"}, {"seq", "2048"}, {"loss", "fused"}});
  TrainingSetup liger = torch_ops;
  liger.kernels = Kernels::liger;
  // At 2048 tokens: the norms' tensors are whole MiBs (12, 6 and 6), the rstd 8 KiB; the activation
  // output's 35 MiB is a segment of its own, which the allocator rounds to 2 MiB: 36 MiB.
  const double T = 2048.0;
  const double norm_saving = 6.0 * h * T - (2.0 * h * T + 4.0 * T);
  const double activation_block = std::ceil(2.0 * I * T / (2.0 * kMiB)) * 2.0 * kMiB;
  const double expected = (2.0 * L + 1.0) * norm_saving + L * activation_block;
  const MemoryEstimate a = estimate_memory(m, torch_ops, find_gpu("h200"));
  const MemoryEstimate b = estimate_memory(m, liger, find_gpu("h200"));
  trainfit::testing::expect_breakdown_and_phases_make_the_peak(b);
  auto acts = [](const MemoryEstimate& e) {
    for (const auto& t : e.breakdown)
      if (t.category == "activations") return static_cast<double>(t.bytes);
    return -1.0;
  };
  EXPECT_EQ(acts(a) - acts(b), expected);
}

TEST(LigerKernels, TheFusedLossHoldsNoLogitsOfTheMicroBatch) {
  // Qwen2.5-1.5B full fine-tuning under TRL: the whole loss holds fp32 logits (3 x 4 T V, 14 GiB at
  // 4 x 2048); the fused loss holds a 128-row chunk's, and its forward grows with the tokens only by
  // what scales with the hidden size (the checkpoints, the hidden states' gradient).
  const ModelSpec m = load_model("qwen2.5-1.5b");
  const double V = static_cast<double>(m.vocab_size), h = static_cast<double>(m.hidden_size);
  const double L = static_cast<double>(m.num_layers);
  const TrainingSetup base =
      setup_from_settings({{"model", "qwen2.5-1.5b"}, {"method", "full"}, {"trainer", "trl"}, {"batch", "4"}, {"seq", "2048"}});
  TrainingSetup fused = base;
  fused.loss = Loss::fused;
  TrainingSetup whole = base;
  whole.loss = Loss::whole;
  const MemoryEstimate f = estimate_memory(m, fused, find_gpu("h100-sxm"));
  const MemoryEstimate w = estimate_memory(m, whole, find_gpu("h100-sxm"));
  trainfit::testing::expect_breakdown_and_phases_make_the_peak(f);
  // The whole loss peaks at its logits (before any gradient exists), the fused loss in the
  // backward with every gradient (2.9 GiB) alive: still 8 GiB apart.
  EXPECT_LT(static_cast<double>(f.peak_allocated_bytes),
            static_cast<double>(w.peak_allocated_bytes) - 0.6 * 3.0 * 4.0 * 8192.0 * V);
  const PhasePeak& forward = f.phases.at(0);
  EXPECT_EQ(forward.moment, "fused loss forward");
  TrainingSetup half = fused;
  half.batch = 2;
  const MemoryEstimate fh = estimate_memory(m, half, find_gpu("h100-sxm"));
  const double grown = static_cast<double>(forward.allocated_bytes - fh.phases.at(0).allocated_bytes);
  const double per_token_bound = (L + 1.0) * 2.0 * h + 64.0;  // checkpoints, gradient, per-position
  EXPECT_GT(grown, 0.0);
  EXPECT_LT(grown, 1.1 * 4096.0 * per_token_bound + 64.0 * static_cast<double>(kMiB));
}

}  // namespace
}  // namespace trainfit
