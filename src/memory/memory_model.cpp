// Peak memory of a steady-state training step: the static tensors plus, at each moment of the
// step where memory can peak, what is alive then. docs/model.md defines every term.
#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "memory/memory_model.hpp"
#include "step/layout.hpp"
#include "step/step_shape.hpp"
#include "trainfit/memory.hpp"
#include "trainfit/units.hpp"

namespace trainfit {

std::string to_string(Phase p) {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
  }
  return "?";
}

namespace detail {

double cublas_workspace_bytes(const GpuSpec& gpu) {
  const double each = gpu.compute_capability_major >= kCublasLargeWorkspaceMajor ? kCublasWorkspaceHopper
                                                                                 : kCublasWorkspaceBeforeHopper;
  return kCublasWorkspacesPerStep * each + kCublasLtWorkspace;
}

namespace {

// Mixed-precision storage under a compute-dtype step (`st` describes the step in the compute
// dtype), and what offloading moves to the host.
void apply_storage_and_offload(MemoryBasis& b, const TrainingSetup& s, const Layout& lay, const StepShape& st) {
  MemoryMoment& base = b.base;
  const double share_o = 1.0 / lay.state_shards;
  // The step's own dtype (`st`'s) and the storage's: fp32 storage over a bf16 step is a ratio of 2.
  const double compute_bytes = bytes_per_element(lay.compute_dtype ? *lay.compute_dtype : s.weights);
  const double storage_bytes = lay.fp32_master ? 4.0 : bytes_per_element(s.weights);
  const double ratio = s.method == Method::full ? storage_bytes / compute_bytes : 1.0;
  double grad_partition = 0;  // DeepSpeed's gradient partition in the optimizer's dtype
  if (lay.zero) {
    // DeepSpeed: the module in the compute dtype (sharded at stage 3, as `st` has it), and in each
    // GPU's partition the optimizer's own copy of its parameters (fp32 master weights in bf16/fp16
    // mode), their states and their gradients: 16 bytes a parameter in bf16 mode, as DeepSpeed's
    // estimators count (estimate_zero2/3_model_states_mem_needs). Stage 2 also counts every
    // gradient whole in the compute dtype, as each is made before its bucket reduces it.
    if (lay.fp32_master) base.master_weights = st.params.weights * ratio * share_o;
    base.optimizer_states *= ratio;
    grad_partition = st.gradients * ratio * share_o;
    const bool whole_gradients = !data_parallel_scheme(s.parallel).shards_parameters;  // below stage 3
    b.all_grads = (whole_gradients ? st.gradients : 0.0) + grad_partition;
    b.layer_grad = whole_gradients ? (b.all_grads - b.root_grads) / b.layers : grad_partition / b.layers;
  } else if (lay.compute_dtype) {
    // FSDP's MixedPrecisionPolicy: the sharded parameters stay in their storage dtype, and so do
    // their gradients (cast back after the reduce-scatter) and the optimizer states; only the
    // gathered layers (`st`'s) are in the compute dtype.
    base.weights *= ratio;
    base.optimizer_states *= ratio;
    b.all_grads *= ratio;
    b.layer_grad *= ratio;
  }
  double host = 0;
  if (lay.offload_states) {
    // The optimizer steps on the CPU: its states, its master weights and the gradients it reads
    // live in host memory (DeepSpeed's offload_optimizer; FSDP2's CPUOffloadPolicy moves the
    // sharded gradients there after each reduce-scatter).
    host += base.optimizer_states + base.master_weights;
    base.optimizer_states = 0;
    base.master_weights = 0;
    b.optimizer_transient = 0;
    if (lay.zero) {
      host += grad_partition;
      b.all_grads = 0;  // reduced bucket by bucket and copied out
      b.layer_grad = 0;
    } else {
      host += b.all_grads;
      b.all_grads = 0;
      b.layer_grad = 0;
    }
  }
  if (lay.offload_params) {
    host += base.weights + base.adapters;
    base.weights = 0;
    base.adapters = 0;
  }
  b.host_bytes = host * lay.gpus_per_node;
}

}  // namespace

// A pipeline stage's share of the whole model's basis: its layers' part of every
// parameter-shaped state plus the embedding (first stage) or the output layer (last stage; a tied
// output layer is its own copy there), and the micro-batches 1F1B keeps in flight on it.
MemoryBasis stage_basis(const MemoryBasis& whole, const Step& step, const PipelineStage& stage) {
  const TrainingSetup& setup = step.setup;
  const StepShape& st = step.tensors;
  MemoryBasis b = whole;
  const ParameterCounts& pc = st.counts;
  const double total = static_cast<double>(pc.total);
  const double embed = static_cast<double>(pc.embedding);
  const double head = static_cast<double>(pc.lm_head > 0 ? pc.lm_head : pc.embedding);
  const double roots = embed + static_cast<double>(pc.lm_head);
  const double layer_part = (total - roots) * stage.layers / whole.layers;
  const double stage_params = layer_part + (stage.embedding ? embed : 0.0) + (stage.head ? head : 0.0);
  const double f = total > 0 ? stage_params / total : 1.0;                        // parameter-shaped states
  const double fl = stage.layers / whole.layers;                                  // layer-only states
  const bool full = setup.method == Method::full;
  MemoryMoment& base = b.base;
  for (double* v : {&base.weights, &base.master_weights, &base.optimizer_states, &base.gradient_buckets})
    *v *= f;
  base.quant_constants *= fl;
  base.adapters *= fl;
  b.all_grads *= full ? f : fl;
  b.autocast_copies *= f;
  b.copies_head = stage.head ? whole.copies_head : 0.0;
  b.head_grad = stage.head ? whole.head_grad : 0.0;
  b.root_grads = b.head_grad + (stage.embedding && pc.lm_head > 0 && full
                                    ? whole.root_grads - whole.head_grad : 0.0);
  b.layers = stage.layers;
  b.vocab = stage.head ? whole.vocab : 0.0;  // no logits before the last stage
  if (!stage.embedding)  // the vision tower runs where the embedding does, on the first stage
    b.tower_saved_per_token = b.tower_checkpoint_per_token = b.tower_largest_per_token =
        b.tower_layer_input_per_token = 0.0;
  if (!stage.head) b.chunked = b.fused = {};  // nor a loss
  b.embedding_backward_transient = stage.embedding ? whole.embedding_backward_transient : 0.0;
  b.optimizer_transient *= f;
  b.in_flight = stage.in_flight;
  b.outputs_kept = stage.keeps_outputs ? stage.microbatches : 0.0;
  b.host_bytes *= f;
  return b;
}

MemoryBasis memory_basis(const ModelSpec& model, const Step& step, const GpuSpec& gpu) {
  const Layout& lay = step.layout;
  const TrainingSetup& user_setup = step.setup;
  // The tensors describe the step the GPUs compute: under a mixed-precision layout, in its compute dtype.
  const TrainingSetup& setup = step.compute();
  const StepShape& st = step.tensors;
  const auto& p = st.params;
  const double L = static_cast<double>(model.num_layers);
  const bool full = setup.method == Method::full;
  const ParameterCounts& pc = st.counts;
  const double tp = lay.tp;  // `pc` counts the whole model; each tensor-parallel GPU holds 1/tp of it
  MemoryBasis b;
  b.layers = L;
  // Under tensor parallelism the output layer is column-parallel but its output is gathered: the
  // Hugging Face plans (tp_plan "colwise_rep" for lm_head) give every GPU the whole logits, and
  // the loss runs over the whole vocabulary on each (no vocabulary-parallel loss).
  b.vocab = static_cast<double>(model.vocab_size);
  b.full = full;
  b.tokens_divisor = lay.cp;

  // Data parallelism: DDP keeps every tensor whole; FSDP and ZeRO-3 store 1/shards of each
  // parameter (the roundings in `p` are already the shards'), ZeRO-2 of each gradient and ZeRO-1
  // of each optimizer state.
  const bool fsdp = lay.gathers_units;
  b.fsdp = fsdp;
  const double share = 1.0 / p.shards;
  const double share_g = 1.0 / lay.grad_shards;
  const double share_o = 1.0 / lay.state_shards;

  // Static: alive through the whole steady-state step.
  MemoryMoment& base = b.base;
  if (full && setup.amp) {
    base.master_weights = p.weights * share + p.weights_rounding;
  } else {
    base.weights = p.weights * share + p.weights_rounding;
  }
  base.quant_constants = p.quant_constants;
  base.adapters = p.adapters * share;
  // Optimizer states have their parameters' shapes, so they round like them.
  const double states_per_param_copy = keeps_two_moments(setup.optimizer) ? 2.0
                                       : setup.optimizer == Optimizer::sgd_momentum ? 1.0 : 0.0;
  base.optimizer_states = st.optimizer_states * share_o + states_per_param_copy * p.trainable_rounding * share_o / share;
  // Measured on one GPU (the boundary scans): whole states, whole logits, no pipeline or DeepSpeed.
  if (states_per_param_copy > 0 && p.trainable_params > 0 && lay.state_shards == 1 && !lay.offload_states &&
      lay.tp == 1 && lay.pp == 1 && lay.cp == 1 && !lay.zero)
    b.largest_state_tensor =
        allocator_block(p.largest_trainable * st.optimizer_states / (states_per_param_copy * p.trainable_params));
  // The libraries' workspaces are the one static term that depends on the card.
  base.cublas_workspace = cublas_workspace_bytes(gpu);
  // DDP's reducer allocates flat bucket buffers for every trainable gradient when it wraps the
  // model (gradient_as_bucket_view off: each gradient is copied in, all-reduced, copied back).
  if (lay.ddp_buckets) base.gradient_buckets = st.gradients;
  // After the first backward the reducer rebuilds its buckets in the order gradients arrived; on
  // one rank at least (which one varies from run to run) the first buckets stay allocated through
  // the second step's backward (python/scale_jobs/ddp_busiest_rank.py: the blocks alive at that
  // rank's peak were allocated in DistributedDataParallel's _ddp_init_helper).
  if (lay.ddp_buckets) b.rebuilt_buckets = st.gradients;
  // DeepSpeed reduces gradients through two buffers of reduce_bucket_size elements (overlap_comm),
  // which the HF Trainer's "auto" sets to hidden_size^2.
  if (lay.zero) base.gradient_buckets = 2.0 * static_cast<double>(model.hidden_size * model.hidden_size) * p.trainable_bytes_each;

  // Gradients. Under FSDP a layer's gradients are reduce-scattered into shards as soon as its
  // backward ends; the root's (output layer, embedding) only when the whole backward has ended.
  b.all_grads = st.gradients * share_g + p.trainable_rounding * share_g / share;
  const double elem = p.trainable_bytes_each;
  b.head_grad = full ? static_cast<double>(pc.lm_head > 0 ? pc.lm_head : pc.embedding) / tp * elem : 0.0;
  const double embed_grad = full ? static_cast<double>(pc.embedding) / tp * elem : 0.0;
  b.root_grads = b.head_grad + (pc.lm_head > 0 ? embed_grad : 0.0);
  const double layer_grad_whole = (st.gradients - (full ? b.root_grads : 0.0)) / L;
  b.layer_grad = fsdp ? layer_grad_whole * share_g : (b.all_grads - (full ? b.root_grads : 0.0)) / L;
  // FSDP, gathered: the root unit (not resharded after the forward: its backward follows at once)
  // and the last layer's flat all-gather buffer, which FSDP holds until the next gather's copy;
  // in a layer's backward, that layer, its flat buffer and the previous layer's prefetch.
  b.gathered_fwd = fsdp ? p.root_weights + p.layer_weights : 0.0;
  b.gathered_layer_bwd = fsdp ? p.root_weights + 3.0 * p.layer_weights : 0.0;
  b.gathered_embedding_bwd = fsdp ? p.root_weights : 0.0;
  // A layer's whole gradients and the flat copy reduce-scatter sends (in the reduce dtype), while
  // it finishes.
  const double reduce_ratio =
      lay.reduce_dtype && elem > 0 ? bytes_per_element(*lay.reduce_dtype) / elem : 1.0;
  b.reducing = fsdp ? (1.0 + reduce_ratio) * layer_grad_whole : 0.0;
  // fsdp-grad-op keeps every layer gathered from its forward until its backward has run: the
  // backward gathers nothing (the current layer is already held).
  if (lay.keeps_gathered) {
    b.kept_gathered_layer = p.layer_weights;
    b.gathered_fwd = p.root_weights;
    b.gathered_layer_bwd = p.root_weights;
  }

  b.autocast_copies = p.autocast_copies;
  b.copies_head = full && setup.amp
                      ? static_cast<double>(pc.lm_head > 0 ? pc.lm_head : pc.embedding) * bytes_per_element(*setup.amp)
                      : 0.0;
  b.copies_layer = (p.autocast_copies - b.copies_head) / L;

  // Each saved tensor is its own allocation, rounded by the caching allocator at the step's size.
  auto sizes = [](const std::vector<Sized>& tensors) {
    std::vector<double> bytes;
    bytes.reserve(tensors.size());
    for (const auto& t : tensors) bytes.push_back(t.bytes);
    return tensor_sizes(std::move(bytes));
  };
  b.layer_activations = sizes(st.layer_activations);
  b.activation_offloading = setup.activation_offloading;
  {
    std::vector<Sized> twice;
    for (const Sized& s : st.layer_activations)
      if (s.saved_twice) twice.push_back(s);
    b.layer_saved_twice = sizes(twice);
  }
  b.outside_activations = sizes(st.outside_activations);
  b.tower_saved_per_token = st.tower_saved_per_token;
  b.tower_checkpoint_per_token = st.tower_checkpoint_per_token;
  b.tower_largest_per_token = st.tower_largest_per_token;
  b.tower_layer_input_per_token = st.tower_checkpoint_per_token / std::max(1.0, static_cast<double>(model.vision.shape.layers));
  b.checkpoint_per_token = st.checkpoint_per_token;
  b.logits_compute_bytes = st.logits_compute_bytes;
  b.logits_upcast = st.logits_upcast;
  b.chunked = st.chunked_loss;
  b.fused = st.fused_loss;
  // Liger's loss returns no logits, so SFTTrainer computes no metrics over them.
  b.sft_metrics =
      user_setup.trainer == Trainer::trl && user_setup.objective == Objective::sft && !b.chunked.on && !b.fused.on;
  if (b.chunked.on) b.chunk_gradient_per_token = b.chunked.hidden * st.logits_compute_bytes;
  // zeros_like(the final norm's output): its dtype, which the norm's output keeps.
  if (b.fused.on) b.fused_input_gradient_per_token = b.fused.hidden * st.final_hidden_bytes;
  b.softcap_bytes = st.softcap_bytes;
  b.layer_backward_transient_per_token = st.layer_backward_transient_per_token;
  b.layer_forward_transient_per_token = st.layer_forward_transient_per_token;
  b.layer_fixed_activations = st.layer_fixed_activations;
  b.packed_mask_per_layer = st.packed_mask_per_layer;
  b.packed_mask_outside = st.packed_mask_outside;
  b.layer_fixed_backward_transient = st.layer_fixed_backward_transient;
  b.dequant_transient = st.dequant_transient;
  // A tied embedding already holds the output layer's gradient, and adding the embedding's own to
  // it holds 4 bytes per vocabulary x hidden element more (measured: bf16 and fp32). An untied
  // embedding's fresh gradient simply becomes its .grad (measured on Qwen2.5-7B: nothing more).
  b.embedding_backward_transient = pc.lm_head > 0 ? 0.0 : allocator_block(static_cast<double>(pc.embedding) * 4.0);
  // Under TRL's chunked loss the tied weight's gradient was made by w.float()'s backward (a tensor
  // of its own), and the embedding's gradient is added into it in place: only the embedding's own
  // gradient is new (the allocator's history of Qwen2.5-0.5B in SFTTrainer: one V x h bf16 block
  // allocated and freed in the embedding's backward; data/bench/h100-trl-sft-2026-12-06/).
  // So under Liger's fused loss, whose forward made the weight's gradient as a tensor of its own.
  if (pc.lm_head == 0 && (st.chunked_loss.on || st.fused_loss.on))
    b.embedding_backward_transient = allocator_block(static_cast<double>(pc.embedding) * p.trainable_bytes_each);
  b.optimizer_transient = st.optimizer_transient;
  // FSDP allocates its flat all-gather buffers on its own stream, and the caching allocator keeps
  // a stream's freed blocks for that stream: the root's buffer (gathered once, at the start of the
  // forward) and two layers' beyond the one still held (the forward gathers ahead) stay reserved.
  b.gather_pool = fsdp ? p.root_weights + 2.0 * p.layer_weights : 0.0;
  apply_storage_and_offload(b, user_setup, lay, st);
  // The objective (docs/model.md, "Objectives"): the sequences a micro-batch trains, the logits'
  // shape, and the models beside the policy. Objectives run on one GPU or data-parallel ones
  // that keep every model whole (validate), so nothing here is sharded.
  const ObjectiveShape& o = st.objective;
  b.objective = o.objective;
  b.sequences_per_example = o.sequences_per_example;
  b.seq = o.seq;
  b.logit_positions = o.logit_positions;
  b.logp_positions = o.logp_positions;
  if (o.objective != Objective::sft) b.vocab = o.output_width;
  b.reference_forward = o.reference_forward;
  b.no_grad_layer_per_token = o.no_grad_layer_per_token;
  b.hidden_states_layers_per_token = o.hidden_states_layers_per_token;
  b.hidden_states_final_per_token = o.hidden_states_final_per_token;
  base.reference_weights = o.reference_weights;
  base.reward_weights = o.reward_weights;
  base.value_weights = o.value.weights;
  base.optimizer_states += o.value.optimizer_states;  // one optimizer over the policy and the value model
  b.value_layer_activations = tensor_sizes(o.value.layer_activations);
  b.value_outside_activations = tensor_sizes(o.value.outside_activations);
  b.value_layer_backward_transient_per_token = o.value.layer_backward_transient_per_token;
  b.value_all_grads = o.value.gradients;
  b.value_head_grad = o.value.head_gradient;
  b.value_layer_grad = (o.value.gradients - o.value.head_gradient) / L;
  if (setup.objective == Objective::grpo && setup.generation == Generation::generate) {
    // transformers' dynamic cache: a keys and a values tensor per layer.
    b.generation_cache_tensor_per_position = kv_cache_bytes_per_position(model, setup);
    b.generation_completion = static_cast<double>(setup.completion_len);
    b.generation_prompt = static_cast<double>(setup.seq - setup.completion_len);
    b.generation_steps = setup.steps_per_generation;
  }
  b.cuda_context_bytes = count_of(kCudaContextBytes + (setup.gpus > 1 ? kNcclBytes : 0.0));
  b.weights_loaded_bytes =
      count_of(base.weights + base.master_weights + base.quant_constants + base.adapters + base.gradient_buckets +
               base.reference_weights + base.reward_weights + base.value_weights);
  b.trainable_parameters = count_of(p.trainable_params + p.idle_trainable_params + o.value.parameters);
  b.total_parameters = pc.total + (full ? 0 : b.trainable_parameters);
  b.untargeted_expert_adapter_parameters = count_of(p.untargeted_expert_adapter_params);
  return b;
}

namespace {

// The rows of 128 that TRL's entropy_from_logits takes at a time (its chunk_size).
constexpr double kEntropyChunkRows = 128;

// The logits-sized tensors of an objective's loss as TRL computes it (docs/model.md,
// "Objectives"), bytes, at the moments where they peak. `T` is the micro-batch's trained tokens.
// TRL's selective_log_softmax takes the logits in their own dtype one sequence (row) at a time,
// and autograd keeps each row's log-softmax output; the backward makes each row's gradient, stacks
// them (unbind's backward), and slice's backward writes them into zeros of the logits' shape.
struct LossBuffers {
  double forward = 0;            // the forward's peak at the loss (the reference's logits, the metrics' copies)
  double reference_forward = 0;  // while the reference runs (dpo, kto): the policy's logits and rows
  double backward = 0;           // the loss's backward peak
  double output_backward = 0;    // the logits' gradient through the output layer
  double kept = 0;               // PPO: the policy's logits, which TRL keeps to the step's end
  const char* forward_moment = "loss forward";
  const char* backward_moment = "loss backward";
};

LossBuffers objective_loss(const MemoryBasis& b, double T) {
  const double n = T / b.seq;  // sequences the policy trains on
  const double V = b.vocab, c = b.logits_compute_bytes, R = b.logp_positions;
  const auto full = [&](double k) { return allocator_block(k * b.logit_positions * V * c); };  // the logits of k sequences
  const double row = allocator_block(R * V * c);  // one sequence's log-softmax output, or its gradient
  // What selective_log_softmax keeps of each row (trl/trainer/utils.py at f2cd577): half-precision
  // logits go row by row through log_softmax, whose output autograd keeps; fp32 logits (TRL's
  // trainers receive them so: accelerate's convert_outputs_to_fp32) go through gather and a
  // logsumexp per row, which keep nothing of the logits' size (the allocator's history of
  // DPOTrainer shows no such tensor at its peak).
  const double kept_row = c < 4.0 ? row : 0.0;
  const auto rowcat = [&](double k) { return allocator_block(k * R * V * c); };  // k rows in one tensor
  // entropy_from_logits: a chunk's log-softmax, its exp and their product, alive together.
  const double entropy_chunk = 3.0 * allocator_block(kEntropyChunkRows * V * c);
  // The metrics' entropy flattens the logits (a strided view: reshape copies them), then chunks.
  const double entropy = rowcat(n) + entropy_chunk;
  LossBuffers l;
  switch (b.objective) {
    case Objective::dpo:
    case Objective::kto: {
      const double reference_logits = b.reference_forward ? full(n) : 0.0;
      l.reference_forward = full(n) + n * kept_row;
      double metrics = entropy;
      if (b.objective == Objective::kto) {
        // KTO's metrics copy the desirable and the undesirable sequences' logits (index_select,
        // both alive until the loss returns), then the desirable ones' completion tokens again.
        const double desirable = std::ceil(n / 2.0), undesirable = n - desirable;
        metrics = std::max(metrics, 2.0 * rowcat(desirable) + rowcat(undesirable));
      }
      // DPO's masked copies of the chosen (then the rejected) logits are half the entropy's copy.
      l.forward = full(n) + n * kept_row + reference_logits + metrics;
      // fp32 logits: each row's logsumexp saves its input, a view of the logits, so the logits
      // themselves live until those backwards have run (the allocator's history of a precomputed-
      // reference DPO step: the fp32 logits and two logits-sized gradients at its peak).
      const double logits_saved_by_logsumexp = kept_row > 0 ? 0.0 : full(n);
      l.backward = rowcat(n) + std::max(n * kept_row, full(n)) + logits_saved_by_logsumexp;
      l.output_backward = full(n);
      l.forward_moment = b.reference_forward ? "loss forward: the policy's and the reference's logits, metrics"
                                             : "loss forward: the policy's logits, metrics";
      l.backward_moment = "log-softmax backward";
      break;
    }
    case Objective::orpo: {
      // The NLL of the chosen half: a contiguous copy of its logits, then cross_entropy's
      // log-softmax (kept); then selective_log_softmax's rows over every sequence.
      const double chosen = n / 2.0;
      const double nll = rowcat(chosen);
      l.forward = full(n) + nll + std::max(nll, n * row);
      // The log-probabilities' backward runs first (created last), leaving the logits' gradient
      // in autograd's buffer while the NLL's backward makes its own: zeros of the chosen half's
      // shape, then of the whole logits, added in place.
      l.backward = std::max(nll + rowcat(n) + std::max(n * row, full(n)), 2.0 * full(n) + full(chosen));
      l.output_backward = full(n);
      l.forward_moment = "loss forward: NLL and log-probabilities";
      l.backward_moment = "NLL and log-softmax backward";
      break;
    }
    case Objective::reward:
      // The score head's logits: one number per position, gathered at each sequence's last token.
      l.forward = l.backward = l.output_backward = full(n);
      l.forward_moment = "loss forward: scores";
      l.backward_moment = "loss backward: scores";
      break;
    case Objective::grpo:
    case Objective::ppo: {
      // The logits are sliced to the completion and divided by the temperature in place: the
      // backward's slices write into zeros of the logits' shape, and the in-place division on a
      // view makes autograd clone that gradient (CopySlices) and the slice's part twice.
      const double kept = b.objective == Objective::ppo ? full(n) : 0.0;
      l.kept = kept;
      l.forward = full(n) + n * row + (b.objective == Objective::grpo ? entropy : 0.0);
      l.backward = kept + std::max(n * row + rowcat(n), 2.0 * full(n) + 2.0 * rowcat(n));
      l.output_backward = kept + full(n);
      l.forward_moment = b.objective == Objective::grpo ? "loss forward: completion logits, entropy"
                                                        : "loss forward: policy and value";
      l.backward_moment = "log-softmax backward";
      break;
    }
    case Objective::sft: break;
  }
  return l;
}

// What one chunk of TRL's chunked loss holds beside the step's other tensors (docs/model.md, "The
// chunked loss"), for chunks of `rows` positions. With W the output layer's weight (V x H), w its
// bytes per element, g the GEMM's (the autocast dtype, else 4):
//  - forward, at the GEMM: w.float() (a new fp32 copy unless w is 4), autocast's cast of it to g
//    (unless g is 4), the chunk's hidden states in fp32 and in g, and the logits in g; then, for the
//    metrics, the logits, log-softmax's fp32 output, its exp and their product;
//  - backward: the recompute holds the same as the forward's GEMM; then the GEMM's saved weight
//    operand (W in g, or the fp32 copy), the log-probabilities, the NLL's gradient and
//    log-softmax's (fp32) and its cast to g. A trained head then adds W's gradient in g beside the
//    saved operand, that gradient cast back to fp32 by autocast's backward (the saved operand
//    freed), and the fp32 gradient cast to w by w.float()'s backward, before it is accumulated.
// What a loss that runs the output layer a chunk of positions at a time (TRL's chunked loss,
// Liger's fused one) holds at its forward's and its backward's peak, and the backward's temporaries.
struct ChunkedLossMemory {
  double forward = 0, backward = 0, backward_transient = 0;
};
ChunkedLossMemory chunk_memory(const ChunkedLossShape& c, double rows) {
  const double VH = c.head_elems, g = c.gemm_bytes, w = c.weight_bytes;
  const double fp32_copy = w < 4.0 ? allocator_block(VH * 4.0) : 0.0;
  const double autocast_copy = g < 4.0 ? allocator_block(VH * g) : 0.0;
  const double saved_weight = g < 4.0 ? autocast_copy : allocator_block(VH * 4.0);
  const double gemm_bytes = g < 4.0 ? g : 4.0;
  const auto rows_of = [&](double width, double bytes) { return allocator_block(rows * width * bytes); };
  const double at_gemm = fp32_copy + autocast_copy + rows_of(c.hidden, 4.0) +
                         (g < 4.0 ? rows_of(c.hidden, g) : 0.0) + rows_of(c.vocab, g);
  const double metrics = rows_of(c.vocab, g) + 3.0 * rows_of(c.vocab, 4.0);
  ChunkedLossMemory m;
  m.forward = std::max(at_gemm, metrics);
  const double loss_grad = saved_weight + 3.0 * rows_of(c.vocab, 4.0) + (g < 4.0 ? rows_of(c.vocab, g) : 0.0);
  m.backward = std::max(at_gemm, loss_grad);
  if (c.head_trained) {
    const double weight_grad = 2.0 * saved_weight + rows_of(c.vocab, gemm_bytes);
    const double autocast_back = g < 4.0 ? allocator_block(VH * g) + allocator_block(VH * 4.0) : 0.0;
    const double to_weight_dtype = w < 4.0 ? allocator_block(VH * 4.0) + allocator_block(VH * w) : 0.0;
    m.backward = std::max({m.backward, weight_grad, autocast_back, to_weight_dtype});
  }
  return m;
}

// What Liger's fused linear cross-entropy holds beside the step's other tensors
// (liger_kernel/ops/fused_linear_cross_entropy.py at Liger-Kernel ead96b61), for a micro-batch of
// `T` positions. Through the forward: the hidden states' gradient (zeros of their shape), a trained
// head's weight gradient (zeros of the weight, in its dtype), the per-position loss and token
// accuracy (fp32), the labels' mask, and the labels padded and shifted (int64, transformers'
// LigerForCausalLMLoss); at a chunk, its logits (the cross-entropy's gradient is written over
// them), then the larger of its hidden-state gradient (chunk x H in the GEMM's dtype) and, for a
// 16-bit trained head, torch.mm's V x H product and its .float() copy, alive together before they
// are added into the weight's gradient (an fp32 head accumulates with addmm(out=) instead). The
// backward scales both gradients in place; the weight's becomes its .grad.
ChunkedLossMemory fused_loss_memory(const ChunkedLossShape& f, double input_gradient_per_token, double T) {
  const double VH = f.head_elems, g = f.gemm_bytes;
  const double rows = fused_loss_chunk_rows(T, f.vocab, f.hidden);
  const double input_gradient = allocator_block(input_gradient_per_token * T);
  const double per_position = 2.0 * allocator_block(T * 4.0) + allocator_block(T) + 2.0 * allocator_block(T * 8.0);
  const double weight_gradient = f.head_trained ? allocator_block(VH * f.weight_bytes) : 0.0;
  const double chunk_logits = allocator_block(rows * f.vocab * g);
  const double chunk_input_gradient = allocator_block(rows * f.hidden * g);
  const double weight_product =
      f.head_trained && f.weight_bytes < 4.0 ? allocator_block(VH * g) + allocator_block(VH * 4.0) : 0.0;
  ChunkedLossMemory m;
  m.forward =
      input_gradient + per_position + weight_gradient + chunk_logits + std::max(chunk_input_gradient, weight_product);
  m.backward = input_gradient;
  return m;
}

}  // namespace

StepMemory step_memory(const MemoryBasis& b, double tokens, std::int64_t grad_accum, bool grad_ckpt) {
  // A paired objective trains on the chosen and the rejected sequence of every example.
  const double T = tokens * b.sequences_per_example / b.tokens_divisor;
  const double L = b.layers;
  const double TV = T * b.vocab;
  const MemoryMoment& base = b.base;

  // Gradients: with accumulation, micro-batches after the first run with every gradient alive.
  const double grads_prev = grad_accum > 1 ? b.all_grads : 0.0;
  // Each saved tensor is its own allocation, rounded by the caching allocator.
  const double layer_acts = allocated_for(b.layer_activations, T) + b.layer_fixed_activations +
                            (b.packed_mask_per_layer > 0 ? allocator_block(b.packed_mask_per_layer * T * T) : 0.0);
  const double kept_per_layer = grad_ckpt ? allocator_block(b.checkpoint_per_token * T) : layer_acts;
  // TRL's activation offloading copies every saved tensor to the host and frees it once five
  // later saves have come (its forward stash); one saved again in that window stays on the GPU
  // (its storage is kept, not offloaded twice). A checkpointed layer saves its input alone, so
  // nothing of the layers stays; without checkpointing, the tensors saved twice do.
  const double resident_per_layer = !b.activation_offloading ? kept_per_layer
                                    : grad_ckpt              ? 0.0
                                                             : allocated_for(b.layer_saved_twice, T);
  const double layers_kept = L * resident_per_layer;
  // SFT's loss over the whole logits (not TRL's chunked loss, not Liger's fused one).
  const bool whole_loss = b.objective == Objective::sft && !b.chunked.on && !b.fused.on;
  // A training vision tower's layers: their tensors, or under checkpointing their inputs.
  const double outside = allocated_for(b.outside_activations, T) +
                         (b.packed_mask_outside > 0 ? allocator_block(b.packed_mask_outside * T * T) : 0.0) +
                         allocator_block((grad_ckpt ? b.tower_checkpoint_per_token : b.tower_saved_per_token) * T);
  // Under checkpointing autograd keeps no layer's autocast copies: they die when the forward
  // leaves autocast and each layer's recompute makes its own again.
  const double copies_kept_per_layer = grad_ckpt ? 0.0 : b.copies_layer;
  // A pipeline stage keeps the saved tensors of the other micro-batches in flight on it.
  const double other_in_flight = (b.in_flight - 1.0) * (layers_kept + outside);
  // fsdp-grad-op: every layer stays gathered until its backward.
  const double kept_gathered = L * b.kept_gathered_layer;
  const double lc = b.logits_compute_bytes;
  const double logits_c = allocator_block(TV * lc);   // one logits-sized tensor in the lm_head dtype
  const double logits_f = allocator_block(TV * 4.0);  // one fp32 logits-sized tensor
  const double softcap = b.softcap_bytes > 0 ? allocator_block(TV * b.softcap_bytes) : 0.0;
  // A pipeline's last stage: the outputs its PipelineStage keeps. In the backward of the step's
  // last micro-batch every one is alive (its own included); in that micro-batch's forward the
  // others, beside its own logits, which the forward moment counts already.
  const double outputs_bwd = b.outputs_kept * logits_c;
  const double outputs_fwd = std::max(0.0, b.outputs_kept - 1.0) * logits_c;

  StepMemory out;
  auto moment = [&](Phase phase, const char* what) -> MemoryMoment& {
    MemoryMoment& m = out.moments[out.count++];
    m = base;
    m.phase = phase;
    m.what = what;
    return m;
  };
  // PPO: the value model's saved tensors live until its backward, which runs after the
  // policy's (its forward came first); the policy's output (hidden states, logits) lives to the
  // step's end. Zero for the other objectives.
  const bool ppo = b.objective == Objective::ppo;
  const double value_acts =
      ppo ? L * allocated_for(b.value_layer_activations, T) + allocated_for(b.value_outside_activations, T) : 0.0;
  const double hidden_states =
      ppo ? allocator_block(b.hidden_states_final_per_token * T) +
                (grad_ckpt ? 0.0 : L * allocator_block(b.hidden_states_layers_per_token / L * T))
          : 0.0;
  const double objective_acts = value_acts + hidden_states;
  const LossBuffers loss = b.objective == Objective::sft ? LossBuffers{} : objective_loss(b, T);
  if (b.chunked.on || b.fused.on) {
    // A chunk's tensors instead of the micro-batch's logits. The output layer's gradient (a trained
    // head's) exists from the loss's backward on: TRL's chunks make it in each chunk's backward,
    // Liger's in the forward. TRL's backward also holds the gathered hidden states' gradient twice:
    // autograd's buffer, and each chunk's slice gradient written into zeros of the whole shape.
    ChunkedLossMemory c;
    if (b.chunked.on) {
      c = chunk_memory(b.chunked, std::min(b.chunked.chunk_rows, T));
      c.backward_transient = 2.0 * allocator_block(b.chunk_gradient_per_token * T);
    } else {
      c = fused_loss_memory(b.fused, b.fused_input_gradient_per_token, T);
    }
    {
      MemoryMoment& m = moment(Phase::forward, b.chunked.on ? "chunked loss forward" : "fused loss forward");
      m.gradients = grads_prev;
      m.gathered_weights = b.gathered_fwd + kept_gathered;
      m.activations = layers_kept + outside + other_in_flight;
      m.weights += b.autocast_copies;
      m.logits_and_loss = c.forward + outputs_fwd;
    }
    {
      MemoryMoment& m = moment(Phase::backward, b.chunked.on ? "chunked loss backward" : "fused loss backward");
      m.gradients = std::max(grads_prev, b.head_grad);
      m.gathered_weights = b.gathered_fwd + kept_gathered;
      m.activations = layers_kept + outside + other_in_flight;
      m.weights += b.copies_head + L * copies_kept_per_layer;
      m.logits_and_loss = c.backward + outputs_bwd;
      m.transient = c.backward_transient;
    }
  } else if (b.objective == Objective::sft) {
    // Forward, at the loss: every layer's saved tensors, the logits as the lm_head made them,
    // their fp32 copy and log_softmax's fp32 output (kept for backward).
    {
      MemoryMoment& m = moment(Phase::forward, "cross-entropy forward");
      m.gradients = grads_prev;
      m.gathered_weights = b.gathered_fwd + kept_gathered;
      m.activations = layers_kept + outside + other_in_flight;
      m.weights += b.autocast_copies;
      m.logits_and_loss = logits_c + (b.logits_upcast ? logits_f : 0.0) + logits_f + softcap + outputs_fwd;
    }
    // SFTTrainer's metrics (compute_loss at TRL f2cd577, loss_type nll), under no_grad once the
    // forward has returned: accelerate's fp32 copy of the logits (convert_outputs_to_fp32), the
    // loss's saved log-softmax output, entropy_from_logits' flattened copy of the shifted logits and
    // one chunk's log-softmax, exp and product (128 rows each), and the argmax's int64 predictions.
    // Measured: Qwen2.5-1.5B LoRA and Qwen2.5-7B LoRA in SFTTrainer, 220-245 MiB above the loss's
    // backward, which the chunk's three 128-row tensors (223 MiB at Qwen's vocabulary) are.
    if (b.sft_metrics) {
      MemoryMoment& m = moment(Phase::forward, "SFTTrainer metrics");
      m.gradients = grads_prev;
      m.gathered_weights = b.gathered_fwd + kept_gathered;
      m.activations = layers_kept + outside + other_in_flight;
      m.weights += b.autocast_copies;
      m.logits_and_loss = 3.0 * logits_f + 3.0 * allocator_block(kEntropyChunkRows * b.vocab * 4.0) +
                          allocator_block(T * 8.0) + softcap + outputs_fwd;
    }
    // Backward, in log_softmax's backward: its saved output, the incoming gradient and the
    // gradient it produces, all fp32 over the vocabulary.
    {
      MemoryMoment& m = moment(Phase::backward, "cross-entropy backward");
      m.gradients = grads_prev;
      m.gathered_weights = b.gathered_fwd + kept_gathered;
      m.activations = layers_kept + outside + other_in_flight;
      m.weights += b.copies_head + L * copies_kept_per_layer;
      m.logits_and_loss = 3.0 * logits_f + softcap + outputs_bwd;
    }
    // Backward through the output layer: its gradient appears while the logits' gradient (in
    // the lm_head's dtype) is still alive.
    {
      MemoryMoment& m = moment(Phase::backward, "output layer backward");
      m.gradients = std::max(grads_prev, b.head_grad);
      m.gathered_weights = b.gathered_fwd + kept_gathered;
      m.activations = layers_kept + outside + other_in_flight;
      m.weights += b.copies_head + L * copies_kept_per_layer;
      m.logits_and_loss = logits_c + outputs_bwd;
    }
  } else {
    // The reference forward (dpo, kto), without autograd: the policy's logits and rows already
    // exist, and the reference holds one layer's intermediates at a time.
    if (b.reference_forward) {
      MemoryMoment& m = moment(Phase::forward, "reference forward");
      m.gradients = grads_prev;
      m.activations = layers_kept + outside + objective_acts;
      m.weights += b.autocast_copies;
      m.logits_and_loss = loss.reference_forward;
      m.transient = allocator_block(b.no_grad_layer_per_token * T);
    }
    {
      MemoryMoment& m = moment(Phase::forward, loss.forward_moment);
      m.gradients = grads_prev;
      m.activations = layers_kept + outside + objective_acts;
      m.weights += b.autocast_copies;
      m.logits_and_loss = loss.forward;
    }
    {
      MemoryMoment& m = moment(Phase::backward, loss.backward_moment);
      m.gradients = grads_prev;
      m.activations = layers_kept + outside + objective_acts;
      m.weights += b.copies_head + L * copies_kept_per_layer;
      m.logits_and_loss = loss.backward;
    }
    {
      MemoryMoment& m = moment(Phase::backward, "output layer backward");
      m.gradients = std::max(grads_prev, b.head_grad);
      m.activations = layers_kept + outside + objective_acts;
      m.weights += b.copies_head + L * copies_kept_per_layer;
      m.logits_and_loss = loss.output_backward;
    }
  }
  // Backward through the last and the first decoder layer: gradients of the layers done so far,
  // saved tensors of the layers still to do, the layer's own recomputed activations under
  // checkpointing, and its in-flight gradients.
  for (const double done : {0.0, L - 1.0}) {
    MemoryMoment& m = moment(Phase::backward, done == 0.0 ? "last layer backward" : "first layer backward");
    m.gradients = b.fsdp ? std::max(grads_prev, b.head_grad + done * b.layer_grad) + b.reducing
                         : std::max(grads_prev, b.head_grad + (done + 1.0) * b.layer_grad);
    m.gathered_weights = b.gathered_layer_bwd + (L - done) * b.kept_gathered_layer;
    // Offloaded: the layer's own tensors come back (its checkpoint, or all it saved) beside what
    // the layers still to do left on the GPU.
    m.activations = (L - done - 1.0) * resident_per_layer + kept_per_layer + (grad_ckpt ? layer_acts : 0.0) +
                    other_in_flight + objective_acts;
    m.weights += copies_kept_per_layer * (L - done) + (grad_ckpt ? b.copies_layer : 0.0);
    m.transient = b.layer_backward_transient_per_token * T + b.layer_fixed_backward_transient + b.dequant_transient;
    m.logits_and_loss = loss.kept + outputs_bwd;
  }
  // Backward through the embedding (full fine-tuning): every gradient exists, and a tied
  // embedding's fp32 accumulation buffer (memory_basis).
  if (b.full) {
    MemoryMoment& m = moment(Phase::backward, "embedding backward");
    m.gradients = b.fsdp ? b.root_grads + L * b.layer_grad : b.all_grads;
    m.gathered_weights = b.gathered_embedding_bwd;
    m.transient = b.embedding_backward_transient;
    m.activations = objective_acts;
    m.logits_and_loss = loss.kept;
  }
  // PPO: the value model's backward, after the policy's: every policy gradient, the value
  // model's saved tensors, its last layer's gradients and in-flight ones.
  if (ppo) {
    MemoryMoment& m = moment(Phase::backward, "value model backward");
    m.gradients = b.all_grads + b.value_head_grad + b.value_layer_grad;
    m.activations = objective_acts;
    m.transient = b.value_layer_backward_transient_per_token * T;
    m.logits_and_loss = loss.kept;
  }
  // GRPO's generation, at its last decoding step (docs/model.md, "Generation"): the cache of every
  // row at its longest, one layer's torch.cat making a new keys tensor beside the old, and the last
  // position's logits (the model's, accelerate's fp32 copy, the softmax's probabilities and the
  // processors' scores). No saved activations (torch.no_grad); the gradients of earlier
  // micro-batches only when a generation serves fewer micro-batches than a step has.
  if (b.generation_cache_tensor_per_position > 0) {
    const double spg = static_cast<double>(generation_steps(b.generation_steps, grad_accum));
    const double rows = T / b.seq * spg;
    const double tensor = allocator_block(rows * (b.generation_prompt + b.generation_completion) *
                                          b.generation_cache_tensor_per_position);
    MemoryMoment& m = moment(Phase::forward, "generation: the KV cache at its longest");
    m.gradients = spg < static_cast<double>(grad_accum) ? grads_prev : 0.0;
    m.activations = 2.0 * L * tensor;
    m.transient = tensor;
    m.logits_and_loss = allocator_block(rows * b.vocab * lc) + 3.0 * allocator_block(rows * b.vocab * 4.0);
  }
  // Optimizer step: every gradient, plus the optimizer's own temporaries.
  {
    MemoryMoment& m = moment(Phase::optimizer, "optimizer step");
    m.gradients = b.all_grads + b.value_all_grads;
    m.transient = b.optimizer_transient;
    m.activations = hidden_states;
    m.logits_and_loss = loss.kept;
  }

  double peak_total = out.moments[0].total();
  for (std::size_t i = 1; i < out.count; ++i) {
    const double total = out.moments[i].total();
    if (total > peak_total) {
      peak_total = total;
      out.peak = i;
    }
  }
  out.peak_allocated_bytes = count_of(peak_total);
  // The boundary (docs/model.md, "The boundary"): the first optimizer step allocates its states,
  // and the caching allocator puts each in the smallest cached free block that holds it. States
  // of 1 MiB or less come from the small pool's own segments. Larger ones go to the blocks the
  // step freed: the saved activations' (less the gradients the backward allocated into them) and
  // the loss's fp32 logits'. When one is larger than every activation block, or all of them do not
  // fit the activations' free space, states stay in a first-step logits segment, which can then not
  // serve the next step's fp32 logits: they need a segment of their own beside it.
  // (Not judged with activation offloading, whose blocks come and go on a stream of their own.)
  if (whole_loss && !b.activation_offloading &&
      b.largest_state_tensor > caching_allocator::kSmallSize && b.largest_state_tensor <= logits_f) {
    // (Under checkpointing a tower layer's input is c x d a position: its largest is one layer's.)
    const double tower_largest = grad_ckpt ? b.tower_layer_input_per_token : b.tower_largest_per_token;
    double largest_activation = allocator_block(std::max(b.checkpoint_per_token, tower_largest) * T);
    for (const TensorSizes* sizes : {&b.layer_activations, &b.outside_activations})
      for (const TensorSizes::SameSize& d : sizes->distinct)
        largest_activation = std::max(largest_activation, allocator_block(d.bytes_per_token * T));
    // Under checkpointing the layers' recomputed tensors reuse one layer's blocks.
    const double freed_activations = (grad_ckpt ? L * kept_per_layer + layer_acts : L * layer_acts) + outside;
    const double room = freed_activations - b.all_grads;
    if (b.largest_state_tensor > largest_activation || base.optimizer_states > room)
      out.later_logits_segment_bytes = count_of(logits_f);
  }
  out.busiest_peak_allocated_bytes = count_of(peak_total + b.rebuilt_buckets);
  // Activation offloading's copies: each layer's tensors but those it keeps on the GPU, and under
  // the whole-logits loss the log-softmax's fp32 output, which nll_loss saves (the output layer runs
  // outside the offloading, so its input and logits stay). Each copy is a pinned host block, which
  // PyTorch's CachingHostAllocator rounds up to a power of two.
  if (b.activation_offloading) {
    const auto pinned = [](double bytes) { return bytes > 0 ? std::exp2(std::ceil(std::log2(bytes))) : 0.0; };
    double layer_host = 0;
    if (grad_ckpt) {
      layer_host = pinned(b.checkpoint_per_token * T);
    } else {
      for (const TensorSizes::SameSize& d : b.layer_activations.distinct)
        layer_host += d.count * pinned(d.bytes_per_token * T);
      for (const TensorSizes::SameSize& d : b.layer_saved_twice.distinct)
        layer_host -= d.count * pinned(d.bytes_per_token * T);
    }
    out.offloaded_host_bytes = L * layer_host + (whole_loss ? pinned(TV * 4.0) : 0.0);
  }
  // Blocks freed before the peak that the allocator cannot reuse for it stay reserved: the
  // lm_head-dtype logits (too small for the loss backward's fp32 blocks) and the blocks of a
  // layer's forward temporaries; under FSDP, its gather pool (memory_basis).
  const double fragmentation =
      (b.logits_upcast ? logits_c : 0.0) + allocator_block(b.layer_forward_transient_per_token * T);
  out.peak_reserved_bytes = count_of(peak_total + fragmentation + b.gather_pool);
  out.device_used_bytes = add_bytes(out.peak_reserved_bytes, b.cuda_context_bytes);
  // The busiest GPU's extra blocks are allocated beside the step's and so reserved too.
  out.busiest_device_used_bytes =
      add_bytes(count_of(peak_total + b.rebuilt_buckets + fragmentation + b.gather_pool), b.cuda_context_bytes);
  return out;
}

StepMemoryBases memory_bases(const ModelSpec& model, const Step& step, const GpuSpec& gpu) {
  StepMemoryBases out;
  MemoryBasis whole = memory_basis(model, step, gpu);
  if (!step.first_stage || !step.last_stage) {
    // Moved, not copied: a basis holds a dozen vectors, and a search builds thousands of groups.
    out.priced.push_back({std::move(whole), {}, 0, false});
    return out;
  }
  out.microbatches = step.setup.microbatches;
  // A stage's peak is in its first micro-batch's backward (the most micro-batches in flight, the
  // gradients not there yet unless an earlier accumulation step left them, one output kept) or in
  // a later one's (the gradients alive, one micro-batch fewer in flight, every output kept by the
  // last); measured on two H200s (docs/model.md, "Several GPUs").
  for (const PipelineStage& stage : {*step.first_stage, *step.last_stage}) {
    MemoryBasis first_mb = stage_basis(whole, step, stage);
    MemoryBasis later = first_mb;
    first_mb.outputs_kept = stage.keeps_outputs ? 1.0 : 0.0;
    later.in_flight = std::max(1.0, std::min(stage.in_flight, stage.microbatches - 1.0));
    out.priced.push_back({std::move(first_mb), std::move(later), stage.index, true});
  }
  return out;
}

BusiestStepMemory busiest_step_memory(const StepMemoryBases& bases, double tokens, std::int64_t grad_accum,
                                      bool grad_ckpt) {
  const StepMemoryBases::Stage& whole = bases.priced.front();
  // Without a pipeline: the one basis, built in place (a StepMemory is a kilobyte, and a search
  // prices millions of points).
  if (!whole.pipelined)
    return {step_memory(whole.first_microbatch, tokens, grad_accum, grad_ckpt), &whole.first_microbatch, whole.index};
  // A pipeline stage accumulates its gradients over the step's micro-batches: from the second on,
  // each runs with the gradients alive, as accumulation does.
  const std::int64_t accumulated = grad_accum * bases.microbatches;
  BusiestStepMemory best;
  bool any = false;
  for (const StepMemoryBases::Stage& stage : bases.priced) {
    BusiestStepMemory first{step_memory(stage.first_microbatch, tokens, grad_accum, grad_ckpt), &stage.first_microbatch,
                            stage.index};
    BusiestStepMemory later{step_memory(stage.later, tokens, accumulated, grad_ckpt), &stage.later, stage.index};
    BusiestStepMemory& stage_best = first.memory.peak_allocated_bytes > later.memory.peak_allocated_bytes ? first : later;
    // The first stage is listed first: a later stage must hold more to be the busiest.
    if (!any || stage_best.memory.peak_allocated_bytes > best.memory.peak_allocated_bytes) best = stage_best;
    any = true;
  }
  return best;
}

MemoryEstimate estimate_memory(const ModelSpec& model, const Step& step, const GpuSpec& gpu) {
  const TrainingSetup& setup = step.setup;
  const StepShape& st = step.tensors;
  const Layout& lay = step.layout;
  const StepMemoryBases bases = memory_bases(model, step, gpu);
  const BusiestStepMemory busiest = busiest_step_memory(bases, st.tokens, setup.grad_accum, setup.grad_ckpt);
  const MemoryBasis& basis = *busiest.basis;
  const std::int64_t busiest_stage = busiest.stage;
  const StepMemory& sm = busiest.memory;
  const MemoryMoment& peak = sm.moments[sm.peak];

  MemoryEstimate est;
  est.peak_allocated_bytes = sm.peak_allocated_bytes;
  est.busiest_peak_allocated_bytes = sm.busiest_peak_allocated_bytes;
  est.peak_phase = peak.phase;
  est.peak_moment = peak.what;
  est.breakdown = {
      {"weights", count_of(peak.weights)},
      {"master_weights", count_of(peak.master_weights)},
      {"quant_constants", count_of(peak.quant_constants)},
      {"adapters", count_of(peak.adapters)},
      {"gradients", count_of(peak.gradients)},
      {"optimizer_states", count_of(peak.optimizer_states)},
      {"activations", count_of(peak.activations)},
      {"logits_and_loss", count_of(peak.logits_and_loss)},
      {"transient", count_of(peak.transient)},
      {"cublas_workspace", count_of(peak.cublas_workspace)},
  };
  if (lay.ddp_buckets || lay.zero) est.breakdown.push_back({"gradient_buckets", count_of(peak.gradient_buckets)});
  if (lay.gathers_units) est.breakdown.push_back({"gathered_weights", count_of(peak.gathered_weights)});
  // The objectives' other models, when there are some (docs/model.md, "Objectives").
  if (setup.objective != Objective::sft && has_reference_setting(setup.objective))
    est.breakdown.push_back({"reference_weights", count_of(peak.reference_weights)});
  if (setup.objective == Objective::ppo) {
    est.breakdown.push_back({"reward_weights", count_of(peak.reward_weights)});
    est.breakdown.push_back({"value_weights", count_of(peak.value_weights)});
  }
  for (const Phase ph : {Phase::forward, Phase::backward, Phase::optimizer}) {
    PhasePeak pp{ph, 0, ""};
    for (std::size_t i = 0; i < sm.count; ++i) {
      const MemoryMoment& m = sm.moments[i];
      if (m.phase == ph && count_of(m.total()) > pp.allocated_bytes) {
        pp.allocated_bytes = count_of(m.total());
        pp.moment = m.what;
      }
    }
    est.phases.push_back(pp);
  }
  est.peak_reserved_bytes = sm.peak_reserved_bytes;
  est.later_logits_segment_bytes = sm.later_logits_segment_bytes;
  est.cuda_context_bytes = basis.cuda_context_bytes;
  est.device_used_bytes = sm.device_used_bytes;
  est.busiest_device_used_bytes = sm.busiest_device_used_bytes;
  est.weights_loaded_bytes = basis.weights_loaded_bytes;
  est.trainable_parameters = basis.trainable_parameters;
  est.total_parameters = basis.total_parameters;
  est.untargeted_expert_adapter_parameters = basis.untargeted_expert_adapter_parameters;
  est.host_bytes = count_of(basis.host_bytes + sm.offloaded_host_bytes);
  est.pipeline_stage = busiest_stage;
  // The objective's sequences and models (docs/model.md, "Objectives").
  const ObjectiveShape& o = st.objective;
  ObjectiveMemory& om = est.objective;
  om.trained_sequences = setup.batch * trained_sequences_per_example(setup.objective);
  const bool reference_runs = o.reference == Reference::copy || o.reference == Reference::adapter_off;
  if (reference_runs && (setup.objective == Objective::dpo || setup.objective == Objective::grpo))
    om.no_grad_sequences = om.trained_sequences;
  if (setup.objective == Objective::kto)  // the KL batch through the policy, and both batches through the reference
    om.no_grad_sequences = setup.batch * (reference_runs ? 3 : 1);
  om.reference_weights_bytes = count_of(o.reference_weights);
  om.reward_weights_bytes = count_of(o.reward_weights);
  om.value_weights_bytes = count_of(o.value.weights);
  om.value_gradients_bytes = count_of(o.value.gradients);
  om.value_optimizer_states_bytes = count_of(o.value.optimizer_states);
  om.value_parameters = count_of(o.value.parameters);
  return est;
}

}  // namespace detail

MemoryEstimate estimate_memory(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu) {
  validate(setup);
  return detail::estimate_memory(model, detail::describe_step(model, setup), gpu);
}

}  // namespace trainfit
