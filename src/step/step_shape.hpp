#pragma once
// What the memory and time models share: the tensors of one training step, derived once from
// the model and the setup. Nothing here depends on the card; what does (the cuBLAS workspaces)
// is the memory model's, in memory/memory_model.hpp.
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trainfit/model.hpp"
#include "trainfit/setup.hpp"
#include "trainfit/units.hpp"

namespace trainfit::detail {

// A named tensor size (bytes, or bytes per token for activations). The name is kept in its parts
// so that describing a step (an advisor describes thousands) builds no strings: name() joins
// them, "q_proj lora dropout output", "expert mlp input", "dense layers: input norm fp32 input".
struct Sized {
  std::string owner;           // the module or norm keeping it ("q_proj", "input norm"), or empty
  const char* what = "";       // what it is ("lora dropout output"): a literal
  double bytes = 0;
  const char* prefix = "";     // the part of the layer it belongs to ("expert ", "dense layers: "), a literal
  bool lora_branch = false;    // kept by a LoRA branch (whose traffic the time model counts with the branch's)
  // Saved by two operations of the forward, one shortly after the other (an RMSNorm's fp32 input,
  // an input several projections read): TRL's activation offloading keeps such a tensor on the GPU.
  bool saved_twice = false;
  std::string name() const;
  bool operator==(const Sized& o) const {
    return name() == o.name() && bytes == o.bytes && lora_branch == o.lora_branch && saved_twice == o.saved_twice;
  }
};

struct ParameterStorage {
  double weights = 0;          // parameters as stored (4-bit packed for quantised linears)
  double quant_constants = 0;  // block absmax etc. of quantised weights
  double adapters = 0;         // LoRA A and B
  double trainable_params = 0;
  // Parameters that require a gradient but get none in the step, so have no gradient and no
  // optimizer state: a multimodal model's vision tower (full) or its adapters (LoRA), idle in a
  // text-only step. Counted as trainable, as PEFT and transformers count them.
  double idle_trainable_params = 0;
  // LoRA A and B that adapters on the routed experts would add (PEFT's target_parameters, r x (in + out)
  // per expert and projection) when the LoRA targets leave them out, as all-linear does with experts
  // stored as fused 3-D tensors; 0 in full fine-tuning and for dense models.
  double untargeted_expert_adapter_params = 0;
  double trainable_bytes_each = 0;  // bytes per element of a trainable parameter (and its gradient)
  double autocast_copies = 0;  // bf16/fp16 copies autocast makes of the fp32 linear weights
  double largest_trainable = 0;  // elements of the largest trainable tensor (optimizer transients)
  // What the caching allocator's block rounding adds to the weights, and to each of the
  // gradients and one optimizer state of the same shapes (full fine-tuning).
  double weights_rounding = 0;
  double trainable_rounding = 0;
  // With FSDP each GPU stores a 1/gpus shard of every parameter, gradient and optimizer state
  // (weights, adapters, the roundings above are then the shards'); these are whole tensors.
  double root_weights = 0;     // embedding, output layer and final norm (FSDP's root unit), allocated
  double layer_weights = 0;    // one decoder layer's parameters, adapters included, as one flat buffer
  double shards = 1;           // the divisor of the stored parameters, gradients and states
  bool operator==(const ParameterStorage&) const = default;
};

// PyTorch's CUDACachingAllocator rounding, under the names c10/cuda/CUDACachingAllocator.cpp
// gives these constants (the same values since torch 1.x; newer releases declare them in
// c10/core/AllocatorConfig.h). Checked against the H200 measurements: Qwen2.5-3B's 43 MiB MLP
// matrices take 44 MiB blocks each (docs/model.md, "Allocator block rounding").
namespace caching_allocator {
// Every request is rounded up to a multiple of 512 bytes ("all sizes are rounded to at least
// 512 bytes").
inline constexpr double kMinBlockSize = 512;
// "Largest small allocation is 1 MiB". It is also the most a large block may leave unused: a
// block is split only when what remains is larger than this (`should_split`), so a segment's
// tail of up to 1 MiB stays in the block and counts as allocated.
inline constexpr double kSmallSize = 1.0 * static_cast<double>(kMiB);
// Requests from here up get a segment (one cudaMalloc) of their own; smaller ones are carved
// out of shared 2 MiB or 20 MiB segments, so their block is the rounded request.
inline constexpr double kMinLargeAlloc = 10.0 * static_cast<double>(kMiB);
// A large request's own segment is rounded up to a multiple of 2 MiB.
inline constexpr double kRoundLarge = 2.0 * static_cast<double>(kMiB);
}  // namespace caching_allocator

// The bytes the caching allocator counts as allocated for one request (PyTorch's
// CUDACachingAllocator): requests round up to 512 bytes; one of 10 MiB or more gets its own
// segment rounded up to 2 MiB, and the segment's tail stays in the block (and is counted) unless
// it is larger than 1 MiB.
double allocator_block(double bytes);

// Sum of allocator_block over a list of tensors, each `bytes_per_token * tokens` bytes, in order.
double allocated_for(std::span<const double> bytes_per_token, double tokens);

// A list of tensors' sizes per token, kept for pricing many token counts: allocated_for over it
// rounds each distinct size once. A layer saves many tensors of one size (the LoRA branches of
// q, k and v keep the same inputs), and every block is a whole number of bytes, so the sum is the
// same whatever the order while it stays under 2^53 bytes; past that (absurd sizes) it is summed
// in the list's order, as allocated_for(span) does.
struct TensorSizes {
  struct SameSize {
    double bytes_per_token = 0;
    double count = 0;  // tensors of this size
    bool operator==(const SameSize&) const = default;
  };
  std::vector<double> ordered;     // bytes per token of each tensor, in the step's order
  std::vector<SameSize> distinct;  // each size once, in the order it first appears
  double bytes_per_token = 0;      // all of them
  bool operator==(const TensorSizes&) const = default;
};
TensorSizes tensor_sizes(std::vector<double> bytes_per_token);
// The same as allocated_for(sizes.ordered, tokens), to the bit.
double allocated_for(const TensorSizes& sizes, double tokens);

// The tokens of one micro-batch, batch x seq: the one place the memory and time models (and a
// SetupGroup pricing many batches) turn the setup's integers into the `tokens` they scale by. A
// paired objective trains on sequences_per_example (2) of them per example: the memory and time
// models multiply by it (MemoryBasis, WorkBasis).
inline double micro_batch_tokens(std::int64_t seq, std::int64_t batch) {
  return static_cast<double>(seq) * static_cast<double>(batch);
}

// Bytes per element of a QLoRA base's parameters that bitsandbytes leaves unquantised (embedding,
// output layer, norms, biases, fused experts): the compute dtype, or fp32 after
// prepare_model_for_kbit_training, which casts every 16-bit parameter it finds.
// flash-linear-attention's chunk_gated_delta_rule runs in chunks of 64 positions (its chunk_size
// default, which transformers' Qwen3-Next does not change): its WY matrix A is a chunk wide, its
// states are kept once a chunk, and its work is counted a chunk at a time.
inline constexpr double kGatedDeltaChunk = 64;

// A Mamba-2 scan pads the sequence to whole chunks (mamba2_chunk_scan's pad_tensor_by_size): the
// positions its chunked tensors hold per position of a sequence of `seq`.
inline double state_space_padding(const StateSpace& ss, double seq) {
  const double chunk = static_cast<double>(ss.chunk_size);
  return std::ceil(seq / chunk) * chunk / seq;
}

inline double unquantised_parameter_bytes(const TrainingSetup& s) {
  return s.quant.kbit_prepare ? 4.0 : bytes_per_element(s.quant.compute_dtype);
}

// PEFT's rule for a target name: it matches a module whose path is that name or ends with
// "." and that name ("v_proj" matches "self_attn.v_proj", "proj" matches neither).
bool module_name_matches(std::string_view module_path, std::string_view name);
// Whether the LoRA targets reach a linear module of the vision tower or projector (all-linear
// reaches every one).
// (none where the tower is frozen, vision_tower frozen).
bool targets_tower_module(const TrainingSetup& setup, const TowerLinear& m);
// Whether they reach a module of the tower's layers (not only the projector's).
bool adapts_tower_layers(const ModelSpec& model, const TrainingSetup& setup);
// The positions the vision tower runs for one image: its tokens (the setup's, or the tower's
// default) times the positions a token stands for (TowerLayers::positions_per_token).
double tower_image_positions(const ModelSpec& model, const TrainingSetup& setup);
// Whether images through the tower train its layers: full fine-tuning of a tower not frozen, or
// adapters on its layers' modules.
bool trains_tower_layers(const ModelSpec& model, const TrainingSetup& setup);

// A SettingError on `lora_targets` for a target that names no linear module of the model's layers
// (PEFT refuses such a target; planning it would give a LoRA run without adapters), listing the
// names the model has. All-linear and full fine-tuning always pass. layer_linears() calls it.
void check_lora_targets(const ModelSpec& model, const TrainingSetup& setup);

// Whether PEFT wraps this decoder module in a LoRA adapter for these targets.
bool targets_module(const LoraSetup& lora, const LinearModule& m);
// The sum of in + out features over the vision tower's and projector's linear modules the targets
// reach (PEFT matches a name against the end of a module's path; all-linear takes every nn.Linear
// of the model but the output layer; none of a frozen tower): a rank-r LoRA adds r times this.
double tower_adapter_width(const ModelSpec& model, const TrainingSetup& setup);

// A linear module of a decoder layer, and whether a LoRA adapter wraps it.
struct LayerLinear {
  LinearModule module;
  bool lora_target = false;  // never in full fine-tuning: the base itself trains
  // Adapted through PEFT's lora.ParamWrapper (fused 3-D experts under all-linear, lora_dropout 0):
  // the forward multiplies by W + B A folded into one new tensor, so it keeps its input and that
  // merged weight as full fine-tuning's weight gradient would, and has no LoRA branch of its own.
  bool param_wrapped = false;
  bool operator==(const LayerLinear&) const = default;
};

// Whether PEFT 0.21 under transformers 5 adapts an MoE model's fused experts: all-linear reaches
// them through lora.ParamWrapper, which builds only with lora_dropout 0 (get_peft_model raises
// otherwise), and not PhiMoE's (whose tuple-returning router fails the LoRA forward first).
bool adapts_fused_experts(const ModelSpec& model, const TrainingSetup& setup);

// The linear modules of each kind of decoder layer. A dense model has one kind; an MoE model has
// its expert layers and may have some layers with a dense MLP instead.
struct LayerLinears {
  std::vector<LayerLinear> dense;  // every attention layer of a dense model; an MoE model's dense-MLP layer
  std::vector<LayerLinear> moe;    // an MoE model's attention layer with experts; empty for a dense model
  // A linear-attention layer (Qwen3-Next's Gated DeltaNet) with the model's MLP kind; empty without.
  std::vector<LayerLinear> linear_attention;
  // A Mamba-2 layer (Granite 4.0-H's mamba) with the model's MLP kind; empty without.
  std::vector<LayerLinear> state_space;
  // An MLP-only layer (Nemotron-H's `-` blocks); empty without.
  std::vector<LayerLinear> mlp_only;
  double dense_layers = 0;         // how many layers are of each kind
  double moe_layers = 0;
  double linear_attention_layers = 0;
  double state_space_layers = 0;
  double mlp_only_layers = 0;
  // Calls f(modules, layers) for each kind the model has.
  template <class F>
  void for_each_kind(F&& f) const {
    if (dense_layers > 0) f(dense, dense_layers);
    if (moe_layers > 0) f(moe, moe_layers);
    if (linear_attention_layers > 0) f(linear_attention, linear_attention_layers);
    if (state_space_layers > 0) f(state_space, state_space_layers);
    if (mlp_only_layers > 0) f(mlp_only, mlp_only_layers);
  }
  bool operator==(const LayerLinears&) const = default;
};
LayerLinears layer_linears(const ModelSpec& model, const TrainingSetup& setup);

// PPO's value model (docs/model.md, "Objectives"): a sequence classifier of the policy's
// architecture (its backbone and a score head of hidden x 1), every weight trained in the
// policy's dtype (TRL's PPOTrainer applies PEFT to the policy only), never checkpointed (TRL's
// PolicyAndValueWrapper enables checkpointing on the policy alone). What its own describe_step
// gives, kept as numbers.
struct ValueModelShape {
  double weights = 0;           // parameters as stored, with the allocator's rounding
  double gradients = 0;         // its gradients (the parameters' shapes: the same rounding)
  double optimizer_states = 0;  // its optimizer states, with their rounding
  double parameters = 0;
  std::vector<double> layer_activations;    // bytes per token, each tensor one layer saves
  std::vector<double> outside_activations;  // outside the layers (the score head's input among them)
  double layer_backward_transient_per_token = 0;
  double head_gradient = 0;     // the score head's gradient
  bool operator==(const ValueModelShape&) const = default;
};

// What the training objective adds to the step (docs/model.md, "Objectives"): how many
// sequences the policy trains on, which logits exist and for how long, and the models beside the
// policy. All of it per sequence, per token or per step, like the rest of the shape.
struct ObjectiveShape {
  Objective objective = Objective::sft;
  Reference reference = Reference::none;  // none for an objective without one
  double sequences_per_example = 1;  // 2 for dpo, orpo and reward (chosen and rejected)
  double seq = 0;                    // tokens of a sequence
  double logit_positions = 0;        // positions of a sequence the output layer computes (grpo: completion + 1)
  double logp_positions = 0;         // positions of TRL's per-row log-softmax (seq - 1; the completion for ppo, grpo)
  double output_width = 0;           // the vocabulary, or 1 for the reward model's score head
  bool reference_forward = false;    // dpo, kto: a reference forward runs inside the loss, its logits alive to its end
  double reference_weights = 0;      // bytes of a frozen copy (reference copy), as the base is stored
  double reward_weights = 0;         // PPO's frozen reward model, bytes
  // A forward without autograd frees each layer's intermediates as it goes: what one layer holds
  // at once (the MLP's activation, up and product, the layer input and residual), bytes per token.
  double no_grad_layer_per_token = 0;
  // PPO's forward passes output_hidden_states=True and TRL keeps the policy's output through the
  // backward: every layer's output (bytes per token, all layers; under checkpointing they are the
  // checkpoints' own inputs, already counted) and the final norm's.
  double hidden_states_layers_per_token = 0;
  double hidden_states_final_per_token = 0;
  ValueModelShape value;  // PPO
  bool operator==(const ObjectiveShape&) const = default;
};
ObjectiveShape describe_objective(const ModelSpec& model, const TrainingSetup& setup);

// GRPO's generation (docs/model.md, "Generation"): bytes of one row's keys (or values) at one
// position in one layer of transformers' dynamic cache, [rows, kv heads, context, head_dim] in the
// activations' dtype (autocast's, a quantised base's compute dtype, else the weights').
double kv_cache_bytes_per_position(const ModelSpec& model, const TrainingSetup& setup);

// TRL's chunked loss (Loss::chunked; docs/model.md, "The chunked loss"), as SFTTrainer patches
// the model's forward (trl/trainer/sft_trainer.py, _chunked_cross_entropy_loss at TRL f2cd577):
// the final hidden states of the label-kept positions are gathered (hidden[order], kept for the
// backward), then every chunk of `chunk_rows` of them runs under non-reentrant checkpointing
// `h.float() @ w.float().t()`, the log-softmax, the NLL, the argmax and the entropy. Nothing of a
// chunk's forward is kept; the backward recomputes each chunk up to the NLL and runs its gradient.
// What makes its memory is the output layer's weight: `w.float()` is a new fp32 copy of the
// vocabulary x hidden matrix in every chunk (unless the weight is fp32 already), and under
// autocast the GEMM casts that copy back to the compute dtype, a second copy.
struct ChunkedLossShape {
  bool on = false;
  double chunk_rows = 256;  // _CHUNKED_LM_HEAD_CHUNK_SIZE
  double head_elems = 0;    // the output layer's weight, vocabulary x hidden (the embedding's when tied)
  double hidden = 0, vocab = 0;
  double weight_bytes = 0;  // bytes per element of that weight as stored
  double gemm_bytes = 4;    // the chunk GEMM's operands: 4 (fp32), or the autocast dtype's
  bool head_trained = false;  // full fine-tuning: the weight's gradient is computed chunk by chunk
  bool operator==(const ChunkedLossShape&) const = default;
};

// Liger's fused linear cross-entropy (Loss::fused; docs/model.md, "Liger's kernels"), as
// liger_kernel/ops/fused_linear_cross_entropy.py at Liger-Kernel ead96b61 runs it: the micro-batch's
// T positions in chunks of next_power_of_2(ceil(T / ceil(V / H))) rows (at most T), so that a
// chunk's logits are about as large as the hidden states; each chunk's logits, the cross-entropy's gradient written
// over them, and from it the hidden states' gradient and (trained head) the weight's, accumulated in
// the forward. The backward only scales them.
double fused_loss_chunk_rows(double positions, double vocab, double hidden);

// One training step's tensors, per token where they scale with the micro-batch.
struct StepShape {
  double tokens = 0;                  // batch x seq of one micro-batch
  ParameterStorage params;
  std::vector<Sized> layer_activations;  // bytes per token that autograd keeps for one decoder layer
  double layer_activation_per_token = 0;
  double checkpoint_per_token = 0;    // what a checkpointed layer keeps (its input)
  std::vector<Sized> outside_activations;  // bytes per token kept outside the decoder layers
  double outside_per_token = 0;
  double layer_backward_transient_per_token = 0;  // gradients in flight while one layer runs backward
  // Token-independent bytes a layer keeps (averaged over the layers): the merged expert weights of
  // ParamWrapper adapters and their low-rank factors cast to the weight dtype.
  double layer_fixed_activations = 0;
  // Packing under SDPA (docs/model.md, "Packing"): bytes per token squared (T x T over the
  // micro-batch's flattened tokens) that a layer keeps, averaged over the layers, and that the
  // step keeps outside them.
  double packed_mask_per_layer = 0;
  double packed_mask_outside = 0;
  // And what one layer's backward holds beside them: the merged gate/up weight's gradient, less the
  // merged down weight freed before it (averaged over the layers).
  double layer_fixed_backward_transient = 0;
  double layer_forward_transient_per_token = 0;   // largest set of temporaries alive at once in a layer's forward
  double logits_compute_bytes = 0;    // bytes per logit element of the lm_head output
  double final_hidden_bytes = 0;      // bytes per element of the final norm's output (the output layer's input)
  bool lora_branch_autocast = false;  // TRL's autocast runs the LoRA branch from lora_A on in the compute dtype
  // Images through the vision tower (docs/model.md, "Images through the vision tower"): its
  // forward's linear and attention FLOPs per token of the text sequence, and whether it trains
  // (its layers' backward runs: input gradients, and its weights' gradients in full fine-tuning).
  double tower_linear_flops_per_token = 0;
  double tower_attention_flops_per_token = 0;
  bool tower_trained = false;
  // And what a training tower's layers keep, bytes per text token: their saved tensors, or under
  // gradient checkpointing their inputs (outside the decoder layers, but checkpointed as they are).
  double tower_saved_per_token = 0, tower_checkpoint_per_token = 0;
  double tower_largest_per_token = 0;  // the largest of its saved tensors
  bool logits_upcast = false;         // the loss casts the logits to fp32 (a new tensor)
  double softcap_bytes = 0;           // gemma2 final-logit soft-capping, bytes per logit element kept
  double gradients = 0;               // bytes of all trainable gradients
  double optimizer_states = 0;
  double optimizer_transient = 0;
  double dequant_transient = 0;       // largest dequantised weight of a 4-bit/8-bit base
  ParameterCounts counts;             // count_parameters(model); a reward model's score head as its output layer
  LayerLinears linears;               // the layers' linear modules (layer_linears), for the time model
  ObjectiveShape objective;           // what the objective adds (sft: nothing)
  ChunkedLossShape chunked_loss;      // sft with Loss::chunked
  ChunkedLossShape fused_loss;        // sft with Loss::fused (its chunk rows follow the micro-batch)
  bool operator==(const StepShape&) const = default;
};

struct Layout;

// The tensors of one step of this setup, laid out so; the same on every card. `compute` is what the
// GPUs compute (compute_setup), `layout` the setup's (layout_of): step/step.hpp's describe_step
// derives both once and is the one caller. Everything but `tokens` is per token or per step, and
// does not depend on the setup's batch, grad_accum or grad_ckpt (a SetupGroup describes a step once
// for every batch, accumulation and checkpointing; the unit test
// SetupGroup.DescribeStepDoesNotDependOnBatchAccumulationOrCheckpointing holds it to that).
StepShape describe_tensors(const ModelSpec& model, const TrainingSetup& compute, const Layout& layout);

}  // namespace trainfit::detail
