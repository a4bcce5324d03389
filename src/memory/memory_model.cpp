// Peak memory of a steady-state training step: the static tensors plus, at each moment of the
// step where memory can peak, what is alive then. docs/model.md defines every term.
#include <algorithm>
#include <array>
#include <cmath>

#include "memory/memory_model.hpp"
#include "memory/step_shape.hpp"
#include "trainfit/memory.hpp"

namespace trainfit {

std::string to_string(Phase p) {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
  }
  return "?";
}

namespace {

// The allocated bytes at one moment, by category.
struct Moment {
  Phase phase = Phase::forward;
  std::string what;
  double weights = 0, master_weights = 0, quant_constants = 0, adapters = 0, gradients = 0, optimizer_states = 0,
         activations = 0, logits_and_loss = 0, transient = 0, cublas_workspace = 0, gradient_buckets = 0,
         gathered_weights = 0;
  double total() const {
    return weights + master_weights + quant_constants + adapters + gradients + optimizer_states + activations +
           logits_and_loss + transient + cublas_workspace + gradient_buckets + gathered_weights;
  }
};

std::int64_t to_bytes(double v) { return static_cast<std::int64_t>(std::llround(std::max(0.0, v))); }

}  // namespace

namespace detail {

double cublas_workspace_bytes(const GpuSpec& gpu) {
  const double each = gpu.compute_capability_major >= kCublasLargeWorkspaceMajor ? kCublasWorkspaceHopper
                                                                                 : kCublasWorkspaceBeforeHopper;
  return kCublasWorkspacesPerStep * each + kCublasLtWorkspace;
}

}  // namespace detail

MemoryEstimate estimate_memory(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu) {
  validate(setup);
  const detail::StepShape st = detail::describe_step(model, setup);
  const auto& p = st.params;
  const double T = st.tokens;
  const double L = static_cast<double>(model.num_layers);
  const double TV = T * static_cast<double>(model.vocab_size);
  const bool full = setup.method == Method::full;
  const ParameterCounts pc = count_parameters(model);

  // Data parallelism: DDP keeps every tensor whole; FSDP stores 1/shards of each parameter,
  // gradient and optimizer state (the roundings in `p` are already the shards').
  const bool ddp = setup.gpus > 1 && setup.parallel == Parallel::ddp;
  const bool fsdp = setup.gpus > 1 && setup.parallel == Parallel::fsdp;
  const double share = 1.0 / p.shards;

  // Static: alive through the whole steady-state step.
  Moment base;
  if (full && setup.amp) {
    base.master_weights = p.weights * share + p.weights_rounding;
  } else {
    base.weights = p.weights * share + p.weights_rounding;
  }
  base.quant_constants = p.quant_constants;
  base.adapters = p.adapters * share;
  // Optimizer states have their parameters' shapes, so they round like them.
  const double states_per_param_copy = setup.optimizer == Optimizer::adamw ? 2.0
                                       : setup.optimizer == Optimizer::sgd_momentum ? 1.0 : 0.0;
  base.optimizer_states = st.optimizer_states * share + states_per_param_copy * p.trainable_rounding;
  // The libraries' workspaces are the one static term that depends on the card.
  base.cublas_workspace = detail::cublas_workspace_bytes(gpu);
  // DDP's reducer allocates flat bucket buffers for every trainable gradient when it wraps the
  // model (gradient_as_bucket_view off: each gradient is copied in, all-reduced, copied back).
  if (ddp) base.gradient_buckets = st.gradients;

  // Gradients: with accumulation, micro-batches after the first run with every gradient alive.
  // Under FSDP a layer's gradients are reduce-scattered into shards as soon as its backward ends;
  // the root's (output layer, embedding) only when the whole backward has ended.
  const double all_grads = st.gradients * share + p.trainable_rounding;
  const double grads_prev = setup.grad_accum > 1 ? all_grads : 0.0;
  const double elem = p.trainable_bytes_each;
  const double head_grad = full ? static_cast<double>(pc.lm_head > 0 ? pc.lm_head : pc.embedding) * elem : 0.0;
  const double embed_grad = full ? static_cast<double>(pc.embedding) * elem : 0.0;
  const double root_grads = head_grad + (pc.lm_head > 0 ? embed_grad : 0.0);
  const double layer_grad_whole = (st.gradients - (full ? root_grads : 0.0)) / L;
  const double layer_grad = fsdp ? layer_grad_whole * share : (all_grads - (full ? root_grads : 0.0)) / L;
  // FSDP, gathered: the root unit (not resharded after the forward: its backward follows at once)
  // and the last layer's flat all-gather buffer, which FSDP holds until the next gather's copy;
  // in a layer's backward, that layer, its flat buffer and the previous layer's prefetch.
  const double gathered_fwd = fsdp ? p.root_weights + p.layer_weights : 0.0;
  const double gathered_layer_bwd = fsdp ? p.root_weights + 3.0 * p.layer_weights : 0.0;
  // A layer's whole gradients and the flat copy reduce-scatter sends, while it finishes.
  const double reducing = fsdp ? 2.0 * layer_grad_whole : 0.0;

  // Each saved tensor is its own allocation, rounded by the caching allocator.
  const double layer_acts = detail::allocated_for(st.layer_activations, T);
  const double kept_per_layer = setup.grad_ckpt ? detail::allocator_block(st.checkpoint_per_token * T) : layer_acts;
  const double outside = detail::allocated_for(st.outside_activations, T);
  const double copies_head = full && setup.amp ? static_cast<double>(pc.lm_head > 0 ? pc.lm_head : pc.embedding) * bytes_per_element(*setup.amp) : 0.0;
  const double copies_layer = (p.autocast_copies - copies_head) / L;
  // Under checkpointing autograd keeps no layer's autocast copies: they die when the forward
  // leaves autocast and each layer's recompute makes its own again.
  const double copies_kept_per_layer = setup.grad_ckpt ? 0.0 : copies_layer;
  const double lc = st.logits_compute_bytes;
  const double logits_c = detail::allocator_block(TV * lc);     // one logits-sized tensor in the lm_head dtype
  const double logits_f = detail::allocator_block(TV * 4.0);    // one fp32 logits-sized tensor
  const double softcap = st.softcap_bytes > 0 ? detail::allocator_block(TV * st.softcap_bytes) : 0.0;

  std::vector<Moment> moments;
  // Forward, at the loss: every layer's saved tensors, the logits as the lm_head made them,
  // their fp32 copy and log_softmax's fp32 output (kept for backward).
  {
    Moment m = base;
    m.phase = Phase::forward;
    m.what = "cross-entropy forward";
    m.gradients = grads_prev;
    m.gathered_weights = gathered_fwd;
    m.activations = L * kept_per_layer + outside;
    m.weights += p.autocast_copies;
    m.logits_and_loss = logits_c + (st.logits_upcast ? logits_f : 0.0) + logits_f + softcap;
    moments.push_back(m);
  }
  // Backward, in log_softmax's backward: its saved output, the incoming gradient and the
  // gradient it produces, all fp32 over the vocabulary.
  {
    Moment m = base;
    m.phase = Phase::backward;
    m.what = "cross-entropy backward";
    m.gradients = grads_prev;
    m.gathered_weights = gathered_fwd;
    m.activations = L * kept_per_layer + outside;
    m.weights += copies_head + L * copies_kept_per_layer;
    m.logits_and_loss = 3.0 * logits_f + softcap;
    moments.push_back(m);
  }
  // Backward through the output layer: its gradient appears while the logits' gradient (in
  // the lm_head's dtype) is still alive.
  {
    Moment m = base;
    m.phase = Phase::backward;
    m.what = "output layer backward";
    m.gradients = std::max(grads_prev, head_grad);
    m.gathered_weights = gathered_fwd;
    m.activations = L * kept_per_layer + outside;
    m.weights += copies_head + L * copies_kept_per_layer;
    m.logits_and_loss = logits_c;
    moments.push_back(m);
  }
  // Backward through the last and the first decoder layer: gradients of the layers done so far,
  // saved tensors of the layers still to do, the layer's own recomputed activations under
  // checkpointing, and its in-flight gradients.
  for (const double done : {0.0, L - 1.0}) {
    Moment m = base;
    m.phase = Phase::backward;
    m.what = done == 0.0 ? "last layer backward" : "first layer backward";
    m.gradients = fsdp ? std::max(grads_prev, head_grad + done * layer_grad) + reducing
                       : std::max(grads_prev, head_grad + (done + 1.0) * layer_grad);
    m.gathered_weights = gathered_layer_bwd;
    m.activations = (L - done) * kept_per_layer + (setup.grad_ckpt ? layer_acts : 0.0);
    m.weights += copies_kept_per_layer * (L - done) + (setup.grad_ckpt ? copies_layer : 0.0);
    m.transient = st.layer_backward_transient_per_token * T + st.dequant_transient;
    moments.push_back(m);
  }
  // Backward through the embedding (full fine-tuning): every gradient exists. A tied embedding
  // already holds the output layer's gradient, and adding the embedding's own to it holds 4 bytes
  // per vocabulary x hidden element more (measured: bf16 and fp32). An untied embedding's fresh
  // gradient simply becomes its .grad (measured on Qwen2.5-7B: nothing more).
  if (full) {
    Moment m = base;
    m.phase = Phase::backward;
    m.what = "embedding backward";
    m.gradients = fsdp ? root_grads + L * layer_grad : all_grads;
    m.gathered_weights = fsdp ? p.root_weights : 0.0;
    m.transient = pc.lm_head > 0 ? 0.0 : detail::allocator_block(static_cast<double>(pc.embedding) * 4.0);
    moments.push_back(m);
  }
  // Optimizer step: every gradient, plus the optimizer's own temporaries.
  {
    Moment m = base;
    m.phase = Phase::optimizer;
    m.what = "optimizer step";
    m.gradients = all_grads;
    m.transient = st.optimizer_transient;
    moments.push_back(m);
  }

  const Moment* peak = &moments.front();
  for (const auto& m : moments)
    if (m.total() > peak->total()) peak = &m;

  MemoryEstimate est;
  est.peak_allocated_bytes = to_bytes(peak->total());
  est.peak_phase = peak->phase;
  est.peak_moment = peak->what;
  est.breakdown = {
      {"weights", to_bytes(peak->weights)},
      {"master_weights", to_bytes(peak->master_weights)},
      {"quant_constants", to_bytes(peak->quant_constants)},
      {"adapters", to_bytes(peak->adapters)},
      {"gradients", to_bytes(peak->gradients)},
      {"optimizer_states", to_bytes(peak->optimizer_states)},
      {"activations", to_bytes(peak->activations)},
      {"logits_and_loss", to_bytes(peak->logits_and_loss)},
      {"transient", to_bytes(peak->transient)},
      {"cublas_workspace", to_bytes(peak->cublas_workspace)},
  };
  if (ddp) est.breakdown.push_back({"gradient_buckets", to_bytes(peak->gradient_buckets)});
  if (fsdp) est.breakdown.push_back({"gathered_weights", to_bytes(peak->gathered_weights)});
  for (const Phase ph : {Phase::forward, Phase::backward, Phase::optimizer}) {
    PhasePeak pp{ph, 0, ""};
    for (const auto& m : moments) {
      if (m.phase == ph && to_bytes(m.total()) > pp.allocated_bytes) {
        pp.allocated_bytes = to_bytes(m.total());
        pp.moment = m.what;
      }
    }
    est.phases.push_back(pp);
  }
  // Blocks freed before the peak that the allocator cannot reuse for it stay reserved: the
  // lm_head-dtype logits (too small for the loss backward's fp32 blocks) and the blocks of a
  // layer's forward temporaries.
  const double fragmentation = (st.logits_upcast ? logits_c : 0.0) +
                               detail::allocator_block(st.layer_forward_transient_per_token * T);
  // FSDP allocates its flat all-gather buffers on its own stream, and the caching allocator keeps
  // a stream's freed blocks for that stream: the root's buffer (gathered once, at the start of the
  // forward) and two layers' beyond the one still held (the forward gathers ahead) stay reserved.
  const double gather_pool = fsdp ? p.root_weights + 2.0 * p.layer_weights : 0.0;
  est.peak_reserved_bytes = to_bytes(peak->total() + fragmentation + gather_pool);
  est.cuda_context_bytes = to_bytes(detail::kCudaContextBytes + (setup.gpus > 1 ? detail::kNcclBytes : 0.0));
  est.device_used_bytes = est.peak_reserved_bytes + est.cuda_context_bytes;
  est.weights_loaded_bytes =
      to_bytes(base.weights + base.master_weights + base.quant_constants + base.adapters + base.gradient_buckets);
  est.trainable_parameters = static_cast<std::int64_t>(std::llround(p.trainable_params));
  est.total_parameters = pc.total + (full ? 0 : est.trainable_parameters);
  return est;
}

}  // namespace trainfit
