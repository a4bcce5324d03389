// TRL's packing (docs/model.md, "Packing"): the micro-batch flattened into one sequence whose
// examples attend within themselves. Under SDPA transformers masks it block-diagonally, so every
// attention layer keeps the mask's additive bias over the whole of it; under flash attention each
// example runs as an unpacked row of its tokens would.
#include <gtest/gtest.h>

#include <string>

#include "support/breakdown_terms.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

using testing::term;

TrainingSetup qwen_full(bool packing, Attention attention = Attention::sdpa) {
  TrainingSetup s;
  s.model = "qwen2.5-0.5b";
  s.method = Method::full;
  s.weights = DType::bf16;
  s.seq = 2048;
  s.batch = 4;
  s.attention = attention;
  s.packing = packing;
  return s;
}

TEST(Packing, UnderSdpaEveryLayerKeepsTheBlockMasksBiasOverTheFlattenedMicroBatch) {
  const ModelSpec model = load_model("qwen2.5-0.5b");
  const GpuSpec& gpu = find_gpu("h200");
  const MemoryEstimate plain = estimate_memory(model, qwen_full(false), gpu);
  const MemoryEstimate packed = estimate_memory(model, qwen_full(true), gpu);
  // T = 4 x 2048 tokens. Each of the 24 layers keeps a bf16 bias of T x T; transformers' boolean
  // mask (a byte a pair) lives through the step; with the mask passed SDPA gets key and value
  // repeated to the 14 query heads (from 2), 2 x (896 - 128) bf16 elements a token a layer more.
  const double T = 4.0 * 2048.0;
  const double bias = 24.0 * 2.0 * T * T;
  const double mask = T * T;
  const double repeated = 24.0 * T * 2.0 * 2.0 * (896.0 - 128.0);
  EXPECT_NEAR(term(packed, "activations") - term(plain, "activations"), bias + mask + repeated, 2.0 * 1048576.0);
  // Under flash attention each example attends within itself as a row of its own would: no mask.
  const MemoryEstimate flash_plain = estimate_memory(model, qwen_full(false, Attention::flash), gpu);
  const MemoryEstimate flash_packed = estimate_memory(model, qwen_full(true, Attention::flash), gpu);
  EXPECT_EQ(flash_packed.peak_allocated_bytes, flash_plain.peak_allocated_bytes);
}

TEST(Packing, UnderCheckpointingNoLayerKeepsItsBiasAcrossTheStep) {
  const ModelSpec model = load_model("qwen2.5-0.5b");
  const GpuSpec& gpu = find_gpu("h200");
  TrainingSetup plain = qwen_full(false), packed = qwen_full(true);
  plain.grad_ckpt = packed.grad_ckpt = true;
  const MemoryEstimate p = estimate_memory(model, packed, gpu);
  const double T = 4.0 * 2048.0;
  // The checkpointed forward runs without autograd, so no layer keeps a bias; the peak is the
  // loss's backward, where no layer is recomputing: only the boolean mask is more than unpacked.
  EXPECT_EQ(p.peak_phase, Phase::backward);
  EXPECT_NEAR(term(p, "activations") - term(estimate_memory(model, plain, gpu), "activations"), T * T, 1048576.0);
}

TEST(Packing, UnderSdpaTheMaskedKernelComputesTheWholeSquare) {
  const ModelSpec model = load_model("qwen2.5-0.5b");
  const GpuSpec& gpu = find_gpu("h200");
  const TimeProfile profile = default_profile(gpu);
  const double plain = term(estimate_time(model, qwen_full(false), gpu, profile, false), "attention");
  const double packed = term(estimate_time(model, qwen_full(true), gpu, profile, false), "attention");
  // Causal rows: B x S^2 / 2 pairs; packed: the whole (B S)^2, 2B times as many.
  EXPECT_NEAR(packed / plain, 2.0 * 4.0, 1e-9);
  const double flash_plain =
      term(estimate_time(model, qwen_full(false, Attention::flash), gpu, profile, false), "attention");
  const double flash_packed =
      term(estimate_time(model, qwen_full(true, Attention::flash), gpu, profile, false), "attention");
  EXPECT_DOUBLE_EQ(flash_packed, flash_plain);
}

TEST(Packing, WhatHasNoTermIsRefusedByName) {
  const GpuSpec& gpu = find_gpu("h200");
  const auto error_of = [&](const std::string& model, TrainingSetup s) {
    s.model = model;
    try {
      (void)estimate_memory(load_model(model), s, gpu);
    } catch (const SettingError& e) {
      return std::string(e.what());
    }
    return std::string("(planned)");
  };
  EXPECT_NE(
      error_of("qwen2.5-0.5b", qwen_full(true, Attention::eager)).find("packing under eager attention is not planned"),
      std::string::npos);
  EXPECT_NE(
      error_of("granite4.0-h-350m", qwen_full(true)).find("packing is not planned for granite4.0-h-350m's Mamba-2"),
      std::string::npos);
  TrainingSetup fp32 = qwen_full(true);
  fp32.weights = DType::fp32;
  EXPECT_NE(error_of("qwen2.5-0.5b", fp32).find("SDPA's math kernel"), std::string::npos);
  TrainingSetup dpo = qwen_full(true);
  dpo.objective = Objective::dpo;
  // The setting applies to SFT only: the settings table refuses it elsewhere.
  EXPECT_THROW(validate(dpo), SettingError);
}

}  // namespace
}  // namespace trainfit
