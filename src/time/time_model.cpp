// Step time: the GPU's work at the rates the profile says the card achieves, the host's dispatch
// work, whichever is longer, and the traffic of a system-memory fallback when the step spills.
#include <algorithm>
#include <cmath>

#include "time/time_model.hpp"
#include "trainfit/time.hpp"

namespace trainfit {

namespace detail {

bool has_rates(const GpuSpec& gpu) {
  const double tensor_peak = gpu.bf16_flops > 0 ? gpu.bf16_flops : gpu.fp16_flops;
  return tensor_peak > 0 && gpu.memory_bandwidth_bytes_per_s > 0 && gpu.fp32_flops > 0;
}

namespace {

// GRPO's generate() calls, their share of one optimizer step (docs/model.md, "Generation"). A call
// makes the completions of batch x steps_per_generation rows: a prefill (one forward over the
// prompts) and completion - 1 decoding steps (one token of every row each). generate() reads a
// tensor back to the host every decoding step (its stopping criteria), so each step takes the
// longer of the host's dispatch and the GPU's work, and nothing of one step overlaps the next.
double generation_seconds(const GenerationWork& g, const StepCounts& counts, const TimeProfile& prof,
                          double tensor_peak, double bw, bool& host_bound) {
  const double accum = static_cast<double>(counts.grad_accum);
  const double spg = static_cast<double>(generation_steps(g.steps_per_generation, counts.grad_accum));
  const double batch = static_cast<double>(counts.batch);
  const double rows = batch * spg;
  const double calls = accum / (spg * g.iterations);  // a call every spg x iterations micro-batches
  const double mm = prof.matmul_efficiency * tensor_peak, at = prof.attention_efficiency * tensor_peak;
  const double floor = g.kernels * prof.kernel_floor_seconds;
  const double host =
      g.layer_ops * prof.decode_seconds_per_op + g.adapters * prof.decode_adapter_seconds + prof.decode_loop_seconds;
  // The prefill: every prompt token through the layers, attending to half the prompt on average;
  // its keys and values written to the cache.
  const double P = g.prompt, C = g.completion;
  const double prefill_gpu =
      rows * P * g.flops_per_token / mm + rows * P * (P / 2.0) * g.attention_flops_per_token_position / at +
      rows * g.head_flops_per_row / mm +
      (g.weight_bytes + rows * P * g.cache_bytes_per_position + rows * g.logits_bytes_per_row) / bw + floor;
  // A decoding step at the mean context: one token a row; every weight read once; the cache read
  // by attention, and read and written again by the dynamic cache's torch.cat that appends the
  // step's keys and values.
  const double context = P + C / 2.0;
  const double decode_gpu =
      rows * (g.flops_per_token + g.head_flops_per_row) / mm +
      rows * context * g.attention_flops_per_token_position / at +
      (g.weight_bytes + 3.0 * rows * context * g.cache_bytes_per_position + rows * g.logits_bytes_per_row) / bw + floor;
  host_bound = host > decode_gpu;
  double call = std::max(prefill_gpu, host) + std::max(0.0, C - 1.0) * std::max(decode_gpu, host);
  // The old policy's log-probabilities (num_iterations above 1, or a generation serving more
  // micro-batches than a step has): a forward without autograd over each micro-batch of the
  // generation batch, the completion's logits only.
  if (g.iterations > 1 || spg > accum) {
    const double S = P + C;
    const double score_gpu = batch * S * g.score_flops_per_token / mm +
                             batch * S * (S / 2.0) * g.attention_flops_per_token_position / at + g.weight_bytes / bw +
                             floor;
    call += spg * std::max(score_gpu, host);
  }
  return calls * call;
}

}  // namespace

StepSeconds step_seconds(const StepWork& w, const StepCounts& counts, const GpuSpec& gpu, const TimeProfile& prof,
                         bool spills) {
  StepSeconds t;
  const double tensor_peak = t.tensor_peak = gpu.bf16_flops > 0 ? gpu.bf16_flops : gpu.fp16_flops;
  const double bw = prof.bandwidth_efficiency * gpu.memory_bandwidth_bytes_per_s;
  t.matmul = w.tensor_flops / (prof.matmul_efficiency * tensor_peak);
  t.attention = w.attention_flops / (prof.attention_efficiency * tensor_peak);
  t.fp32 = w.fp32_flops / (prof.fp32_efficiency * gpu.fp32_flops) + w.adapter_bytes / bw;
  // A broadcast kernel of a rank-5 or rank-6 tensor computes each element's offsets into its
  // operands dimension by dimension (a division and a remainder a dimension) before it moves the
  // element: it takes the longer of its bytes at the bandwidth and that arithmetic at the CUDA
  // cores' rate (docs/model.md, "Mamba-2 layers").
  t.traffic = w.memory_bytes / bw + std::max(w.broadcast_elements * kBroadcastElementBytes / bw,
                                             w.broadcast_elements * prof.broadcast_ops_per_element / gpu.fp32_flops);
  t.floor = w.kernels * prof.kernel_floor_seconds;
  // Collectives over the GPU-to-GPU link (the host link when the card has none); a data-parallel
  // group spread over several hosts goes at the network's pace. NCCL's kernels run beside the
  // backward's but share its SMs and memory bandwidth: counted in series (on two H200s DDP's
  // 15 GB all-reduce, 0.047 s at the measured rate, lengthened the 7B step by 0.039 s).
  const double accum = t.accum = static_cast<double>(counts.grad_accum);
  // The micro-batches a step runs on each GPU: the accumulation's, each a pipeline's m. What
  // happens once a step (DDP's gradient all-reduce after the last backward, ZeRO's reduction, the
  // bucket copies that go with them) is spread over all of them, not over the accumulation's alone:
  // under a pipeline it was charged m times a step (issue 36: a 1T-parameter layout's
  // communication went 0.9 s to 150 s from one data-parallel replica to two).
  const double step_micro_batches = accum * std::max(1.0, w.layout.pipeline_microbatches);
  if (counts.gpus > 1) {
    const double link = gpu.gpu_link_bytes_per_s > 0 ? gpu.gpu_link_bytes_per_s : gpu.host_link_bytes_per_s;
    const double network = gpu.network_bytes_per_s > 0 ? std::min(link, gpu.network_bytes_per_s) : link;
    const double dp_link = w.layout.dp_crosses_hosts ? network : link;
    const double reduce_rate = prof.all_reduce_efficiency * dp_link;
    const double gather_rate = prof.all_gather_efficiency * dp_link;
    if (link > 0) {
      // Once-a-step collectives are spread over the step's micro-batches.
      t.comm = (w.layout.all_reduce_bytes + w.layout.step_collective_bytes) / step_micro_batches / reduce_rate +
               w.layout.all_gather_bytes / gather_rate +
               w.layout.network_bytes / step_micro_batches / (prof.all_reduce_efficiency * network) +
               w.model_parallel_bytes / (prof.all_gather_efficiency * link);
    }
    // After the optimizer step, ZeRO-1/2 send each GPU's updated parameters to the others: in
    // series with the step (nothing is left to overlap them with), each collective launched from
    // Python on the host and taking at least a small collective's latency on the GPU.
    if (link > 0 && w.layout.post_step_collectives > 0) {
      t.post_comm_gpu = w.layout.post_step_collective_bytes / gather_rate + w.layout.post_step_collectives * prof.collective_latency_seconds;
      t.post_comm_host = w.layout.post_step_collectives * prof.collective_launch_seconds;
    }
  }
  // Offloading (a sharded layout's states or parameters, or one GPU's activations): pinned copies
  // over the host link, and the optimizer step on the CPU.
  if (gpu.host_link_bytes_per_s > 0) {
    const double host_link = kPinnedCopyEfficiency * gpu.host_link_bytes_per_s;
    t.offload_micro = w.layout.offload_micro_bytes / host_link;
    t.offload_step =
        w.layout.offload_step_bytes / host_link + w.layout.host_optimizer_bytes / kHostOptimizerBytesPerSecond;
  }
  t.gpu_micro = t.matmul + t.attention + t.fp32 + t.traffic + t.floor + t.comm + t.offload_micro;
  // Host: the micro-batch's operations, its share of the once-a-step ones (DDP's bucket copies,
  // in the synchronising micro-batch), and DTensor's dispatch on top of the operations on DTensors.
  t.host_micro = (w.ops + w.step_ops / step_micro_batches) * prof.host_seconds_per_op +
                 w.dtensor_ops * prof.dtensor_seconds_per_op;
  t.opt_gpu = w.optimizer_bytes / bw + t.offload_step;
  t.opt_host = w.optimizer_ops * prof.host_seconds_per_op;

  // Kernels run asynchronously: the GPU and the host work side by side, and the slower of the
  // two sets the pace of each micro-batch and of the optimizer step (with what follows it).
  const double slot = std::max(t.gpu_micro, t.host_micro);
  double micro_batches = accum * slot;
  if (w.layout.pipeline_stages > 1) {
    // 1F1B over p stages, m micro-batches, each stage its own process (docs/model.md, "The
    // step"): a stage's host never waits for another's (the schedule's receives make the GPU
    // stream wait, not the host), so the host dispatches its m micro-batches back to back, while
    // the GPUs fill and drain. The last stage starts once every stage before it has run its first
    // forward, runs its m micro-batches, and the last backward walks back through the p - 1
    // stages before it. With g, h a micro-batch's GPU and host time on the busiest stage and f, b
    // their forward and backward parts:
    //   pipeline = max(m h, m g + max(h_f, g_f) + (p - 2) g_f) + (p - 1) g_b
    // Host-bound (h > g): m h + (p - 1) g_b, no bubble for the host; GPU-bound: (m + p - 1) g,
    // the classic bubble. Within 5% of an event simulation of the schedule (every stage's host
    // and GPU, p = 2..8, m = p..64, g/h = 0.1..4; tests/unit/time_layouts_test.cpp has it).
    const double m = w.layout.pipeline_microbatches, p = w.layout.pipeline_stages;
    const double g = t.gpu_micro, h = t.host_micro;
    const double gf = w.gpu_forward_fraction * g, gb = g - gf, hf = w.host_forward_fraction * h;
    const double pipeline = std::max(m * h, m * g + std::max(hf, gf) + (p - 2.0) * gf) + (p - 1.0) * gb;
    t.bubble = accum * (pipeline - m * slot);
    micro_batches = accum * pipeline;
  }
  t.fitting = micro_batches + std::max(t.opt_gpu + t.post_comm_gpu, t.opt_host + t.post_comm_host);
  // GRPO's generation runs before the micro-batches it serves, in series with them.
  if (w.generation.on) {
    t.generation = generation_seconds(w.generation, counts, prof, tensor_peak, bw, t.generation_host_bound);
    t.fitting += t.generation;
  }

  // Over capacity with a system-memory fallback, layers are visited in a cycle larger than the
  // card, so a least-recently-used pager evicts exactly what the next pass needs: every layer
  // pass pages its working set in and another out over the host link.
  if (spills && gpu.host_link_bytes_per_s > 0) {
    t.spill = accum * w.layer_passes * 2.0 * w.layer_working_set_bytes /
              (prof.spill_efficiency * gpu.host_link_bytes_per_s);
  }
  t.step = t.fitting + t.spill;
  const double tokens = static_cast<double>(counts.seq * counts.batch) * accum * w.layout.pipeline_microbatches * w.layout.data_parallel *
                        w.sequences_per_example;
  t.tokens_per_second = tokens / t.step;
  return t;
}

}  // namespace detail

TimeEstimate estimate_time(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu,
                           const TimeProfile& prof, bool spills) {
  if (!detail::has_rates(gpu)) {
    TimeEstimate t;
    t.predicted = false;  // a card known only by its memory: no rates to divide by
    return t;
  }
  return estimate_time(step_work(model, setup), setup, gpu, prof, spills);
}

TimeEstimate estimate_time(const StepWork& w, const TrainingSetup& setup, const GpuSpec& gpu,
                           const TimeProfile& prof, bool spills) {
  TimeEstimate t;
  if (!detail::has_rates(gpu)) {
    t.predicted = false;
    return t;
  }
  const detail::StepSeconds s =
      detail::step_seconds(w, {setup.seq, setup.batch, setup.grad_accum, setup.gpus}, gpu, prof, spills);
  const double accum = s.accum;
  t.step_seconds = s.step;
  t.spill_seconds = s.spill;
  t.spill_slowdown = t.step_seconds / s.fitting;
  const double micro = accum * w.layout.pipeline_microbatches;
  t.gpu_seconds = micro * s.gpu_micro + s.opt_gpu + s.post_comm_gpu;
  t.host_seconds = micro * s.host_micro + s.opt_host + s.post_comm_host;
  t.communication_seconds = accum * w.layout.pipeline_microbatches * s.comm + s.post_comm_gpu;
  t.pipeline_bubble_seconds = s.bubble;
  t.offload_seconds = accum * w.layout.pipeline_microbatches * s.offload_micro + s.offload_step;
  t.generation_seconds = s.generation;
  t.tokens_per_second = s.tokens_per_second;
  t.mfu = w.model_flops * micro / (t.step_seconds * s.tensor_peak);  // per GPU: model_flops is one GPU's
  // GPU terms add up to gpu_seconds, host_dispatch is host_seconds; the step is the larger of the
  // two in each micro-batch and in the optimizer step, plus any spill.
  t.breakdown = {{"matmul", micro * s.matmul},          {"attention", micro * s.attention},
                 {"adapters_fp32", micro * s.fp32},     {"memory_traffic", micro * s.traffic},
                 {"kernel_floor", micro * s.floor},     {"optimizer", s.opt_gpu - s.offload_step},
                 {"host_dispatch", t.host_seconds},     {"spill", s.spill}};
  if (setup.gpus > 1) t.breakdown.push_back({"communication", t.communication_seconds});
  if (w.layout.pipeline_stages > 1) t.breakdown.push_back({"pipeline_bubble", s.bubble});
  if (t.offload_seconds > 0) t.breakdown.push_back({"offload", t.offload_seconds});
  if (s.generation > 0) t.breakdown.push_back({"generation", s.generation});

  // The critical path: each micro-batch's slot is the GPU's terms when the GPU is the slower, else
  // the host's dispatch; the optimizer step likewise; then the bubble and the spill.
  const bool gpu_paces_micro = s.gpu_micro >= s.host_micro;
  const bool gpu_paces_step = s.opt_gpu + s.post_comm_gpu >= s.opt_host + s.post_comm_host;
  const double g = gpu_paces_micro ? micro : 0.0;
  t.critical_path = {{"matmul", g * s.matmul},
                     {"attention", g * s.attention},
                     {"adapters_fp32", g * s.fp32},
                     {"memory_traffic", g * s.traffic},
                     {"kernel_floor", g * s.floor},
                     {"optimizer", gpu_paces_step ? s.opt_gpu - s.offload_step : 0.0},
                     {"host_dispatch", (gpu_paces_micro ? 0.0 : micro * s.host_micro) +
                                           (gpu_paces_step ? 0.0 : s.opt_host + s.post_comm_host)},
                     {"spill", s.spill}};
  if (setup.gpus > 1) t.critical_path.push_back({"communication", g * s.comm + (gpu_paces_step ? s.post_comm_gpu : 0.0)});
  if (w.layout.pipeline_stages > 1) t.critical_path.push_back({"pipeline_bubble", s.bubble});
  if (t.offload_seconds > 0) t.critical_path.push_back({"offload", g * s.offload_micro + (gpu_paces_step ? s.offload_step : 0.0)});
  if (s.generation > 0) t.critical_path.push_back({"generation", s.generation});

  // Named as a profile shows it: the host when the GPU waits on it; else the larger of the GPU
  // time in matrix kernels (GEMMs, attention, adapter GEMMs) and in elementwise kernels.
  const double matrix = s.matmul + s.attention + s.fp32;
  if (s.spill > 0.5 * t.step_seconds) {
    t.bottleneck = Bottleneck::host_link_spill;
  } else if (s.generation > 0.5 * t.step_seconds) {
    // Decoding a token at a time: the host's dispatch, or streaming every weight once a token.
    t.bottleneck = s.generation_host_bound ? Bottleneck::launch_overhead : Bottleneck::memory_bandwidth;
  } else if (s.host_micro > s.gpu_micro || s.floor > std::max({matrix, s.traffic, s.comm})) {
    t.bottleneck = Bottleneck::launch_overhead;
  } else if (s.offload_micro * micro + s.offload_step > 0.5 * t.step_seconds) {
    t.bottleneck = Bottleneck::offload;
  } else if (s.comm > std::max(matrix, s.traffic)) {
    t.bottleneck = Bottleneck::communication;
  } else if (s.traffic > matrix) {
    t.bottleneck = Bottleneck::memory_bandwidth;
  } else {
    t.bottleneck = Bottleneck::compute;
  }
  return t;
}

}  // namespace trainfit
