// The layouts on several GPUs (docs/model.md, "Several GPUs"): what each GPU stores follows from
// what the layout shards, offloads or splits, for any GPU count; cross-checked against DeepSpeed's
// own estimators; combinations that cannot run are refused with the reason.
#include "step/layout.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

std::map<std::string, double> breakdown(const MemoryEstimate& e) {
  std::map<std::string, double> m;
  for (const auto& t : e.breakdown) m[t.category] = static_cast<double>(t.bytes);
  return m;
}

MemoryEstimate estimate(const std::string& model, const TrainingSetup& s, const std::string& gpu = "h100-sxm") {
  return estimate_memory(load_model(model), s, find_gpu(gpu));
}

TrainingSetup full_on(std::int64_t gpus, Parallel parallel) {
  TrainingSetup s;
  s.method = Method::full;
  s.seq = 2048;
  s.grad_ckpt = true;
  s.gpus = gpus;
  s.parallel = parallel;
  return s;
}

double params(const std::string& model) {
  return static_cast<double>(count_parameters(load_model(model)).total);
}

// From eight GPUs on: on two, DeepSpeed's bf16 mode (zero2, zero3: fp32 master weights, states
// and gradient partition, 16 bytes a parameter over the partition) holds more than zero1's pure
// bf16 AdamW (4 bytes a parameter of states over the partition, 6 whole).
TEST(Layout, EachZeroStageStoresLessThanTheOneBefore) {
  for (const std::int64_t n : {8, 16, 64}) {
    const double ddp = static_cast<double>(estimate("llama3.1-8b", full_on(n, Parallel::ddp)).peak_allocated_bytes);
    const double z1 = static_cast<double>(estimate("llama3.1-8b", full_on(n, Parallel::zero1)).peak_allocated_bytes);
    const double z2 = static_cast<double>(estimate("llama3.1-8b", full_on(n, Parallel::zero2)).peak_allocated_bytes);
    const double z3 = static_cast<double>(estimate("llama3.1-8b", full_on(n, Parallel::zero3)).peak_allocated_bytes);
    EXPECT_GT(ddp, z1) << n;
    EXPECT_GT(z1, z3) << n;
    EXPECT_GT(z2, z3) << n;
  }
}

TEST(Layout, ZeroOneDividesTheOptimizerStatesByTheGpus) {
  const double p = params("qwen2.5-7b");
  for (const std::int64_t n : {2, 8}) {
    auto b = breakdown(estimate("qwen2.5-7b", full_on(n, Parallel::zero1)));
    // Two bf16 AdamW states per parameter, a 1/n share each (plus the block rounding's share).
    EXPECT_NEAR(b["optimizer_states"], 4.0 * p / static_cast<double>(n), 0.01 * 4.0 * p / static_cast<double>(n)) << n;
    EXPECT_NEAR(b["gradient_buckets"], 2.0 * p, 0.001 * 2.0 * p);
  }
}

// DeepSpeed's estimators (deepspeed/runtime/zero/stage_1_and_2.py and stage3.py): in bf16 mode,
// without offload, a GPU holds 4 P + 16 P / N of model states at stage 2 and 18 P / N (plus the
// largest layer gathered) at stage 3.
TEST(Layout, DeepSpeedStatesMatchItsOwnEstimators) {
  const double p = params("llama3.1-8b");
  for (const std::int64_t n : {2, 8, 32}) {
    const double shard = 1.0 / static_cast<double>(n);
    TrainingSetup s = full_on(n, Parallel::zero3);
    auto b = breakdown(estimate("llama3.1-8b", s));
    const double states = b["weights"] + b["master_weights"] + b["optimizer_states"];
    // The fp32 gradient partition is in `gradients` at the optimizer step.
    EXPECT_NEAR(states, 14.0 * p * shard, 0.01 * 14.0 * p * shard) << n;
    MemoryEstimate e = estimate("llama3.1-8b", s);
    double partition = 0;
    for (const auto& t : e.breakdown)
      if (t.category == "gradients") partition = static_cast<double>(t.bytes);
    EXPECT_GE(partition, 0.0);

    s.parallel = Parallel::zero2;
    b = breakdown(estimate("llama3.1-8b", s));
    EXPECT_NEAR(b["weights"], 2.0 * p, 0.01 * 2.0 * p) << n;
    EXPECT_NEAR(b["master_weights"] + b["optimizer_states"], 12.0 * p * shard, 0.01 * 12.0 * p * shard) << n;
  }
}

TEST(Layout, OffloadMovesTheOptimizerToTheHostOfEveryGpu) {
  TrainingSetup s = full_on(8, Parallel::zero3);
  const auto on_gpu = estimate("llama3.1-8b", s);
  s.offload = Offload::optimizer;
  const auto offloaded = estimate("llama3.1-8b", s);
  auto b = breakdown(offloaded);
  EXPECT_EQ(b["optimizer_states"], 0.0);
  EXPECT_EQ(b["master_weights"], 0.0);
  EXPECT_LT(offloaded.peak_allocated_bytes, on_gpu.peak_allocated_bytes);
  // Eight GPUs of one host: 16 bytes a parameter (master, two states, gradient partition) in all.
  const double p = params("llama3.1-8b");
  EXPECT_NEAR(static_cast<double>(offloaded.host_bytes), 16.0 * p, 0.01 * 16.0 * p);
  EXPECT_EQ(on_gpu.host_bytes, 0);
  // Over two hosts, each holds its own GPUs' partitions: half.
  s.nodes = 2;
  EXPECT_NEAR(static_cast<double>(estimate("llama3.1-8b", s).host_bytes), 8.0 * p, 0.01 * 8.0 * p);
}

TEST(Layout, SeventyBillionFullFineTuningFitsEightH100sUnderZeroThreeWithTheOptimizerOffloaded) {
  TrainingSetup s = full_on(8, Parallel::zero3);
  s.seq = 4096;
  s.offload = Offload::optimizer;
  const ModelSpec m = load_model("llama3.1-70b");
  const GpuSpec& h100 = find_gpu("h100-sxm");
  const Plan plan = make_plan(m, s, h100);
  EXPECT_EQ(plan.verdict, Verdict::fits);
  EXPECT_GT(plan.memory.host_bytes, 500LL * kGiB);
  // About 1 TiB on the host, 131 GiB a GPU: within what an 8-GPU server has, no warning. On two
  // GPUs the same states need 526 GiB a GPU: the plan says so.
  const auto host_warning = [](const Plan& p) {
    return std::any_of(p.warnings.begin(), p.warnings.end(),
                       [](const std::string& w) { return w.find("host memory") != std::string::npos; });
  };
  EXPECT_FALSE(host_warning(plan));
  TrainingSetup two = s;
  two.gpus = 2;
  EXPECT_TRUE(host_warning(make_plan(m, two, h100)));
  s.offload = Offload::none;
  s.parallel = Parallel::ddp;
  EXPECT_EQ(make_plan(m, s, h100).verdict, Verdict::oom);
}

TEST(Layout, FsdpMixedPrecisionKeepsFp32ShardsAndComputesInBf16) {
  TrainingSetup s = full_on(2, Parallel::fsdp);
  s.weights = DType::fp32;
  const auto fp32 = estimate("qwen2.5-1.5b", s);
  s.fsdp_param_dtype = DType::bf16;
  const auto mixed = estimate("qwen2.5-1.5b", s);
  const double p = params("qwen2.5-1.5b");
  auto b = breakdown(mixed);
  // fp32 shards and fp32 AdamW states, half of them on each of the two GPUs.
  // (Plus each shard's allocator block rounding: up to 6% on this model's small shards.)
  EXPECT_GE(b["weights"], 4.0 * p / 2.0);
  EXPECT_LE(b["weights"], 1.06 * 4.0 * p / 2.0);
  EXPECT_GE(b["optimizer_states"], 8.0 * p / 2.0);
  EXPECT_LE(b["optimizer_states"], 1.06 * 8.0 * p / 2.0);
  // bf16 activations and gathered layers: less than the pure fp32 step.
  EXPECT_LT(mixed.peak_allocated_bytes, fp32.peak_allocated_bytes);
  EXPECT_LT(breakdown(mixed)["gathered_weights"], breakdown(fp32)["gathered_weights"]);
}

TEST(Layout, GradOpKeepsEveryLayerGatheredUntilItsBackward) {
  TrainingSetup s = full_on(2, Parallel::fsdp);
  s.grad_ckpt = false;
  const auto fsdp = estimate("qwen2.5-3b", s, "h200");
  s.parallel = Parallel::fsdp_grad_op;
  const auto grad_op = estimate("qwen2.5-3b", s, "h200");
  // Every layer whole (bf16) at the loss: about the whole model's bf16 weights more.
  const double p = params("qwen2.5-3b");
  EXPECT_GT(grad_op.peak_allocated_bytes, fsdp.peak_allocated_bytes + static_cast<std::int64_t>(0.5 * 2.0 * p));
}

TEST(Layout, TensorParallelismDividesWeightsAndActivations) {
  TrainingSetup s = full_on(1, Parallel::ddp);
  s.grad_ckpt = false;  // the peak in the backward, with every layer's saved tensors, on one GPU and on t
  auto one = breakdown(estimate("llama3.1-8b", s));
  for (const std::int64_t t : {2, 4, 8}) {
    s.gpus = t;
    s.tp = t;
    auto split = breakdown(estimate("llama3.1-8b", s));
    const double td = static_cast<double>(t);
    EXPECT_NEAR(split["weights"], one["weights"] / td, 0.01 * one["weights"] / td) << t;
    EXPECT_NEAR(split["activations"], one["activations"] / td, 0.05 * one["activations"] / td) << t;
  }
}

TEST(Layout, PipelineFirstStageKeepsAMicroBatchPerStageInFlight) {
  TrainingSetup s = full_on(4, Parallel::ddp);
  s.grad_ckpt = false;
  s.pp = 4;
  s.microbatches = 8;
  const auto e = estimate("llama3.1-8b", s, "h200");
  // Llama-3.1-8B's untied 128k-vocabulary output layer and its logits weigh on the last stage;
  // the first keeps four micro-batches of its eight layers' activations. Either way one stage.
  EXPECT_TRUE(e.pipeline_stage == 0 || e.pipeline_stage == 3);
  TrainingSetup one = s;
  one.gpus = 1;
  one.pp = 1;
  const auto whole = estimate("llama3.1-8b", one, "h200");
  auto b = breakdown(e);
  // A quarter of the layers' weights (plus the embedding or the output layer).
  EXPECT_LT(b.at("weights"), 0.45 * breakdown(whole).at("weights"));
  // 1F1B keeps pp - stage micro-batches in flight on a stage: the first stage, 4 micro-batches x 8
  // layers, holds as many layers' saved tensors as the whole model does for one micro-batch; the
  // last, one micro-batch, with the output layer and the loss.
  s.microbatches = 4;
  const ModelSpec llama = load_model("llama3.1-8b");
  const detail::PipelineStage first = detail::first_stage(llama, detail::layout_of(s));
  EXPECT_EQ(first.in_flight * first.layers, 32.0);
  EXPECT_EQ(first.in_flight, 4.0);
  EXPECT_TRUE(first.embedding);
  EXPECT_FALSE(first.head);
  const detail::PipelineStage last = detail::last_stage(llama, detail::layout_of(s));
  EXPECT_EQ(last.in_flight, 1.0);
  EXPECT_EQ(last.layers, 8.0);
  EXPECT_TRUE(last.head);
  // Fewer micro-batches than stages: no more in flight than there are.
  s.microbatches = 2;
  EXPECT_EQ(detail::first_stage(llama, detail::layout_of(s)).in_flight, 2.0);
}

// Schedule1F1B's last stage keeps every micro-batch's output (output_chunks) to the step's end: each
// micro-batch more adds one logits-sized tensor in bf16 (Qwen2.5-0.5B's 151,936 x 2048 x 2 bytes)
// to its peak, measured as 596-597 MiB on two H200s. The first stage's second backward at m = pp
// has one micro-batch in flight beside the gradients: its peak rises once, from m = 2 to 3.
TEST(Layout, PipelineLastStageKeepsEveryMicroBatchsOutput) {
  TrainingSetup s = full_on(2, Parallel::ddp);
  s.grad_ckpt = false;
  s.seq = 2048;
  s.pp = 2;
  const auto peak_at = [&](std::int64_t m) {
    s.microbatches = m;
    return estimate("qwen2.5-0.5b", s, "h200");
  };
  const double logits = 151936.0 * 2048 * 2;
  const auto m3 = peak_at(3), m4 = peak_at(4), m8 = peak_at(8);
  EXPECT_EQ(m4.pipeline_stage, 1);
  EXPECT_NEAR(static_cast<double>(m4.peak_allocated_bytes - m3.peak_allocated_bytes), logits, 0.01 * logits);
  EXPECT_NEAR(static_cast<double>(m8.peak_allocated_bytes - m4.peak_allocated_bytes), 4 * logits, 0.01 * logits);
  const ModelSpec qwen = load_model("qwen2.5-0.5b");
  EXPECT_TRUE(detail::last_stage(qwen, detail::layout_of(s)).keeps_outputs);
  EXPECT_FALSE(detail::first_stage(qwen, detail::layout_of(s)).keeps_outputs);
}

TEST(Layout, ContextParallelismDividesTheTokens) {
  TrainingSetup s = full_on(1, Parallel::ddp);
  s.seq = 32768;
  auto one = breakdown(estimate("llama3.1-8b", s, "h200"));
  s.gpus = 4;
  s.cp = 4;
  s.parallel = Parallel::fsdp;
  auto split = breakdown(estimate("llama3.1-8b", s, "h200"));
  EXPECT_NEAR(split.at("activations"), one.at("activations") / 4.0, 0.05 * one.at("activations") / 4.0);
}

// data/measurements/h200x2-ddp-busiest-rank-2026-11-30.json: a plain DDP loop on two H200s, its
// busiest rank's max_memory_allocated over the whole run (the second step holds DDP's first
// buckets beside the rebuilt ones).
TEST(Layout, DdpBusiestRankHoldsTheFirstBucketsToo) {
  const std::vector<std::pair<std::string, double>> measured = {{"qwen2.5-1.5b", 24190.7}, {"llama3.2-3b", 40934.2}};
  for (const auto& [model, mib] : measured) {
    TrainingSetup s = full_on(2, Parallel::ddp);
    s.grad_ckpt = false;
    const auto e = estimate(model, s, "h200");
    EXPECT_EQ(e.busiest_peak_allocated_bytes - e.peak_allocated_bytes,
              static_cast<std::int64_t>(breakdown(e).at("gradient_buckets")))
        << model;
    EXPECT_NEAR(static_cast<double>(e.busiest_peak_allocated_bytes) / static_cast<double>(kMiB), mib, 0.01 * mib)
        << model;
    s.parallel = Parallel::fsdp;  // no reducer, no rebuilt buckets
    const auto f = estimate(model, s, "h200");
    EXPECT_EQ(f.busiest_peak_allocated_bytes, f.peak_allocated_bytes) << model;
  }
}

void expect_refused(const std::string& model, const TrainingSetup& s, const std::string& setting,
                    const std::string& words) {
  try {
    (void)estimate(model, s);
    FAIL() << "accepted; expected a refusal naming " << setting;
  } catch (const SettingError& e) {
    EXPECT_EQ(e.setting(), setting);
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(Layout, LayoutsThatCannotRunAreRefusedWithTheReason) {
  TrainingSetup s = full_on(16, Parallel::fsdp);
  s.tp = 16;  // Llama-3.1-8B has 8 key/value heads
  expect_refused("llama3.1-8b", s, "tp", "key/value heads");
  s.tp = 1;
  s.gpus = 64;
  s.pp = 64;
  s.microbatches = 64;
  expect_refused("llama3.1-8b", s, "pp", "32 layers");
  TrainingSetup o = full_on(8, Parallel::ddp);
  o.offload = Offload::optimizer;
  expect_refused("llama3.1-8b", o, "offload", "ddp");
  o.parallel = Parallel::zero2;
  o.offload = Offload::params;
  expect_refused("llama3.1-8b", o, "offload", "zero3");
  o.parallel = Parallel::fsdp;
  o.offload = Offload::optimizer;
  expect_refused("llama3.1-8b", o, "offload", "optimizer,params");
  TrainingSetup g = full_on(6, Parallel::fsdp);
  g.tp = 4;
  expect_refused("llama3.1-8b", g, "gpus", "tp x pp x cp");
  TrainingSetup p = full_on(4, Parallel::ddp);
  p.pp = 4;
  p.microbatches = 2;
  expect_refused("llama3.1-8b", p, "microbatches", "at least 4");
}

TEST(Layout, HostAndNetworkTermsAppearInTheStepTime) {
  TrainingSetup s = full_on(16, Parallel::fsdp);
  s.nodes = 2;
  const ModelSpec m = load_model("llama3.1-8b");
  const GpuSpec& h100 = find_gpu("h100-sxm");
  const TimeProfile prof = default_profile(h100);
  const auto fsdp = estimate_time(m, s, h100, prof, false);
  s.parallel = Parallel::hsdp;
  const auto hsdp = estimate_time(m, s, h100, prof, false);
  // FSDP over two hosts gathers across the network; HSDP gathers within the host.
  EXPECT_GT(fsdp.communication_seconds, hsdp.communication_seconds);
  s.offload = Offload::optimizer_params;
  const auto offloaded = estimate_time(m, s, h100, prof, false);
  EXPECT_GT(offloaded.offload_seconds, 0.0);
  s.offload = Offload::none;
  s.parallel = Parallel::ddp;
  s.nodes = 1;
  s.gpus = 4;
  s.pp = 4;
  s.microbatches = 4;
  const auto piped = estimate_time(m, s, h100, prof, false);
  // 1F1B with 4 stages and 4 micro-batches idles 3 of 7 slots.
  EXPECT_NEAR(piped.pipeline_bubble_seconds / piped.step_seconds, 3.0 / 7.0, 0.05);
}

}  // namespace
}  // namespace trainfit
