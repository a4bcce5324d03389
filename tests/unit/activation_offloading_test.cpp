// TRL's activation offloading (docs/model.md, "Activation offloading"): every tensor autograd
// saves in the forward goes to pinned host memory and comes back in the backward; a tensor saved
// twice within five saves stays on the GPU, and so does everything around the output layer.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "support/breakdown_terms.hpp"
#include "trainfit/error.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

using testing::term;

// The measured rows' setups (data/bench/h100-trl-offload-2026-12-08): TRL with loss_type nll.
TrainingSetup trl_sft(const std::string& model, Method method, std::int64_t batch, std::int64_t seq, bool ckpt,
                      bool offloading) {
  TrainingSetup s;
  s.model = model;
  s.method = method;
  s.weights = DType::bf16;
  s.batch = batch;
  s.seq = seq;
  s.grad_ckpt = ckpt;
  s.trainer = Trainer::trl;
  s.loss = Loss::whole;
  s.activation_offloading = offloading;
  return s;
}

constexpr double kMiB = 1024.0 * 1024.0;

TEST(ActivationOffloading, CheckpointedLayersLeaveNothingOnTheGpuAtTheLoss) {
  const ModelSpec model = load_model("qwen2.5-1.5b");
  const GpuSpec& gpu = find_gpu("h100-sxm");
  const MemoryEstimate kept = estimate_memory(model, trl_sft("qwen2.5-1.5b", Method::full, 4, 2048, true, false), gpu);
  const MemoryEstimate offloaded =
      estimate_memory(model, trl_sft("qwen2.5-1.5b", Method::full, 4, 2048, true, true), gpu);
  // 28 checkpoints of 4 x 2048 x 1536 bf16 (24 MiB each) leave: measured 24,134.1 -> 23,462.1 MiB.
  EXPECT_NEAR((term(kept, "activations") - term(offloaded, "activations")) / kMiB, 28 * 24.0, 1.0);
  EXPECT_NEAR(static_cast<double>(offloaded.peak_allocated_bytes) / kMiB, 23462.1, 0.01 * 23462.1);
  // Pinned host memory: each checkpoint's 24 MiB rounds up to 32 MiB (a power of two), and the
  // log-softmax's fp32 output (8192 x 151936 x 4 bytes, 4.6 GiB) to 8 GiB.
  EXPECT_NEAR(static_cast<double>(offloaded.host_bytes) / kMiB, 28 * 32.0 + 8192.0, 1.0);
  EXPECT_EQ(kept.host_bytes, 0);
}

TEST(ActivationOffloading, WithoutCheckpointingTensorsSavedTwiceStay) {
  const ModelSpec model = load_model("qwen2.5-0.5b");
  const GpuSpec& gpu = find_gpu("h100-sxm");
  const MemoryEstimate kept = estimate_memory(model, trl_sft("qwen2.5-0.5b", Method::full, 4, 2048, false, false), gpu);
  const MemoryEstimate offloaded =
      estimate_memory(model, trl_sft("qwen2.5-0.5b", Method::full, 4, 2048, false, true), gpu);
  // A layer's two RMSNorms' fp32 inputs (pow and the product save each) and its two shared inputs
  // (k and v after q, up after gate), 4 + 4 + 2 + 2 bytes a hidden unit: 24 layers x 8192 tokens x
  // 896 x 12 bytes, 2,016 MiB, stay, with what the layers keep outside.
  const double layers_stay = 24.0 * 8192 * 896 * 12 / kMiB;
  EXPECT_GT(term(offloaded, "activations") / kMiB, layers_stay);
  EXPECT_LT(term(offloaded, "activations") / kMiB, layers_stay + 0.1 * term(kept, "activations") / kMiB);
  EXPECT_NEAR(static_cast<double>(offloaded.peak_allocated_bytes) / kMiB, 19778.8, 0.01 * 19778.8);
}

TEST(ActivationOffloading, TheCopiesGoOverTheHostLinkInSeries) {
  const ModelSpec model = load_model("qwen2.5-0.5b");
  const GpuSpec& gpu = find_gpu("h100-sxm");
  const TimeProfile profile = default_profile(gpu);
  const TimeEstimate kept =
      estimate_time(model, trl_sft("qwen2.5-0.5b", Method::full, 4, 2048, false, false), gpu, profile, false);
  const TimeEstimate offloaded =
      estimate_time(model, trl_sft("qwen2.5-0.5b", Method::full, 4, 2048, false, true), gpu, profile, false);
  EXPECT_EQ(term(kept, "offload"), 0.0);
  // Each offloaded byte goes out and comes back: twice over 0.8 of PCIe 5.0 x16's 64 GB/s a way.
  const double out = term(offloaded, "offload") * 0.8 * gpu.host_link_bytes_per_s / 2.0;
  EXPECT_GT(out, 8.0 * 1024 * 1024 * 1024);  // the layers' 8.2 GiB and the log-softmax output's 4.6 GiB
  EXPECT_LT(out, 14.0 * 1024 * 1024 * 1024);
  EXPECT_NEAR(offloaded.step_seconds, 0.6533, 0.10 * 0.6533);  // measured
  EXPECT_EQ(offloaded.bottleneck, Bottleneck::offload);
}

TEST(ActivationOffloading, RefusedWhereNoTermDescribesIt) {
  const ModelSpec model = load_model("qwen2.5-0.5b");
  const GpuSpec& gpu = find_gpu("h100-sxm");
  auto error_of = [&](TrainingSetup s) -> std::string {
    try {
      (void)make_plan(model, s, gpu);
    } catch (const SettingError& e) {
      return e.what();
    }
    return "(planned)";
  };
  TrainingSetup fsdp = trl_sft("qwen2.5-0.5b", Method::full, 1, 512, true, true);
  fsdp.gpus = 2;
  fsdp.parallel = Parallel::fsdp;
  EXPECT_NE(error_of(fsdp).find("activation offloading under fsdp is not planned"), std::string::npos);
  TrainingSetup pp = trl_sft("qwen2.5-0.5b", Method::full, 1, 512, true, true);
  pp.gpus = 2;
  pp.pp = 2;
  EXPECT_NE(error_of(pp).find("pipeline"), std::string::npos);
  TrainingSetup ddp = trl_sft("qwen2.5-0.5b", Method::full, 1, 512, true, true);
  ddp.gpus = 2;
  EXPECT_EQ(error_of(ddp), "(planned)");
}

}  // namespace
}  // namespace trainfit
