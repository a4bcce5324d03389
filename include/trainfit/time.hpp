#pragma once
// The time model of one training step (docs/model.md, "The time model"): the work of the step
// (floating-point operations, bytes moved, operations dispatched) divided by what the card and
// the software stack achieve, measured and stored in a profile.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trainfit/hardware.hpp"
#include "trainfit/memory.hpp"
#include "trainfit/model.hpp"
#include "trainfit/setup.hpp"

namespace trainfit {

// What a card + software stack achieve, as fractions of the card's datasheet peaks and as host
// time per dispatched operation. `trainfit calibrate` fits these to measured steps.
struct TimeProfile {
  std::string name = "default";
  std::string source;                  // what it was measured or fitted on
  double matmul_efficiency = 0.69;     // fraction of dense bf16/fp16 tensor peak that training GEMMs reach
  double attention_efficiency = 0.43;  // fraction of tensor peak causal fused attention (fwd + bwd) reaches
  double fp32_efficiency = 0.76;       // fraction of CUDA-core fp32 peak fp32 GEMMs reach
  double bandwidth_efficiency = 0.88;  // fraction of memory bandwidth elementwise kernels reach
  double host_seconds_per_op = 30e-6;  // CPU time to dispatch one operation (eager PyTorch, HF modules, autograd)
  double kernel_floor_seconds = 0.85e-6;  // the shortest a kernel takes on the GPU, however small
  double spill_efficiency = 0.063;     // fraction of the host link a thrashing system-memory fallback achieves
  // NCCL bus bandwidth as a fraction of the GPU-to-GPU link (one direction), large messages.
  double all_reduce_efficiency = 0.72;  // DDP's gradient all-reduce
  double all_gather_efficiency = 0.59;  // FSDP's all-gather and reduce-scatter
};

// The profile trainfit uses for a card when none is given: the H200 profile fitted to the
// calibration data (for every card; fractions of each card's own peaks, see docs/model.md).
TimeProfile default_profile(const GpuSpec& gpu);
TimeProfile parse_profile(std::string_view toml_text, std::string_view source_name);
TimeProfile load_profile(std::string_view path);
std::string profile_to_toml(const TimeProfile& profile);

struct TimeTerm {
  std::string name;   // matmul, attention, adapters_fp32, memory_traffic, optimizer, kernel_floor, host, spill
  double seconds = 0;
};

enum class Bottleneck { compute, memory_bandwidth, launch_overhead, host_link_spill, offload, communication, input_pipeline };
std::string to_string(Bottleneck b);

// The work of one optimizer step, before any card is involved.
struct StepWork {
  double tensor_flops = 0;     // matmuls on tensor cores (bf16/fp16), including recomputation
  double attention_flops = 0;  // attention score and value matmuls
  double fp32_flops = 0;       // fp32 matmuls on CUDA cores (fp32 training without autocast)
  double adapter_bytes = 0;    // operands PEFT's fp32 adapter GEMMs stream (skinny GEMMs are bandwidth-bound)
  double memory_bytes = 0;     // bytes read and written by elementwise work, the loss and dequantisation
  double optimizer_bytes = 0;  // bytes the optimizer update reads and writes
  double ops = 0;              // operations the host dispatches (forward, backward, recompute)
  double optimizer_ops = 0;    // host operations of the optimizer step, in forward-operation equivalents
  double kernels = 0;          // kernels the GPU runs
  double model_flops = 0;      // the training math alone (no recomputation): for model FLOP utilisation
  double layer_working_set_bytes = 0;  // weights + activations one layer's pass touches (for spill)
  double layer_passes = 0;     // layer passes a step makes (forward, recompute, backward)
  // Data parallelism, per micro-batch: the bytes each GPU's link carries (NCCL's bus bytes).
  double all_reduce_bytes = 0;      // DDP: 2 (n-1)/n x the trainable gradients
  double all_gather_bytes = 0;      // FSDP: (n-1)/n x (layers gathered twice, root once, gradients scattered)
};

StepWork step_work(const ModelSpec& model, const TrainingSetup& setup);

struct TimeEstimate {
  double step_seconds = 0;       // steady-state wall time of one optimizer step
  double tokens_per_second = 0;  // batch x seq x grad_accum x gpus / step_seconds (all GPUs together)
  double gpu_seconds = 0;        // the GPU's own work for the step
  double host_seconds = 0;       // the host's dispatch work for the step
  double spill_seconds = 0;      // system-memory fallback traffic (0 when the step fits)
  double communication_seconds = 0;  // data-parallel collectives (0 on one GPU)
  double mfu = 0;                // model FLOPs / (step_seconds x dense bf16 peak)
  double spill_slowdown = 1;     // step_seconds / the same step fitting in memory
  Bottleneck bottleneck = Bottleneck::compute;
  std::vector<TimeTerm> breakdown;
  bool predicted = true;         // false when the card's throughput is unknown (--vram only)
};

// `spills` says whether the step runs over the card's memory through a system-memory fallback.
TimeEstimate estimate_time(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu,
                           const TimeProfile& profile, bool spills);

// A measured step for calibration: the setup, the card and the steady-state step time.
struct TimedStep {
  ModelSpec model;
  TrainingSetup setup;
  GpuSpec gpu;
  double step_seconds = 0;
};

struct CalibrationResult {
  TimeProfile profile;
  double median_abs_error = 0;  // on the steps it was fitted to
  double max_abs_error = 0;
  std::size_t steps = 0;
};

// The profile's parameters by name, for choosing which calibrate() fits.
const std::vector<std::string>& profile_parameter_names();

// Fits the named parameters of `start` (least squares on log step time); the others stay as they
// are. The rates a micro-benchmark measures directly (python/trainfit_runner/measure_rates.py)
// are best left fixed; host dispatch and the bandwidth training's mix of elementwise kernels
// reaches are fitted to whole steps: the default.
CalibrationResult calibrate(const std::vector<TimedStep>& steps, const TimeProfile& start,
                            const std::vector<std::string>& fit = {"host_seconds_per_op", "bandwidth_efficiency"});

}  // namespace trainfit
