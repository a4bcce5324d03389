#pragma once
// The memory that depends on the card and the libraries rather than on the step's tensors
// (step/step_shape.hpp has those): what estimate_memory adds once it knows the card. And the
// memory model itself in two parts: what does not depend on the micro-batch's size, the gradient
// accumulation or checkpointing (MemoryBasis, counted once), and the moments of a step priced from
// it at any of those (step_memory: a few dozen block roundings, no allocation). estimate_memory is
// the two in a row; a SetupGroup (plan/setup_grid.hpp) keeps the first and calls the second.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "step/step.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/memory.hpp"
#include "trainfit/model.hpp"
#include "trainfit/setup.hpp"
#include "trainfit/units.hpp"

namespace trainfit::detail {

// cuBLAS's workspace for one (thread, stream), as PyTorch sizes it (aten/src/ATen/cuda/
// CublasHandlePool.cpp, parseChosenWorkspaceSize, with CUBLAS_WORKSPACE_CONFIG unset): ":4096:8"
// on compute capability 9.0 and newer, 8 x 4096 KiB = 32 MiB.
inline constexpr double kCublasWorkspaceHopper = 4096.0 * 8 * static_cast<double>(kKiB);
// ... and ":4096:2:16:8" before it, 2 x 4096 KiB + 8 x 16 KiB = 8.125 MiB.
inline constexpr double kCublasWorkspaceBeforeHopper = (4096.0 * 2 + 16.0 * 8) * static_cast<double>(kKiB);
// The first compute capability that gets the larger workspace.
inline constexpr int kCublasLargeWorkspaceMajor = 9;
// How many workspaces a training step makes: PyTorch gives each (thread, stream) its own, and the
// forward runs on the main thread while the backward runs on autograd's device thread.
inline constexpr double kCublasWorkspacesPerStep = 2;
// cuBLASLt's workspace, allocated once. Measured on the H200 (torch 2.11): 65 MiB in all, the two
// 32 MiB cuBLAS workspaces and this.
inline constexpr double kCublasLtWorkspace = 1.0 * static_cast<double>(kMiB);

// The cuBLAS and cuBLASLt workspaces a training step allocates on this card (through the caching
// allocator, so they count in max_memory_allocated).
double cublas_workspace_bytes(const GpuSpec& gpu);

// CUDA context, driver and library memory outside PyTorch's allocator, as NVML sees it.
// Measured on the H200 (torch 2.11, CUDA 13): NVML used - max_memory_reserved = 1382 MiB.
// Other cards are assumed alike until measured (docs/model.md, "CUDA context").
inline constexpr double kCudaContextBytes = 1382.0 * static_cast<double>(kMiB);
// NCCL's communicator buffers, also outside the allocator: NVML used - max_memory_reserved grew
// by 846 MiB (842-846 over 16 DDP and FSDP runs) on two NVLinked H200s (NCCL 2.28.9, 2026-11-30).
// The buffers scale with NCCL's channels and peers; other machines are assumed alike.
inline constexpr double kNcclBytes = 846.0 * static_cast<double>(kMiB);

// The allocated bytes at one moment of the step, by category (the categories of
// MemoryEstimate::breakdown).
struct MemoryMoment {
  Phase phase = Phase::forward;
  const char* what = "";  // "cross-entropy forward": a literal, so pricing a moment allocates nothing
  double weights = 0, master_weights = 0, quant_constants = 0, adapters = 0, gradients = 0, optimizer_states = 0,
         activations = 0, logits_and_loss = 0, transient = 0, cublas_workspace = 0, gradient_buckets = 0,
         gathered_weights = 0;
  // The objectives' other models (docs/model.md, "Objectives"): a frozen reference copy, PPO's
  // frozen reward model and its trained value model's weights (the value model's gradients,
  // optimizer states and activations are in those categories).
  double reference_weights = 0, reward_weights = 0, value_weights = 0;
  double total() const {
    return weights + master_weights + quant_constants + adapters + gradients + optimizer_states + activations +
           logits_and_loss + transient + cublas_workspace + gradient_buckets + gathered_weights + reference_weights +
           reward_weights + value_weights;
  }
  bool operator==(const MemoryMoment&) const = default;
};

// Everything of the memory model that does not depend on the micro-batch's tokens, the gradient
// accumulation or gradient checkpointing: the static tensors, the gradients' and gathered units'
// sizes, and the per-token sizes of the saved tensors (each its own allocation).
struct MemoryBasis {
  MemoryMoment base;  // static: alive through the whole steady-state step
  double layers = 0;  // decoder layers
  double vocab = 0;
  bool full = false;  // full fine-tuning
  bool fsdp = false;
  // Gradients: all of them (as stored), the output layer's and the root's, one layer's
  // (sharded or whole).
  double all_grads = 0, head_grad = 0, root_grads = 0, layer_grad = 0;
  double gathered_fwd = 0, gathered_layer_bwd = 0, gathered_embedding_bwd = 0;
  double reducing = 0;  // FSDP: a layer's whole gradients and the flat copy reduce-scatter sends
  // Autocast copies: of every weight (alive at the loss), of the output layer's, of one layer's.
  double autocast_copies = 0, copies_head = 0, copies_layer = 0;
  TensorSizes layer_activations;    // per token, each tensor one decoder layer saves
  // TRL's activation offloading (docs/model.md, "Activation offloading"): on, and the layer's
  // tensors saved twice (Sized::saved_twice), which stay on the GPU.
  bool activation_offloading = false;
  TensorSizes layer_saved_twice;
  TensorSizes outside_activations;  // per token, each tensor saved outside the layers
  double tower_saved_per_token = 0, tower_checkpoint_per_token = 0;  // a training vision tower's (Step)
  double tower_largest_per_token = 0, tower_layer_input_per_token = 0;
  double checkpoint_per_token = 0;
  double logits_compute_bytes = 0;
  bool logits_upcast = false;
  // TRL's chunked loss (docs/model.md, "The chunked loss"): its shape, and the bytes per token of
  // the gathered hidden states' gradient, which its backward accumulates chunk by chunk.
  ChunkedLossShape chunked;
  double chunk_gradient_per_token = 0;
  // Liger's fused linear cross-entropy (docs/model.md, "Liger's kernels"), and the bytes per token
  // of the final hidden states' gradient it makes in the forward.
  ChunkedLossShape fused;
  double fused_input_gradient_per_token = 0;
  // SFTTrainer's metrics over the whole logits (trainer trl, loss whole): after the forward, with
  // the loss's buffers.
  bool sft_metrics = false;
  double softcap_bytes = 0;
  double layer_backward_transient_per_token = 0;
  double layer_forward_transient_per_token = 0;
  double layer_fixed_activations = 0;  // StepShape's: bytes a layer keeps whatever the tokens
  double packed_mask_per_layer = 0;    // StepShape's: bytes per token squared (packing under SDPA)
  double packed_mask_outside = 0;
  double layer_fixed_backward_transient = 0;
  double dequant_transient = 0;
  double embedding_backward_transient = 0;
  double optimizer_transient = 0;
  // The first optimizer step's largest state tensor, as allocated (whole tensors on this GPU; 0
  // when states are sharded, offloaded or not kept): where it lands decides the boundary.
  double largest_state_tensor = 0;
  double gather_pool = 0;  // FSDP's all-gather buffers kept reserved in its stream's pool
  // Layouts (step/layout.hpp): the tokens a GPU holds are the micro-batch's / tokens_divisor
  // (context parallelism); fsdp-grad-op keeps each layer gathered (kept_gathered_layer bytes)
  // from its forward to its backward; a pipeline stage keeps `in_flight` micro-batches' saved
  // tensors; offloaded states live in host memory (host_bytes, for the whole host).
  double tokens_divisor = 1;
  double kept_gathered_layer = 0;
  double in_flight = 1;
  double outputs_kept = 0;  // a pipeline's last stage: micro-batch outputs alive (PipelineStage above)
  double host_bytes = 0;
  double rebuilt_buckets = 0;  // DDP's first buckets, alive beside the rebuilt ones in the second step
  // The objective (ObjectiveShape): the sequences a micro-batch trains per example, the logits'
  // shape, and PPO's value model.
  Objective objective = Objective::sft;
  double sequences_per_example = 1;
  double seq = 0, logit_positions = 0, logp_positions = 0;
  bool reference_forward = false;
  double no_grad_layer_per_token = 0;
  double hidden_states_layers_per_token = 0, hidden_states_final_per_token = 0;
  TensorSizes value_layer_activations, value_outside_activations;
  double value_layer_backward_transient_per_token = 0;
  double value_all_grads = 0, value_head_grad = 0, value_layer_grad = 0;
  std::int64_t cuda_context_bytes = 0;
  std::int64_t weights_loaded_bytes = 0;
  std::int64_t trainable_parameters = 0;
  std::int64_t total_parameters = 0;
  std::int64_t untargeted_expert_adapter_parameters = 0;
  // GRPO's generation (docs/model.md, "Generation"): one layer's keys or values of one row at one
  // position (0: no generate() in the step), the prompt and completion lengths, the micro-batches
  // a generation serves (0: grad_accum), and the last position's logits of a row.
  double generation_cache_tensor_per_position = 0;
  double generation_prompt = 0, generation_completion = 0;
  std::int64_t generation_steps = 0;
  bool operator==(const MemoryBasis&) const = default;
};

// The step's memory for this card, the whole model's. Ignores the setup's batch, grad_accum and
// grad_ckpt: the step's tensors are per token.
MemoryBasis memory_basis(const ModelSpec& model, const Step& step, const GpuSpec& gpu);
// A pipeline stage's part of the whole model's basis (docs/model.md, "Pipeline parallelism").
MemoryBasis stage_basis(const MemoryBasis& whole, const Step& step, const PipelineStage& stage);

// The moments where a step's memory can peak: forward at the loss, the loss backward, the output
// layer's backward, the last and the first layer's backward, the embedding's (full fine-tuning)
// and the optimizer step; with an objective, its reference forward (dpo, kto) and its value
// model's backward (ppo).
inline constexpr std::size_t kMaxMemoryMoments = 10;

// A step's memory at its moments, and its peak.
struct StepMemory {
  std::array<MemoryMoment, kMaxMemoryMoments> moments{};
  std::size_t count = 0;  // moments[0, count) are the step's, in the step's order
  std::size_t peak = 0;   // the first moment of the highest total
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t busiest_peak_allocated_bytes = 0;  // over the run (MemoryEstimate's)
  std::int64_t busiest_device_used_bytes = 0;     // the same GPU's device use (MemoryEstimate's)
  std::int64_t peak_reserved_bytes = 0;
  std::int64_t device_used_bytes = 0;
  // The fp32 logits segment a later step must make beside the first step's, which the first
  // optimizer step's states made unusable for them (MemoryEstimate::later_logits_segment_bytes).
  std::int64_t later_logits_segment_bytes = 0;
  // Activation offloading: the pinned host memory that holds what a micro-batch copies out.
  double offloaded_host_bytes = 0;
};

// What a card must hold for the steps after the first to run at all when the first optimizer step
// strands the first step's logits segment (StepMemory::later_logits_segment_bytes): the busiest
// peak's tensors, the new segment and the CUDA context; 0 when nothing is stranded. The verdict
// and the run state judge it beside the device use (docs/model.md, "The boundary").
inline std::int64_t later_step_need_bytes(std::int64_t busiest_peak_allocated, std::int64_t later_logits_segment,
                                          std::int64_t cuda_context) {
  return later_logits_segment > 0 ? add_bytes(add_bytes(busiest_peak_allocated, later_logits_segment), cuda_context)
                                  : 0;
}

// The memory of a step of `tokens` tokens a micro-batch (micro_batch_tokens), with `grad_accum`
// micro-batches a step, with or without checkpointing.
StepMemory step_memory(const MemoryBasis& basis, double tokens, std::int64_t grad_accum, bool grad_ckpt);

// What a step's memory is priced from at any micro-batch, accumulation and checkpointing: the
// whole model's basis, or with a pipeline its first and its last stage's (either can be the
// busiest), each for the stage's first micro-batch and for its later ones. estimate_memory and the
// advisor's SetupGroup both price from these, through busiest_step_memory: one code for both.
struct StepMemoryBases {
  struct Stage {
    MemoryBasis first_microbatch;  // without a pipeline: the whole step's basis
    MemoryBasis later;             // a pipeline stage's later micro-batches (unused without one)
    std::int64_t index = 0;        // the pipeline stage (0 without one)
    bool pipelined = false;
  };
  std::vector<Stage> priced;  // one without a pipeline; the first and the last stage with one
  std::int64_t microbatches = 1;
};
StepMemoryBases memory_bases(const ModelSpec& model, const Step& step, const GpuSpec& gpu);

// The busiest GPU's step: the memory at its moments, the basis it was priced from (one of
// `bases`'), and its pipeline stage.
struct BusiestStepMemory {
  StepMemory memory;
  const MemoryBasis* basis = nullptr;
  std::int64_t stage = 0;
};
BusiestStepMemory busiest_step_memory(const StepMemoryBases& bases, double tokens, std::int64_t grad_accum,
                                      bool grad_ckpt);

// estimate_memory for a validated setup whose step is already described: make_plan describes a
// step once for its memory and its time.
MemoryEstimate estimate_memory(const ModelSpec& model, const Step& step, const GpuSpec& gpu);

}  // namespace trainfit::detail
