// The step time of the layouts on several GPUs (docs/model.md, "The step", "Two-GPU layouts"):
// each term against the formula it implements, so that a term left out, counted where it does
// not run, or priced twice fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "time/time_model.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

TrainingSetup full_2048(std::int64_t gpus) {
  TrainingSetup s;
  s.method = Method::full;
  s.seq = 2048;
  s.gpus = gpus;
  return s;
}

const GpuSpec& h200() { return find_gpu("h200"); }

// ---------------------------------------------------------------------------------------------
// Pipeline parallelism (1F1B)

// An event simulation of torch.distributed.pipelining's Schedule1F1B, the physics the closed form
// stands for: stage s runs min(m, p - s) forwards, then alternates a backward and a forward, then
// its remaining backwards. Each stage is its own process: its host dispatches its phases back to
// back and never waits for another stage (the receives make the GPU stream wait). A phase's GPU
// work starts when its host starts dispatching it, its GPU is free and its input has arrived (the
// previous stage's forward, the next stage's backward), runs g, and ends no earlier than its
// dispatch does.
double simulate_1f1b(int stages, int microbatches, double hf, double hb, double gf, double gb) {
  const auto p = static_cast<std::size_t>(stages), m = static_cast<std::size_t>(microbatches);
  struct Phase {
    bool forward;
    std::size_t micro;
  };
  std::vector<std::vector<Phase>> order(p);
  for (std::size_t s = 0; s < p; ++s) {
    const std::size_t warm = std::min(m, p - s);
    std::size_t f = 0, b = 0;
    for (; f < warm; ++f) order[s].push_back({true, f});
    while (true) {
      order[s].push_back({false, b++});
      if (f == m) break;
      order[s].push_back({true, f++});
    }
    while (b < m) order[s].push_back({false, b++});
  }
  // done[s][0 or 1][micro]: when that phase's GPU work ended (-1: not yet).
  std::vector<std::vector<std::vector<double>>> done(p, std::vector<std::vector<double>>(2, std::vector<double>(m, -1)));
  std::vector<double> host(p, 0.0), gpu(p, 0.0);
  std::vector<std::size_t> next(p, 0);
  std::size_t left = 0;
  for (const auto& o : order) left += o.size();
  while (left > 0) {
    bool progressed = false;
    for (std::size_t s = 0; s < p; ++s) {
      if (next[s] >= order[s].size()) continue;
      const Phase ph = order[s][next[s]];
      double ready = 0;
      if (ph.forward && s > 0) ready = done[s - 1][0][ph.micro];
      if (!ph.forward) ready = s + 1 < p ? done[s + 1][1][ph.micro] : done[s][0][ph.micro];
      if (ready < 0) continue;
      const double h = ph.forward ? hf : hb, g = ph.forward ? gf : gb;
      const double host_start = host[s];
      host[s] += h;
      const double start = std::max({gpu[s], ready, host_start});
      gpu[s] = std::max(start + g, host[s]);
      done[s][ph.forward ? 0 : 1][ph.micro] = gpu[s];
      ++next[s];
      --left;
      progressed = true;
    }
    if (!progressed) {
      ADD_FAILURE() << "the schedule deadlocked";
      return 0;
    }
  }
  return *std::max_element(gpu.begin(), gpu.end());
}

// A stage's micro-batch of g seconds on the GPU and h on the host, priced by step_seconds.
detail::StepSeconds pipeline_step(double p, double m, double h, double g, double gpu_forward, double host_forward) {
  StepWork w;
  const GpuSpec& gpu = h200();
  const TimeProfile prof = default_profile(gpu);
  w.memory_bytes = g * prof.bandwidth_efficiency * gpu.memory_bandwidth_bytes_per_s;  // g seconds of traffic
  w.ops = h / prof.host_seconds_per_op;
  w.layout.pipeline_stages = p;
  w.layout.pipeline_microbatches = m;
  w.gpu_forward_fraction = gpu_forward;
  w.host_forward_fraction = host_forward;
  return detail::step_seconds(w, {2048, 1, 1, static_cast<std::int64_t>(p)}, gpu, prof, false);
}

// The closed form follows the simulated schedule in every regime: host-bound (the host never
// waits, so no bubble on the host: m h and the last backward's walk back), GPU-bound (the
// classic (m + p - 1) g) and in between, within 5% (4.2% at worst, p = 2, m = 4, g = 0.8 h with a
// host-heavy forward and a GPU-heavy backward). Pricing every micro-batch slot at
// max(g, h), as the model did before, is up to 77% off the same simulation.
TEST(TimePipeline, ClosedFormFollowsTheSimulatedSchedule) {
  double worst = 0;
  for (const int p : {2, 3, 4, 8}) {
    for (const int m : {p, 2 * p, 16, 64}) {
      if (m < p) continue;
      for (const double ratio : {0.1, 0.5, 0.8, 0.9, 1.0, 1.1, 1.5, 4.0}) {
        for (const auto& [hf, gf] : std::vector<std::pair<double, double>>{{0.5, 1.0 / 3.0}, {0.4, 0.5}, {0.6, 0.25}}) {
          const double h = 0.05, g = ratio * h;
          const double sim = simulate_1f1b(p, m, hf * h, (1 - hf) * h, gf * g, (1 - gf) * g);
          const double model = pipeline_step(p, m, h, g, gf, hf).step;
          EXPECT_NEAR(model / sim, 1.0, 0.05) << "p " << p << " m " << m << " g/h " << ratio;
          worst = std::max(worst, std::abs(model / sim - 1));
        }
      }
    }
  }
  EXPECT_GT(worst, 0.005);  // the simulation is not the formula itself
}

TEST(TimePipeline, HostBoundStagesDispatchWithoutABubble) {
  // h = 50 ms, g = 10 ms (two thirds backward): m h + (p - 1) g_b, not (m + p - 1) h.
  const auto t = pipeline_step(2, 4, 0.050, 0.010, 1.0 / 3.0, 0.5);
  EXPECT_NEAR(t.step, 4 * 0.050 + 1 * (2.0 / 3.0) * 0.010, 1e-9);
  EXPECT_NEAR(t.bubble, (2.0 / 3.0) * 0.010, 1e-9);
  // GPU-bound: the fill and the drain are the classic p - 1 slots.
  const auto gpu_bound = pipeline_step(4, 8, 0.010, 0.050, 1.0 / 3.0, 0.5);
  EXPECT_NEAR(gpu_bound.step, (8 + 4 - 1) * 0.050, 1e-9);
  EXPECT_NEAR(gpu_bound.bubble, 3 * 0.050, 1e-9);
}

// The busiest stage: of a 28-layer model on two stages, each holds 14 layers and the last also
// the output layer and the loss; the host dispatches its own stage's operations only, and no
// data-parallel wrapper's (there is none with one replica).
TEST(TimePipeline, TheLastStageRunsHalfTheLayersAndTheOutputLayer) {
  const ModelSpec m = load_model("qwen2.5-1.5b");  // 28 layers, hidden 1536, vocabulary 151936
  const StepWork one = step_work(m, full_2048(1));
  TrainingSetup s = full_2048(2);
  s.pp = 2;
  s.microbatches = 2;
  const StepWork piped = step_work(m, s);
  const double T = 2048, V = 151936, h = 1536;
  const double output_layer = 3.0 * 2.0 * V * h * T;  // forward, input and weight gradients
  EXPECT_NEAR(piped.tensor_flops, (one.tensor_flops - output_layer) / 2 + output_layer, 1e-6 * one.tensor_flops);
  const double outside_ops = 2.0 * 32.0;  // the 32 operations outside the layers, forward and backward
  EXPECT_NEAR(piped.ops, (one.ops - outside_ops) / 2 + outside_ops, 1e-9);
  EXPECT_EQ(piped.step_ops, 0.0);
  // Each stage steps its own parameters: its 14 layers' and one vocabulary matrix.
  const double total = static_cast<double>(count_parameters(m).total);
  const double stage = (total - V * h) / 2 + V * h;  // tied: the embedding is counted once in the total
  EXPECT_NEAR(piped.optimizer_bytes / one.optimizer_bytes, stage / total, 0.002);
}

// Two stages, each over two data-parallel replicas: the schedule runs m micro-batches and DDP
// all-reduces each stage's gradients once, after the last backward (torch.distributed.pipelining
// runs the others under no_sync), as it copies into its buckets once. Charged once a micro-batch,
// the all-reduce grew with m (issue 36).
TEST(TimePipeline, TheDataParallelAllReduceIsOnceAStepWhateverTheMicroBatches) {
  const ModelSpec m = load_model("qwen2.5-1.5b");
  const GpuSpec& g = h200();
  const TimeProfile prof = default_profile(g);
  const auto priced = [&](std::int64_t gpus, std::int64_t microbatches) {
    TrainingSetup s = full_2048(gpus);
    s.pp = 2;
    s.microbatches = microbatches;
    return std::pair{step_work(m, s), estimate_time(m, s, g, prof, false)};
  };
  for (const std::int64_t micro : {2, 8, 32}) {
    const auto [work, replicated] = priced(4, micro);
    const auto [alone_work, alone] = priced(2, micro);
    ASSERT_GT(work.layout.all_reduce_bytes, 0);
    const double all_reduce = work.layout.all_reduce_bytes / (prof.all_reduce_efficiency * g.gpu_link_bytes_per_s);
    EXPECT_NEAR(replicated.communication_seconds - alone.communication_seconds, all_reduce, 1e-9 * all_reduce)
        << micro << " micro-batches";
    EXPECT_NEAR(replicated.host_seconds - alone.host_seconds, work.step_ops * prof.host_seconds_per_op, 1e-9)
        << micro << " micro-batches";
  }
}

// ---------------------------------------------------------------------------------------------
// DDP under accumulation, and layouts without a data-parallel wrapper

TEST(TimeDataParallel, DdpCopiesIntoItsBucketsOnlyInTheSynchronisingMicroBatch) {
  const ModelSpec m = load_model("qwen2.5-1.5b");
  TrainingSetup s = full_2048(1);
  s.grad_accum = 4;
  const StepWork one = step_work(m, s);
  s.gpus = 2;
  const StepWork ddp = step_work(m, s);
  const double tensors = 28 * 12 + 3;  // the model's parameter tensors
  EXPECT_EQ(ddp.ops, one.ops);         // the micro-batches' own operations
  EXPECT_EQ(ddp.step_ops, 2.0 * tensors);
  const GpuSpec& g = h200();
  const TimeProfile prof = default_profile(g);
  TrainingSetup single = s;
  single.gpus = 1;
  const double extra = estimate_time(m, s, g, prof, false).host_seconds - estimate_time(m, single, g, prof, false).host_seconds;
  EXPECT_NEAR(extra, 2.0 * tensors * prof.host_seconds_per_op, 1e-9);  // once, not once a micro-batch
}

// ---------------------------------------------------------------------------------------------
// Tensor parallelism

TEST(TimeTensorParallel, EveryOperationOnDTensorsPaysTheDispatch) {
  const ModelSpec m = load_model("qwen2.5-1.5b");
  const StepWork one = step_work(m, full_2048(1));
  TrainingSetup s = full_2048(2);
  s.tp = 2;
  const StepWork tp = step_work(m, s);
  EXPECT_NEAR(tp.ops, one.ops, 1e-9 * one.ops);  // every GPU dispatches every operation; no data-parallel wrapper
  // The counts measured on the runner's plan (data/bench/h200-dispatch-costs-world1-2026-12-01.json):
  // 77 a layer's forward, 106 its backward, 26 and 32 outside the layers.
  EXPECT_NEAR(tp.dtensor_ops, 28 * (77 + 106) + 26 + 32, 1e-9);
  const GpuSpec& g = h200();
  TimeProfile prof = default_profile(g);
  const TimeEstimate t = estimate_time(m, s, g, prof, false);
  EXPECT_NEAR(t.host_seconds, tp.ops * prof.host_seconds_per_op + tp.dtensor_ops * prof.dtensor_seconds_per_op +
                                  tp.optimizer_ops * prof.host_seconds_per_op,
              1e-9);
  EXPECT_EQ(t.bottleneck, Bottleneck::launch_overhead);
  // The dispatch cost is the profile's: twice it, twice the DTensor part.
  prof.dtensor_seconds_per_op *= 2;
  EXPECT_NEAR(estimate_time(m, s, g, prof, false).host_seconds - t.host_seconds,
              tp.dtensor_ops * prof.dtensor_seconds_per_op / 2, 1e-9);
  // The logits are gathered whole: every GPU's loss moves all 40 bytes a logit.
  EXPECT_GT(tp.memory_bytes, 40.0 * 2048 * 151936);
}

// The recompute runs the layers' forward again, its DTensor operations included; the host's
// forward share counts the forward's DTensor operations.
TEST(TimeTensorParallel, CheckpointingDispatchesTheLayersForwardOnDTensorsAgain) {
  const ModelSpec m = load_model("qwen2.5-1.5b");
  TrainingSetup s = full_2048(2);
  s.tp = 2;
  const StepWork plain = step_work(m, s);
  s.grad_ckpt = true;
  const StepWork ckpt = step_work(m, s);
  EXPECT_NEAR(ckpt.dtensor_ops - plain.dtensor_ops, 28 * 77, 1e-9);
  const double forward_ops = 28 * 50 + 32;  // the plain forward's operations (docs/model.md)
  EXPECT_NEAR(plain.host_forward_fraction, (forward_ops + 28 * 77 + 26) / (plain.ops + plain.dtensor_ops), 1e-12);
  // Under a pipeline, the busiest stage's DTensor operations: 14 layers', and those outside the
  // layers (the last stage's, as with the plain operations).
  s.grad_ckpt = false;
  s.gpus = 4;
  s.pp = 2;
  const StepWork piped = step_work(m, s);
  EXPECT_NEAR(piped.dtensor_ops, 14 * (77 + 106) + 26 + 32, 1e-9);
}

// The profile's price per DTensor operation is the in-situ measurement: a layer's step took
// 18.2 ms more host time under the plan than without it, over the 195 operations and calls the
// script counted there (its 12 gradient-accumulation add_ included, which a real step does not
// dispatch and the counts above leave out).
TEST(TimeTensorParallel, DispatchCostIsTheInSituMeasurement) {
  const TimeProfile prof = default_profile(h200());
  EXPECT_NEAR(prof.dtensor_seconds_per_op * (46 + 11 + 11 + 9 + 112 + 6), 0.018208, 0.0001);
  // What the model prices a layer's step at: the 183 operations a real step dispatches.
  EXPECT_NEAR(prof.dtensor_seconds_per_op * (77 + 106), 0.018208 * 183 / 195, 0.0001);
}

// ---------------------------------------------------------------------------------------------
// ZeRO-1: ZeroRedundancyOptimizer broadcasts every parameter tensor after the step

TEST(TimeZero, ParametersGoOutAfterTheStepOneBroadcastATensor) {
  const ModelSpec m = load_model("qwen2.5-1.5b");
  TrainingSetup s = full_2048(2);
  s.parallel = Parallel::ddp;
  const StepWork ddp = step_work(m, s);
  s.parallel = Parallel::zero1;
  const StepWork z = step_work(m, s);
  EXPECT_EQ(z.layout.step_collective_bytes, ddp.layout.all_reduce_bytes);  // the gradients' all-reduce, overlapped
  EXPECT_EQ(z.layout.post_step_collectives, 28 * 12 + 3);
  const double params = 1543714304.0 * 2;  // bf16
  EXPECT_NEAR(z.layout.post_step_collective_bytes, 0.5 * params, 0.01 * params);
  const GpuSpec& g = h200();
  const TimeProfile prof = default_profile(g);
  const auto t = detail::step_seconds(z, {2048, 1, 1, 2}, g, prof, false);
  EXPECT_NEAR(t.post_comm_host, z.layout.post_step_collectives * prof.collective_launch_seconds, 1e-12);
  EXPECT_NEAR(t.post_comm_gpu,
              z.layout.post_step_collective_bytes / (prof.all_gather_efficiency * g.gpu_link_bytes_per_s) +
                  z.layout.post_step_collectives * prof.collective_latency_seconds,
              1e-12);
  // In series with the optimizer step, never hidden behind the micro-batch's host time.
  EXPECT_NEAR(t.step, std::max(t.gpu_micro, t.host_micro) +
                          std::max(t.opt_gpu + t.post_comm_gpu, t.opt_host + t.post_comm_host),
              1e-12);
}

// ---------------------------------------------------------------------------------------------
// FSDP's mixed precision: the optimizer steps the fp32 shards; fp32 reduce-scatters move 4 bytes

TEST(TimeFsdp, MixedPrecisionStepsAndReducesInFp32) {
  const ModelSpec m = load_model("qwen2.5-1.5b");
  TrainingSetup s = full_2048(2);
  s.parallel = Parallel::fsdp;
  const StepWork bf16 = step_work(m, s);
  s.weights = DType::fp32;
  s.fsdp_param_dtype = DType::bf16;
  const StepWork mp_bf16_reduce = step_work(m, s);
  s.fsdp_reduce_dtype = DType::fp32;
  const StepWork mp = step_work(m, s);
  EXPECT_NEAR(mp.optimizer_bytes, 2.0 * bf16.optimizer_bytes, 1e-6 * bf16.optimizer_bytes);
  EXPECT_EQ(mp_bf16_reduce.layout.all_gather_bytes, bf16.layout.all_gather_bytes);
  const double grads_bf16 = 1543714304.0 * 2;
  EXPECT_NEAR(mp.layout.all_gather_bytes - bf16.layout.all_gather_bytes, 0.5 * grads_bf16, 0.01 * grads_bf16);
}

}  // namespace
}  // namespace trainfit
