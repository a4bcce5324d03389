// TRL's trainer and its chunked loss (docs/model.md, "Trainers" and "The chunked loss"): the
// defaults --trainer trl brings, and what the chunks hold and cost against the whole loss.
#include <gtest/gtest.h>

#include <map>

#include "support/memory_checks.hpp"
#include "support/plan_args.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

using trainfit::testing::setup_from_settings;

std::int64_t category(const MemoryEstimate& e, const std::string& name) {
  for (const auto& t : e.breakdown)
    if (t.category == name) return t.bytes;
  return -1;
}

TEST(Trainer, TrlDefaultsCheckpointingAndTheChunkedLossForSft) {
  const TrainingSetup trl = setup_from_settings({{"model", "qwen2.5-0.5b"}, {"trainer", "trl"}});
  EXPECT_TRUE(trl.grad_ckpt);
  EXPECT_EQ(trl.loss, Loss::chunked);
  const TrainingSetup hf = setup_from_settings({{"model", "qwen2.5-0.5b"}});
  EXPECT_FALSE(hf.grad_ckpt);
  EXPECT_EQ(hf.loss, Loss::whole);
  // Given values win over TRL's defaults; TRL's own loss names are read.
  const TrainingSetup nll =
      setup_from_settings({{"model", "qwen2.5-0.5b"}, {"trainer", "trl"}, {"loss", "nll"}, {"grad_ckpt", "false"}});
  EXPECT_EQ(nll.loss, Loss::whole);
  EXPECT_EQ(parse_loss("chunked_nll"), Loss::chunked);
  // The loss is SFT's: under DPO it does not apply and is left out of the setup's JSON.
  const TrainingSetup dpo = setup_from_settings({{"model", "qwen2.5-0.5b"}, {"trainer", "trl"}, {"objective", "dpo"}});
  EXPECT_FALSE(setup_to_json(dpo).contains("loss"));
  EXPECT_TRUE(setup_to_json(trl).contains("loss"));
}

TEST(ChunkedLoss, HoldsTheOutputLayersCopiesInsteadOfTheMicroBatchsLogits) {
  // Qwen2.5-1.5B, bf16 LoRA under TRL's autocast: a chunk holds w.float() (4 V h) and autocast's
  // bf16 cast of it (2 V h) at its GEMM, whatever the micro-batch; the whole loss holds 3 fp32
  // logits-sized tensors, which grow with the tokens.
  const ModelSpec m = load_model("qwen2.5-1.5b");
  const double vh = static_cast<double>(m.vocab_size) * static_cast<double>(m.hidden_size);
  TrainingSetup s = setup_from_settings({{"model", "qwen2.5-1.5b"}, {"trainer", "trl"}, {"batch", "4"}, {"seq", "1024"}});
  const MemoryEstimate chunked = estimate_memory(m, s, find_gpu("h100-sxm"));
  trainfit::testing::expect_breakdown_and_phases_make_the_peak(chunked);
  EXPECT_EQ(chunked.peak_moment, "chunked loss backward");
  const double loss = static_cast<double>(category(chunked, "logits_and_loss"));
  EXPECT_GT(loss, 6.0 * vh);
  EXPECT_LT(loss, 6.0 * vh + 0.5 * static_cast<double>(kGiB));  // the chunk's 256 x V rows on top
  // Half the tokens: the chunk holds the same.
  s.batch = 2;
  const MemoryEstimate shorter = estimate_memory(m, s, find_gpu("h100-sxm"));
  EXPECT_EQ(shorter.peak_moment, "chunked loss backward");
  EXPECT_EQ(category(shorter, "logits_and_loss"), category(chunked, "logits_and_loss"));
  // The whole loss at 4 x 1024 tokens: its three fp32 logits-sized tensors alone are 7 GiB.
  s.batch = 4;
  s.loss = Loss::whole;
  const MemoryEstimate whole = estimate_memory(m, s, find_gpu("h100-sxm"));
  EXPECT_GE(category(whole, "logits_and_loss"), 3 * 4 * 4 * 1024 * m.vocab_size);
  EXPECT_GT(whole.peak_allocated_bytes, chunked.peak_allocated_bytes + 5 * kGiB);
}

TEST(ChunkedLoss, WithoutAutocastTheTrainedHeadHoldsItsFp32CopyAndGradient) {
  // Full fine-tuning of 16-bit weights without autocast: the GEMM keeps the fp32 copy and a
  // trained head's backward holds its fp32 gradient beside it (8 V h), where TRL's autocast holds
  // 6 V h, and the chunk's logits are fp32 rather than bf16. Measured in SFTTrainer on an H100,
  // Qwen2.5-0.5B at 4 x 1024 with checkpointing, bf16=True against bf16=False: peaks of 4229.0 and
  // 4562.4 MiB, 333.4 MiB apart (data/bench/h100-trl-sft-2026-12-06/).
  const ModelSpec m = load_model("qwen2.5-0.5b");
  TrainingSetup s =
      setup_from_settings({{"model", "qwen2.5-0.5b"}, {"method", "full"}, {"trainer", "trl"}, {"batch", "4"}, {"seq", "1024"}});
  const MemoryEstimate autocast = estimate_memory(m, s, find_gpu("h100-sxm"));
  s.trainer = Trainer::transformers;
  const MemoryEstimate fp32 = estimate_memory(m, s, find_gpu("h100-sxm"));
  EXPECT_EQ(fp32.peak_moment, "chunked loss backward");
  EXPECT_NEAR(static_cast<double>(fp32.peak_allocated_bytes - autocast.peak_allocated_bytes) / kMiB, 333.4, 10.0);
}

TEST(ChunkedLoss, CostsAnotherHeadGemmAndTheWeightsConversionsEveryChunk) {
  const ModelSpec m = load_model("qwen2.5-1.5b");
  TrainingSetup s = setup_from_settings({{"model", "qwen2.5-1.5b"},
                              {"method", "full"},
                              {"trainer", "trl"},
                              {"batch", "4"},
                              {"seq", "2048"},
                              {"loss", "whole"}});
  const StepWork whole = step_work(m, s);
  s.loss = Loss::chunked;
  const StepWork chunked = step_work(m, s);
  const double vh = static_cast<double>(m.vocab_size) * static_cast<double>(m.hidden_size);
  const double positions = 4.0 * 2047.0;
  // The head: forward, recompute, input and weight gradients over the chunks' positions, where
  // the whole loss runs three over every token.
  EXPECT_NEAR(chunked.tensor_flops - whole.tensor_flops, 2.0 * vh * (4.0 * positions - 3.0 * 4.0 * 2048.0),
              1e-6 * whole.tensor_flops);
  // 32 chunks, each converting W in the forward and the recompute (12 bytes an element each) and
  // its gradient (18): at least 32 x 42 V h bytes more traffic.
  EXPECT_GT(chunked.memory_bytes - whole.memory_bytes, 32.0 * 42.0 * vh * 0.9);
  // Host: 55 operations a chunk of a trained head, where the whole loss under TRL dispatches
  // SFTTrainer's entropy in 64 chunks of 128 rows, 6 operations each.
  EXPECT_DOUBLE_EQ(chunked.ops - whole.ops, 32.0 * 55.0 - 64.0 * 6.0);
}

}  // namespace
}  // namespace trainfit
