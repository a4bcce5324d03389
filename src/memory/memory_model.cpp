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

namespace detail {

std::int64_t to_bytes(double v) { return static_cast<std::int64_t>(std::llround(std::max(0.0, v))); }

double cublas_workspace_bytes(const GpuSpec& gpu) {
  const double each = gpu.compute_capability_major >= kCublasLargeWorkspaceMajor ? kCublasWorkspaceHopper
                                                                                 : kCublasWorkspaceBeforeHopper;
  return kCublasWorkspacesPerStep * each + kCublasLtWorkspace;
}

MemoryBasis memory_basis(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu, const StepShape& st) {
  const auto& p = st.params;
  const double L = static_cast<double>(model.num_layers);
  const bool full = setup.method == Method::full;
  const ParameterCounts& pc = st.counts;
  MemoryBasis b;
  b.layers = L;
  b.vocab = static_cast<double>(model.vocab_size);
  b.full = full;

  // Data parallelism: DDP keeps every tensor whole; FSDP stores 1/shards of each parameter,
  // gradient and optimizer state (the roundings in `p` are already the shards').
  const bool ddp = setup.gpus > 1 && setup.parallel == Parallel::ddp;
  const bool fsdp = setup.gpus > 1 && setup.parallel == Parallel::fsdp;
  b.fsdp = fsdp;
  const double share = 1.0 / p.shards;

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
  const double states_per_param_copy = setup.optimizer == Optimizer::adamw ? 2.0
                                       : setup.optimizer == Optimizer::sgd_momentum ? 1.0 : 0.0;
  base.optimizer_states = st.optimizer_states * share + states_per_param_copy * p.trainable_rounding;
  // The libraries' workspaces are the one static term that depends on the card.
  base.cublas_workspace = cublas_workspace_bytes(gpu);
  // DDP's reducer allocates flat bucket buffers for every trainable gradient when it wraps the
  // model (gradient_as_bucket_view off: each gradient is copied in, all-reduced, copied back).
  if (ddp) base.gradient_buckets = st.gradients;

  // Gradients. Under FSDP a layer's gradients are reduce-scattered into shards as soon as its
  // backward ends; the root's (output layer, embedding) only when the whole backward has ended.
  b.all_grads = st.gradients * share + p.trainable_rounding;
  const double elem = p.trainable_bytes_each;
  b.head_grad = full ? static_cast<double>(pc.lm_head > 0 ? pc.lm_head : pc.embedding) * elem : 0.0;
  const double embed_grad = full ? static_cast<double>(pc.embedding) * elem : 0.0;
  b.root_grads = b.head_grad + (pc.lm_head > 0 ? embed_grad : 0.0);
  const double layer_grad_whole = (st.gradients - (full ? b.root_grads : 0.0)) / L;
  b.layer_grad = fsdp ? layer_grad_whole * share : (b.all_grads - (full ? b.root_grads : 0.0)) / L;
  // FSDP, gathered: the root unit (not resharded after the forward: its backward follows at once)
  // and the last layer's flat all-gather buffer, which FSDP holds until the next gather's copy;
  // in a layer's backward, that layer, its flat buffer and the previous layer's prefetch.
  b.gathered_fwd = fsdp ? p.root_weights + p.layer_weights : 0.0;
  b.gathered_layer_bwd = fsdp ? p.root_weights + 3.0 * p.layer_weights : 0.0;
  b.gathered_embedding_bwd = fsdp ? p.root_weights : 0.0;
  // A layer's whole gradients and the flat copy reduce-scatter sends, while it finishes.
  b.reducing = fsdp ? 2.0 * layer_grad_whole : 0.0;

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
  b.outside_activations = sizes(st.outside_activations);
  b.checkpoint_per_token = st.checkpoint_per_token;
  b.logits_compute_bytes = st.logits_compute_bytes;
  b.logits_upcast = st.logits_upcast;
  b.softcap_bytes = st.softcap_bytes;
  b.layer_backward_transient_per_token = st.layer_backward_transient_per_token;
  b.layer_forward_transient_per_token = st.layer_forward_transient_per_token;
  b.dequant_transient = st.dequant_transient;
  // A tied embedding already holds the output layer's gradient, and adding the embedding's own to
  // it holds 4 bytes per vocabulary x hidden element more (measured: bf16 and fp32). An untied
  // embedding's fresh gradient simply becomes its .grad (measured on Qwen2.5-7B: nothing more).
  b.embedding_backward_transient = pc.lm_head > 0 ? 0.0 : allocator_block(static_cast<double>(pc.embedding) * 4.0);
  b.optimizer_transient = st.optimizer_transient;
  // FSDP allocates its flat all-gather buffers on its own stream, and the caching allocator keeps
  // a stream's freed blocks for that stream: the root's buffer (gathered once, at the start of the
  // forward) and two layers' beyond the one still held (the forward gathers ahead) stay reserved.
  b.gather_pool = fsdp ? p.root_weights + 2.0 * p.layer_weights : 0.0;
  b.cuda_context_bytes = to_bytes(kCudaContextBytes + (setup.gpus > 1 ? kNcclBytes : 0.0));
  b.weights_loaded_bytes =
      to_bytes(base.weights + base.master_weights + base.quant_constants + base.adapters + base.gradient_buckets);
  b.trainable_parameters = static_cast<std::int64_t>(std::llround(p.trainable_params));
  b.total_parameters = pc.total + (full ? 0 : b.trainable_parameters);
  return b;
}

StepMemory step_memory(const MemoryBasis& b, double tokens, std::int64_t grad_accum, bool grad_ckpt) {
  const double T = tokens;
  const double L = b.layers;
  const double TV = T * b.vocab;
  const MemoryMoment& base = b.base;

  // Gradients: with accumulation, micro-batches after the first run with every gradient alive.
  const double grads_prev = grad_accum > 1 ? b.all_grads : 0.0;
  // Each saved tensor is its own allocation, rounded by the caching allocator.
  const double layer_acts = allocated_for(b.layer_activations, T);
  const double kept_per_layer = grad_ckpt ? allocator_block(b.checkpoint_per_token * T) : layer_acts;
  const double outside = allocated_for(b.outside_activations, T);
  // Under checkpointing autograd keeps no layer's autocast copies: they die when the forward
  // leaves autocast and each layer's recompute makes its own again.
  const double copies_kept_per_layer = grad_ckpt ? 0.0 : b.copies_layer;
  const double lc = b.logits_compute_bytes;
  const double logits_c = allocator_block(TV * lc);   // one logits-sized tensor in the lm_head dtype
  const double logits_f = allocator_block(TV * 4.0);  // one fp32 logits-sized tensor
  const double softcap = b.softcap_bytes > 0 ? allocator_block(TV * b.softcap_bytes) : 0.0;

  StepMemory out;
  auto moment = [&](Phase phase, const char* what) -> MemoryMoment& {
    MemoryMoment& m = out.moments[out.count++];
    m = base;
    m.phase = phase;
    m.what = what;
    return m;
  };
  // Forward, at the loss: every layer's saved tensors, the logits as the lm_head made them,
  // their fp32 copy and log_softmax's fp32 output (kept for backward).
  {
    MemoryMoment& m = moment(Phase::forward, "cross-entropy forward");
    m.gradients = grads_prev;
    m.gathered_weights = b.gathered_fwd;
    m.activations = L * kept_per_layer + outside;
    m.weights += b.autocast_copies;
    m.logits_and_loss = logits_c + (b.logits_upcast ? logits_f : 0.0) + logits_f + softcap;
  }
  // Backward, in log_softmax's backward: its saved output, the incoming gradient and the
  // gradient it produces, all fp32 over the vocabulary.
  {
    MemoryMoment& m = moment(Phase::backward, "cross-entropy backward");
    m.gradients = grads_prev;
    m.gathered_weights = b.gathered_fwd;
    m.activations = L * kept_per_layer + outside;
    m.weights += b.copies_head + L * copies_kept_per_layer;
    m.logits_and_loss = 3.0 * logits_f + softcap;
  }
  // Backward through the output layer: its gradient appears while the logits' gradient (in
  // the lm_head's dtype) is still alive.
  {
    MemoryMoment& m = moment(Phase::backward, "output layer backward");
    m.gradients = std::max(grads_prev, b.head_grad);
    m.gathered_weights = b.gathered_fwd;
    m.activations = L * kept_per_layer + outside;
    m.weights += b.copies_head + L * copies_kept_per_layer;
    m.logits_and_loss = logits_c;
  }
  // Backward through the last and the first decoder layer: gradients of the layers done so far,
  // saved tensors of the layers still to do, the layer's own recomputed activations under
  // checkpointing, and its in-flight gradients.
  for (const double done : {0.0, L - 1.0}) {
    MemoryMoment& m = moment(Phase::backward, done == 0.0 ? "last layer backward" : "first layer backward");
    m.gradients = b.fsdp ? std::max(grads_prev, b.head_grad + done * b.layer_grad) + b.reducing
                         : std::max(grads_prev, b.head_grad + (done + 1.0) * b.layer_grad);
    m.gathered_weights = b.gathered_layer_bwd;
    m.activations = (L - done) * kept_per_layer + (grad_ckpt ? layer_acts : 0.0);
    m.weights += copies_kept_per_layer * (L - done) + (grad_ckpt ? b.copies_layer : 0.0);
    m.transient = b.layer_backward_transient_per_token * T + b.dequant_transient;
  }
  // Backward through the embedding (full fine-tuning): every gradient exists, and a tied
  // embedding's fp32 accumulation buffer (memory_basis).
  if (b.full) {
    MemoryMoment& m = moment(Phase::backward, "embedding backward");
    m.gradients = b.fsdp ? b.root_grads + L * b.layer_grad : b.all_grads;
    m.gathered_weights = b.gathered_embedding_bwd;
    m.transient = b.embedding_backward_transient;
  }
  // Optimizer step: every gradient, plus the optimizer's own temporaries.
  {
    MemoryMoment& m = moment(Phase::optimizer, "optimizer step");
    m.gradients = b.all_grads;
    m.transient = b.optimizer_transient;
  }

  double peak_total = out.moments[0].total();
  for (std::size_t i = 1; i < out.count; ++i) {
    const double total = out.moments[i].total();
    if (total > peak_total) {
      peak_total = total;
      out.peak = i;
    }
  }
  out.peak_allocated_bytes = to_bytes(peak_total);
  // Blocks freed before the peak that the allocator cannot reuse for it stay reserved: the
  // lm_head-dtype logits (too small for the loss backward's fp32 blocks) and the blocks of a
  // layer's forward temporaries; under FSDP, its gather pool (memory_basis).
  const double fragmentation =
      (b.logits_upcast ? logits_c : 0.0) + allocator_block(b.layer_forward_transient_per_token * T);
  out.peak_reserved_bytes = to_bytes(peak_total + fragmentation + b.gather_pool);
  out.device_used_bytes = out.peak_reserved_bytes + b.cuda_context_bytes;
  return out;
}

MemoryEstimate estimate_memory(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu,
                               const StepShape& st) {
  const MemoryBasis basis = memory_basis(model, setup, gpu, st);
  const StepMemory sm = step_memory(basis, st.tokens, setup.grad_accum, setup.grad_ckpt);
  const MemoryMoment& peak = sm.moments[sm.peak];

  MemoryEstimate est;
  est.peak_allocated_bytes = sm.peak_allocated_bytes;
  est.peak_phase = peak.phase;
  est.peak_moment = peak.what;
  est.breakdown = {
      {"weights", to_bytes(peak.weights)},
      {"master_weights", to_bytes(peak.master_weights)},
      {"quant_constants", to_bytes(peak.quant_constants)},
      {"adapters", to_bytes(peak.adapters)},
      {"gradients", to_bytes(peak.gradients)},
      {"optimizer_states", to_bytes(peak.optimizer_states)},
      {"activations", to_bytes(peak.activations)},
      {"logits_and_loss", to_bytes(peak.logits_and_loss)},
      {"transient", to_bytes(peak.transient)},
      {"cublas_workspace", to_bytes(peak.cublas_workspace)},
  };
  const bool data_parallel = setup.gpus > 1;
  if (data_parallel && setup.parallel == Parallel::ddp)
    est.breakdown.push_back({"gradient_buckets", to_bytes(peak.gradient_buckets)});
  if (data_parallel && setup.parallel == Parallel::fsdp)
    est.breakdown.push_back({"gathered_weights", to_bytes(peak.gathered_weights)});
  for (const Phase ph : {Phase::forward, Phase::backward, Phase::optimizer}) {
    PhasePeak pp{ph, 0, ""};
    for (std::size_t i = 0; i < sm.count; ++i) {
      const MemoryMoment& m = sm.moments[i];
      if (m.phase == ph && to_bytes(m.total()) > pp.allocated_bytes) {
        pp.allocated_bytes = to_bytes(m.total());
        pp.moment = m.what;
      }
    }
    est.phases.push_back(pp);
  }
  est.peak_reserved_bytes = sm.peak_reserved_bytes;
  est.cuda_context_bytes = basis.cuda_context_bytes;
  est.device_used_bytes = sm.device_used_bytes;
  est.weights_loaded_bytes = basis.weights_loaded_bytes;
  est.trainable_parameters = basis.trainable_parameters;
  est.total_parameters = basis.total_parameters;
  return est;
}

}  // namespace detail

MemoryEstimate estimate_memory(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu) {
  validate(setup);
  return detail::estimate_memory(model, setup, gpu, detail::describe_step(model, setup));
}

}  // namespace trainfit
