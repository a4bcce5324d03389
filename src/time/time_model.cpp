// Step time: the GPU's work at the rates the profile says the card achieves, the host's dispatch
// work, whichever is longer, and the traffic of a system-memory fallback when the step spills.
#include <algorithm>
#include <cmath>

#include "trainfit/time.hpp"

namespace trainfit {

std::string to_string(Bottleneck b) {
  switch (b) {
    case Bottleneck::compute: return "compute";
    case Bottleneck::memory_bandwidth: return "memory-bandwidth";
    case Bottleneck::launch_overhead: return "launch-overhead";
    case Bottleneck::host_link_spill: return "host-link/spill";
    case Bottleneck::offload: return "offload";
    case Bottleneck::communication: return "communication";
    case Bottleneck::input_pipeline: return "input-pipeline";
  }
  return "?";
}

namespace {

bool has_rates(const GpuSpec& gpu) {
  const double tensor_peak = gpu.bf16_flops > 0 ? gpu.bf16_flops : gpu.fp16_flops;
  return tensor_peak > 0 && gpu.memory_bandwidth_bytes_per_s > 0 && gpu.fp32_flops > 0;
}

}  // namespace

TimeEstimate estimate_time(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu,
                           const TimeProfile& prof, bool spills) {
  if (!has_rates(gpu)) {
    TimeEstimate t;
    t.predicted = false;  // a card known only by its memory: no rates to divide by
    return t;
  }
  return estimate_time(step_work(model, setup), setup, gpu, prof, spills);
}

TimeEstimate estimate_time(const StepWork& w, const TrainingSetup& setup, const GpuSpec& gpu,
                           const TimeProfile& prof, bool spills) {
  TimeEstimate t;
  if (!has_rates(gpu)) {
    t.predicted = false;
    return t;
  }
  const double tensor_peak = gpu.bf16_flops > 0 ? gpu.bf16_flops : gpu.fp16_flops;
  const double bw = prof.bandwidth_efficiency * gpu.memory_bandwidth_bytes_per_s;
  const double matmul = w.tensor_flops / (prof.matmul_efficiency * tensor_peak);
  const double attention = w.attention_flops / (prof.attention_efficiency * tensor_peak);
  const double fp32 = w.fp32_flops / (prof.fp32_efficiency * gpu.fp32_flops) + w.adapter_bytes / bw;
  const double traffic = w.memory_bytes / bw;
  const double floor = w.kernels * prof.kernel_floor_seconds;
  // Collectives over the GPU-to-GPU link (the host link when the card has none). NCCL's kernels
  // run beside the backward's but share its SMs and memory bandwidth: counted in series (on two
  // H200s DDP's 15 GB all-reduce, 0.047 s at the measured rate, lengthened the 7B step by 0.039 s).
  double comm = 0;
  if (setup.gpus > 1) {
    const double link = gpu.gpu_link_bytes_per_s > 0 ? gpu.gpu_link_bytes_per_s : gpu.host_link_bytes_per_s;
    if (link > 0)
      comm = w.all_reduce_bytes / (prof.all_reduce_efficiency * link) +
             w.all_gather_bytes / (prof.all_gather_efficiency * link);
  }
  const double gpu_micro = matmul + attention + fp32 + traffic + floor + comm;
  const double host_micro = w.ops * prof.host_seconds_per_op;
  const double opt_gpu = w.optimizer_bytes / bw;
  const double opt_host = w.optimizer_ops * prof.host_seconds_per_op;
  const double accum = static_cast<double>(setup.grad_accum);

  // Kernels run asynchronously: the GPU and the host work side by side, and the slower of the
  // two sets the pace of each micro-batch and of the optimizer step.
  const double fitting = accum * std::max(gpu_micro, host_micro) + std::max(opt_gpu, opt_host);

  // Over capacity with a system-memory fallback, layers are visited in a cycle larger than the
  // card, so a least-recently-used pager evicts exactly what the next pass needs: every layer
  // pass pages its working set in and another out over the host link.
  double spill = 0;
  if (spills && gpu.host_link_bytes_per_s > 0) {
    spill = accum * w.layer_passes * 2.0 * w.layer_working_set_bytes / (prof.spill_efficiency * gpu.host_link_bytes_per_s);
  }
  t.step_seconds = fitting + spill;
  t.spill_seconds = spill;
  t.spill_slowdown = t.step_seconds / fitting;
  t.gpu_seconds = accum * gpu_micro + opt_gpu;
  t.host_seconds = accum * host_micro + opt_host;
  t.communication_seconds = accum * comm;
  const double tokens = static_cast<double>(setup.seq * setup.batch) * accum * static_cast<double>(setup.gpus);
  t.tokens_per_second = tokens / t.step_seconds;
  t.mfu = w.model_flops * accum / (t.step_seconds * tensor_peak);  // per GPU: model_flops is one GPU's
  // GPU terms add up to gpu_seconds, host_dispatch is host_seconds; the step is the larger of the
  // two in each micro-batch and in the optimizer step, plus any spill.
  t.breakdown = {{"matmul", accum * matmul},          {"attention", accum * attention},
                 {"adapters_fp32", accum * fp32},     {"memory_traffic", accum * traffic},
                 {"kernel_floor", accum * floor},     {"optimizer", opt_gpu},
                 {"host_dispatch", t.host_seconds},   {"spill", spill}};
  if (setup.gpus > 1) t.breakdown.push_back({"communication", accum * comm});

  // Named as a profile shows it: the host when the GPU waits on it; else the larger of the GPU
  // time in matrix kernels (GEMMs, attention, adapter GEMMs) and in elementwise kernels.
  if (spill > 0.5 * t.step_seconds) {
    t.bottleneck = Bottleneck::host_link_spill;
  } else if (host_micro > gpu_micro || floor > std::max({matmul + attention + fp32, traffic, comm})) {
    t.bottleneck = Bottleneck::launch_overhead;
  } else if (comm > std::max(matmul + attention + fp32, traffic)) {
    t.bottleneck = Bottleneck::communication;
  } else if (traffic > matmul + attention + fp32) {
    t.bottleneck = Bottleneck::memory_bandwidth;
  } else {
    t.bottleneck = Bottleneck::compute;
  }
  return t;
}

}  // namespace trainfit
