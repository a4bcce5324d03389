// The work of one optimizer step: floating-point operations, bytes moved and operations the
// host dispatches, counted from the same description of the step the memory model uses.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/numeric.hpp"
#include "step/layout.hpp"
#include "step/step_shape.hpp"
#include "time/time_model.hpp"
#include "trainfit/time.hpp"

namespace trainfit {
namespace {

using detail::as_d;

// Host operations one decoder layer dispatches in its forward, counted from HF transformers'
// Llama/Qwen2 layer: two RMSNorms (8 each: cast, pow, mean, add, rsqrt, mul, cast, weight mul),
// three projections with their views and transposes (9), rotary embedding on q and k (16), the
// attention call (1), the output reshape (2), o_proj (1), two residual adds (2), the MLP (5)
// and its views (~6).
// The passes over parameter-sized arrays (elements of the states' dtype) that torch's foreach AdamW
// makes (torch/optim/adam.py, _multi_tensor_adam): lerp_ of exp_avg toward the gradient (read 2,
// write 1), mul_ and addcmul_ of exp_avg_sq (2 + 3), sqrt into a new list (2), div_ and add_ on it
// (2 + 2), addcdiv_ into the parameters (read 3, write 1), the decoupled weight decay's mul_ (2):
// 20, where the fused kernel reads parameter, gradient and both states once and writes three (7).
constexpr double kForeachAdamwPasses = 20;
constexpr double kLayerForwardOps = 50;
// Of those, the rotary embedding's (a layer without one, SmolLM3's NoPE layers, dispatches none).
constexpr double kRotaryOps = 16;
// Granite's scalings, per token: each sublayer's output multiplied before its residual add reads
// and writes the hidden state, and its backward reads and writes the gradient (4 widths, twice a
// layer); the embedding output the same once. The logits' division: 4 widths per logit.
constexpr double kScalingWidthsPerPass = 4.0;
// Eager attention adds the key/value repeat (4), scores matmul, scale, mask add, softmax, cast,
// dropout, value matmul and transpose.
constexpr double kEagerExtraOps = 12;
// Multi-head latent attention beyond those: the kv_a RMSNorm (8), splitting the compressed
// projection and kv_b_proj's output, their views and transposes, the rotary key's view and expand,
// and joining the query's and the key's two parts (9); with a low-rank query, q_b_proj and the q_a
// RMSNorm (9) more.
constexpr double kLatentAttentionExtraOps = 17;
constexpr double kLowRankQueryExtraOps = 9;
// A Gated DeltaNet layer's token mixer in place of attention's (the projections with their views,
// the rotary embedding, the attention call, the output reshape and o_proj: 29 of the layer's 50):
// in_proj_qkvz and in_proj_ba with their views, splits and reshapes (12), joining q, k and v, the
// convolution with its transposes, slice, SiLU and split (11), the write strength's sigmoid (1),
// the decay in fp32 (7), repeating q and k to the value heads (2), flash-linear-attention's
// Function (its contiguous copies, two l2 norms, the cumulative decay, the WY representation, the
// states and the output: 10), the gated RMSNorm in eager PyTorch (12) with its reshapes (4) and
// out_proj (1): 60.
constexpr double kAttentionBlockOps = 29;
// Of the layer's 50, the gated MLP's (gate, up, activation, product, down), and one residual add.
constexpr double kMlpOps = 5;
constexpr double kResidualAddOps = 1;
constexpr double kGatedDeltaNetOps = 60;
// A Mamba-2 layer's token mixer in transformers' PyTorch scan (GraniteMoeHybridMambaLayer without
// the hub's kernels), in place of attention's 29: A from A_log (3), in_proj's split and the
// convolution with its transposes, weight view, slice and SiLU (9), the views into the scan (3);
// dt's bias, softplus and clamp and the fp32 casts of x, B and C with B's and C's repeats (13);
// D's residual (3), the discretisation of x and A (6), padding and chunking four tensors (8), the
// cumulative sum (2), two segment sums with their masks and exponentials (24), G, M, the diagonal
// output, the decays, B decayed, the chunk states, their recurrence and the off-diagonal output
// with their views (about 40), the output's sums, reshapes and slice (5), the gated RMSNorm in
// fp32 (11), the cast and out_proj (2): about 118.
constexpr double kStateSpaceScanOps = 118;
// Falcon-H1's products by its multipliers a layer: the mixer's input (ssm_in), in_proj's output
// (mup_vector), the mixer's output (ssm_out), attention's input and output (attention_in, _out),
// the keys (key_multiplier), the MLP's gate and output (mlp_multipliers), and the two outputs' sum.
constexpr double kFalconMultiplierOps = 9;
// The scan's broadcast products (G, M, the diagonal output, the chunk states, C times the states)
// are summed where they are made; their backward (MulBackward0) makes both factors' gradients at
// the product's size, each reduced after: 2 passes over a product forward, 4 backward.
constexpr double kStateSpaceProductPassesForward = 2.0;
constexpr double kStateSpaceProductPassesBackward = 4.0;
// Qwen3-Next's attention output gate: q_proj's output split into query and gate, the gate's
// reshape, sigmoid and the product.
constexpr double kOutputGateOps = 5;
// An nn.LayerNorm is one operation where the layer's count has an RMSNorm's 8.
constexpr double kRmsNormOps = 8;
// A PEFT LoRA branch: cast to the adapter dtype, dropout, A, B, scale, add, cast back.
constexpr double kLoraForwardOps = 7;
// Outside the layers: embedding, rotary cos/sin, final norm, output layer, the loss.
constexpr double kModelForwardOps = 32;
// Autograd dispatches about one backward node per differentiable forward operation.
constexpr double kBackwardOpsPerForwardOp = 1.0;
// One attention call of sdpa_attention_forward: the kernel, the output's transpose and its
// contiguous copy.
constexpr double kAttentionCallOps = 3;
// Views and metadata operations dispatch but launch no kernel.
constexpr double kKernelsPerOp = 0.75;
// A decoding step's logits, per row and vocabulary entry: the output layer writes the last
// position's (2), accelerate's convert_outputs_to_fp32 reads them and writes fp32 (2 + 4), the
// logits processors and the softmax read and write fp32 (8), the multinomial draw reads (4).
constexpr double kDecodeLogitBytes = 20.0;
// Bytes elementwise work moves per byte of saved activation: written once in the forward and
// read once in the backward, where its gradient is written and read once more.
constexpr double kTrafficPerSavedByteForward = 2.0;
constexpr double kTrafficPerSavedByteBackward = 2.0;
// PEFT's LoRA branch in fp32, bytes per token per unit of width, forward: the input cast to fp32
// (read c, write 4), dropout (read 4, write 4 and a 1-byte mask), A reading the fp32 input (4);
// on the output side B writing fp32 (4), the scaling (read 4, write 4), the add to the base output
// (read c and 4, write 4) and the cast back (read 4, write c). The backward moves about twice that.
constexpr double kLoraInputBytesPerWidth = 17.0;   // plus 1 x c
constexpr double kLoraOutputBytesPerWidth = 24.0;  // plus 2 x c
// Under TRL's autocast over a 16-bit base the branch leaves fp32 at lora_A: on the input side
// autocast's cast of the dropout's output (read 4, write c) and A reading c instead of 4 (2 c more
// in all); on the output side B writes c, the scaling reads and writes c and the add reads two and
// writes one (6 c, no fp32 and no cast back).
constexpr double kLoraAutocastInputWidths = 2.0;   // more, in multiples of c
constexpr double kLoraAutocastOutputWidths = 6.0;  // in place of 24 + 2 c
constexpr double kLoraBackwardPerForward = 2.0;
// The loss over the vocabulary, per logit: the lm_head output, its fp32 copy, log-softmax read and
// written, the NLL gradient written, log-softmax's backward reading two and writing one, the cast back.
constexpr double kLossBytesPerLogit = 40.0;
// FSDP2 works on each parameter tensor on the host in every step: DTensor wrapping, the copy into
// the all-gather buffer and out of it, storage freeing, the gradient's reduce-scatter copy and
// the optimizer's DTensor dispatch. Fitted: the 8 FSDP steps on two H200s
// (data/bench/h200x2-data-parallel-2026-11-30.jsonl) took a median of 262 us more per parameter
// tensor than the same steps on one GPU, 8 operations at the profile's 32.8 us.
constexpr double kFsdpOpsPerParameter = 8.0;
// DDP without gradient_as_bucket_view copies each gradient into its bucket and back. Its reducer
// does so only in the backward that synchronises: under no_sync (every micro-batch of an
// accumulation but the last) the autograd hooks return at once and the gradients accumulate in
// place (torch/csrc/distributed/c10d/reducer.cpp: autograd_hook returns unless
// prepare_for_backward ran, which DDP's forward calls only when require_backward_grad_sync).
constexpr double kDdpOpsPerGradient = 2.0;
// Tensor parallelism as the runner lays it out (python/trainfit_runner/parallel.py, PyTorch's
// ColwiseParallel, RowwiseParallel and SequenceParallel styles): what a step dispatches on
// DTensors, each through DTensor's op dispatcher. Measured: measure_dispatch.py's tp_plan section
// ran the runner's plan on Qwen2.5-1.5B-shaped models of 2 and 4 layers and counted, with a
// TorchDispatchMode, the operations dispatched with a DTensor argument, and the calls of
// DTensor.from_local, to_local and redistribute (data/bench/h200-dispatch-costs-world1-2026-12-01.json,
// tp_plan.per_layer and outside_layers, the difference between 4 and 2 layers). Per decoder layer:
//  - forward: 46 operations (the two SequenceParallel RMSNorms' and the seven projections'
//    composite linears: t, view, (add)mm, _unsafe_view), 11 from_local (the norms' and the
//    projections' inputs, the runner's two sequence-parallel pre-hooks), 11 to_local and 9
//    redistribute (the projections' outputs, the pre-hooks' all-gathers): 77;
//  - backward: 112 operations and 6 to_local, less the 12 add_ that accumulated the layer's 12
//    parameter gradients into the previous step's (the script never zeroes them; the runner's
//    steps set them to None first, so a real step has no such add_): 106.
// Outside the layers (embedding, final norm, output layer): forward 14 + 4 + 4 + 4 = 26;
// backward 31 + 3, less the 2 add_ of the embedding's and the final norm's gradients: 32.
// Attention itself, the rotary embedding, the activation and the residual adds run on the local
// tensors (plain operations, already counted).
constexpr double kDTensorForwardOpsPerLayer = 46 + 11 + 11 + 9;
constexpr double kDTensorBackwardOpsPerLayer = 112 - 12 + 6;
constexpr double kDTensorForwardOpsOutside = 14 + 4 + 4 + 4;
constexpr double kDTensorBackwardOpsOutside = 31 - 2 + 3;
// DeepSpeed's ZeRO-1/2 all-gather the updated parameters after the step in pieces of
// allgather_bucket_size elements (5e8 by default; docs of the DeepSpeed config). Unmeasured.
constexpr double kDeepSpeedAllgatherBucket = 5e8;
// Dequantising a 4-bit weight reads half a byte and writes two; the GEMM then reads the two.
constexpr double kDequantBytesPerWeight = 4.5;
// TRL's chunked loss (sft_trainer.py, _chunk and _chunked_cross_entropy_loss), bytes per logit
// in multiples of the GEMM dtype's width g and fp32's 4. Forward: the GEMM writes the logit (g),
// autocast's cast for log-softmax reads it and writes fp32 (g + 4; with g = 4 there is no cast,
// counted the same), log-softmax reads and writes (8), the argmax reads the logit (g), the entropy's
// exp (8), product (12) and sum (4). Recompute: the logit (g), the cast (g + 4), log-softmax (8).
// Backward: the NLL's gradient (zeros and the scatter: 4), log-softmax's backward (reads two, writes
// one: 12), the cast back (4 + g). In all 6 g + 68.
constexpr double kChunkedLossFixedBytesPerLogit = 68.0;
constexpr double kChunkedLossWidthsPerLogit = 6.0;
// A chunk's host operations. Forward: the two slices, h.float(), w.float(), autocast's two casts,
// t and mm, log-softmax's cast and log_softmax, nll_loss, the mask, argmax, eq, and, sum, float, exp,
// mul, neg, sum over the vocabulary, mul by the mask, sum, and the three running sums (27). The
// recompute to the NLL (10). Backward: the running sum's, nll_loss's, log_softmax's, the casts', mm's
// two products and slice's zeros and copy, and the accumulation into the gathered states' gradient
// (15); a trained head: its weight's product, its casts back and its accumulation (3 more).
constexpr double kChunkOps = 27.0 + 10.0 + 15.0;
constexpr double kChunkHeadGradientOps = 3.0;
// Liger's fused linear cross-entropy (liger_kernel/ops/fused_linear_cross_entropy.py at
// Liger-Kernel ead96b61), bytes per logit in multiples of the GEMM dtype's width g: the GEMM writes
// the logit, the cross-entropy kernel reads it twice (its running maximum and sum, then the
// gradient) and writes the gradient over it, and the hidden states' and (a trained head) the
// weight's gradient GEMMs read it: 5 g, and one more g with a trained head.
constexpr double kFusedLossWidthsPerLogit = 5.0;
// Its host operations. Around the chunks: the zeros of both gradients, of the loss and of the
// token accuracy, the labels' mask, its sum and .item() (a synchronisation), the two sums after
// the chunks, transformers' padding, slicing, views and the division by the items (17), the
// Function's own dispatch (2); in the backward, torch.equal against a new 1.0 and the two in-place
// scalings (5). A chunk: the slices of the input, the labels, the loss and the accuracy (4), t and
// mm (2), two contiguous (2), the Triton kernel (1), the loss's and accuracy's slice copies (4), the
// hidden states' gradient GEMM and its slice copy (3): 16; a trained head's t, mm, float and add_ (4).
constexpr double kFusedLossOps = 17.0 + 2.0 + 5.0;
constexpr double kFusedChunkOps = 16.0;
constexpr double kFusedChunkHeadGradientOps = 4.0;
// Liger's layer kernels against transformers' operations, per decoder layer's forward: an RMSNorm
// is its Function (view, two empties, the kernel, view: 5, and the dispatch) where transformers runs
// 8 (-2 each); the rotary embedding is two transposes, four contiguous, the kernel and two
// transposes back (9, and the dispatch) for transformers' 16 (-6); SiLU-and-multiply is two views,
// an empty, the kernel and a view (5, and the dispatch) for transformers' 2 (+4).
constexpr double kLigerNormOpsSaved = 2.0;
constexpr double kLigerRopeOpsSaved = 6.0;
constexpr double kLigerActivationOpsAdded = 4.0;

// SFTTrainer's metrics over the whole logits (compute_loss with loss_type "nll", TRL f2cd577), on
// the fp32 logits accelerate's convert_outputs_to_fp32 makes (it reads the model's and writes 4
// bytes): entropy_from_logits copies the shifted logits flat (2 widths) and takes 128 rows at a time
// through log-softmax (2), exp (2), the product (3) and the sum (1); the argmax reads them (1).
constexpr double kSftMetricWidthsPerLogit = 11.0;
constexpr double kAccelerateFp32Bytes = 4.0;
constexpr double kEntropyChunkRows = 128.0;
constexpr double kEntropyChunkOps = 6.0;  // log_softmax, exp, mul, sum, neg and the copy into the output

// TRL's log-probabilities, per logit, in multiples of the logits' byte width c (docs/model.md,
// "Objectives"): forward, the output layer writes the logit and the row's log-softmax reads and
// writes it (3); backward, gather's gradient (zeros, then the scatter: 2), log-softmax's backward
// (reads the gradient and its output, writes one: 3), the rows stacked (2) and written into the
// logits' shape (zeros, read, write: 3).
constexpr double kLogpWidthsPerLogit = 3.0 + 10.0;
// TRL's metrics over the policy's logits: the entropy's flattened copy (2), each chunk's
// log-softmax (2), exp (2), product (3) and sum (1); DPO's and KTO's copies of the chosen and
// rejected logits and their means (4 more).
constexpr double kEntropyWidthsPerLogit = 10.0;
constexpr double kPreferenceMetricWidthsPerLogit = 4.0;
// ORPO's NLL over the chosen half: the contiguous copy (2), log-softmax (2), its backward (NLL's
// zeros and scatter 2, log-softmax's 3) and the two slices' zeros and copies (6): 15 per chosen
// logit, half the logits.
constexpr double kOrpoNllWidthsPerLogit = 15.0 / 2.0;
// PPO's metrics after the step: softmax (2), logsumexp (its shifted copy and exp: 3), the product
// (3) and its sum (1).
constexpr double kPpoMetricWidthsPerLogit = 9.0;
// A reference's log-probabilities, per reference logit: the output layer's write and the row's
// log-softmax (3).
constexpr double kReferenceLogpWidthsPerLogit = 3.0;

}  // namespace

// Operations a mixture-of-experts layer adds to a dense one's under transformers 5's grouped_mm
// experts: 6 for the router, 29 counted in grouped_mm_experts_forward (integrations/moe.py).
constexpr double kGroupedMoeOps = 35.0;

namespace detail {
namespace {

// What the objective adds to the work of a step (docs/model.md, "Objectives").
void objective_work(WorkBasis& b, const ModelSpec& model, const TrainingSetup& setup, const StepShape& st,
                    double targets, double model_tensors) {
  const ObjectiveShape& o = st.objective;
  b.sequences_per_example = o.sequences_per_example;
  if (o.objective == Objective::sft) return;
  b.vocab = o.output_width;
  b.logit_fraction = o.logit_positions / o.seq;
  const double c = st.logits_compute_bytes;
  const double rows = o.logp_positions / o.logit_positions;  // log-softmax rows per logit
  switch (o.objective) {
    case Objective::dpo:
    case Objective::kto:
      b.loss_bytes_per_logit = c * (rows * kLogpWidthsPerLogit + kEntropyWidthsPerLogit + kPreferenceMetricWidthsPerLogit);
      break;
    case Objective::orpo: b.loss_bytes_per_logit = c * (rows * kLogpWidthsPerLogit + kOrpoNllWidthsPerLogit); break;
    case Objective::grpo: b.loss_bytes_per_logit = c * (rows * kLogpWidthsPerLogit + rows * kEntropyWidthsPerLogit); break;
    case Objective::ppo: b.loss_bytes_per_logit = c * (rows * kLogpWidthsPerLogit + rows * kPpoMetricWidthsPerLogit); break;
    // The score: written, read by the pooling's gather and its backward.
    case Objective::reward: b.loss_bytes_per_logit = 4.0 * c; break;
    case Objective::sft: break;
  }
  // Forwards without autograd: the reference's over the trained sequences (dpo, kto: in the
  // loss; grpo: in the scoring phase, once for each micro-batch's completions) and, for KTO, over
  // the KL batch (as many mismatched sequences) through the reference and the policy.
  const bool reference = o.reference == Reference::copy || o.reference == Reference::adapter_off;
  if (reference && o.objective != Objective::ppo) {
    b.reference_tokens = o.objective == Objective::kto ? 2.0 : 1.0;
    b.reference_logit_fraction = b.logit_fraction;
    b.reference_loss_bytes_per_logit = c * kReferenceLogpWidthsPerLogit * rows;
    // The base model's operations; with the adapters disabled PEFT's wrapper still runs (one
    // operation per targeted module).
    b.reference_forward_ops =
        b.forward_ops - kLoraForwardOps * targets + (o.reference == Reference::adapter_off ? targets : 0.0);
  }
  if (o.objective == Objective::kto) b.policy_no_grad_tokens = 1.0;
  if (o.objective == Objective::ppo) {
    // The value model: the policy's layers (the same architecture) trained whole, a score head.
    const ValueModelShape& v = o.value;
    b.value_linear_flops_per_token = b.linear_flops_per_token + 2.0 * b.hidden;
    double saved = 0;
    for (const double a : v.layer_activations) saved += a;
    b.value_saved_per_token = saved * b.layers;
    for (const double a : v.outside_activations) b.value_saved_per_token += a;
    b.value_weight_bytes = v.weights;
    b.value_forward_ops = b.forward_ops - kLoraForwardOps * targets;
    const double pb = v.parameters > 0 ? v.gradients / v.parameters : 0.0;  // bytes a parameter
    b.value_optimizer_bytes = setup.optimizer == Optimizer::adamw           ? v.parameters * 7.0 * pb
                              : setup.optimizer == Optimizer::adamw_foreach ? v.parameters * kForeachAdamwPasses * pb
                                                                            : v.parameters * 3.0 * pb;
    b.value_optimizer_ops = 0.25 * 0.5 * model_tensors;  // zero_grad over its tensors; the fused launches are shared
  }
  (void)model;
}

}  // namespace

namespace {

// One pass's reads of a quantised base's decoder matrices: each nn.Linear weight dequantised, the
// fused experts (left in the compute dtype) read as they are.
double quantised_weight_pass(const WorkBasis& b) {
  return kDequantBytesPerWeight * (b.weight_elems - b.unquantised_weight_elems) +
         b.unquantised_weight_bytes * b.unquantised_weight_elems;
}

// The work the objective adds to a micro-batch of `T` trained tokens (docs/model.md,
// "Objectives"): the forwards without autograd (FLOPs forward only; their saved-size intermediates
// written and read once; every weight read once) and PPO's value model (a full fine-tuning
// forward and backward without its vocabulary, and its share of the optimizer step).
void objective_step_work(StepWork& w, const WorkBasis& b, double T, double attn_fwd, double lora_forward,
                         double passes) {
  w.sequences_per_example = b.sequences_per_example;
  const double h = b.hidden, V = b.vocab;
  const double weight_pass = b.quantised ? quantised_weight_pass(b) : b.weight_read_bytes * (b.weight_elems + V * h);
  const double saved_fwd = (b.layer_saved_per_token * b.layers + b.outside_per_token) * kTrafficPerSavedByteForward;
  auto no_grad_forward = [&](double tokens, double logit_fraction, double loss_bytes_per_logit, double ops) {
    const double fwd = b.linear_flops_per_token * tokens + 2.0 * V * h * tokens * logit_fraction;
    (b.fp32_compute ? w.fp32_flops : w.tensor_flops) += fwd;
    (b.fp32_compute ? w.fp32_flops : w.attention_flops) += attn_fwd * tokens / T;
    w.memory_bytes += saved_fwd * tokens + weight_pass + loss_bytes_per_logit * tokens * logit_fraction * V;
    w.model_flops += fwd + attn_fwd * tokens / T;
    w.ops += ops;
    w.kernels += kKernelsPerOp * ops;
    w.layer_passes += b.layers;
  };
  if (b.reference_tokens > 0)
    no_grad_forward(b.reference_tokens * T, b.reference_logit_fraction, b.reference_loss_bytes_per_logit,
                    b.reference_tokens * b.reference_forward_ops);
  if (b.policy_no_grad_tokens > 0) {
    no_grad_forward(b.policy_no_grad_tokens * T, b.logit_fraction, b.reference_loss_bytes_per_logit, b.forward_ops);
    w.memory_bytes += lora_forward * b.policy_no_grad_tokens;  // its LoRA branches run too
  }
  if (b.value_linear_flops_per_token > 0) {
    // Forward, input gradients and weight gradients; attention forward and backward.
    const double fwd = b.value_linear_flops_per_token * T;
    (b.fp32_compute ? w.fp32_flops : w.tensor_flops) += 3.0 * fwd;
    (b.fp32_compute ? w.fp32_flops : w.attention_flops) += attn_fwd * 3.5;
    w.memory_bytes += b.value_saved_per_token * T * (kTrafficPerSavedByteForward + kTrafficPerSavedByteBackward) +
                      b.value_weight_bytes * 2.0;
    w.model_flops += 3.0 * fwd + attn_fwd * 3.5;
    const double ops = b.value_forward_ops * (1.0 + kBackwardOpsPerForwardOp);
    w.ops += ops;
    w.kernels += kKernelsPerOp * ops;
    w.optimizer_bytes += b.value_optimizer_bytes;
    w.optimizer_ops += b.value_optimizer_ops;
  }
  (void)passes;
}

}  // namespace

namespace {

// GRPO's generation with transformers' generate() (docs/model.md, "Generation"): one forward of
// the generating model, from the basis's counts. The model generates as the step trains it
// (its weights in the compute dtype, its LoRA branches on), under torch.no_grad and with
// gradient checkpointing switched off (TRL's unwrap_model_for_generation); its keys and values
// go to transformers' dynamic cache in the activations' dtype.
void generation_work(WorkBasis& b, const ModelSpec& model, const TrainingSetup& setup, const StepShape& st,
                     double targets) {
  GenerationWork& g = b.generation;
  g.on = true;
  g.steps_per_generation = setup.steps_per_generation;
  g.iterations = as_d(setup.iterations);
  g.completion = as_d(setup.completion_len);
  g.prompt = b.seq - g.completion;
  const double L = b.layers, h = b.hidden, V = b.vocab;
  g.flops_per_token = b.linear_flops_per_token + 2.0 * b.targeted_rank_widths;
  // generate() asks for the last position's logits only (logits_to_keep 1).
  g.head_flops_per_row = 2.0 * V * h;
  // QK^T and PV: 2 x head_dim FLOPs each per head, token and position attended.
  // Only the attention layers attend and cache keys and values; a linear-attention layer's state
  // is one fixed-size matrix a head, whatever the length (not counted).
  g.attention_flops_per_token_position = 4.0 * b.attention_layers * b.heads * b.head_dim;
  g.weight_bytes = st.params.weights + st.params.adapters;
  g.cache_bytes_per_position = 2.0 * b.attention_layers * kv_cache_bytes_per_position(model, setup);
  g.logits_bytes_per_row = kDecodeLogitBytes * V;
  g.adapters = targets;
  g.layer_ops = L * b.layer_ops - kLoraForwardOps * targets;
  // The scoring pass over a generated batch: the completion's logits only (logits_to_keep).
  g.score_flops_per_token = b.linear_flops_per_token + 2.0 * V * h * b.logit_fraction;
  g.kernels = kKernelsPerOp * (g.layer_ops + kModelForwardOps);
}

}  // namespace

WorkBasis work_basis(const ModelSpec& model, const Step& step) {
  // The GPUs compute in the layout's compute dtype (step/layout.hpp); the tensors describe that step.
  const TrainingSetup& user_setup = step.setup;
  const TrainingSetup& setup = step.compute();
  const Layout& lay = step.layout;
  const StepShape& st = step.tensors;
  WorkBasis b;
  b.seq = as_d(setup.seq);
  const double L = b.layers = as_d(model.num_layers);
  b.attention_layers = as_d(model.attention_layers());
  if (const LinearAttention& la = model.linear_attention; la.layers > 0) {
    // Per token and value head, in multiply-adds: the chunk's k k^T (C dk), w and u (C dk + C dv),
    // v_new = u - w h and the state update k^T v_new (2 dk dv), the output's q h (dk dv) and its
    // within-chunk (q k^T) v_new (C dk + C dv), and the triangular solve (C^2 / 3); two FLOPs each.
    const double C = kGatedDeltaChunk, dk = as_d(la.key_head_dim), dv = as_d(la.value_head_dim);
    b.linear_attention_flops_per_token = as_d(la.layers) * as_d(la.value_heads) * 2.0 *
                                         (2.0 * C * dk + 2.0 * C * dv + 3.0 * dk * dv + C * C / 3.0);
  }
  if (const StateSpace& ss = model.state_space; ss.layers > 0) {
    // Per token and layer, fp32 (4 bytes): G = C B^T (chunk x state a head), M = G L and the segment sums'
    // three temporaries (chunk a head each), the diagonal output M x (chunk x inner), the chunk
    // states B^T x and C times the states (inner x state each); positions padded to whole chunks.
    const double Q = as_d(ss.chunk_size), H = as_d(ss.heads), n = as_d(ss.state_size), I = as_d(ss.inner_width());
    b.state_space_products_per_token =
        as_d(ss.layers) * 4.0 * state_space_padding(ss, b.seq) * (H * Q * n + 4.0 * H * Q + I * Q + 2.0 * I * n);
  }
  b.hidden = as_d(model.hidden_size);
  b.vocab = as_d(model.vocab_size);
  b.heads = as_d(model.num_heads);
  // QK^T runs over the query/key head width and PV over the value head width; step_work counts both
  // at head_dim, so latent attention (192 and 128 in DeepSeek) is counted at their mean.
  b.head_dim = (as_d(model.head_dim) + as_d(model.value_head_dim())) / 2.0;
  const bool full = b.full = setup.method == Method::full;
  const double r = as_d(setup.lora.rank);
  b.fp32_compute = (full && !setup.amp && setup.weights == DType::fp32) ||
                   (setup.method == Method::lora && setup.weights == DType::fp32);
  b.eager = setup.attention == Attention::eager;
  if (model.sliding_mask_at(setup.seq)) b.masked_layers = as_d(model.sliding_layers);
  b.packed_mask = setup.packing && setup.attention == Attention::sdpa;
  b.quantised = setup.method == Method::qlora;
  if (b.quantised) b.unquantised_weight_bytes = detail::unquantised_parameter_bytes(setup);

  // Linear layers (average over dense and MoE layers), with the LoRA targets among them.
  const LayerLinears& linears = st.linears;
  double targets = 0;
  auto add = [&](const std::vector<LayerLinear>& ms, double layers) {
    for (const auto& [m, lora_target, wrapped] : ms) {
      const double rows = as_d(m.count) * m.token_fraction;  // copies a token passes through
      b.linear_flops_per_token += 2.0 * as_d(m.in_features) * as_d(m.out_features) * rows * layers;
      b.weight_elems += as_d(m.in_features) * as_d(m.out_features) * as_d(m.count) * layers;
      if (!m.nn_linear) b.unquantised_weight_elems += as_d(m.in_features) * as_d(m.out_features) * as_d(m.count) * layers;
      if (wrapped) {
        // ParamWrapper: no LoRA branch; the merged weight's gradient is a full weight gradient.
        b.wrapped_flops_per_token += 2.0 * as_d(m.in_features) * as_d(m.out_features) * rows * layers;
        b.merged_weight_elems += as_d(m.in_features) * as_d(m.out_features) * as_d(m.count) * layers;
      } else if (lora_target) {
        b.targeted_rank_widths += r * (as_d(m.in_features) + as_d(m.out_features)) * rows * layers;
        b.targeted_in += as_d(m.in_features) * rows * layers;
        b.targeted_out += as_d(m.out_features) * rows * layers;
        targets += layers;
      }
    }
  };
  linears.for_each_kind(add);

  // The LoRA branch casts the base's activations (2 bytes, or 4 in pure fp32) to its fp32 and back.
  b.activation_bytes = b.fp32_compute ? 4.0 : 2.0;
  b.lora_branch_autocast = st.lora_branch_autocast;

  // The LoRA branch's saved tensors are part of its own traffic (step_work); the rest of the
  // layer's are written and read by the base model's elementwise work.
  double lora_saved_per_token = 0;
  for (const auto& a : st.layer_activations)
    if (a.lora_branch) lora_saved_per_token += a.bytes;
  b.layer_saved_per_token = st.layer_activation_per_token - lora_saved_per_token;
  b.outside_per_token = st.outside_per_token;
  b.tower_linear_flops_per_token = st.tower_linear_flops_per_token;
  b.tower_attention_flops_per_token = st.tower_attention_flops_per_token;
  b.tower_trained = st.tower_trained;
  b.tower_saved_per_token = st.tower_saved_per_token;
  b.layer_activation_per_token = st.layer_activation_per_token;
  b.layer_saved_tensors = static_cast<double>(st.layer_activations.size());
  if (setup.activation_offloading) {
    b.activation_offloading = true;
    b.offload_layer_per_token = st.layer_activation_per_token;
    for (const auto& a : st.layer_activations)
      if (a.saved_twice) b.offload_layer_per_token -= a.bytes;
    b.offload_checkpoint_per_token = st.checkpoint_per_token;
    const bool whole_loss = setup.objective == Objective::sft && !st.chunked_loss.on && !st.fused_loss.on;
    b.offload_loss_per_token = whole_loss ? 4.0 * as_d(model.vocab_size) : 0.0;
  }
  b.weight_read_bytes = full && setup.amp ? bytes_per_element(*setup.amp) : bytes_per_element(setup.weights);
  b.chunked = st.chunked_loss;
  b.fused = st.fused_loss;
  b.logit_bytes = st.logits_compute_bytes;
  b.sft_metrics = setup.trainer == Trainer::trl && setup.objective == Objective::sft && !b.chunked.on && !b.fused.on;

  // Optimizer: read parameter, gradient and states; write parameter and states.
  const double tp = st.params.trainable_params;
  // Under a mixed-precision layout (FSDP's MixedPrecisionPolicy over fp32 weights, DeepSpeed's
  // fp32 master weights) the optimizer steps the fp32 storage, not the compute copies.
  const double pb = full && lay.fp32_master  ? 4.0
                    : full && lay.compute_dtype ? bytes_per_element(user_setup.weights)
                                                : st.params.trainable_bytes_each;
  switch (setup.optimizer) {
    case Optimizer::adamw: b.optimizer_bytes = tp * (3.0 * pb + 4.0 * pb); break;
    case Optimizer::adamw_foreach: b.optimizer_bytes = tp * kForeachAdamwPasses * pb; break;
    case Optimizer::adamw_8bit: b.optimizer_bytes = tp * (3.0 * pb + 4.0); break;
    case Optimizer::sgd: b.optimizer_bytes = tp * 3.0 * pb; break;
    case Optimizer::sgd_momentum: b.optimizer_bytes = tp * 5.0 * pb; break;
    case Optimizer::adafactor: b.optimizer_bytes = tp * (3.0 * pb + 6.0 * 4.0); break;
  }

  // Host operations.
  // Of the layers, the attention layers attend (eagerly, with q/k norms, gated); the others are
  // Gated DeltaNet or Mamba-2 layers (Falcon-H1's layers attend and scan both).
  const double attending = b.attention_layers / L;
  const double gated_delta = as_d(model.linear_attention.layers) / L, state_space = as_d(model.state_space.layers) / L;
  // Falcon-H1's layers scan beside their attention, not in its place.
  const bool parallel_scan = model.state_space.parallel_attention;
  double layer_ops = kLayerForwardOps + attending * ((b.eager ? kEagerExtraOps : 0.0) + (model.qk_norm ? 16.0 : 0.0) +
                                                     (model.attention_output_gate ? kOutputGateOps : 0.0)) +
                     gated_delta * (kGatedDeltaNetOps - kAttentionBlockOps) +
                     state_space * (kStateSpaceScanOps - (parallel_scan ? 0.0 : kAttentionBlockOps)) +
                     (parallel_scan ? kFalconMultiplierOps : 0.0) + 8.0 * as_d(model.norms_per_layer - 2);
  // Nemotron-H's layers are one sublayer each behind one norm (norms_per_layer 1, above) and one
  // residual add: its attention and Mamba-2 layers dispatch no MLP, its MLP-only layers no token
  // mixer; and its non-gated MLP (up, ReLU, square, down) one operation fewer than a gated one.
  const double mlp_only = as_d(model.mlp_only_layers) / L;
  if (model.mixer_only_layers)
    layer_ops -= (1.0 - mlp_only) * kMlpOps + mlp_only * kAttentionBlockOps + kResidualAddOps;
  if (!model.gated_mlp) layer_ops -= model.mixer_only_layers ? mlp_only : 1.0;  // the share of layers with an MLP
  if (model.is_mla()) layer_ops += kLatentAttentionExtraOps + (model.q_lora_rank > 0 ? kLowRankQueryExtraOps : 0.0);
  if (model.layer_norm) layer_ops -= as_d(model.norms_per_layer) * (kRmsNormOps - 1.0);
  layer_ops += kLoraForwardOps * targets / L;
  // A 4-bit or 8-bit base runs bitsandbytes' Python wrapper and its dequantisation kernels (the
  // block constants first, with double quantisation) around every matmul, in every pass.
  if (setup.method == Method::qlora) layer_ops += 6.0 * static_cast<double>(linears.dense.size());
  // Autocast casts each matmul's input (and, once per forward, its weight): two more operations
  // per linear module.
  if (setup.amp) layer_ops += 2.0 * static_cast<double>(linears.dense.size());
  // transformers 5 runs the experts with grouped_mm (config._experts_implementation, checked with
  // 5.17 on Qwen3-MoE, PhiMoE and DeepSeek-V2): the router's operations (linear, softmax, top-k,
  // renormalisation, cast) and grouped_mm_experts_forward's (the token permutation: two argsorts,
  // the gathers, a histogram and its cumulative sum; two torch._grouped_mm; the activation and the
  // routing weights; the inverse permutation and index_add_), whatever the number of experts. Not
  // a loop over the experts, as transformers 4 ran them.
  if (model.is_moe()) layer_ops += kGroupedMoeOps * linears.moe_layers / L;
  layer_ops -= kRotaryOps * as_d(model.rope_free_layers) / L;
  // gpt-oss: eager attention's sink column (expand, cat, max, subtract, slice) and the experts'
  // clamped activation (two slices, two clamps, scale, sigmoid, two products, the shift: 9 operations
  // where SiLU's activation and product are 2).
  if (model.attention_sinks && b.eager) layer_ops += 5.0;
  if (model.clamped_glu) layer_ops += 7.0 * linears.moe_layers / L;
  if (model.scaled_residuals) layer_ops += 2.0;
  if (setup.kernels == Kernels::liger)
    layer_ops += -kLigerNormOpsSaved * as_d(model.norms_per_layer) - kLigerRopeOpsSaved + kLigerActivationOpsAdded -
                 (model.qk_norm && model_family(model).liger_qk_norm ? 2.0 * kLigerNormOpsSaved : 0.0);
  b.layer_ops = layer_ops;
  b.forward_ops =
      L * layer_ops + kModelForwardOps + (model.scaled_residuals ? 1.0 : 0.0) + (model.scaled_logits ? 1.0 : 0.0);
  if (st.tower_linear_flops_per_token > 0) {
    // The vision tower's layers dispatch as a decoder layer of their structure: nn.LayerNorm is
    // one operation where transformers' RMSNorm is eight, SigLIP has no rotary embedding (the
    // others' 2-D one counts as the text's), a GELU MLP has one matmul and one product fewer than
    // a gated one, and every adapter its branch.
    const TowerLayers& t = model.vision.shape;
    double tower_ops = kLayerForwardOps - (t.rms_norm ? 0.0 : 2.0 * (kRmsNormOps - 1.0)) -
                       (model.vision.type == "siglip_vision_model" ? kRotaryOps : 0.0) - (t.gated_mlp ? 0.0 : 2.0);
    if (setup.method != Method::full)
      for (const TowerLinear& m : model.vision.linears)
        if (m.count == t.layers && targets_tower_module(setup, m)) tower_ops += kLoraForwardOps;
    b.forward_ops += as_d(t.layers) * tower_ops;
    if (t.attention_call_per_image && setup.attention != Attention::flash) {
      // Qwen2_5_VLVisionAttention and Qwen3VLVisionAttention without flash attention: q, k and v
      // split at cu_seqlens (each window in the windowed layers, each image in the others) and one
      // attention call each, then one torch.cat.
      const double positions = tower_image_positions(model, setup);
      const double windowed = as_d(t.windowed_layers);
      const double windows = t.window > 0 ? std::ceil(positions / as_d(t.window)) : 1.0;
      b.tower_attention_calls_per_sequence =
          as_d(setup.images) * (windowed * windows + (as_d(t.layers) - windowed));
      b.tower_layers = as_d(t.layers);
    }
  }
  // Granite's scalings move the residual stream once more per sublayer and the embedding once, and
  // the logits once more where the model makes them whole (a chunked or fused loss computes its own).
  const double stream_bytes = as_d(model.hidden_size) * b.activation_bytes;  // a sublayer's output
  if (model.scaled_residuals) b.scaling_bytes_per_token = kScalingWidthsPerPass * stream_bytes * (2.0 * L + 1.0);
  if (model.scaled_logits && !st.chunked_loss.on && !st.fused_loss.on)
    b.scaling_bytes_per_token += kScalingWidthsPerPass * st.logits_compute_bytes * as_d(model.vocab_size);
  // Fused AdamW: a handful of multi-tensor launches; zero_grad touches every parameter tensor.
  // transformers' Adafactor runs about 29 operations per parameter tensor in a Python loop. These
  // run without autograd or module code: measured on the H200 host, a no-grad operation costs a
  // quarter of what a training forward operation costs (7.9 us against the fitted ~32 us).
  constexpr double kNoGradOpCost = 0.25;
  // Parameter tensors of a Llama/Qwen-style model: 12 a layer (q, k, v with biases, o, the three
  // MLP matrices, two norms), the embedding, the output layer and the final norm; LoRA adds A and B
  // to each targeted module.
  const double model_tensors = L * 12.0 + 3.0;
  const double adapter_tensors = full ? 0.0 : 2.0 * targets;
  const double param_tensors = full ? model_tensors : adapter_tensors;  // the trainable ones
  b.optimizer_ops = kNoGradOpCost * (setup.optimizer == Optimizer::adafactor ? 29.0 * param_tensors
                                                                            : 10.0 + 0.5 * param_tensors);

  // Data parallelism. DDP all-reduces the gradients once a step (accumulation runs under
  // no_sync; without accumulation, every micro-batch is a step); FSDP and ZeRO-3 gather each layer
  // for its forward and again for its backward (the root only once) and reduce-scatter the
  // gradients in every micro-batch.
  if (lay.several) {
    const double n = lay.dp * lay.cp;  // GPUs holding the same parameters
    // A data-parallel wrapper (DDP, FSDP2) runs only when several GPUs hold the same parameters:
    // a layout of tensor or pipeline parallelism alone has none (the runner wraps a stage or a
    // tensor-parallel model only over its data-parallel replicas).
    const bool replicated = n > 1;
    // The gradients as they are reduced: FSDP's reduce_dtype (an fp32 reduce-scatter of bf16
    // gradients moves twice their bytes), else the compute dtype.
    const double grads = lay.reduce_dtype && full && st.params.trainable_bytes_each > 0
                             ? st.gradients * bytes_per_element(*lay.reduce_dtype) / st.params.trainable_bytes_each
                             : st.gradients;
    const double params = st.params.weights + st.params.adapters;  // compute dtype, this GPU's tp share
    const double root = st.params.root_weights;
    const DataParallelScheme& scheme = data_parallel_scheme(user_setup.parallel);
    using F = DataParallelFramework;
    if (!scheme.shards_parameters) {
      const double moved = (n - 1.0) / n;
      if (scheme.framework == F::pytorch_ddp) {
        b.layout.all_reduce_bytes = 2.0 * moved * grads;
      } else {
        // ZeroRedundancyOptimizer all-reduces the gradients as DDP does, DeepSpeed's stage 1-2
        // reduce-scatter them; both then send the parameters each GPU updated to the others once
        // the optimizer step is done: nothing is left to overlap them with.
        // ZeroRedundancyOptimizer (parameters_as_bucket_view off, its default) broadcasts every
        // parameter tensor on its own; DeepSpeed all-gathers in buckets.
        const bool zero_redundancy = scheme.framework == F::zero_redundancy_optimizer;
        b.layout.step_collective_bytes = zero_redundancy ? 2.0 * moved * grads : moved * grads;
        const double trainable = user_setup.method == Method::full ? params : st.params.adapters;
        b.layout.post_step_collective_bytes = moved * trainable;
        if (replicated)
          b.layout.post_step_collectives =
              zero_redundancy ? param_tensors : std::ceil(st.params.trainable_params / kDeepSpeedAllgatherBucket);
      }
      // PyTorch's DDP (ddp, and ZeroRedundancyOptimizer over it) copies the gradients in the
      // synchronising micro-batch only; DeepSpeed's stage 2 (unmeasured) is left at every micro-batch.
      if (replicated) {
        if (scheme.framework == F::deepspeed) b.parallel_ops = kDdpOpsPerGradient * param_tensors;
        else b.parallel_step_ops = kDdpOpsPerGradient * param_tensors;
      }
    } else {
      // Each layer gathered for its forward and again for its backward, unless it stays gathered
      // between them; HSDP shards within a host and all-reduces the shards' gradients between hosts.
      const double shard = lay.param_shards;
      const double moved = shard > 0 ? (shard - 1.0) / shard : 0.0;
      const double layers = params - root;
      const double gathers = scheme.keeps_gathered ? 1.0 : 2.0;
      b.layout.all_gather_bytes = moved * (gathers * layers + root + grads);
      if (scheme.shards_within_node && user_setup.nodes > 1) {
        const double replicas = as_d(user_setup.nodes);
        b.layout.network_bytes = 2.0 * (replicas - 1.0) / replicas * grads / shard;
      }
      if (replicated) b.parallel_ops = kFsdpOpsPerParameter * (model_tensors + adapter_tensors);
    }
    // Offload: an offloaded parameter shard comes over the host link for each gather; the
    // gradients go out and the updated parameters come back once a step.
    const double shards = lay.param_shards;
    if (lay.offload_params) b.layout.offload_micro_bytes = (scheme.keeps_gathered ? 1.0 : 2.0) * params / shards;
    if (lay.offload_states) {
      const double trainable = user_setup.method == Method::full ? params : st.params.adapters;
      b.layout.offload_step_bytes = (grads + trainable) / lay.state_shards;
      // The CPU optimizer reads the parameter, gradient and two states and writes three, in fp32.
      b.layout.host_optimizer_bytes = st.params.trainable_params / lay.state_shards * 7.0 * 4.0;
    }
    // Model parallelism. Tensor parallelism with sequence parallelism all-gathers each layer's
    // input to attention and to the MLP and reduce-scatters their outputs: four collectives of the
    // layer's activations a pass, each moving (tp-1)/tp of them. Context parallelism passes every
    // other GPU's keys and values around a ring for each layer's attention (forward, and twice in
    // the backward). Pipeline stages send each micro-batch's activations forward and their
    // gradients back.
    const double c = b.activation_bytes;
    if (lay.tp > 1) b.model_parallel_bytes_per_token_pass += L * 4.0 * (lay.tp - 1.0) / lay.tp * b.hidden * c / lay.cp;
    if (lay.cp > 1)
      b.model_parallel_bytes_per_token_pass += L * 1.5 * (lay.cp - 1.0) / lay.cp * 2.0 * as_d(model.num_kv_heads) *
                                               ((as_d(model.head_dim) + as_d(model.value_head_dim())) / 2.0) * c /
                                               lay.tp;  // keys and values
    if (lay.pp > 1) b.pipeline_bytes_per_token = 2.0 * b.hidden * c / (lay.tp * lay.cp);
    if (lay.tp > 1) {
      // Outside the layers, once a micro-batch: the vocabulary-sharded embedding's output
      // all-reduced, and the output layer's logits all-gathered whole on every GPU (the runner's
      // plan and the Hugging Face plans' "colwise_rep"; its backward is a local slice).
      b.tp_outside_bytes_per_token = (lay.tp - 1.0) / lay.tp * (2.0 * b.hidden + b.vocab) * c / lay.cp;
      b.dtensor_forward_ops = L * kDTensorForwardOpsPerLayer + kDTensorForwardOpsOutside;
      b.dtensor_backward_ops = L * kDTensorBackwardOpsPerLayer + kDTensorBackwardOpsOutside;
    }
    if (lay.pp > 1) {
      const PipelineStage& first = *step.first_stage;
      const PipelineStage& last = *step.last_stage;
      b.first_stage_layers = first.layers;
      b.last_stage_layers = last.layers;
      // Each stage steps the optimizer over its own parameters: its layers' share, and in full
      // fine-tuning a vocabulary matrix each for the first (the embedding) and the last (the
      // output layer, its own copy when tied).
      const double trainable = st.params.trainable_params;
      const double vocab_matrix = user_setup.method == Method::full ? b.vocab * b.hidden / lay.tp : 0.0;
      const double outside = user_setup.method == Method::full
                                 ? vocab_matrix * (model.tie_word_embeddings ? 1.0 : 2.0)
                                 : 0.0;
      const double layer_params = std::max(0.0, trainable - outside);
      const double busiest = std::max(first.layers, last.layers) / L * layer_params + vocab_matrix;
      b.stage_trainable_share = trainable > 0 ? std::min(1.0, busiest / trainable) : 1.0;
      b.optimizer_bytes *= b.stage_trainable_share;
      b.optimizer_ops *= b.stage_trainable_share;
      b.parallel_ops *= b.stage_trainable_share;
      b.parallel_step_ops *= b.stage_trainable_share;
    }
    b.work_divisor = lay.tp * lay.cp * lay.pp;
    b.tensor_parallel = lay.tp;
    b.context_parallel = lay.cp;
    b.layout.pipeline_stages = lay.pp;
    b.layout.pipeline_microbatches = lay.microbatches;
    b.layout.data_parallel = lay.dp;
    // HSDP keeps its shards within a host; any other data-parallel group over several hosts
    // spans them.
    b.layout.dp_crosses_hosts = user_setup.nodes > 1 && !scheme.shards_within_node;
    // Each GPU updates its own share of the trainable parameters.
    b.optimizer_bytes /= lay.state_shards;
    if (lay.offload_states) b.optimizer_bytes = 0;
  }

  // What one layer's pass touches: its weights (and, per token, its activations).
  b.weight_bytes_per_layer = (st.params.weights + st.params.quant_constants) / L;
  objective_work(b, model, setup, st, targets, model_tensors);
  if (setup.objective == Objective::grpo && setup.generation == Generation::generate)
    generation_work(b, model, setup, st, targets);
  return b;
}

namespace {
// The passes over the layers a micro-batch makes: forward, backward and, checkpointed, the recompute.
double passes_of(bool grad_ckpt) {
  return 2.0 + (grad_ckpt ? 1.0 : 0.0);
}
}  // namespace

StepWork step_work(const WorkBasis& b, double tokens, double batch, bool grad_ckpt) {
  StepWork w;
  // A paired objective trains on the chosen and the rejected sequence of every example.
  const double T = tokens * b.sequences_per_example;
  const double S = b.seq, B = batch * b.sequences_per_example;
  const double L = b.layers;
  const double h = b.hidden, V = b.vocab;
  const double nq = b.heads, d = b.head_dim;
  const bool full = b.full;
  const bool ckpt = grad_ckpt;
  const bool fp32_compute = b.fp32_compute;

  const double lm_flops = 2.0 * V * h * T * b.logit_fraction;  // GRPO: the completion's positions only
  const double layers_fwd = b.linear_flops_per_token * T;
  const double fwd = layers_fwd + lm_flops;
  const double matmul = fwd /*forward*/ + fwd /*input gradients*/ + (full ? fwd : 0.0) /*weight gradients*/ +
                        (ckpt ? layers_fwd : 0.0) /*recompute*/;
  (fp32_compute ? w.fp32_flops : w.tensor_flops) += matmul;
  // TRL's chunked loss: its positions are the sequences' but the last of each, in chunks; each
  // chunk's GEMM runs again in the backward, and in fp32 (on CUDA cores) without autocast.
  const ChunkedLossShape& cl = b.chunked;
  const double chunk_positions = cl.on ? std::max(1.0, T - B) : 0.0;
  const double chunks = cl.on ? std::ceil(chunk_positions / cl.chunk_rows) : 0.0;
  // Liger's fused loss: every position, in chunks of the rows its rule picks for this micro-batch.
  const double fused_chunks = b.fused.on ? std::ceil(T / fused_loss_chunk_rows(T, b.fused.vocab, b.fused.hidden)) : 0.0;
  if (cl.on) {
    const double head = 2.0 * cl.head_elems * chunk_positions;
    const double passes_of_head = 2.0 /*forward, recompute*/ + 1.0 /*input gradient*/ + (cl.head_trained ? 1.0 : 0.0);
    (fp32_compute ? w.fp32_flops : w.tensor_flops) -= lm_flops * (2.0 + (full ? 1.0 : 0.0));
    (cl.gemm_bytes < 4.0 && !fp32_compute ? w.tensor_flops : w.fp32_flops) += head * passes_of_head;
  }

  // Attention: QK^T and PV, 2*S*d FLOPs each per token and head. The fused kernels skip the
  // masked half of a causal sequence; eager computes all of it. Backward: fused 2.5x, eager 2x.
  const bool eager = b.eager;
  // A sliding-window layer's mask keeps SDPA off the causal kernels: the memory-efficient kernel
  // computes the whole seq x seq, masked part included (the window saves no work).
  const double La = b.attention_layers;
  // Packed under SDPA: one masked sequence of T tokens, every attention layer over all of T x T
  // (the mask's zero blocks are computed too). Under flash attention each example attends to
  // itself, as an unpacked row of its tokens would.
  const double attn_fwd = b.packed_mask ? 4.0 * La * T * T * nq * d
                                        : (eager ? 4.0 * La : 2.0 * (La + b.masked_layers)) * B * S * S * nq * d;
  const double attn = attn_fwd * (1.0 + (eager ? 2.0 : 2.5) + (ckpt ? 1.0 : 0.0));
  (fp32_compute ? w.fp32_flops : w.attention_flops) += attn;
  // The gated delta rule's kernels, priced as the attention kernels are (Triton kernels, not one
  // GEMM): the forward, a backward that recomputes the states (2.5 forwards, as the fused
  // attention's), the recompute under checkpointing.
  (fp32_compute ? w.fp32_flops : w.attention_flops) +=
      b.linear_attention_flops_per_token * T * (1.0 + 2.5 + (ckpt ? 1.0 : 0.0));

  // The vision tower on the micro-batch's images: its forward; when it trains, the input gradients
  // (and the weights' in full fine-tuning) and, under checkpointing, the recompute of its layers.
  const double tower_fwd = b.tower_linear_flops_per_token * T;
  const double tower_attn_fwd = b.tower_attention_flops_per_token * T;
  const double tower_passes = b.tower_trained ? 2.0 + (full ? 1.0 : 0.0) + (ckpt ? 1.0 : 0.0) : 1.0;
  const double tower_attn_passes = b.tower_trained ? 3.5 + (ckpt ? 1.0 : 0.0) : 1.0;
  (fp32_compute ? w.fp32_flops : w.tensor_flops) += tower_fwd * tower_passes;
  (fp32_compute ? w.fp32_flops : w.attention_flops) += tower_attn_fwd * tower_attn_passes;

  // LoRA branches. Their GEMMs are skinny (rank 16 against thousands), so they stream their fp32
  // operands and barely compute (measured on the H200: 2-16 TFLOP/s, bandwidth-bound); what costs
  // is the fp32 traffic of the branch, counted per unit of module width.
  const double c_act = b.activation_bytes;
  const double lora_in_bytes =
      kLoraInputBytesPerWidth + c_act + (b.lora_branch_autocast ? kLoraAutocastInputWidths * c_act : 0.0);
  const double lora_out_bytes =
      b.lora_branch_autocast ? kLoraAutocastOutputWidths * c_act : kLoraOutputBytesPerWidth + 2.0 * c_act;
  const double lora_forward = T * (b.targeted_in * lora_in_bytes + b.targeted_out * lora_out_bytes);
  const double lora_bytes = lora_forward * (1.0 + kLoraBackwardPerForward + (ckpt ? 1.0 : 0.0));
  // Of that, the adapter GEMMs' own operands: A reads the fp32 input and B writes the fp32 output
  // (forward and recompute); backward, B's two GEMMs read the output gradient, A's two read the
  // input and write its gradient.
  w.adapter_bytes = T * (b.targeted_in * (4.0 * (1.0 + (ckpt ? 1.0 : 0.0)) + 8.0) +
                         b.targeted_out * (4.0 * (1.0 + (ckpt ? 1.0 : 0.0)) + 4.0));

  w.model_flops = 2.0 * fwd + (full ? fwd : 0.0) + attn_fwd * 3.5 + 6.0 * b.targeted_rank_widths * T +
                  b.wrapped_flops_per_token * T +
                  tower_fwd * (b.tower_trained ? (full ? 3.0 : 2.0) : 1.0) +
                  tower_attn_fwd * (b.tower_trained ? 3.5 : 1.0);

  // Bytes: elementwise work over the saved activations (the LoRA branch's are in its traffic
  // above), the loss, dequantisation.
  const double layer_saved = b.layer_saved_per_token * T * L;
  const double saved = layer_saved + (b.outside_per_token + b.tower_saved_per_token) * T;
  double loss_bytes = b.loss_bytes_per_logit > 0 ? b.loss_bytes_per_logit * T * b.logit_fraction * V
                                               : kLossBytesPerLogit * T * V;
  if (cl.on) {
    // The chunks' logits, and the output layer's weight converted in every chunk: w.float() (read
    // w, write 4, unless w is 4) and autocast's cast of that copy (read 4, write g, unless g is 4),
    // in the forward and the recompute; a trained head's gradient cast back to fp32 and to w, then
    // accumulated (read twice, write once).
    const double g = cl.gemm_bytes, wb = cl.weight_bytes;
    const double convert = (wb < 4.0 ? wb + 4.0 : 0.0) + (g < 4.0 ? 4.0 + g : 0.0);
    const double head_grad = cl.head_trained ? (g < 4.0 ? g + 4.0 : 0.0) + (wb < 4.0 ? 4.0 + wb : 0.0) + 3.0 * wb : 0.0;
    loss_bytes = (kChunkedLossFixedBytesPerLogit + kChunkedLossWidthsPerLogit * g) * chunk_positions * V +
                 chunks * cl.head_elems * (2.0 * convert + head_grad);
  } else if (b.fused.on) {
    // Liger's chunks: their logits, each chunk's GEMMs reading the output layer's weight (the logits',
    // the hidden states' gradient's and a trained head's weight gradient's: in place of the one read
    // per pass counted below), and a 16-bit trained head's gradient accumulated chunk by chunk:
    // torch.mm writes V x H in g, .float() reads it and writes fp32, add_ reads the gradient and
    // that copy and writes the gradient (an fp32 head: addmm reads and writes its accumulator).
    const ChunkedLossShape& f = b.fused;
    const double g = f.gemm_bytes, wb = f.weight_bytes;
    const double weight_reads = (2.0 + (f.head_trained ? 1.0 : 0.0)) * g;
    const double accumulate = !f.head_trained ? 0.0 : wb < 4.0 ? 2.0 * g + 4.0 + 2.0 * wb + 4.0 : 8.0;
    loss_bytes = (kFusedLossWidthsPerLogit + (f.head_trained ? 1.0 : 0.0)) * g * T * V +
                 fused_chunks * f.head_elems * (weight_reads + accumulate) -
                 b.weight_read_bytes * V * h * passes_of(ckpt);
  } else if (b.sft_metrics) {
    loss_bytes += (b.logit_bytes + kAccelerateFp32Bytes + kSftMetricWidthsPerLogit * kAccelerateFp32Bytes) * T * V;
  }
  w.memory_bytes = saved * (kTrafficPerSavedByteForward + kTrafficPerSavedByteBackward) +
                   (ckpt ? layer_saved * kTrafficPerSavedByteForward : 0.0) + loss_bytes + lora_bytes -
                   w.adapter_bytes + b.scaling_bytes_per_token * T;
  w.broadcast_elements =
      b.state_space_products_per_token / kBroadcastElementBytes * T *
      (kStateSpaceProductPassesForward * (1.0 + (ckpt ? 1.0 : 0.0)) + kStateSpaceProductPassesBackward);
  // Every pass (forward, backward, recompute) reads each weight matrix once; a quantised one is
  // first dequantised.
  const double passes = passes_of(ckpt);
  if (b.quantised) {
    w.memory_bytes += quantised_weight_pass(b) * passes;
  } else {
    w.memory_bytes += b.weight_read_bytes * (b.weight_elems + V * h) * passes;
  }
  // ParamWrapper's fold reads each adapted weight and writes its merged copy every forward pass
  // (the recompute's too); the backward writes the merged weight's gradient and reads it twice, for
  // A's and B's gradients.
  w.memory_bytes += b.weight_read_bytes * b.merged_weight_elems * (2.0 * (1.0 + (ckpt ? 1.0 : 0.0)) + 3.0);
  w.optimizer_bytes = b.optimizer_bytes;

  // Non-reentrant checkpointing runs two Python hooks per saved tensor (pack and unpack).
  const double ckpt_hooks = ckpt ? 2.0 * L * b.layer_saved_tensors : 0.0;
  w.ops = b.forward_ops * (1.0 + kBackwardOpsPerForwardOp) + (ckpt ? L * b.layer_ops + ckpt_hooks : 0.0) +
          chunks * (kChunkOps + (cl.head_trained ? kChunkHeadGradientOps : 0.0)) +
          (b.fused.on ? kFusedLossOps +
                            fused_chunks * (kFusedChunkOps + (b.fused.head_trained ? kFusedChunkHeadGradientOps : 0.0))
                      : 0.0) +
          (b.sft_metrics ? std::ceil(T / kEntropyChunkRows) * kEntropyChunkOps : 0.0);
  // A tower that attends a window and an image at a time: its calls beyond one a layer, each pass.
  const double tower_calls = std::max(0.0, B * b.tower_attention_calls_per_sequence - b.tower_layers);
  w.ops += kAttentionCallOps * tower_calls *
           (b.tower_trained ? 1.0 + kBackwardOpsPerForwardOp + (ckpt ? 1.0 : 0.0) : 1.0);
  w.kernels = kKernelsPerOp * w.ops;
  w.optimizer_ops = b.optimizer_ops;
  w.layout = b.layout;
  // Activation offloading (docs/model.md, "Activation offloading"): the compute stream waits for
  // the copies (every fifth save in the forward and at its end, each tensor the backward brings
  // back), so they go over the host link in series with the micro-batch's work.
  if (b.activation_offloading)
    w.layout.offload_micro_bytes +=
        2.0 * T * (L * (ckpt ? b.offload_checkpoint_per_token : b.offload_layer_per_token) + b.offload_loss_per_token);
  w.generation = b.generation;
  // Operations on DTensors: the forward's, the backward's and, under checkpointing, the layers'
  // forward again (the recompute runs the plan's hooks and operations as the forward did).
  w.dtensor_ops = b.dtensor_forward_ops + b.dtensor_backward_ops +
                  (ckpt && b.dtensor_forward_ops > 0 ? b.dtensor_forward_ops - kDTensorForwardOpsOutside : 0.0);
  // How the micro-batch's work divides between its forward and its backward (a pipeline's fill
  // and drain wait on the one and the other): FLOPs on the GPU, operations on the host.
  const double flops = matmul + attn;
  w.gpu_forward_fraction = flops > 0 ? (fwd + attn_fwd) / flops : 1.0 / 3.0;
  w.host_forward_fraction = (b.forward_ops + b.dtensor_forward_ops) / (w.ops + w.dtensor_ops);
  double max_stage_layers = L;

  // Model parallelism: each GPU computes its share of the micro-batch: 1/tp of every matrix, 1/cp
  // of the tokens, under pp its stage's layers. Every tensor-parallel GPU dispatches every
  // operation of its layers and computes the loss over the whole vocabulary (the logits are
  // gathered whole). A pipeline's busiest stage sets its pace: each quantity is the larger of the
  // first stage's (the extra layers when they do not divide) and the last stage's (its layers,
  // the final norm, the output layer and the loss; the embedding's work is left out).
  if (b.work_divisor > 1) {
    const double tpcp = b.tensor_parallel * b.context_parallel;
    const bool piped = b.layout.pipeline_stages > 1;
    const double first_layers = piped ? b.first_stage_layers : L;
    const double last_layers = piped ? b.last_stage_layers : L;
    max_stage_layers = std::max(first_layers, last_layers);
    // `outside` is a quantity's part outside the decoder layers, `outside_here` that part on one
    // GPU of the last stage.
    auto per_gpu = [&](double total, double outside, double outside_here, double divisor) {
      const double per_layer = (total - outside) / divisor / L;
      const double last = per_layer * last_layers + outside_here;
      return piped ? std::max(per_layer * first_layers, last) : last;
    };
    const double out_matmul = lm_flops * (2.0 + (full ? 1.0 : 0.0));
    const double out_model_flops = lm_flops * (2.0 + (full ? 1.0 : 0.0));
    const double out_bytes = b.outside_per_token * T * (kTrafficPerSavedByteForward + kTrafficPerSavedByteBackward) +
                             (b.quantised ? 0.0 : b.weight_read_bytes * V * h * passes);
    const double out_ops = kModelForwardOps * (1.0 + kBackwardOpsPerForwardOp);
    const double out_dtensor = kDTensorForwardOpsOutside + kDTensorBackwardOpsOutside;
    double& linear_flops = fp32_compute ? w.fp32_flops : w.tensor_flops;
    linear_flops = per_gpu(linear_flops, out_matmul, out_matmul / tpcp, tpcp);
    if (!fp32_compute) w.attention_flops = per_gpu(w.attention_flops, 0.0, 0.0, tpcp);
    w.adapter_bytes = per_gpu(w.adapter_bytes, 0.0, 0.0, tpcp);
    w.broadcast_elements = per_gpu(w.broadcast_elements, 0.0, 0.0, tpcp);
    w.memory_bytes = per_gpu(w.memory_bytes, out_bytes + loss_bytes,
                             out_bytes / tpcp + loss_bytes / b.context_parallel, tpcp);
    w.model_flops = per_gpu(w.model_flops, out_model_flops, out_model_flops / tpcp, tpcp);
    w.ops = per_gpu(w.ops, out_ops, out_ops, 1.0);
    w.kernels = kKernelsPerOp * w.ops;
    if (w.dtensor_ops > 0) w.dtensor_ops = per_gpu(w.dtensor_ops, out_dtensor, out_dtensor, 1.0);
    if (piped) {
      const double forward = per_gpu(b.forward_ops, kModelForwardOps, kModelForwardOps, 1.0) +
                             (w.dtensor_ops > 0 ? per_gpu(b.dtensor_forward_ops, kDTensorForwardOpsOutside,
                                                          kDTensorForwardOpsOutside, 1.0)
                                                : 0.0);
      w.host_forward_fraction = forward / (w.ops + w.dtensor_ops);
    }
  }
  w.ops += b.parallel_ops;
  w.step_ops = b.parallel_step_ops;
  w.model_parallel_bytes = b.model_parallel_bytes_per_token_pass * T * passes * (max_stage_layers / L) +
                           (b.pipeline_bytes_per_token + b.tp_outside_bytes_per_token) * T;

  // What one layer's pass touches: its weights and its activations (for the spill model).
  w.layer_working_set_bytes = b.weight_bytes_per_layer + b.layer_activation_per_token * T;
  w.layer_passes = max_stage_layers * passes;
  objective_step_work(w, b, T, attn_fwd, lora_forward, passes);
  return w;
}

StepWork step_work(const ModelSpec& model, const Step& step) {
  return step_work(work_basis(model, step), step.tokens(), as_d(step.setup.batch), step.setup.grad_ckpt);
}

}  // namespace detail

StepWork step_work(const ModelSpec& model, const TrainingSetup& setup) {
  return detail::step_work(model, detail::describe_step(model, setup));
}

}  // namespace trainfit
