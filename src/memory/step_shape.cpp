// The tensors of one training step, from the model's shape and the setup.
// docs/model.md explains each term; the comments here say which framework
// behaviour (PyTorch autograd, HF transformers, PEFT, bitsandbytes) makes it exist.
#include "memory/step_shape.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace trainfit::detail {
namespace {

double as_d(std::int64_t v) { return static_cast<double>(v); }

bool targets_module(const LoraSetup& lora, const LinearModule& m) {
  for (const auto& t : lora.targets) {
    // PEFT's "all-linear" matches every nn.Linear but the output layer. Transformers 5 stores
    // routed experts as fused 3-D parameters, which are not nn.Linear, so they are not matched.
    if (t == "all-linear") return m.count == 1 || m.token_fraction >= 1.0;
    // PEFT matches a target name against the end of the module path.
    if (m.name == t || (m.name.size() > t.size() && m.name.compare(m.name.size() - t.size(), t.size(), t) == 0 &&
                        m.name[m.name.size() - t.size() - 1] == '.'))
      return true;
  }
  return false;
}

// Bytes of a 4-bit weight's constants (bitsandbytes): one absmax per block; with double
// quantisation the absmax are themselves 8-bit with one fp32 constant per 256 of them.
double quant_constants_per_element(const TrainingSetup& s) {
  if (s.weights == DType::int8) return 0;  // LLM.int8 row scales are counted per row below
  const double blocks = 1.0 / as_d(s.quant.block_size);
  return s.quant.double_quant ? blocks * (1.0 + 4.0 / 256.0) : blocks * 4.0;
}

struct Widths {
  double compute = 2;   // bytes of a matmul output / activation
  double residual = 2;  // bytes of the residual stream between layers
  double norm_out = 2;  // bytes of a norm's output (norm weight dtype promotes it)
};

Widths widths_for(const TrainingSetup& s) {
  Widths w;
  if (s.method == Method::full) {
    if (s.amp) {
      // fp32 parameters under autocast: matmuls run in the autocast dtype, but the embedding,
      // the residual adds and the norms (fp32 weights) keep the stream in fp32.
      w.compute = bytes_per_element(*s.amp);
      w.residual = 4;
      w.norm_out = 4;
    } else {
      w.compute = w.residual = w.norm_out = bytes_per_element(s.weights);
    }
  } else if (s.method == Method::lora) {
    w.compute = w.residual = w.norm_out = bytes_per_element(s.weights);
  } else {
    w.compute = w.residual = bytes_per_element(s.quant.compute_dtype);
    // prepare_model_for_kbit_training makes the norm weights fp32, which promotes norm outputs.
    w.norm_out = s.quant.kbit_prepare ? 4 : w.compute;
    if (s.quant.kbit_prepare) w.residual = 4;
  }
  return w;
}

}  // namespace

double allocator_block(double bytes) {
  constexpr double kMiB = 1048576.0;
  const double rounded = std::ceil(bytes / 512.0) * 512.0;
  if (rounded < 10.0 * kMiB) return rounded;
  const double segment = std::ceil(rounded / (2.0 * kMiB)) * 2.0 * kMiB;
  return segment - rounded > kMiB ? rounded : segment;
}

double allocated_for(const std::vector<Sized>& per_token, double tokens) {
  double total = 0;
  for (const auto& t : per_token) total += allocator_block(t.bytes * tokens);
  return total;
}

StepShape describe_step(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu) {
  StepShape st;
  const double h = as_d(model.hidden_size);
  const double nq = as_d(model.num_heads);
  const double q = nq * as_d(model.head_dim);
  const double kv = as_d(model.num_kv_heads) * as_d(model.head_dim);
  const double V = as_d(model.vocab_size);
  const double L = as_d(model.num_layers);
  const double seq = as_d(setup.seq);
  st.tokens = as_d(setup.seq) * as_d(setup.batch);
  const bool full = setup.method == Method::full;
  const bool quantised = setup.method == Method::qlora;
  const Widths w = widths_for(setup);
  const double r = as_d(setup.lora.rank);
  const double adapter_bytes = bytes_per_element(setup.lora.adapter_dtype);

  const ParameterCounts pc = count_parameters(model);
  const std::vector<LinearModule> moe_or_dense = layer_linear_modules(model);
  const std::vector<LinearModule> dense_mods = model.is_moe() ? dense_layer_linear_modules(model) : moe_or_dense;
  const double dense_layers = model.is_moe() ? as_d(model.dense_layers) : L;
  const double sparse_layers = L - dense_layers;

  // ---- parameters ----------------------------------------------------------------------
  ParameterStorage& p = st.params;
  const double weight_bytes = bytes_per_element(setup.weights);
  double linear_weight_elems = 0, linear_bias_elems = 0, linear_rows = 0;
  double adapter_params = 0;
  double largest_linear = 0;
  double factored_elems = 0;  // Adafactor's row + column vectors over the trainable matrices
  auto add_layer = [&](const std::vector<LinearModule>& mods, double layers) {
    for (const auto& m : mods) {
      const double n = as_d(m.in_features) * as_d(m.out_features) * as_d(m.count);
      linear_weight_elems += n * layers;
      linear_bias_elems += (m.bias ? as_d(m.out_features) * as_d(m.count) : 0) * layers;
      linear_rows += as_d(m.out_features) * as_d(m.count) * layers;
      largest_linear = std::max(largest_linear, as_d(m.in_features) * as_d(m.out_features));
      if (full) factored_elems += (as_d(m.in_features) + as_d(m.out_features)) * as_d(m.count) * layers;
      if (!full && targets_module(setup.lora, m)) {
        adapter_params += r * (as_d(m.in_features) + as_d(m.out_features)) * as_d(m.count) * layers;
        factored_elems += (as_d(m.in_features) + as_d(m.out_features) + 2.0 * r) * as_d(m.count) * layers;
      }
    }
  };
  add_layer(dense_mods, dense_layers);
  if (sparse_layers > 0) add_layer(moe_or_dense, sparse_layers);
  const double other_elems = as_d(pc.total) - linear_weight_elems;  // embeddings, lm_head, norms, biases
  const double lm_head_elems = as_d(pc.lm_head);
  const double embed_elems = as_d(pc.embedding);

  // Every parameter-shaped tensor (weights, and in full fine-tuning their gradients and optimizer
  // states) is one allocation; the allocator's rounding of each adds up over hundreds of them.
  // FSDP2 stores each parameter's dim-0 shard as its own tensor, so the rounding is the shards'.
  const bool fsdp = setup.gpus > 1 && setup.parallel == Parallel::fsdp;
  const double shards = fsdp ? as_d(setup.gpus) : 1.0;
  auto rounding = [&](double matrix_bytes, double other_bytes) {
    double extra = 0;
    auto add_tensor = [&](double elems, double bytes, double copies) {
      const double stored = elems / shards * bytes;
      if (elems > 0) extra += (allocator_block(stored) - stored) * copies;
    };
    auto add_mods = [&](const std::vector<LinearModule>& mods, double layers) {
      for (const auto& m : mods) {
        add_tensor(as_d(m.in_features) * as_d(m.out_features) * as_d(m.count), matrix_bytes, layers);
        if (m.bias) add_tensor(as_d(m.out_features) * as_d(m.count), other_bytes, layers);
      }
    };
    add_mods(dense_mods, dense_layers);
    if (sparse_layers > 0) add_mods(moe_or_dense, sparse_layers);
    add_tensor(embed_elems, other_bytes, 1.0);
    add_tensor(lm_head_elems, other_bytes, 1.0);
    add_tensor(h, other_bytes, L * as_d(model.norms_per_layer) + 1.0);
    return extra;
  };

  if (quantised) {
    // bitsandbytes quantises every decoder nn.Linear weight; transformers keeps the output
    // layer, the embedding, the norms and the biases in the load dtype (fp32 after k-bit prep).
    const double keep_bytes = setup.quant.kbit_prepare ? 4.0 : bytes_per_element(setup.quant.compute_dtype);
    p.weights = linear_weight_elems * bytes_per_element(setup.weights) + other_elems * keep_bytes;
    p.quant_constants = linear_weight_elems * quant_constants_per_element(setup) +
                        (setup.weights == DType::int8 ? linear_rows * 4.0 : 0.0);
    // Forward and backward dequantise one weight at a time into the compute dtype.
    st.dequant_transient = largest_linear * bytes_per_element(setup.quant.compute_dtype);
    p.weights_rounding = rounding(bytes_per_element(setup.weights), keep_bytes);
  } else {
    p.weights = as_d(pc.total) * weight_bytes;
    p.weights_rounding = rounding(weight_bytes, weight_bytes);
  }

  if (full) {
    p.trainable_params = as_d(pc.total);
    p.trainable_bytes_each = weight_bytes;
    p.largest_trainable = std::max({largest_linear, embed_elems, lm_head_elems});
    p.trainable_rounding = rounding(weight_bytes, weight_bytes);
    if (setup.amp) {
      // Autocast caches one low-precision copy of each fp32 weight a matmul uses, until the
      // forward leaves the autocast region; autograd keeps each copy until that matmul's backward.
      p.autocast_copies = (linear_weight_elems + (lm_head_elems > 0 ? lm_head_elems : embed_elems)) *
                          bytes_per_element(*setup.amp);
    }
  } else {
    p.adapters = adapter_params * adapter_bytes;
    p.trainable_params = adapter_params;
    p.trainable_bytes_each = adapter_bytes;
    p.largest_trainable = r * std::max(h, as_d(model.intermediate_size));
  }
  st.gradients = p.trainable_params * p.trainable_bytes_each;

  // FSDP's units: the root (what no decoder layer holds) stays gathered from the forward to the
  // end of the backward; a layer is gathered into one flat buffer, then copied into its tensors.
  const double root_bytes = quantised ? bytes_per_element(setup.quant.compute_dtype) : weight_bytes;
  p.root_weights = allocator_block(embed_elems * root_bytes) + allocator_block(lm_head_elems * root_bytes) +
                   allocator_block(h * root_bytes);
  p.layer_weights = (p.weights - (embed_elems + lm_head_elems + h) * root_bytes + p.adapters) / L;
  p.shards = shards;

  // ---- optimizer ------------------------------------------------------------------------
  const double tp = p.trainable_params;
  switch (setup.optimizer) {
    case Optimizer::adamw:
      // exp_avg and exp_avg_sq in the parameter's dtype; fused AdamW needs no temporaries.
      st.optimizer_states = 2.0 * tp * p.trainable_bytes_each;
      break;
    case Optimizer::adamw_8bit:
      // bitsandbytes: two uint8 states with one fp32 absmax per 2048-element block.
      st.optimizer_states = 2.0 * tp * (1.0 + 4.0 / 2048.0);
      break;
    case Optimizer::sgd:
      st.optimizer_states = 0;
      break;
    case Optimizer::sgd_momentum:
      st.optimizer_states = tp * p.trainable_bytes_each;
      break;
    case Optimizer::adafactor: {
      // Factored second moment: one row and one column vector per matrix (grad dtype).
      // Vectors (norms, biases) keep a full second moment.
      double factored = factored_elems;
      if (full) factored += (V + h) * (lm_head_elems > 0 ? 2.0 : 1.0) + as_d(pc.norms) + linear_bias_elems;
      st.optimizer_states = factored * p.trainable_bytes_each;
      // transformers' Adafactor works in fp32 on one parameter at a time: fp32 copies of the
      // parameter, its gradient, the update and its square for the largest tensor (measured:
      // four fp32 copies of the embedding on Qwen2.5-0.5B).
      st.optimizer_transient = 4.0 * 4.0 * p.largest_trainable;
      break;
    }
  }

  // ---- activations of one decoder layer, bytes per token ---------------------------------
  auto& acts = st.layer_activations;
  auto add = [&](std::vector<Sized>& v, const std::string& name, double bytes) {
    if (bytes > 0) v.push_back({name, bytes});
  };
  // An RMSNorm upcasts its input to fp32 and keeps it for pow()'s backward; with a trainable
  // weight it also keeps the normalised input for the weight's gradient.
  auto norm = [&](std::vector<Sized>& v, const std::string& name, double width) {
    add(v, name + " fp32 input", 4.0 * width);
    if (full) add(v, name + " normalised input", w.residual * width);
  };
  // What one linear module keeps: its input for the weight gradient when the base trains
  // (under autocast each call casts the fp32 input to a copy of its own), and the LoRA
  // branch's fp32 copy of the input, dropout mask and A output.
  std::map<std::string, bool> shared_input_seen;
  auto linear = [&](std::vector<Sized>& v, const LinearModule& m, const std::string& input_name,
                    double input_bytes, double rows) {
    const double in = as_d(m.in_features) * rows;
    if (full) {
      const bool cast_copy = setup.amp && input_bytes != w.compute;
      if (cast_copy) {
        add(v, m.name + " input (autocast copy)", w.compute * in);
      } else if (!shared_input_seen[input_name]) {
        shared_input_seen[input_name] = true;
        add(v, input_name, input_bytes * in);
      }
    } else if (targets_module(setup.lora, m)) {
      if (setup.lora.dropout > 0) {
        add(v, m.name + " lora dropout output", adapter_bytes * in);
        add(v, m.name + " lora dropout mask", 1.0 * in);
      } else if (adapter_bytes != input_bytes) {
        add(v, m.name + " lora input cast", adapter_bytes * in);
      } else if (!shared_input_seen[input_name]) {
        shared_input_seen[input_name] = true;
        add(v, input_name, input_bytes * in);
      }
      add(v, m.name + " lora A output", adapter_bytes * r * as_d(m.count) * rows);
    }
  };
  auto find = [](const std::vector<LinearModule>& mods, const std::string& name) -> const LinearModule* {
    for (const auto& m : mods)
      if (m.name == name || (m.name.size() > name.size() && m.name.ends_with("." + name))) return &m;
    return nullptr;
  };

  auto layer = [&](const std::vector<LinearModule>& mods, bool moe) {
    std::vector<Sized> v;
    shared_input_seen.clear();
    const double c = w.compute;
    norm(v, "input norm", h);
    // attention projections
    for (const char* name : {"q_proj", "k_proj", "v_proj", "qkv_proj"})
      if (const auto* m = find(mods, name)) linear(v, *m, "attention input", w.norm_out, 1.0);
    if (model.qk_norm) {
      add(v, "q/k norm fp32 inputs", 4.0 * (q + kv));
      if (full) add(v, "q/k norm normalised inputs", c * (q + kv));
    }
    add(v, "query after RoPE", c * q);
    add(v, "key after RoPE", c * kv);
    add(v, "value", c * kv);
    // PyTorch's fused SDPA kernels take half precision only; fp32 with grouped-query attention
    // falls back to the math path (measured on the H200), which keeps the scores like eager does.
    const bool math_sdpa = setup.attention != Attention::eager && c >= 4.0 && model.num_kv_heads < model.num_heads;
    if (math_sdpa) {
      add(v, "key repeated to query heads", c * q);
      add(v, "value repeated to query heads", c * q);
      add(v, "attention probabilities (fp32 softmax output)", 4.0 * nq * seq);
      if (const auto* m = find(mods, "o_proj")) linear(v, *m, "attention output (contiguous copy)", c, 1.0);
    } else if (setup.attention == Attention::eager) {
      // Eager attention repeats the key/value heads to the query heads before its matmuls,
      // keeps softmax's fp32 output and the cast copy the value matmul saves: seq x seq per head.
      add(v, "key repeated to query heads", c * q);
      add(v, "value repeated to query heads", c * q);
      add(v, "attention probabilities (fp32 softmax output)", 4.0 * nq * seq);
      add(v, "attention probabilities (cast copy)", c * nq * seq);
      // Its output is transposed into a new contiguous tensor, o_proj's input.
      if (const auto* m = find(mods, "o_proj")) linear(v, *m, "attention output (contiguous copy)", c, 1.0);
    } else {
      // The fused kernels (cuDNN/flash on Hopper) write their output already in the layout
      // o_proj reads, so the output they keep is also o_proj's input.
      add(v, "attention log-sum-exp", 4.0 * nq);
      add(v, "attention output", c * q);
      shared_input_seen["attention output"] = true;
      if (const auto* m = find(mods, "o_proj")) linear(v, *m, "attention output", c, 1.0);
    }
    for (std::int64_t i = 1; i < model.norms_per_layer; ++i) norm(v, i == 1 ? "post-attention norm" : "extra norm " + std::to_string(i), h);
    // MLP
    auto mlp = [&](const std::string& prefix, const std::vector<const LinearModule*>& gate_up,
                   const LinearModule* down, double inter, double rows) {
      for (const auto* m : gate_up) linear(v, *m, prefix + "mlp input", w.norm_out, rows);
      add(v, prefix + "gate output (activation input)", c * inter * rows);
      add(v, prefix + "activation output", c * inter * rows);
      add(v, prefix + "up output", c * inter * rows);
      if (down) linear(v, *down, prefix + "activation x up (down input)", c, rows);
    };
    if (!moe) {
      std::vector<const LinearModule*> gu;
      for (const char* name : {"gate_proj", "up_proj", "gate_up_proj"})
        if (const auto* m = find(mods, name)) gu.push_back(m);
      mlp("", gu, find(mods, "down_proj"), as_d(model.intermediate_size), 1.0);
    } else {
      const double k = as_d(model.experts_per_token);
      const double E = as_d(model.num_experts);
      if (const auto* router = find(mods, "gate")) linear(v, *router, "mlp input", w.norm_out, 1.0);
      add(v, "router probabilities (fp32)", 4.0 * E);
      // Each routed (token, expert) pair gathers a copy of the token, runs the expert MLP and
      // is scaled by its routing weight (which keeps the expert output for the weight's gradient).
      add(v, "tokens gathered for experts", full ? c * h * k : 0);
      std::vector<const LinearModule*> gu;
      for (const auto& m : mods)
        if (m.count > 1 && (m.name.ends_with("gate_proj") || m.name.ends_with("up_proj") || m.name.ends_with("gate_up_proj"))) gu.push_back(&m);
      const LinearModule* down = nullptr;
      for (const auto& m : mods)
        if (m.count > 1 && m.name.ends_with("down_proj")) down = &m;
      // Per token, k of the E experts run: rows = k/E of the tokens per expert, times E copies.
      mlp("expert ", gu, down, as_d(model.moe_intermediate_size) * k, 1.0 / E);
      add(v, "expert outputs (for routing-weight gradient)", c * h * k);
      if (model.shared_expert_intermediate_size > 0) {
        std::vector<const LinearModule*> sgu;
        for (const auto& m : mods)
          if (m.count == 1 && m.name.find("shared_expert.") != std::string::npos &&
              (m.name.ends_with("gate_proj") || m.name.ends_with("up_proj"))) sgu.push_back(&m);
        const LinearModule* sdown = nullptr;
        for (const auto& m : mods)
          if (m.count == 1 && m.name.find("shared_expert.down_proj") != std::string::npos) sdown = &m;
        mlp("shared expert ", sgu, sdown, as_d(model.shared_expert_intermediate_size), 1.0);
        add(v, "shared expert output and gate", c * h + 4.0);
      }
    }
    return v;
  };

  // The per-layer figure is the average over the model's layers (MoE models may mix kinds).
  std::vector<Sized> dense_acts = layer(dense_mods, false);
  if (model.is_moe()) {
    std::vector<Sized> moe_acts = layer(moe_or_dense, true);
    if (dense_layers > 0) {
      for (auto& s : moe_acts) s.bytes *= sparse_layers / L;
      for (auto& s : dense_acts) {
        s.bytes *= dense_layers / L;
        moe_acts.push_back({"dense layers: " + s.name, s.bytes});
      }
    }
    acts = moe_acts;
  } else {
    acts = dense_acts;
  }
  for (const auto& s : acts) st.layer_activation_per_token += s.bytes;

  // ---- outside the layers ----------------------------------------------------------------
  auto& out = st.outside_activations;
  norm(out, "final norm", h);
  if (full) add(out, setup.amp ? "lm_head input (autocast copy)" : "lm_head input", (setup.amp ? w.compute : w.norm_out) * h);
  // cos/sin of the rotary embedding, computed once and kept by every layer's RoPE.
  add(out, "rotary cos/sin", 2.0 * w.compute * as_d(model.head_dim));
  if (setup.attention == Attention::eager) add(out, "causal mask", w.compute * seq);
  for (const auto& s : out) st.outside_per_token += s.bytes;

  // Non-reentrant checkpointing keeps each layer's input (the residual stream).
  st.checkpoint_per_token = w.residual * h;
  // Gradients in flight inside one layer's backward: the MLP's intermediate gradients and a
  // few residual-width ones.
  st.layer_backward_transient_per_token = 3.0 * w.compute * as_d(model.is_moe() ? model.moe_intermediate_size * model.experts_per_token : model.intermediate_size) + 4.0 * w.residual * h;

  // The largest set of temporaries a layer's forward holds at once (freed, but their blocks stay
  // reserved): a LoRA branch's fp32 input copy, B's fp32 output and its scaled copy (4 in + 8 out
  // for the widest module); without LoRA, an RMSNorm's two fp32 temporaries; eager attention's raw
  // and masked scores.
  double widest = 8.0 * h;
  if (!full) {
    for (const auto& m : dense_mods)
      if (targets_module(setup.lora, m))
        widest = std::max(widest, adapter_bytes * (as_d(m.in_features) + 2.0 * as_d(m.out_features)));
  }
  if (setup.attention == Attention::eager) widest = std::max(widest, 2.0 * w.compute * nq * seq);
  st.layer_forward_transient_per_token = widest;

  // ---- logits and loss --------------------------------------------------------------------
  if (full) st.logits_compute_bytes = setup.amp ? w.compute : bytes_per_element(setup.weights);
  else if (quantised) st.logits_compute_bytes = setup.quant.kbit_prepare ? 4.0 : w.compute;
  else st.logits_compute_bytes = bytes_per_element(setup.weights);
  st.logits_upcast = st.logits_compute_bytes < 4.0;
  if (model.final_logit_softcapping > 0) st.softcap_bytes = st.logits_compute_bytes;

  // ---- library workspaces ----------------------------------------------------------------
  // PyTorch gives each (thread, stream) its own cuBLAS workspace: the forward runs on the
  // main thread and the backward on autograd's device thread, so two exist. Hopper and newer
  // get 32 MiB each, older cards 4096 KiB x 2 + 16 KiB x 8.
  // Measured on the H200: 65 MiB, the two cuBLAS workspaces and 1 MiB of cuBLASLt's.
  const double ws = gpu.compute_capability_major >= 9 ? 32.0 * 1048576.0 : (4096.0 * 2 + 16.0 * 8) * 1024.0;
  st.cublas_workspaces = 2.0 * ws + 1048576.0;
  return st;
}

}  // namespace trainfit::detail
