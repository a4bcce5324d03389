// Properties of the memory model that follow from how a step works, independent of calibration.
#include <gtest/gtest.h>

#include <map>

#include "support/memory_checks.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

std::map<std::string, std::int64_t> breakdown(const MemoryEstimate& e) {
  std::map<std::string, std::int64_t> m;
  for (const auto& t : e.breakdown) m[t.category] = t.bytes;
  return m;
}

MemoryEstimate estimate(const std::string& model, const TrainingSetup& s, const std::string& gpu = "h200") {
  return estimate_memory(load_model(model), s, find_gpu(gpu));
}

TEST(Memory, BreakdownSumsToThePeakAndPhasesBoundIt) {
  for (const Method method : {Method::full, Method::lora, Method::qlora}) {
    for (const bool ckpt : {false, true}) {
      TrainingSetup s;
      s.method = method;
      s.weights = method == Method::qlora ? DType::nf4 : DType::bf16;
      s.grad_ckpt = ckpt;
      const auto e = estimate("qwen2.5-1.5b", s);
      trainfit::testing::expect_breakdown_and_phases_make_the_peak(e);
      EXPECT_GT(e.peak_reserved_bytes, e.peak_allocated_bytes - 1);
      EXPECT_EQ(e.device_used_bytes, e.peak_reserved_bytes + e.cuda_context_bytes);
    }
  }
}

TEST(Memory, LoraStateIsSixteenBytesPerTrainableParameter) {
  // fp32 adapter weights + fp32 gradients + two fp32 AdamW states.
  TrainingSetup s;
  s.grad_ckpt = true;  // so the peak is not in the middle of the gradients' life
  const auto e = estimate("qwen2.5-0.5b", s);
  EXPECT_EQ(e.trainable_parameters, 8'798'208);  // measured with PEFT on the H200
  auto b = breakdown(e);
  EXPECT_EQ(b["adapters"], 4 * 8'798'208);
  EXPECT_EQ(b["optimizer_states"], 8 * 8'798'208);
  EXPECT_GE(b["weights"], 2 * 494'032'768);  // plus the allocator's block rounding
  EXPECT_LE(b["weights"], 2 * 494'032'768 + 8 * kMiB);
}

TEST(Memory, FourBitBaseStoresHalfAByteAWeightPlusBlockConstants) {
  TrainingSetup s;
  s.method = Method::qlora;
  s.weights = DType::nf4;
  const ModelSpec m = load_model("qwen2.5-7b");
  const auto pc = count_parameters(m);
  std::int64_t matrices = 0;  // quantised: every decoder weight matrix (not the biases)
  for (const auto& mod : layer_linear_modules(m)) matrices += mod.in_features * mod.out_features * mod.count;
  matrices *= m.num_layers;
  const double linear = static_cast<double>(matrices);
  auto b = breakdown(estimate_memory(m, s, find_gpu("h200")));
  // Packed weights are 0.5 byte; double-quantised constants ~1/64 byte a weight; the rest
  // (embedding, output layer, norms, biases) stays bf16.
  EXPECT_NEAR(static_cast<double>(b["quant_constants"]) / linear, (1.0 + 4.0 / 256) / 64, 1e-6);
  // The allocator rounds each tensor up to its block: at most 1 MiB more per tensor.
  const std::int64_t exact = matrices / 2 + 2 * (pc.total - matrices);
  EXPECT_GE(b["weights"], exact);
  EXPECT_LE(b["weights"], exact + (9 * m.num_layers + 3) * kMiB);
  s.quant.double_quant = false;
  auto b2 = breakdown(estimate_memory(m, s, find_gpu("h200")));
  EXPECT_NEAR(static_cast<double>(b2["quant_constants"]) / linear, 4.0 / 64, 1e-6);
}

TEST(Memory, CheckpointingTradesActivationsForRecompute) {
  TrainingSetup s;
  s.seq = 4096;
  const auto off = estimate("qwen2.5-7b", s);
  s.grad_ckpt = true;
  const auto on = estimate("qwen2.5-7b", s);
  EXPECT_LT(on.peak_allocated_bytes, off.peak_allocated_bytes);
  EXPECT_LT(breakdown(on)["activations"] * 4, breakdown(off)["activations"]);
}

TEST(Memory, EagerAttentionGrowsWithTheSquareOfTheSequence) {
  TrainingSetup s;
  s.attention = Attention::eager;
  s.seq = 1024;
  const auto e1 = estimate("qwen2.5-0.5b", s);
  s.seq = 4096;
  const auto e4 = estimate("qwen2.5-0.5b", s);
  s.attention = Attention::sdpa;
  const auto sdpa4 = estimate("qwen2.5-0.5b", s);
  const double a1 = static_cast<double>(breakdown(e1)["activations"]);
  const double a4 = static_cast<double>(breakdown(e4)["activations"]);
  EXPECT_GT(a4 / a1, 8.0);  // linear growth alone would be 4x
  EXPECT_GT(e4.peak_allocated_bytes, sdpa4.peak_allocated_bytes * 2);
}

TEST(Memory, LogitsOfALargeVocabularyDominateShortLoraSteps) {
  TrainingSetup s;
  s.seq = 2048;
  s.batch = 4;
  s.grad_ckpt = true;
  const auto e = estimate("qwen2.5-0.5b", s);
  EXPECT_EQ(e.peak_moment, "cross-entropy backward");
  // Three fp32 vocabulary-sized buffers: 8192 tokens x 151936 x 12 bytes.
  EXPECT_EQ(breakdown(e)["logits_and_loss"], std::int64_t{8192} * 151936 * 12);
}

TEST(Memory, OptimizersOrderAsTheirStates) {
  TrainingSetup s;
  s.method = Method::full;
  s.weights = DType::fp32;
  s.amp = DType::bf16;
  auto states = [&](Optimizer o) {
    s.optimizer = o;
    return breakdown(estimate("qwen2.5-0.5b", s))["optimizer_states"];
  };
  const auto adam = states(Optimizer::adamw), adam8 = states(Optimizer::adamw_8bit), sgd = states(Optimizer::sgd),
             mom = states(Optimizer::sgd_momentum), ada = states(Optimizer::adafactor);
  EXPECT_NEAR(static_cast<double>(adam), 8.0 * 494'032'768, 0.005 * 8.0 * 494'032'768);  // + block rounding
  EXPECT_EQ(mom * 2, adam);
  EXPECT_EQ(sgd, 0);
  EXPECT_LT(ada * 50, adam);
  EXPECT_LT(adam8 * 3, adam);
}

// torch's foreach AdamW keeps the same states as the fused one, and its step holds one more copy of
// the second moments (_foreach_sqrt): the optimizer moment is larger by one state's bytes.
TEST(Memory, ForeachAdamwHoldsACopyOfTheSecondMomentsInItsStep) {
  TrainingSetup s;
  s.method = Method::full;
  s.weights = DType::bf16;
  s.grad_ckpt = true;
  auto optimizer_phase = [&](const MemoryEstimate& e) {
    for (const auto& ph : e.phases)
      if (ph.phase == Phase::optimizer) return ph.allocated_bytes;
    return std::int64_t{-1};
  };
  s.optimizer = Optimizer::adamw;
  const auto fused = estimate("qwen2.5-3b", s);
  s.optimizer = Optimizer::adamw_foreach;
  const auto foreach_ = estimate("qwen2.5-3b", s);
  EXPECT_EQ(breakdown(foreach_)["optimizer_states"], breakdown(fused)["optimizer_states"]);
  const double one_moment = static_cast<double>(breakdown(fused)["optimizer_states"]) / 2;
  EXPECT_NEAR(static_cast<double>(optimizer_phase(foreach_) - optimizer_phase(fused)), one_moment, 0.001 * one_moment);
  EXPECT_EQ(foreach_.peak_phase, Phase::optimizer);
}

TEST(Memory, GradientAccumulationKeepsGradientsThroughTheNextForward) {
  TrainingSetup s;
  s.method = Method::full;
  const auto one = estimate("qwen2.5-0.5b", s);
  s.grad_accum = 4;
  const auto four = estimate("qwen2.5-0.5b", s);
  EXPECT_GT(four.peak_allocated_bytes, one.peak_allocated_bytes);
  EXPECT_NEAR(static_cast<double>(breakdown(four)["gradients"]), 2.0 * 494'032'768, 0.005 * 2.0 * 494'032'768);
}

TEST(Memory, LargestModelsAndLongestSequencesStayFinite) {
  TrainingSetup s;
  s.method = Method::full;
  s.weights = DType::fp32;
  s.seq = 1 << 15;
  s.batch = 512;
  const auto e = estimate("llama3.1-70b", s);
  EXPECT_GT(e.peak_allocated_bytes, std::int64_t{1} << 40);  // over a TiB, and no overflow
  EXPECT_GT(e.device_used_bytes, e.peak_allocated_bytes);
}

TEST(Memory, EveryBuiltinModelPlansUnderEveryMethod) {
  for (const auto& name : builtin_model_names()) {
    for (const Method method : {Method::full, Method::lora, Method::qlora}) {
      TrainingSetup s;
      s.method = method;
      s.weights = method == Method::qlora ? DType::nf4 : DType::bf16;
      const auto e = estimate(name, s);
      EXPECT_GT(e.peak_allocated_bytes, e.weights_loaded_bytes) << name << " " << to_string(method);
      EXPECT_GT(e.trainable_parameters, 0) << name;
    }
  }
}

// DDP: every GPU runs the one-GPU step and also holds the reducer's flat bucket copy of every
// trainable gradient (measured on two H200s against one: +14,556 MiB for Qwen2.5-7B full, 14,526 predicted).
TEST(MemoryDataParallel, DdpAddsOneCopyOfTheTrainableGradients) {
  for (const Method method : {Method::full, Method::lora}) {
    TrainingSetup one;
    one.method = method;
    one.seq = 2048;
    TrainingSetup two = one;
    two.gpus = 2;
    two.parallel = Parallel::ddp;
    const auto a = estimate("qwen2.5-7b", one);
    const auto b = estimate("qwen2.5-7b", two);
    const double grad_bytes = method == Method::full ? 7615616512.0 * 2.0 : static_cast<double>(a.trainable_parameters) * 4.0;
    EXPECT_NEAR(static_cast<double>(b.peak_allocated_bytes - a.peak_allocated_bytes), grad_bytes, 1.0);
    EXPECT_EQ(breakdown(b)["gradient_buckets"], static_cast<std::int64_t>(grad_bytes));
    EXPECT_EQ(breakdown(a).count("gradient_buckets"), 0u);
    // NCCL's buffers live outside the allocator: device memory only.
    EXPECT_GT(b.cuda_context_bytes, a.cuda_context_bytes);
  }
}

// FSDP: parameters, gradients and optimizer states are sharded; the root unit and the layer in
// flight are gathered whole, so the peak falls with more GPUs but never below the activations.
TEST(MemoryDataParallel, FsdpShardsStatesAndGathersTheUnitsInFlight) {
  TrainingSetup s;
  s.method = Method::full;
  s.seq = 2048;
  s.parallel = Parallel::fsdp;
  const auto one = estimate("qwen2.5-7b", s);
  std::int64_t previous = one.peak_allocated_bytes;
  for (const std::int64_t gpus : {2, 4, 8}) {
    s.gpus = gpus;
    const auto e = estimate("qwen2.5-7b", s);
    auto b = breakdown(e);
    EXPECT_LT(e.peak_allocated_bytes, previous) << gpus;
    previous = e.peak_allocated_bytes;
    // Shards: within the allocator's rounding of each shard (2 MiB a tensor at most).
    EXPECT_NEAR(static_cast<double>(b["weights"]), 7615616512.0 * 2.0 / static_cast<double>(gpus), 2.0 * 340 * kMiB);
    EXPECT_NEAR(static_cast<double>(b["optimizer_states"]), 2.0 * 7615616512.0 * 2.0 / static_cast<double>(gpus),
                4.0 * 340 * kMiB);
    // The root (embedding + untied output layer, 2 x 544.5M bf16) and one flat layer at the loss.
    EXPECT_GT(b["gathered_weights"], static_cast<std::int64_t>(2.0 * 544997376.0 * 2.0));
    EXPECT_GT(b["activations"], 0);
    for (const auto& ph : e.phases)
      if (ph.phase == Phase::optimizer) {
        EXPECT_LT(ph.allocated_bytes, e.peak_allocated_bytes);
      }
  }
  EXPECT_GT(previous, breakdown(one)["activations"]);
}

TEST(MemoryDataParallel, OneGpuIsTheSameWhateverTheParallelism) {
  TrainingSetup ddp;
  ddp.parallel = Parallel::ddp;
  TrainingSetup fsdp = ddp;
  fsdp.parallel = Parallel::fsdp;
  EXPECT_EQ(estimate("qwen2.5-3b", ddp).peak_allocated_bytes, estimate("qwen2.5-3b", fsdp).peak_allocated_bytes);
}

}  // namespace
}  // namespace trainfit
