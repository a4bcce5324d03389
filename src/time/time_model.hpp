#pragma once
// The time model in parts, so that a caller pricing many micro-batch sizes, accumulations and
// checkpointing choices of one setup (a SetupGroup, plan/setup_grid.hpp) counts what they share
// once: the work of a step is a WorkBasis (sums over the model's modules, host operations, the
// optimizer: nothing that depends on the batch or on checkpointing) priced at a micro-batch
// (step_work), and a step's seconds are that work at the profile's rates (step_seconds).
// step_work(model, setup) and estimate_time are these in a row: one formula for both.
#include <cstdint>

#include "step/step.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/model.hpp"
#include "trainfit/setup.hpp"
#include "trainfit/time.hpp"

namespace trainfit::detail {

// What the work of a step is computed from, whatever the micro-batch and checkpointing.
struct WorkBasis {
  double seq = 0, layers = 0, hidden = 0, vocab = 0, heads = 0, head_dim = 0;
  double attention_layers = 0;  // layers that attend (the others mix tokens by linear attention)
  // The gated delta rule's forward FLOPs a token over every linear-attention layer (Qwen3-Next).
  double linear_attention_flops_per_token = 0;
  // Bytes a token over every Mamba-2 layer of the PyTorch scan's broadcast products and the segment
  // sums' temporaries, each written and read once in the forward (step_work counts the backward's).
  double state_space_products_per_token = 0;
  bool full = false;          // full fine-tuning: the base's weight gradients are computed
  bool fp32_compute = false;  // matmuls on CUDA cores (pure fp32 training)
  bool eager = false;         // eager attention
  double masked_layers = 0;   // sliding-window layers run with an explicit mask (ModelSpec::sliding_mask_at)
  // Packing under SDPA: every attention layer runs masked over the micro-batch's flattened tokens,
  // one sequence of batch x seq (docs/model.md, "Packing").
  bool packed_mask = false;
  bool quantised = false;     // a 4-bit or 8-bit base, dequantised in every pass
  // Sums over the decoder layers' linear modules (MoE: the routed share), per token.
  double linear_flops_per_token = 0;
  double targeted_rank_widths = 0;  // r x (in + out) over the LoRA-targeted modules
  double targeted_in = 0, targeted_out = 0;
  double weight_elems = 0;       // matrix weights of every layer
  // Of those, the ones QLoRA leaves in the compute dtype (fused experts: bitsandbytes quantises
  // nn.Linear modules only), read as they are in every pass.
  double unquantised_weight_elems = 0;
  double unquantised_weight_bytes = 0;  // bytes per element of those
  double merged_weight_elems = 0;      // of those, the ones PEFT's ParamWrapper adapts (folded W + B A each pass)
  double wrapped_flops_per_token = 0;  // their merged weights' gradient matmuls
  double activation_bytes = 0;   // bytes per element of the activations a LoRA branch casts (4 in pure fp32, else 2)
  bool lora_branch_autocast = false;  // TRL's autocast: the branch in the compute dtype from lora_A on
  double weight_read_bytes = 0;  // bytes per element of a weight a pass reads (unquantised bases)
  // Saved tensors, bytes per token: one layer's without the LoRA branch's, outside the layers,
  // one layer's in all.
  double layer_saved_per_token = 0, outside_per_token = 0, layer_activation_per_token = 0;
  double layer_saved_tensors = 0;  // tensors one layer saves (checkpointing hooks each)
  // TRL's activation offloading: bytes per token one layer copies to the host and back (all it
  // saves but what it saves twice; under checkpointing, its input), and the loss's (the
  // log-softmax's fp32 output under the whole-logits loss), per token.
  bool activation_offloading = false;
  double offload_layer_per_token = 0, offload_checkpoint_per_token = 0, offload_loss_per_token = 0;
  double scaling_bytes_per_token = 0;  // Granite's multipliers over the residual stream and the logits
  // Images through the vision tower: its forward FLOPs per text token, and whether its backward runs.
  double tower_linear_flops_per_token = 0, tower_attention_flops_per_token = 0;
  double tower_saved_per_token = 0;  // its layers' saved tensors (written and read as the layers' are)
  bool tower_trained = false;
  // A tower whose attention runs a call a window and image: its layers' calls a sequence's images
  // (windows and images, summed over the layers) less the one call a layer its operations count.
  double tower_attention_calls_per_sequence = 0;
  double tower_layers = 0;
  double optimizer_bytes = 0, optimizer_ops = 0;
  double layer_ops = 0, forward_ops = 0;  // host operations: one layer's forward, the whole forward
  double parallel_ops = 0;                // FSDP2's per-parameter work (every micro-batch)
  double parallel_step_ops = 0;           // DDP's bucket copies (once a step: the synchronising micro-batch)
  double dtensor_forward_ops = 0;         // operations on DTensors in one forward (tensor parallelism)
  double dtensor_backward_ops = 0;        // and in one backward
  double model_parallel_bytes_per_token_pass = 0;  // TP/CP collectives, per token and per pass
  double pipeline_bytes_per_token = 0;             // activations and their gradients between stages
  double tp_outside_bytes_per_token = 0;           // TP outside the layers: the embedding's all-reduce, the logits' all-gather
  double work_divisor = 1;  // tp x cp x pp: each GPU's share of a micro-batch's compute
  double tensor_parallel = 1, context_parallel = 1;
  LayoutWork layout;  // the collectives, offload traffic and spread of the step (trainfit/time.hpp)
  // Pipeline parallelism: the decoder layers of the first and of the last stage (the last also
  // runs the final norm, the output layer and the loss), and the share of the trainable
  // parameters the busier of the two steps in the optimizer.
  double first_stage_layers = 0, last_stage_layers = 0, stage_trainable_share = 1;
  double weight_bytes_per_layer = 0;
  // The objective (docs/model.md, "Objectives"): trained sequences per example (`tokens` and
  // `batch` count examples), the output layer's positions per trained token and the bytes the
  // loss moves per logit, and the forwards without autograd it adds, in trained tokens: the
  // reference's (dpo, kto, grpo) and KTO's KL batch through the policy.
  double sequences_per_example = 1;
  double logit_fraction = 1;
  double loss_bytes_per_logit = 0;
  double reference_tokens = 0, reference_logit_fraction = 0, reference_loss_bytes_per_logit = 0;
  double reference_forward_ops = 0;  // a reference forward's host operations (the base, no LoRA branch work)
  double policy_no_grad_tokens = 0;
  // PPO's value model, trained beside the policy (full fine-tuning of the policy's architecture
  // with a score head, never checkpointed): per token, its linear FLOPs and saved bytes; its
  // weights read each pass; host operations of its forward; its optimizer's bytes and operations.
  double value_linear_flops_per_token = 0, value_saved_per_token = 0, value_weight_bytes = 0;
  double value_forward_ops = 0, value_optimizer_bytes = 0, value_optimizer_ops = 0;
  // TRL's chunked loss (docs/model.md, "The chunked loss"); and SFTTrainer's metrics over the whole
  // logits (trainer trl with the whole loss): the token entropy and the argmax every step.
  ChunkedLossShape chunked;
  ChunkedLossShape fused;  // Liger's fused linear cross-entropy
  bool sft_metrics = false;
  double logit_bytes = 0;     // bytes per logit as the output layer makes them
  GenerationWork generation;  // GRPO's generate() (docs/model.md, "Generation")
  bool operator==(const WorkBasis&) const = default;
};

// The step's batch, grad_accum and grad_ckpt are not read.
WorkBasis work_basis(const ModelSpec& model, const Step& step);

// The work of one step of micro-batches of `batch` examples, `tokens` = micro_batch_tokens(seq, batch)
// (a paired objective trains sequences_per_example sequences per example).
StepWork step_work(const WorkBasis& basis, double tokens, double batch, bool grad_ckpt);
// step_work(model, setup) of a step already described.
StepWork step_work(const ModelSpec& model, const Step& step);

// Whether a card's datasheet gives the rates the time model divides by (a card known only by its
// memory does not).
bool has_rates(const GpuSpec& gpu);

// A pinned copy over PCIe carries about 80% of the link's one-direction rate as payload (packet
// headers and flow control take the rest).
inline constexpr double kPinnedCopyEfficiency = 0.8;
// Bytes of an element StepWork::broadcast_elements counts: the Mamba-2 scan's products are fp32.
inline constexpr double kBroadcastElementBytes = 4;
// The CPU optimizer of an offloaded step (PyTorch's or DeepSpeed's Adam over fp32 states) is bound
// by host memory bandwidth: bytes read and written a second. Unmeasured: a server socket's DRAM
// streams some 100-200 GB/s, and a multi-threaded Adam reaches a fraction of it.
inline constexpr double kHostOptimizerBytesPerSecond = 20e9;

// The counts a step's time multiplies by.
struct StepCounts {
  std::int64_t seq = 0, batch = 0, grad_accum = 0, gpus = 0;
};

// A step's seconds, term by term (estimate_time's breakdown is made of these).
struct StepSeconds {
  double tensor_peak = 0;  // the card's dense bf16 (else fp16) peak
  double matmul = 0, attention = 0, fp32 = 0, traffic = 0, floor = 0, comm = 0;  // one micro-batch's GPU terms
  double gpu_micro = 0, host_micro = 0;                                          // one micro-batch, GPU and host
  double opt_gpu = 0, opt_host = 0;                                              // the optimizer step, GPU and host
  double offload_micro = 0, offload_step = 0;  // host-link copies a micro-batch, and copies + CPU optimizer a step
  double post_comm_gpu = 0, post_comm_host = 0;  // collectives after the optimizer step (ZeRO-1/2's parameters)
  double bubble = 0;                           // pipeline fill and drain
  double generation = 0;                         // GRPO's generate() calls, their share of the step
  bool generation_host_bound = false;            // its decoding steps wait on the host
  double accum = 0;
  double fitting = 0;  // the step when it fits in memory
  double spill = 0;
  double step = 0;
  double tokens_per_second = 0;
};

// The step's seconds for a card with rates (has_rates).
StepSeconds step_seconds(const StepWork& work, const StepCounts& counts, const GpuSpec& gpu, const TimeProfile& prof,
                         bool spills);

}  // namespace trainfit::detail
