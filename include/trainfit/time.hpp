#pragma once
// The time model of one training step (docs/model.md, "The time model"): the work of the step
// (floating-point operations, bytes moved, operations dispatched) divided by what the card and
// the software stack achieve, measured and stored in a profile.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "trainfit/bottleneck.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/memory.hpp"
#include "trainfit/model.hpp"
#include "trainfit/setup.hpp"

namespace trainfit {

// What a card + software stack achieve, as fractions of the card's datasheet peaks and as host
// time per dispatched operation. `trainfit calibrate` fits these to measured steps.
//
// The initialisers are the shipped profile, measured on an H200 (HF transformers + PEFT, torch 2.11
// + CUDA 13) and used for every card until that card is measured: the one place these values
// live, so that default_profile() and a profile file that leaves a field out agree. Measured by
// python/trainfit_runner/measure_rates.py (data/measurements/h200-rates-2026-11-30.json) unless
// the comment says fitted; the fitted ones come from `trainfit calibrate
// data/reference/h200-hf-peft-calibration.jsonl` (tests/golden/time_test.cpp refits them).
struct TimeProfile {
  std::string name = "default";
  std::string source;                  // what it was measured or fitted on
  // The catalogue card whose measurements give the rates (every field's initialiser below is the
  // H200's). On another card the same fractions of that card's datasheet peaks are used: the plan
  // says its step time is extrapolated from this card.
  std::string measured_on = "h200";
  // Fraction of dense bf16/fp16 tensor peak that training GEMMs reach. Micro-benchmarks at training
  // shapes reach 760-825 of 989 TFLOP/s, but in a step GEMMs run below that (backward layouts,
  // mixed shapes): the profile of a Qwen2.5-14B LoRA step
  // (data/measurements/h200-step-profiles-2026-11-30.json) spends 0.99 s in bf16 tensor GEMMs for
  // 675 TFLOP: 0.69 of peak.
  double matmul_efficiency = 0.69;
  // Fraction of tensor peak causal fused attention (fwd + bwd) reaches: cuDNN attention forward +
  // backward, 196-501 TFLOP/s over five shapes, median 422.
  double attention_efficiency = 0.43;
  // Fraction of CUDA-core fp32 peak fp32 GEMMs reach: 51 of 67 TFLOP/s.
  double fp32_efficiency = 0.76;
  // Fraction of memory bandwidth elementwise kernels reach. Fitted: the mix of training's
  // elementwise kernels (strided RoPE slices, reductions, casts) reaches 0.63 of the bandwidth; a
  // streaming kernel reaches 0.88 (4.21 of 4.8 TB/s, measured).
  double bandwidth_efficiency = 0.63;
  // CUDA-core operations a broadcast elementwise kernel of a rank-5 or rank-6 fp32 tensor spends on
  // each element it writes or reads (a Mamba-2 layer's PyTorch scan: G = C B^T, M x, the chunk
  // states and their sums, which TensorIterator runs through its generic, offset-computing kernel).
  // Measured on an H100 (python/family_jobs/profile_scan.py, data/bench/h100-mamba-scan-profile-2026-12-08):
  // Granite 4.0-H-350M's scan at 4 layers and 1 x 1024 ran its products and sums in 144.9 ms of
  // kernel time for 5.80e10 element-passes, 2.50 ps each, which is 167 of the card's 66.9 TFLOP/s
  // fp32 operations. The H100 and H200 share the die, SMs and clocks, so the rate is the same on
  // both; on other cards it follows their CUDA-core peak.
  double broadcast_ops_per_element = 167;
  // CPU time to dispatch one operation (eager PyTorch, HF modules, PEFT wrappers, autograd).
  // Fitted to whole steps; a bare tiny op is 10 us.
  double host_seconds_per_op = 32.8e-6;
  // The shortest a kernel takes on the GPU, however small: a tiny kernel replayed in a CUDA graph.
  double kernel_floor_seconds = 0.85e-6;
  // Fraction of the host link a thrashing system-memory fallback achieves. Fitted to the seed's
  // one spilling measurement (Qwen2.5-14B, 4-bit, no checkpointing, 21.7 s on an RTX 5070 Ti under
  // Windows): the only system-memory-fallback step measured so far.
  double spill_efficiency = 0.063;
  // NCCL bus bandwidth as a fraction of the GPU-to-GPU link (one direction), large messages.
  // NCCL 2.28.9 between two NVLinked H200s (NV18, 450 GB/s a direction), 1 GiB messages: all-reduce
  // 325 GB/s, all-gather 267, reduce-scatter 259 (data/measurements/h200x2-collectives-2026-11-30.json).
  double all_reduce_efficiency = 0.72;  // DDP's gradient all-reduce
  double all_gather_efficiency = 0.59;  // FSDP's all-gather and reduce-scatter
  // Host time an operation on DTensors (tensor parallelism: torch.distributed.tensor) takes beyond a
  // plain tensor's: DTensor's op dispatcher (sharding propagation, a cache hit in the steady state,
  // unwrapping the local tensors and wrapping the result) and everything else the plan adds to a
  // layer (the parallel styles' module hooks, from_local / to_local / redistribute), per operation
  // the plan dispatches on DTensors. Measured in situ on one H200's host (measure_dispatch.py's
  // tp_plan, data/bench/h200-dispatch-costs-world1-2026-12-01.json, in_situ_dtensor_seconds_per_op):
  // the host time of a step (forward and backward) of Qwen2.5-1.5B-shaped models of 2 and 6 layers
  // under the runner's plan, less the same models' without it, 18.2 ms a layer, over the 195
  // operations and calls a layer's step dispatches on DTensors there. At world size 1: the
  // collectives a redistribute issues at two GPUs are skipped (their launch is not in it).
  double dtensor_seconds_per_op = 93.4e-6;
  // One collective issued from Python by itself (torch.distributed.broadcast(..., async_op=True)):
  // host time to launch it, and the GPU time of a small NCCL collective. AWAIT MEASUREMENT
  // (measure_dispatch.py, `collective_launch_seconds`, `collective_latency_seconds`, which needs two
  // GPUs: the one-GPU run of 2026-12-01 could not measure them). Until then:
  // one small collective issued alone takes 57 us end to end at 1 and 4 MiB (all-gather,
  // data/measurements/h200x2-collectives-2026-11-30.json: launch, GPU latency and the
  // synchronisation together), taken as half launch, half GPU.
  double collective_launch_seconds = 25e-6;
  double collective_latency_seconds = 25e-6;
  // GRPO's generation with transformers' generate() (docs/model.md, "Generation"), the host's time
  // in a decoding step (a forward under torch.no_grad): per operation the time model counts in a
  // layer's forward; per PEFT LoRA branch (its module calls and 13 ATen operations); and outside
  // the layers (the embedding, the final norm, the output layer, the logits processors, sampling,
  // the stopping criteria's check, the cache and mask bookkeeping). Measured on the H200 machine's
  // host (2026-12-06) with python/recipe_jobs/generation_probe.py, Qwen2 layers of hidden size 64
  // whose kernels take microseconds, as the Trainer's accelerator wraps them: a decoding step took
  // 0.503 ms a layer (50 operations), 1.416 ms a layer with LoRA on its 7 linear modules, and
  // 3.06 ms outside the layers (data/bench/h200-grpo-generation-2026-12-06/).
  double decode_seconds_per_op = 10.06e-6;
  double decode_adapter_seconds = 0.1305e-3;
  double decode_loop_seconds = 3.06e-3;
};

// The range every rate of a profile must lie in: above 0 and at most 1. Efficiencies are fractions
// of a peak; the times per operation are positive and far under a second (a host operation takes
// tens of microseconds). Zero or a negative value would make a step take no time or forever; a
// larger one is a unit mistake. One definition: parse_profile refuses a file outside it, and
// calibrate() a fit that leaves it (a profile `plan` would then refuse).
inline constexpr double kProfileRateAbove = 0.0;
inline constexpr double kProfileRateAtMost = 1.0;

// The profile trainfit uses for a card when none is given: TimeProfile's values (the H200's),
// named, for every card (fractions of each card's own peaks, see docs/model.md).
TimeProfile default_profile(const GpuSpec& gpu);
// A profile file (TOML, the fields of TimeProfile); a field left out keeps TimeProfile's value.
TimeProfile parse_profile(std::string_view toml_text, std::string_view source_name);
TimeProfile load_profile(std::string_view path);
std::string profile_to_toml(const TimeProfile& profile);
// Writes profile_to_toml(profile) to `path`, replacing it. A write that fails at any step (open,
// write, close: a full disk, /dev/full) is a SystemError naming the file.
void save_profile(const TimeProfile& profile, const std::string& path);

struct TimeTerm {
  std::string name;   // matmul, attention, adapters_fp32, memory_traffic, optimizer, kernel_floor, host, spill, generation
  double seconds = 0;
};

// What a setup's layout adds to each of its steps, whatever the micro-batch and checkpointing:
// the bytes of the collectives and of offloading, and how the step is spread over GPUs (pipeline
// stages and micro-batches, data-parallel replicas). The time model computes it once a setup
// (its basis) and every priced step carries it as it is.
struct LayoutWork {
  // Data parallelism, per micro-batch: the bytes each GPU's link carries (NCCL's bus bytes).
  double all_reduce_bytes = 0;      // DDP: 2 (n-1)/n x the trainable gradients
  double all_gather_bytes = 0;      // FSDP: (n-1)/n x (layers gathered twice, root once, gradients scattered)
  // Per optimizer step (once however many micro-batches accumulate, under no_sync): ZeRO-1/2's
  // gradient reduction and parameter all-gather; HSDP's all-reduce between hosts (network_bytes).
  double step_collective_bytes = 0;
  double network_bytes = 0;
  // After the optimizer step, in series with nothing: ZeRO-1/2 send the parameters each GPU
  // updated to the others (bus bytes a GPU), in this many collectives (ZeroRedundancyOptimizer:
  // one broadcast a parameter tensor).
  double post_step_collective_bytes = 0;
  double post_step_collectives = 0;
  // Offload over the host link: parameters brought in for every gather (per micro-batch), and
  // gradients out and updated parameters back (per step); the CPU optimizer's memory traffic.
  double offload_micro_bytes = 0;
  double offload_step_bytes = 0;
  double host_optimizer_bytes = 0;
  // Pipeline parallelism: stages, and micro-batches a step runs through them (1F1B). A step's work
  // is then the busiest stage's (the first with the extra layers, or the last with the output
  // layer and the loss).
  double pipeline_stages = 1;
  double pipeline_microbatches = 1;
  double data_parallel = 1;       // replicas that each run the step's micro-batches (tokens per step)
  bool dp_crosses_hosts = false;  // the data-parallel group spans hosts: its collectives cross the network
  bool operator==(const LayoutWork&) const = default;
};

// The work of one optimizer step, before any card is involved.
// GRPO's generation with generate() on the training GPU (docs/model.md, "Generation"): what one
// forward of the generating model does, per token and per row where it scales with them. The
// step's counts say how many rows a generate() call makes and how often it runs.
struct GenerationWork {
  bool on = false;
  std::int64_t steps_per_generation = 0;          // micro-batches one call serves; 0: grad_accum
  double iterations = 1;                          // optimisation passes over each generation batch
  double prompt = 0, completion = 0;              // tokens of a row
  double flops_per_token = 0;                     // the layers' linear FLOPs of one token
  double head_flops_per_row = 0;                  // the output layer at the row's last position
  double attention_flops_per_token_position = 0;  // QK^T and PV per token and per position attended
  double weight_bytes = 0;                        // every weight read once a forward
  double cache_bytes_per_position = 0;            // keys and values of one position of one row, all layers
  double logits_bytes_per_row = 0;                // the last position's logits through fp32 and sampling
  double layer_ops = 0;              // host operations of one forward in the layers, the LoRA branches' apart
  double adapters = 0;               // LoRA branches one forward runs (all layers)
  double score_flops_per_token = 0;  // the scoring pass: a forward with the completion's logits
  double kernels = 0;                // kernels one forward launches
  bool operator==(const GenerationWork&) const = default;
};

struct StepWork {
  double tensor_flops = 0;     // matmuls on tensor cores (bf16/fp16), including recomputation
  double attention_flops = 0;  // attention score and value matmuls
  double fp32_flops = 0;       // fp32 matmuls on CUDA cores (fp32 training without autocast)
  double adapter_bytes = 0;    // operands PEFT's fp32 adapter GEMMs stream (skinny GEMMs are bandwidth-bound)
  double memory_bytes = 0;     // bytes read and written by elementwise work, the loss and dequantisation
  // Elements written or read by broadcast elementwise kernels of rank-5 and rank-6 tensors (a Mamba-2
  // layer's PyTorch scan: its products and their sums), one per element and pass. Their kernels
  // are paced by the SMs' offset arithmetic as much as by their bytes (TimeProfile's
  // broadcast_ops_per_element); their bytes are not in memory_bytes.
  double broadcast_elements = 0;
  double optimizer_bytes = 0;  // bytes the optimizer update reads and writes
  double ops = 0;              // operations the host dispatches (forward, backward, recompute)
  double optimizer_ops = 0;    // host operations of the optimizer step, in forward-operation equivalents
  // Host operations once an optimizer step, outside the optimizer: DDP's copies of each gradient
  // into its bucket and back, which run only in the micro-batch that synchronises (the others run
  // under no_sync). Spread over the step's micro-batches, as once-a-step collectives are.
  double step_ops = 0;
  // Operations dispatched on DTensors (tensor parallelism), per micro-batch: each costs the
  // profile's dtensor_seconds_per_op on top of the plain operation the others count.
  double dtensor_ops = 0;
  double kernels = 0;          // kernels the GPU runs
  double model_flops = 0;      // the training math alone (no recomputation): for model FLOP utilisation
  double layer_working_set_bytes = 0;  // weights + activations one layer's pass touches (for spill)
  double layer_passes = 0;     // layer passes a step makes (forward, recompute, backward)
  // Model parallelism, per micro-batch: tensor parallelism's all-gathers and reduce-scatters,
  // context parallelism's key/value ring, pipeline parallelism's activations between stages.
  double model_parallel_bytes = 0;
  // With a pipeline, the share of the busiest stage's micro-batch work in the forward.
  double gpu_forward_fraction = 1.0 / 3.0;   // of the micro-batch's GPU work, by FLOPs
  double host_forward_fraction = 0.5;        // of its host operations, by count
  double sequences_per_example = 1;  // sequences trained per example of a micro-batch (2: dpo, orpo, reward)
  GenerationWork generation;                // GRPO's generate() (off unless --generation generate)
  // What the layout adds and how it spreads the step: the basis's, the same at every micro-batch.
  LayoutWork layout;
};

StepWork step_work(const ModelSpec& model, const TrainingSetup& setup);

struct TimeEstimate {
  double step_seconds = 0;       // steady-state wall time of one optimizer step
  double tokens_per_second = 0;  // batch x sequences per example x seq x grad_accum x microbatches x data-parallel GPUs / step_seconds
  double gpu_seconds = 0;        // the GPU's own work for the step
  double host_seconds = 0;       // the host's dispatch work for the step
  double spill_seconds = 0;      // system-memory fallback traffic (0 when the step fits)
  double communication_seconds = 0;  // collectives between GPUs (0 on one GPU)
  double pipeline_bubble_seconds = 0;  // pipeline stages idle while it fills and drains
  double offload_seconds = 0;        // host link traffic and the CPU optimizer step of offloading
  double mfu = 0;                // model FLOPs / (step_seconds x dense bf16 peak)
  double generation_seconds = 0;       // GRPO's generate() calls, their share of a step (0 without)
  double spill_slowdown = 1;     // step_seconds / the same step fitting in memory
  Bottleneck bottleneck = Bottleneck::compute;
  std::vector<TimeTerm> breakdown;
  // The same terms as they lie on the step's critical path: in each micro-batch and in the optimizer
  // step only the longer of the GPU's and the host's work counts, plus the pipeline's bubble and any
  // spill. They add up to step_seconds; breakdown minus critical_path is the work that overlaps it.
  std::vector<TimeTerm> critical_path;
  bool predicted = true;         // false when the card's throughput is unknown (--vram only)
};

// `spills` says whether the step runs over the card's memory through a system-memory fallback.
TimeEstimate estimate_time(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu,
                           const TimeProfile& profile, bool spills);
// The same from the step's work, step_work(model, setup), counted once: the work depends on the
// model and the setup only, so a caller pricing one step at many profiles (calibrate) counts it
// once. The same numbers as above, to the bit.
TimeEstimate estimate_time(const StepWork& work, const TrainingSetup& setup, const GpuSpec& gpu,
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
// are. A fitted value outside (kProfileRateAbove, kProfileRateAtMost] is an InputError naming the
// parameter: the steps are then not what the model can explain (most likely not in seconds). The rates a micro-benchmark measures directly (python/trainfit_runner/measure_rates.py)
// are best left fixed; host dispatch and the bandwidth training's mix of elementwise kernels
// reaches are fitted to whole steps: the default.
CalibrationResult calibrate(const std::vector<TimedStep>& steps, const TimeProfile& start,
                            const std::vector<std::string>& fit = {"host_seconds_per_op", "bandwidth_efficiency"});

}  // namespace trainfit
