// The tensors of one training step, from the model's shape and the setup.
// docs/model.md explains each term; the comments here say which framework
// behaviour (PyTorch autograd, HF transformers, PEFT, bitsandbytes) makes it exist.
#include "step/step_shape.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/numeric.hpp"
#include "step/layout.hpp"
#include "trainfit/error.hpp"

namespace trainfit::detail {
namespace {

// bitsandbytes' double quantisation stores one fp32 constant per 256 of a weight's 8-bit block
// absmax values.
constexpr double kAbsmaxPerDoubleQuantConstant = 256;
// bitsandbytes' 8-bit optimizers keep one fp32 absmax per 2048-element block of each state.
constexpr double kEightBitStateBlock = 2048;
constexpr double kFp32Bytes = 4;

// Bytes of a 4-bit weight's constants (bitsandbytes): one absmax per block; with double
// quantisation the absmax are themselves 8-bit with one fp32 constant per 256 of them.
double quant_constants_per_element(const TrainingSetup& s) {
  if (s.weights == DType::int8) return 0;  // LLM.int8 row scales are counted per row below
  const double blocks = 1.0 / as_d(s.quant.block_size);
  return s.quant.double_quant ? blocks * (1.0 + kFp32Bytes / kAbsmaxPerDoubleQuantConstant) : blocks * kFp32Bytes;
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
    // prepare_model_for_kbit_training makes the embedding and norm weights fp32, so the residual
    // stream and the norms' outputs are fp32. bitsandbytes' Linear4bit multiplies in the compute
    // dtype but casts its output back to its input's dtype: every projection's output is fp32 too,
    // and so is everything computed from it (attention, which takes SDPA's math path in fp32, the
    // MLP). Measured on the H200 (data/bench/h200-setup-settings-2026-11-30.jsonl): Qwen2.5-1.5B,
    // 2 x 1024 tokens, 20,679 MiB prepared against 13,995 MiB unprepared.
    w.norm_out = s.quant.kbit_prepare ? 4 : w.compute;
    if (s.quant.kbit_prepare) w.residual = w.compute = 4;
  }
  return w;
}

// The parameters of the model the objective trains: a reward model (transformers'
// AutoModelForSequenceClassification) has a score head of hidden x 1, untied, in place of the
// output layer.
ParameterCounts objective_counts(const ModelSpec& m, const TrainingSetup& s) {
  ParameterCounts pc = count_parameters(m);
  // The text model of a multimodal config built alone has no tower.
  if (s.vision_tower == VisionTowerUse::dropped) {
    pc.total -= pc.vision;
    pc.vision = 0;
  }
  if (s.objective == Objective::reward) {
    pc.total = pc.total - pc.lm_head + m.hidden_size;
    pc.lm_head = m.hidden_size;
  }
  return pc;
}

// What every part of the step's description is computed from, derived once: the model's sizes,
// the setup's byte widths and the linear modules of its layers with the LoRA targets among them.
struct StepBasis {
  StepBasis(const ModelSpec& m, const TrainingSetup& s, const Layout& l)
      : model(m),
        setup(s),
        layout(l),
        h(as_d(m.hidden_size)),
        nq(as_d(m.num_heads)),
        q(nq * as_d(m.head_dim)),
        kv(as_d(m.num_kv_heads) * as_d(m.head_dim)),
        v(as_d(m.num_kv_heads) * as_d(m.value_head_dim())),
        attn_out(nq * as_d(m.value_head_dim())),
        V(as_d(m.vocab_size)),
        L(as_d(m.num_layers)),
        seq(as_d(s.seq)),
        full(s.method == Method::full),
        quantised(s.method == Method::qlora),
        w(widths_for(s)),
        r(as_d(s.lora.rank)),
        adapter_bytes(bytes_per_element(s.lora.adapter_dtype)),
        pc(objective_counts(m, s)),
        vision_adapter_params(pc.vision > 0 && s.method != Method::full ? r * tower_adapter_width(m, s) : 0.0),
        images(pc.vision > 0 && s.images > 0),
        tower_frozen(s.vision_tower == VisionTowerUse::frozen),
        tower_trained(images && ((full && !tower_frozen) || vision_adapter_params > 0)),
        tower_layers_trained(images && trains_tower_layers(m, s)),
        linears(layer_linears(m, s)),
        liger(s.kernels == Kernels::liger),
        liger_qk_norm(liger && model_family(m).liger_qk_norm),
        lora_branch_autocast(s.method != Method::full && s.trainer == Trainer::trl && !s.amp &&
                             adapter_bytes > w.compute && w.compute < 4.0),
        packed_mask(s.packing && s.attention == Attention::sdpa) {}

  const ModelSpec& model;
  const TrainingSetup& setup;  // what the GPUs compute (compute_setup)
  const Layout& layout;
  double h, nq, q, kv;             // hidden size, query heads, query and key widths
  double v, attn_out;              // value and attention output widths (narrower than q and k under latent attention)
  double V, L, seq;                // vocabulary, layers, sequence
  bool full, quantised;            // full fine-tuning; a 4-bit or 8-bit base (QLoRA)
  Widths w;
  double r;              // LoRA rank
  double adapter_bytes;  // bytes per element of a LoRA adapter (and of its branch's activations)
  ParameterCounts pc;
  // LoRA A and B on the vision tower's and projector's linear modules the targets reach (all-linear
  // reaches every one): created, but idle in a text-only step.
  double vision_adapter_params;
  // Images run through the tower; and it trains (its weights, or adapters on it): its parameters
  // get gradients and optimizer states. Autograd keeps its layers' tensors when they train (full
  // fine-tuning, or adapters on them): adapters on the projector alone need nothing below it.
  bool images, tower_frozen, tower_trained, tower_layers_trained;
  LayerLinears linears;
  bool liger;          // Liger's kernels patched in: the layers' norms, gated activation and RoPE
  bool liger_qk_norm;  // and the q/k norms too (Gemma 3's patch; Qwen3's leaves them)
  // TRL's bf16 autocast over a 16-bit base reaches the fp32 LoRA branch: from lora_A on it runs in
  // the compute dtype (docs/model.md, "Trainers").
  bool lora_branch_autocast;
  // Packing under SDPA: transformers masks the flattened micro-batch block-diagonally (one block an
  // example), so every attention layer runs the memory-efficient kernel over the whole of it.
  bool packed_mask;
};

// Sums over the linear modules of every decoder layer.
struct LinearTotals {
  double weight_elems = 0;    // matrix weights
  double bias_elems = 0;
  double rows = 0;            // output features (LLM.int8 keeps one scale per row)
  double adapter_params = 0;  // LoRA A and B of the targeted modules
  double untargeted_expert_adapter_params = 0;  // what adapters on the untargeted routed experts would add
  double largest = 0;         // elements of the largest single matrix (one expert's for experts)
  double factored_elems = 0;  // Adafactor's row + column vectors over the trainable matrices
  // Of the matrices, those of nn.Linear modules: what bitsandbytes quantises under QLoRA. It
  // replaces nn.Linear modules only, so transformers 5's fused 3-D experts (and a bare router
  // weight) stay in the compute dtype (bitsandbytes issue #1849: "silently skipped and stay full
  // precision").
  double linear_module_elems = 0, linear_module_rows = 0, largest_linear_module = 0;
};


// LoRA A and B of one module, every copy. PEFT's ParamWrapper gives a 3-D expert parameter A of
// (rank x E) x in and B of out x (rank x E), and the fused gate/up parameter twice the rank (its
// gate and up halves each keep the rank a pair of nn.Linear would have): 2r x E x (h + 2 I), which
// split over a listed gate/up pair is r x E x (h + 2 I) each. Counted to the parameter on the H200
// for Qwen3-MoE, Mixtral and DeepSeek-V2-Lite.
double adapter_params_of(const LinearModule& m, bool wrapped, double r) {
  const double in = as_d(m.in_features), out = as_d(m.out_features), copies = as_d(m.count);
  if (!wrapped || m.count == 1 || !is_mlp_input_side(m.role)) return r * (in + out) * copies;
  if (m.role == ModuleRole::expert_gate_up) return 2.0 * r * (in + out) * copies;
  return r * (in + 2.0 * out) * copies;
}

LinearTotals sum_linears(const StepBasis& b) {
  LinearTotals t;
  const double r = b.r;
  auto add_layer = [&](const std::vector<LayerLinear>& mods, double layers) {
    for (const auto& [m, lora_target, wrapped] : mods) {
      const double n = as_d(m.in_features) * as_d(m.out_features) * as_d(m.count);
      t.weight_elems += n * layers;
      t.bias_elems += (m.bias ? as_d(m.out_features) * as_d(m.count) : 0) * layers;
      t.rows += as_d(m.out_features) * as_d(m.count) * layers;
      t.largest = std::max(t.largest, as_d(m.in_features) * as_d(m.out_features));
      if (m.nn_linear) {
        t.linear_module_elems += n * layers;
        t.linear_module_rows += as_d(m.out_features) * as_d(m.count) * layers;
        t.largest_linear_module = std::max(t.largest_linear_module, as_d(m.in_features) * as_d(m.out_features));
      }
      if (b.full) t.factored_elems += (as_d(m.in_features) + as_d(m.out_features)) * as_d(m.count) * layers;
      if (lora_target) {
        t.adapter_params += adapter_params_of(m, wrapped, r) * layers;
        t.factored_elems += (as_d(m.in_features) + as_d(m.out_features) + 2.0 * r) * as_d(m.count) * layers;
      } else if (!b.full && m.count > 1) {
        t.untargeted_expert_adapter_params += adapter_params_of(m, true, r) * layers;
      }
    }
  };
  b.linears.for_each_kind(add_layer);
  return t;
}

// What the caching allocator's block rounding adds over every parameter-shaped tensor, stored at
// `matrix_bytes` a weight-matrix element and `other_bytes` for the rest. Every such tensor
// (weights, and in full fine-tuning their gradients and optimizer states) is one allocation; the
// allocator's rounding of each adds up over hundreds of them. FSDP2 stores each parameter's
// dim-0 shard as its own tensor, so the rounding is the shards'.
double parameter_rounding(const StepBasis& b, double matrix_bytes, double other_bytes, double shards) {
  double extra = 0;
  auto add_tensor = [&](double elems, double bytes, double copies) {
    const double stored = elems / shards * bytes;
    if (elems > 0) extra += (allocator_block(stored) - stored) * copies;
  };
  auto add_mods = [&](const std::vector<LayerLinear>& mods, double layers) {
    for (const auto& [m, lora_target, wrapped] : mods) {
      // A fused expert parameter is no nn.Linear: stored as the rest (QLoRA leaves it unquantised).
      add_tensor(as_d(m.in_features) * as_d(m.out_features) * as_d(m.count), m.nn_linear ? matrix_bytes : other_bytes,
                 layers);
      if (m.bias) add_tensor(as_d(m.out_features) * as_d(m.count), other_bytes, layers);
    }
  };
  b.linears.for_each_kind(add_mods);
  // A Gated DeltaNet layer's convolution weight, dt_bias, A_log and gated norm weight.
  const LinearAttention& la = b.model.linear_attention;
  if (la.layers > 0) {
    const double n = as_d(la.layers);
    add_tensor(as_d(la.conv_width() * la.conv_kernel), other_bytes, n);
    add_tensor(as_d(la.value_heads), other_bytes, 2.0 * n);
    add_tensor(as_d(la.value_head_dim), other_bytes, n);
  }
  // A Mamba-2 layer's convolution weight and bias, dt_bias, A_log, D and gated norm weight.
  if (const StateSpace& ss = b.model.state_space; ss.layers > 0) {
    const double n = as_d(ss.layers);
    add_tensor(as_d(ss.conv_width() * ss.conv_kernel), other_bytes, n);
    if (ss.conv_bias) add_tensor(as_d(ss.conv_width()), other_bytes, n);
    add_tensor(as_d(ss.heads), other_bytes, 3.0 * n);
    if (ss.gated_norm) add_tensor(as_d(ss.inner_width()), other_bytes, n);
  }
  add_tensor(as_d(b.pc.embedding), other_bytes, 1.0);
  add_tensor(as_d(b.pc.lm_head), other_bytes, 1.0);
  // A LayerNorm stores a bias beside its weight.
  const double tensors_per_norm = b.model.layer_norm ? 2.0 : 1.0;
  add_tensor(b.h, other_bytes, (b.L * as_d(b.model.norms_per_layer) + 1.0) * tensors_per_norm);
  return extra;
}

// The parameters as stored: the base weights (quantised or not) with their constants and the
// allocator's rounding, the adapters, what trains, and FSDP's shards and gathered units.
ParameterStorage parameter_storage(const StepBasis& b, const LinearTotals& lin) {
  const TrainingSetup& setup = b.setup;
  ParameterStorage p;
  const double weight_bytes = bytes_per_element(setup.weights);
  const double other_elems = as_d(b.pc.total) - lin.weight_elems;  // embeddings, lm_head, norms, biases
  const double lm_head_elems = as_d(b.pc.lm_head);
  const double embed_elems = as_d(b.pc.embedding);
  // Sharded layouts store 1/shards of each parameter (and its gradient and states) as its own tensor.
  const Layout& layout = b.layout;
  const double shards = layout.gathers_units ? layout.param_shards : 1.0;

  if (b.quantised) {
    // bitsandbytes quantises every decoder nn.Linear weight; transformers keeps the output
    // layer, the embedding, the norms, the biases and the fused experts (no nn.Linear) in the load
    // dtype, which prepare_model_for_kbit_training casts to fp32 (every 16-bit parameter it finds).
    const double keep_bytes = unquantised_parameter_bytes(setup);
    const double unquantised = lin.weight_elems - lin.linear_module_elems;
    p.weights = lin.linear_module_elems * bytes_per_element(setup.weights) + (other_elems + unquantised) * keep_bytes;
    // LLM.int8 keeps one fp32 scale per output row.
    p.quant_constants = lin.linear_module_elems * quant_constants_per_element(setup) +
                        (setup.weights == DType::int8 ? lin.linear_module_rows * kFp32Bytes : 0.0);
    p.weights_rounding = parameter_rounding(b, bytes_per_element(setup.weights), keep_bytes, shards);
  } else {
    p.weights = as_d(b.pc.total) * weight_bytes;
    p.weights_rounding = parameter_rounding(b, weight_bytes, weight_bytes, shards);
  }

  if (b.full) {
    // The vision tower's parameters require a gradient but get none in a text-only step: no
    // gradient, no optimizer state (AdamW skips a parameter whose grad is None).
    p.trainable_params = as_d(b.pc.total - b.pc.vision);
    // A frozen tower's parameters require no gradient: not trainable at all.
    p.idle_trainable_params = b.tower_frozen ? 0.0 : as_d(b.pc.vision);
    if (b.tower_trained) {
      p.trainable_params = as_d(b.pc.total);
      p.idle_trainable_params = 0;
    }
    p.trainable_bytes_each = weight_bytes;
    p.largest_trainable = std::max({lin.largest, embed_elems, lm_head_elems});
    p.trainable_rounding = parameter_rounding(b, weight_bytes, weight_bytes, shards);
    if (setup.amp) {
      // Autocast caches one low-precision copy of each fp32 weight a matmul uses, until the
      // forward leaves the autocast region; autograd keeps each copy until that matmul's backward.
      p.autocast_copies =
          (lin.weight_elems + (lm_head_elems > 0 ? lm_head_elems : embed_elems)) * bytes_per_element(*setup.amp);
    }
  } else {
    p.adapters = (lin.adapter_params + b.vision_adapter_params) * b.adapter_bytes;
    p.trainable_params = lin.adapter_params + (b.tower_trained ? b.vision_adapter_params : 0.0);
    p.idle_trainable_params = b.tower_trained ? 0.0 : b.vision_adapter_params;
    p.untargeted_expert_adapter_params = lin.untargeted_expert_adapter_params;
    p.trainable_bytes_each = b.adapter_bytes;
    p.largest_trainable = b.r * std::max(b.h, as_d(b.model.intermediate_size));
  }

  // FSDP's units: the root (what no decoder layer holds) stays gathered from the forward to the
  // end of the backward; a layer is gathered into one flat buffer, then copied into its tensors.
  const double root_bytes = b.quantised ? bytes_per_element(setup.quant.compute_dtype) : weight_bytes;
  p.root_weights = allocator_block(embed_elems * root_bytes) + allocator_block(lm_head_elems * root_bytes) +
                   allocator_block(b.h * root_bytes);
  // The vision tower is no decoder layer's (FSDP wraps its own layers as units of their own).
  const double vision_bytes = as_d(b.pc.vision) * (b.quantised ? unquantised_parameter_bytes(setup) : weight_bytes) +
                              b.vision_adapter_params * b.adapter_bytes;
  p.layer_weights = (p.weights - (embed_elems + lm_head_elems + b.h) * root_bytes + p.adapters - vision_bytes) / b.L;
  p.shards = shards;
  return p;
}

struct OptimizerMemory {
  double states = 0;     // alive through the whole step
  double transient = 0;  // alive inside the optimizer step only
};

OptimizerMemory optimizer_memory(const StepBasis& b, const LinearTotals& lin, const ParameterStorage& p) {
  OptimizerMemory o;
  const double tp = p.trainable_params;
  switch (b.setup.optimizer) {
    case Optimizer::adamw:
      // exp_avg and exp_avg_sq in the parameter's dtype; fused AdamW needs no temporaries.
      o.states = 2.0 * tp * p.trainable_bytes_each;
      break;
    case Optimizer::adamw_foreach:
      // The same states. torch/optim/adam.py's _multi_tensor_adam (no fused=True, not capturable)
      // steps every parameter of a device and dtype at once: exp_avg_sq_sqrt =
      // torch._foreach_sqrt(exp_avg_sqs) is a new tensor per state, all alive until the update
      // (addcdiv_) has used them: one more copy of the second moments, rounded as they are.
      o.states = 2.0 * tp * p.trainable_bytes_each;
      o.transient = tp * p.trainable_bytes_each + p.trainable_rounding;
      break;
    case Optimizer::adamw_8bit:
      // bitsandbytes: two uint8 states with one fp32 absmax per 2048-element block.
      o.states = 2.0 * tp * (1.0 + kFp32Bytes / kEightBitStateBlock);
      break;
    case Optimizer::sgd:
      o.states = 0;
      break;
    case Optimizer::sgd_momentum:
      o.states = tp * p.trainable_bytes_each;
      break;
    case Optimizer::adafactor: {
      // Factored second moment: one row and one column vector per matrix (grad dtype).
      // Vectors (norms, biases) keep a full second moment.
      double factored = lin.factored_elems;
      // The embedding's row and column vectors, and the output layer's when it is its own
      // (a reward model's score head: 1 x hidden).
      const double head_rows = b.setup.objective == Objective::reward ? 1.0 : b.V;
      if (b.full)
        factored += (b.V + b.h) + (b.pc.lm_head > 0 ? head_rows + b.h : 0.0) + as_d(b.pc.norms) + lin.bias_elems;
      o.states = factored * p.trainable_bytes_each;
      // transformers' Adafactor works in fp32 on one parameter at a time: fp32 copies of the
      // parameter, its gradient, the update and its square for the largest tensor (measured:
      // four fp32 copies of the embedding on Qwen2.5-0.5B).
      o.transient = 4.0 * 4.0 * p.largest_trainable;
      break;
    }
  }
  return o;
}

// Keeps a tensor of `bytes` (per token), when there is one.
void keep(std::vector<Sized>& v, Sized s) {
  if (s.bytes > 0) v.push_back(std::move(s));
}
void keep(std::vector<Sized>& v, const char* what, double bytes) { keep(v, Sized{{}, what, bytes}); }

// An RMSNorm upcasts its input to fp32 and keeps it for pow()'s backward; with a trainable
// weight it also keeps the normalised input for the weight's gradient. nn.LayerNorm (PhiMoE) keeps
// its input as it comes (the residual stream) and an fp32 mean and reciprocal deviation a row, from
// which its backward recomputes the normalised input for the weight's gradient.
//
// Liger's RMSNorm (liger_kernel/ops/rms_norm.py at Liger-Kernel ead96b61) is one autograd Function
// that keeps its input as it came and one fp32 reciprocal deviation a row; its backward recomputes
// the normalised input for the weight's gradient. `liger` says Liger patched this norm.
void keep_norm(std::vector<Sized>& v, const StepBasis& b, const std::string& name, double width, bool liger) {
  if (liger) {
    keep(v, Sized{name, "input (Liger RMSNorm)", b.w.residual * width});
    keep(v, Sized{name, "reciprocal deviation (fp32)", kFp32Bytes});
    return;
  }
  if (b.model.layer_norm) {
    keep(v, Sized{name, "input", b.w.residual * width});
    keep(v, Sized{name, "mean and rstd (fp32)", 2.0 * kFp32Bytes});
    return;
  }
  // The fp32 copy is saved by pow (for the variance) and by the product with the reciprocal
  // deviation: two saves of one tensor.
  keep(v, Sized{name, "fp32 input", 4.0 * width, "", false, true});
  if (b.full) keep(v, Sized{name, "normalised input", (b.model.norm_scale_in_fp32 ? kFp32Bytes : b.w.residual) * width});
}

// The first module of `mods` PEFT would match by `name`.
const LayerLinear* find_module(const std::vector<LayerLinear>& mods, ModuleRole role) {
  for (const auto& m : mods)
    if (m.module.role == role) return &m;
  return nullptr;
}

// A layer with no token mixer: Nemotron-H's MLP-only blocks.
bool is_mlp_only(const std::vector<LayerLinear>& mods) {
  return std::none_of(mods.begin(), mods.end(), [](const LayerLinear& l) { return is_attention(l.module.role); });
}

// The name of a saved tensor that several modules read, as `prefix` + `what` ("expert mlp input").
struct SharedInput {
  const char* prefix = "";
  const char* what = "";
  bool operator==(const SharedInput& o) const {
    return std::string_view(prefix) == o.prefix && std::string_view(what) == o.what;
  }
};

// What autograd keeps, bytes per token, for one decoder layer of one kind, in the order the
// forward makes it.
class LayerActivations {
 public:
  explicit LayerActivations(const StepBasis& b) : b_(b) { kept_.reserve(64); }

  std::vector<Sized> of_layer(const std::vector<LayerLinear>& mods, bool moe) && {
    const ModelSpec& model = b_.model;
    // OLMo 2 normalises what attention and the MLP return, so both read the residual stream itself.
    sublayer_input_bytes_ = model.post_norms ? b_.w.residual : b_.w.norm_out;
    if (!model.post_norms) keep_norm(kept_, b_, "input norm", b_.h, b_.liger);
    // Nemotron-H's layers are one sublayer each: a token mixer, or an MLP alone.
    const bool mlp_only = model.mlp_only_layers > 0 && is_mlp_only(mods);
    if (!mlp_only) {
      mix_tokens(mods);
      if (model.mixer_only_layers) return std::move(kept_);
    }
    if (model.post_norms) {
      keep_norm(kept_, b_, "post-attention norm", b_.h, b_.liger);
    } else {
      for (std::int64_t i = 1; i < model.norms_per_layer; ++i)
        keep_norm(kept_, b_, i == 1 ? "post-attention norm" : "extra norm " + std::to_string(i), b_.h, b_.liger);
    }
    if (moe) {
      moe_mlp(mods);
    } else {
      std::array<const LayerLinear*, 3> gu{};
      std::size_t n = 0;
      for (const ModuleRole role : {ModuleRole::mlp_gate, ModuleRole::mlp_up, ModuleRole::mlp_gate_up})
        if (const auto* m = find_module(mods, role)) gu[n++] = m;
      mlp("", std::span(gu.data(), n), find_module(mods, ModuleRole::mlp_down), as_d(model.intermediate_size), 1.0,
          1.0);
    }
    if (model.post_norms) keep_norm(kept_, b_, "post-feedforward norm", b_.h, b_.liger);
    return std::move(kept_);
  }

 private:
  // What one linear module keeps: its input for the weight gradient when the base trains
  // (under autocast each call casts the fp32 input to a copy of its own), and the LoRA
  // branch's fp32 copy of the input, dropout mask and A output. Modules reading the same input
  // (q/k/v, gate/up) share one saved tensor, named `input`. `rows` is the fraction of the layer's
  // tokens one copy of the module sees (k/E for a routed expert); its `count` copies together see
  // rows x count of them (k for the experts: each token's k routed copies).
  void linear(const LayerLinear& l, SharedInput input, double input_bytes, double rows) {
    const LinearModule& m = l.module;
    const double in = as_d(m.in_features) * rows * as_d(m.count);
    if (l.param_wrapped) {
      // The merged weight requires a gradient, so the grouped matmul keeps its input (measured on
      // the H200: the gathered rows and the down input, as under full fine-tuning).
      keep_shared_input(input, input_bytes * in);
      return;
    }
    if (b_.full) {
      const bool cast_copy = b_.setup.amp && input_bytes != b_.w.compute;
      if (cast_copy) {
        keep(kept_, Sized{m.name, "input (autocast copy)", b_.w.compute * in});
      } else {
        keep_shared_input(input, input_bytes * in);
      }
    } else if (l.lora_target) {
      // TRL's trainers autocast (their configs set bf16) over a 16-bit base too: lora_A's matmul
      // then casts the branch's fp32 input to the compute dtype and keeps that copy, and lora_B
      // keeps A's output in it (measured: Llama-3.2-3B LoRA without checkpointing in SFTTrainer
      // keeps 2 bytes an input element less in every module than the fp32 branch would).
      const double branch = b_.lora_branch_autocast ? b_.w.compute : b_.adapter_bytes;
      if (b_.setup.lora.dropout > 0) {
        keep(kept_,
             Sized{m.name, b_.lora_branch_autocast ? "lora dropout output (autocast copy)" : "lora dropout output",
                   branch * in, "", true});
        keep(kept_, Sized{m.name, "lora dropout mask", 1.0 * in, "", true});
      } else if (branch != input_bytes) {
        keep(kept_, Sized{m.name, "lora input cast", branch * in, "", true});
      } else {
        keep_shared_input(input, input_bytes * in);
      }
      keep(kept_, Sized{m.name, "lora A output", branch * b_.r * as_d(m.count) * rows, "", true});
    }
  }

  void keep_shared_input(SharedInput input, double bytes) {
    if (std::find(shared_inputs_kept_.begin(), shared_inputs_kept_.end(), input) != shared_inputs_kept_.end()) {
      // A second module saves the same tensor (k and v after q, up after gate).
      for (Sized& s : kept_)
        if (s.owner.empty() && std::string_view(s.what) == input.what && std::string_view(s.prefix) == input.prefix)
          s.saved_twice = true;
      return;
    }
    shared_inputs_kept_.push_back(input);
    keep(kept_, Sized{{}, input.what, bytes, input.prefix});
  }

  void attention(const std::vector<LayerLinear>& mods) {
    const double c = b_.w.compute;
    const double q = b_.q, kv = b_.kv;
    // attention projections
    for (const ModuleRole role : {ModuleRole::attention_query, ModuleRole::attention_key, ModuleRole::attention_value,
                                  ModuleRole::attention_qkv})
      if (const auto* m = find_module(mods, role)) linear(*m, {"", "attention input"}, sublayer_input_bytes_, 1.0);
    if (b_.model.qk_norm && b_.liger_qk_norm) {
      // Liger's RMSNorm over each head: the projections' outputs and a reciprocal deviation a head.
      keep(kept_, "q/k norm inputs (Liger RMSNorm)", c * (q + kv));
      keep(kept_, "q/k norm reciprocal deviations (fp32)", kFp32Bytes * (q + kv) / as_d(b_.model.head_dim));
    } else if (b_.model.qk_norm) {
      keep(kept_, "q/k norm fp32 inputs", 4.0 * (q + kv));
      if (b_.full) keep(kept_, "q/k norm normalised inputs", (b_.model.norm_scale_in_fp32 ? kFp32Bytes : c) * (q + kv));
    } else if (b_.model.qk_l2_norm_layers > 0) {
      // Llama4TextL2Norm: x.float() times its reciprocal root mean square keeps the fp32 copy (no
      // weight, so nothing else); averaged over the layers, the RoPE ones have it.
      keep(kept_, "q/k L2 norm fp32 inputs", 4.0 * (q + kv) * as_d(b_.model.qk_l2_norm_layers) / b_.L);
    }
    keep(kept_, "query after RoPE", c * q);
    keep(kept_, "key after RoPE", c * kv);
    keep(kept_, "value", c * b_.v);
    scores_and_output(mods);
  }

  // Multi-head latent attention, as DeepseekV2Attention and DeepseekV3Attention run it: the query
  // through q_a_proj, its RMSNorm and q_b_proj (or one q_proj); kv_a_proj_with_mqa's output split into
  // the compressed keys and values, which an RMSNorm and kv_b_proj expand to every head, and one
  // rotary key all heads share. Training keeps the expanded keys and values: the compression saves
  // cache memory when generating, not activations when training.
  void latent_attention(const std::vector<LayerLinear>& mods) {
    const ModelSpec& model = b_.model;
    const double c = b_.w.compute;
    if (const auto* q_a = find_module(mods, ModuleRole::latent_query_down)) {
      linear(*q_a, {"", "attention input"}, sublayer_input_bytes_, 1.0);
      keep_norm(kept_, b_, "q_a norm", as_d(model.q_lora_rank), false);
      if (const auto* q_b = find_module(mods, ModuleRole::latent_query_up)) linear(*q_b, {"", "q_a norm output"}, b_.w.norm_out, 1.0);
    } else if (const auto* q_proj = find_module(mods, ModuleRole::attention_query)) {
      linear(*q_proj, {"", "attention input"}, sublayer_input_bytes_, 1.0);
    }
    if (const auto* kv_a = find_module(mods, ModuleRole::latent_kv_down))
      linear(*kv_a, {"", "attention input"}, sublayer_input_bytes_, 1.0);
    keep_norm(kept_, b_, "kv_a norm", as_d(model.kv_lora_rank), false);
    const LayerLinear* kv_b = find_module(mods, ModuleRole::latent_kv_up);
    if (kv_b) linear(*kv_b, {"", "kv_a norm output"}, b_.w.norm_out, 1.0);
    // The query and the key are new tensors (torch.cat of their position-free and rotary parts); the
    // value is a slice of kv_b_proj's output, and keeping it keeps that whole output.
    keep(kept_, "query (position-free and rotary parts joined)", c * b_.q);
    keep(kept_, "key (position-free part and the shared rotary key joined)", c * b_.kv);
    keep(kept_, "kv_b_proj output (the value is a slice of it)",
         c * (kv_b ? as_d(kv_b->module.out_features) : b_.kv + b_.v));
    scores_and_output(mods);
  }

  // What the attention kernel keeps beside its query, key and value, and o_proj's input.
  void scores_and_output(const std::vector<LayerLinear>& mods) {
    const double c = b_.w.compute;
    const double nq = b_.nq, seq = b_.seq;
    // Grouped-query attention repeats the key/value heads to the query heads (repeat_kv) where the
    // kernel cannot take them as they are; with as many key/value heads as query heads it returns them.
    const bool grouped = b_.model.num_kv_heads < b_.model.num_heads;
    // PyTorch's fused SDPA kernels take half precision only; fp32 with grouped-query attention
    // falls back to the math path (measured on the H200), which keeps the scores like eager does.
    const bool math_sdpa = b_.setup.attention != Attention::eager && c >= 4.0 && grouped;
    const LayerLinear* o_proj = find_module(mods, ModuleRole::attention_output);
    if (math_sdpa) {
      keep(kept_, "key repeated to query heads", c * b_.q);
      keep(kept_, "value repeated to query heads", c * b_.attn_out);
      keep(kept_, "attention probabilities (fp32 softmax output)", 4.0 * nq * seq);
      output_projection(o_proj, {"", "attention output (contiguous copy)"});
    } else if (b_.setup.attention == Attention::eager) {
      // Eager attention repeats the key/value heads to the query heads before its matmuls,
      // keeps softmax's fp32 output and the cast copy the value matmul saves: seq x seq per head.
      if (grouped) {
        keep(kept_, "key repeated to query heads", c * b_.q);
        keep(kept_, "value repeated to query heads", c * b_.attn_out);
      }
      if (b_.model.attention_sinks) {
        // gpt-oss's eager attention joins each head's sink logit to the scores as one more column,
        // subtracts the row maxima (max keeps their indices) and takes the softmax in the compute
        // dtype, which keeps its output; the value matmul reads the probabilities without the sink
        // column as a strided view of that output (bmm takes the row stride as it is), and keeps
        // the view, no copy (measured on the H200: 4 layers of gpt-oss-20b without checkpointing
        // kept one score-sized tensor a layer less than a contiguous copy would).
        keep(kept_, "attention probabilities with the sink column (softmax output)", c * nq * (seq + 1.0));
        keep(kept_, "row maxima indices (int64)", 8.0 * nq);
      } else {
        keep(kept_, "attention probabilities (fp32 softmax output)", 4.0 * nq * seq);
        keep(kept_, "attention probabilities (cast copy)", c * nq * seq);
      }
      // Its output is transposed into a new contiguous tensor, o_proj's input.
      output_projection(o_proj, {"", "attention output (contiguous copy)"});
    } else {
      // The fused kernels (cuDNN/flash on Hopper) write their output already in the layout
      // o_proj reads, so the output they keep is also o_proj's input.
      keep(kept_, "attention log-sum-exp", 4.0 * nq);
      keep(kept_, "attention output", c * b_.attn_out);
      // A sliding-window layer passes SDPA a boolean mask; SDPA turns it into an additive bias in the
      // compute dtype (batch x 1 x seq x seq, seq per token) for the memory-efficient kernel, which
      // keeps it for the backward. Measured on the H200: Gemma 3 1B keeps 22 x 2 x seq^2 bytes more
      // than with every layer causal (data/bench/h200-sliding-window-*.json). Averaged over the layers.
      const ModelSpec& m = b_.model;
      // Packed (TRL's flattened micro-batch): every layer is masked, and its bias, a square of the
      // micro-batch's tokens, is StepShape::packed_mask_per_layer (per token squared).
      if (b_.packed_mask || m.sliding_mask_at(static_cast<std::int64_t>(seq))) {
        const double masked_share =
            b_.packed_mask ? 1.0 : static_cast<double>(m.sliding_layers) / static_cast<double>(m.num_layers);
        if (!b_.packed_mask) keep(kept_, "sliding-window mask (additive bias)", c * seq * masked_share);
        // transformers hands SDPA grouped key/value heads (enable_gqa) only when no mask is passed;
        // with the sliding layers' mask it repeats them to the query heads first (repeat_kv), and
        // the kernel keeps the repeated copies in place of the originals. One key/value head
        // repeats as a view, which costs nothing. Measured on the H200: Gemma 3 4B keeps 2 x 2 x
        // (q - kv) bytes a token more in each sliding layer, and Gemma 2 2B at 8k tokens the 416
        // MiB docs/model.md had left unexplained.
        if (grouped && m.num_kv_heads > 1)
          keep(kept_, "key and value repeated to query heads (masked SDPA)",
               c * ((b_.q - b_.kv) + (b_.attn_out - b_.v)) * masked_share);
      }
      shared_inputs_kept_.push_back({"", "attention output"});
      output_projection(o_proj, {"", "attention output"});
    }
  }

  // o_proj reads the attention output; under Qwen3-Next's output gate it reads the product of that
  // output and sigmoid(gate) instead, and the product keeps both factors for its backward.
  void output_projection(const LayerLinear* o_proj, SharedInput attention_output) {
    const double c = b_.w.compute;
    if (b_.model.attention_output_gate) {
      keep_shared_input(attention_output, c * b_.attn_out);
      keep(kept_, "output gate (sigmoid output)", c * b_.attn_out);
      attention_output = {"", "gated attention output"};
    }
    if (o_proj) linear(*o_proj, attention_output, c, 1.0);
  }

  // A Gated DeltaNet layer's token mixer (Qwen3NextGatedDeltaNet in transformers 5.17) with
  // flash-linear-attention's chunk_gated_delta_rule and PyTorch's depthwise convolution, as it runs
  // when flash-linear-attention is installed and causal-conv1d is not (docs/model.md, "Linear
  // attention"). In order: in_proj_qkvz and in_proj_ba read the normalised input; q, k and v are
  // joined (torch.cat) for the convolution, which keeps its input, and SiLU keeps the convolution's
  // output (padded by kernel - 1 positions, the slice a view of it); the decay g is computed in fp32
  // (softplus keeps its input, and its output for A_log's gradient when A_log trains), the write
  // strength is a sigmoid (which keeps its output). The kernel (one autograd Function) keeps the
  // l2-normalised q and k, repeated to the value heads, with an fp32 reciprocal norm a row, its
  // contiguous copy of v, the decay's fp32 chunk-local sums, beta and A, the chunk x chunk WY matrix
  // of every value head; its backward recomputes the states. The gated RMSNorm over each value head
  // runs eagerly in fp32: its fp32 input and reciprocal deviation, the weighted output (and the
  // normalised input when the weight trains), the gate z's fp32 copy and its SiLU, whose product,
  // cast back, is out_proj's input.
  void gated_delta_net(const std::vector<LayerLinear>& mods) {
    const double c = b_.w.compute;
    const LinearAttention& la = b_.model.linear_attention;
    const double conv = as_d(la.conv_width()), vd = as_d(la.value_width()), hv = as_d(la.value_heads);
    const double repeated_qk = hv * as_d(la.key_head_dim);  // q or k after repeat_interleave
    for (const ModuleRole role : {ModuleRole::linear_attention_qkvz, ModuleRole::linear_attention_ba})
      if (const auto* m = find_module(mods, role)) linear(*m, {"", "attention input"}, sublayer_input_bytes_, 1.0);
    keep(kept_, "q, k and v joined (convolution input)", c * conv);
    keep(kept_, "convolution output (SiLU input)", c * conv * (b_.seq + as_d(la.conv_kernel) - 1.0) / b_.seq);
    keep(kept_, "decay softplus input (fp32)", kFp32Bytes * hv);
    if (b_.full) keep(kept_, "decay softplus output (fp32, for A_log)", kFp32Bytes * hv);
    keep(kept_, "write strength (sigmoid output)", c * hv);
    keep(kept_, "q and k l2-normalised, repeated to the value heads", 2.0 * c * repeated_qk);
    keep(kept_, "q and k reciprocal norms (fp32)", 2.0 * kFp32Bytes * hv);
    keep(kept_, "v (contiguous copy)", c * vd);
    keep(kept_, "decay chunk sums (fp32)", kFp32Bytes * hv);
    keep(kept_, "WY matrix A (a chunk's width a value head)", c * hv * kGatedDeltaChunk);
    keep(kept_, "gated norm fp32 input", kFp32Bytes * vd);
    keep(kept_, "gated norm reciprocal deviation (fp32)", kFp32Bytes * hv);
    if (b_.full) keep(kept_, "gated norm normalised input", c * vd);
    keep(kept_, "gated norm weighted output", c * vd);
    keep(kept_, "output gate z (fp32 copy, SiLU input)", kFp32Bytes * vd);
    keep(kept_, "output gate SiLU output (fp32)", kFp32Bytes * vd);
    if (const auto* out = find_module(mods, ModuleRole::linear_attention_output))
      linear(*out, {"", "gated norm output"}, c, 1.0);
  }

  // A Mamba-2 layer's token mixer as transformers 5.17 runs it without the hub's kernels
  // (GraniteMoeHybridMambaLayer.forward: its fused-kernel call returns None, then causal_conv1d_fn
  // and mamba2_chunk_scan in PyTorch; docs/model.md, "Mamba-2 layers"). In order: in_proj reads the
  // normalised input; the convolution reads x, B and C as a transposed view of in_proj's output,
  // so it keeps all of that output; SiLU keeps the convolution's output (padded by kernel - 1
  // positions). dt + dt_bias goes through softplus (keeps its input) and clamp (keeps the softplus
  // output). The scan casts x, B and C to fp32, repeats B and C to the heads, multiplies x by an
  // fp32 copy of dt (keeping both), pads each to whole chunks (new tensors), and forms, per chunk,
  // the segment decays L = exp(segsum(A dt)) and G = C B^T (chunk x chunk a head), M = G L,
  // Y_diag = M x; B decayed to the chunk's end and the chunk states B^T x, their running sums
  // across chunks, and C times those states decayed from the chunk's start: each product keeps both
  // factors. The gated RMSNorm runs in fp32 on the scan's output and SiLU(z), whose product, cast
  // back, is out_proj's input (Falcon-H1 without mamba_rms_norm: the scan's output times SiLU(z)
  // alone). D, dt_bias and A_log keep their other factors only when they train.
  void state_space_scan(const std::vector<LayerLinear>& mods) {
    const double c = b_.w.compute, f = kFp32Bytes;
    const StateSpace& ss = b_.model.state_space;
    const double I = as_d(ss.inner_width()), H = as_d(ss.heads), n = as_d(ss.state_size);
    const double seq = b_.seq, chunk = as_d(ss.chunk_size);
    const double chunks = std::ceil(seq / chunk);
    const double p = state_space_padding(ss, seq);  // positions padded to whole chunks, per position
    // Falcon-H1's in_proj reads its own scaled copy of the input (x ssm_in_multiplier), beside
    // attention's (x attention_in_multiplier).
    const SharedInput input = ss.parallel_attention ? SharedInput{"", "mamba input (scaled copy)"}
                                                    : SharedInput{"", "attention input"};
    if (const auto* in = find_module(mods, ModuleRole::state_space_input))
      linear(*in, input, sublayer_input_bytes_, 1.0);
    keep(kept_, "in_proj output (z, x, B, C, dt; the convolution reads a view)", c * as_d(ss.input_width()));
    keep(kept_, "convolution output (SiLU input)", c * as_d(ss.conv_width()) * (seq + as_d(ss.conv_kernel) - 1.0) / seq);
    keep(kept_, "dt plus dt_bias (softplus input)", c * H);
    keep(kept_, "softplus output (clamp input)", c * H);
    keep(kept_, "dt (fp32 copy)", f * H);
    keep(kept_, "x (fp32 copy)", f * I);
    if (b_.full) {
      keep(kept_, "x padded (fp32, for D's gradient)", f * I * p);
      keep(kept_, "dt (fp32 copy, for A_log's gradient)", f * H);
    }
    keep(kept_, "x times dt, chunked (fp32)", f * I * p);
    keep(kept_, "B and C repeated to the heads, chunked (fp32)", 2.0 * f * H * n * p);
    keep(kept_, "segment decays L (fp32, a chunk's width a head)", f * H * chunk * p);
    keep(kept_, "C B^T within chunks, G (fp32)", f * H * chunk * p);
    keep(kept_, "G times L, M (fp32)", f * H * chunk * p);
    keep(kept_, "decays to the chunk's end and from its start (fp32)", 2.0 * f * H * p);
    keep(kept_, "B decayed (fp32)", f * H * n * p);
    keep(kept_, "chunk states and their running sums (fp32)", 2.0 * f * I * n * (chunks + 1.0) / seq);
    keep(kept_, "decays between chunks (fp32)", f * H * (chunks + 1.0) * (chunks + 1.0) / seq);
    keep(kept_, "C times states, summed (fp32)", f * I * p);
    if (ss.gated_norm) {
      keep(kept_, "gated norm input (fp32 scan output)", f * I * p);
      keep(kept_, "gate z (fp32 copy, SiLU input)", f * I);
      keep(kept_, "gate SiLU output (fp32)", f * I);
      keep(kept_, "gated product (fp32)", f * I);
      keep(kept_, "gated norm reciprocal deviation (fp32)", f);
      if (b_.full) keep(kept_, "gated norm normalised (fp32)", f * I);
    } else {
      // Falcon-H1 without mamba_rms_norm: y x silu(z), z a view of in_proj's kept output; the
      // product keeps the scan's fp32 output and the SiLU's (compute dtype) output.
      keep(kept_, "scan output (fp32)", f * I * p);
      keep(kept_, "gate SiLU output", c * I);
    }
    if (const auto* out = find_module(mods, ModuleRole::state_space_output))
      linear(*out, {"", "gated norm output"}, c, 1.0);
  }

  // The layer's token mixer: latent, linear or ordinary attention, a Mamba-2 scan, or (Falcon-H1)
  // attention and the scan side by side.
  void mix_tokens(const std::vector<LayerLinear>& mods) {
    const ModelSpec& model = b_.model;
    if (model.is_mla()) {
      latent_attention(mods);
    } else if (find_module(mods, ModuleRole::linear_attention_qkvz) != nullptr) {
      gated_delta_net(mods);
    } else if (find_module(mods, ModuleRole::state_space_input) != nullptr) {
      if (model.state_space.parallel_attention) attention(mods);
      state_space_scan(mods);
    } else {
      attention(mods);
    }
  }

  // A gated MLP: gate and up read the normalised input, the activation keeps its input, the
  // product keeps both factors, down reads the product. `inter` is one copy's intermediate width,
  // `rows` the fraction of the layer's tokens one copy sees and `copies` how many copies there are
  // (1 and 1 for a dense MLP; k/E and E for routed experts, whose intermediates are every token's
  // k routed rows: measured on the H200, Qwen3-MoE keeps 3 x 2 x k x I_e bytes a token here);
  // `prefix` names the MLP ("expert ").
  void mlp(const char* prefix, std::span<const LayerLinear* const> gate_up, const LayerLinear* down, double inter,
           double rows, double copies) {
    const double c = b_.w.compute;
    const double width = inter * rows * copies;
    for (const auto* m : gate_up) linear(*m, {prefix, "mlp input"}, sublayer_input_bytes_, rows);
    if (b_.model.clamped_glu && std::string_view(prefix) == "expert ") {
      // gpt-oss's activation: the clamps keep their inputs, strided slices of the fused gate_up
      // output, so all of it; sigmoid keeps its output; gate x sigmoid keeps the clamped gate;
      // the product keeps up + 1 and that gated value.
      keep(kept_, Sized{{}, "gate_up output (the clamps' inputs)", 2.0 * c * width, prefix});
      keep(kept_, Sized{{}, "clamped gate", c * width, prefix});
      keep(kept_, Sized{{}, "sigmoid output", c * width, prefix});
      keep(kept_, Sized{{}, "clamped up plus one", c * width, prefix});
      keep(kept_, Sized{{}, "gated value", c * width, prefix});
      if (down) linear(*down, {prefix, "activation x up (down input)"}, c, rows);
      return;
    }
    if (!b_.model.gated_mlp && std::string_view(prefix).empty()) {
      // Nemotron-H's relu2 between up and down: ReLU keeps its output for its backward, and the
      // square keeps its input, the same tensor; down keeps the square's output.
      keep(kept_, Sized{{}, "ReLU output (the square's input)", c * width, prefix});
      if (down) linear(*down, {prefix, "squared ReLU (down input)"}, c, rows);
      return;
    }
    keep(kept_, Sized{{}, "gate output (activation input)", c * width, prefix});
    // Liger's SiLU/GELU-and-multiply kernel keeps its two inputs and recomputes the activation in
    // its backward (liger_kernel/ops/swiglu.py, geglu.py).
    if (!b_.liger) keep(kept_, Sized{{}, "activation output", c * width, prefix});
    keep(kept_, Sized{{}, "up output", c * width, prefix});
    if (down) linear(*down, {prefix, "activation x up (down input)"}, c, rows);
  }

  void moe_mlp(const std::vector<LayerLinear>& mods) {
    const ModelSpec& model = b_.model;
    const double c = b_.w.compute;
    const double h = b_.h;
    const double k = as_d(model.experts_per_token);
    const double E = as_d(model.num_experts);
    const LayerLinear* router = find_module(mods, ModuleRole::router);
    if (model.router_in_fp32) {
      // DeepSeek's router multiplies an fp32 copy of the hidden states, which its weight gradient
      // keeps in full fine-tuning (the copy is the input itself when that is fp32 already). It never
      // runs a wrapping module's forward, so a LoRA adapter on it keeps nothing.
      if (b_.full && sublayer_input_bytes_ < kFp32Bytes) {
        keep(kept_, "router input (fp32 copy)", kFp32Bytes * h);
      } else if (b_.full) {
        keep_shared_input({"", "mlp input"}, sublayer_input_bytes_ * h);
      }
    } else if (router) {
      linear(*router, {"", "mlp input"}, sublayer_input_bytes_, 1.0);
    }
    if (model.router_softmax_over_top_k) {
      // topk over the fp32 logits keeps its indices (int64), the softmax over those k its output.
      keep(kept_, "router top-k weights (fp32) and indices", (4.0 + 8.0) * k);
    } else {
      keep(kept_, "router probabilities (fp32)", 4.0 * E);
    }
    keep(kept_, "input jitter noise", as_d(model.jitter_noise_tensors) * sublayer_input_bytes_ * h);
    // Each routed (token, expert) pair gathers a copy of the token (the experts' gate and up input,
    // which their weight gradient keeps: the expert "mlp input" below), runs the expert MLP and
    // is scaled by its routing weight (which keeps the expert output for the weight's gradient).
    std::vector<const LayerLinear*> gu;
    for (const auto& l : mods)
      if (is_routed_expert(l.module.role) && is_mlp_input_side(l.module.role)) gu.push_back(&l);
    const LayerLinear* down = find_module(mods, ModuleRole::expert_down);
    if (model.dense_expert_routing) {
      // Llama4TextMoe repeats every token for each of the E experts and multiplies the copies by
      // their router scores (0 off the top-k) before the experts: that product keeps the repeated
      // tokens and the score column, and every expert runs on every token.
      keep(kept_, "tokens repeated for every expert (score product input)", c * h * E);
      keep(kept_, "router scores (score product input)", c * E);
      mlp("expert ", gu, down, as_d(model.moe_intermediate_size), 1.0, E);
    } else {
      // Per token, k of the E experts run: rows = k/E of the tokens per expert, times E copies.
      mlp("expert ", gu, down, as_d(model.moe_intermediate_size), k / E, E);
      keep(kept_, "expert outputs (for routing-weight gradient)", c * h * k);
    }
    if (model.shared_expert_intermediate_size > 0) {
      // Qwen's shared_expert.* or DeepSeek's shared_experts.*: one MLP every token runs.
      std::vector<const LayerLinear*> sgu;
      for (const auto& l : mods)
        if (is_shared_expert(l.module.role) && is_mlp_input_side(l.module.role)) sgu.push_back(&l);
      const LayerLinear* sdown = find_module(mods, ModuleRole::shared_expert_down);
      mlp("shared expert ", sgu, sdown, as_d(model.shared_expert_intermediate_size), 1.0, 1.0);
      // Qwen2-MoE scales the shared expert's output by a sigmoid gate, which keeps both; DeepSeek adds it.
      if (find_module(mods, ModuleRole::shared_expert_scale)) keep(kept_, "shared expert output and gate", c * h + 4.0);
    }
  }

  const StepBasis& b_;
  std::vector<Sized> kept_;
  std::vector<SharedInput> shared_inputs_kept_;  // a handful: a list beats a set of strings
  double sublayer_input_bytes_ = 0;              // bytes per element of what attention and the MLP read
};

// The activations of one decoder layer, bytes per token. The per-layer figure is the average
// over the model's layers (MoE models may mix kinds).
std::vector<Sized> layer_activations(const StepBasis& b) {
  const LayerLinears& ls = b.linears;
  const bool moe = b.model.is_moe();
  const double main_layers = moe ? ls.moe_layers : ls.dense_layers;
  std::vector<Sized> acts;
  if (main_layers > 0) acts = LayerActivations(b).of_layer(moe ? ls.moe : ls.dense, moe);
  for (auto& s : acts) s.bytes *= main_layers / b.L;
  if (moe && ls.dense_layers > 0) {
    for (auto& s : LayerActivations(b).of_layer(ls.dense, false)) {
      s.bytes *= ls.dense_layers / b.L;
      s.prefix = "dense layers: ";  // a dense layer's MLP has no prefix of its own
      acts.push_back(std::move(s));
    }
  }
  // Linear-attention and Mamba-2 layers share the attention layers' norms and MLP: a tensor of the
  // same name is the same tensor in every layer, and its average over the layers is its size.
  auto merge = [&](const std::vector<LayerLinear>& mods, double layers) {
    for (auto& s : LayerActivations(b).of_layer(mods, moe)) {
      s.bytes *= layers / b.L;
      const auto same = std::find_if(acts.begin(), acts.end(), [&](const Sized& a) { return a.name() == s.name(); });
      if (same != acts.end()) {
        same->bytes += s.bytes;
      } else {
        acts.push_back(std::move(s));
      }
    }
  };
  if (ls.linear_attention_layers > 0) merge(ls.linear_attention, ls.linear_attention_layers);
  if (ls.state_space_layers > 0) merge(ls.state_space, ls.state_space_layers);
  if (ls.mlp_only_layers > 0) merge(ls.mlp_only, ls.mlp_only_layers);
  return acts;
}

// The tower's positions per token of the text sequence: each image's tokens, times the positions
// the tower runs for each (TowerLayers::positions_per_token).
double tower_positions_per_token(const StepBasis& b) {
  if (!b.images) return 0.0;
  return as_d(b.setup.images) * tower_image_positions(b.model, b.setup) / b.seq;
}

// What a tower layer keeps for its backward, bytes per position, when the tower trains
// (docs/model.md, "Images through the vision tower"): its two norms' inputs (nn.LayerNorm: the
// input and a mean and rstd a row; transformers' RMSNorm: the fp32 copy and rstd, and the
// normalised copy when its weight trains), SDPA's q, k, v and output (and a fused projection's
// whole output, which v's view keeps), GELU's input or the gated MLP's gate, up and activation,
// and each adapter's fp32 input copy (its dropout output and mask) and A's output. A linear
// module keeps its input only when its weight trains (full fine-tuning): autograd saves an input
// for the weight's gradient alone. Measured on an H100 (data/bench/h100-families-2026-12-07/).
double tower_layer_saved_per_position(const StepBasis& b) {
  const TowerLayers& t = b.model.vision.shape;
  const double c = b.w.compute, d = as_d(t.hidden), inter = as_d(t.intermediate);
  const double norm = t.rms_norm ? 4.0 * d + 4.0 + (b.full ? c * d : 0.0) : c * d + 8.0;
  const double weights_train = b.full ? 1.0 : 0.0;
  double bytes = 2.0 * norm + 3.0 * c * d /*q, k, v*/ + (t.fused_qkv_rotary ? 2.0 * c * d : 0.0) +
                 c * d /*attention output*/ + weights_train * 3.0 * c * d /*q/k/v, o and MLP inputs*/ +
                 (t.gated_mlp ? 3.0 : 1.0) * c * inter + weights_train * c * inter /*down's or fc2's input*/;
  if (!b.full) {
    const double dropout = b.setup.lora.dropout > 0 ? 5.0 : 4.0;
    for (const TowerLinear& m : b.model.vision.linears) {
      // The layers' modules (the projector's run on the merged tokens, a few hundredths of these).
      if (m.count == t.layers && targets_tower_module(b.setup, m)) bytes += dropout * as_d(m.in_features) + 4.0 * b.r;
    }
  }
  return bytes;
}

// What autograd keeps outside the decoder layers, bytes per token.
std::vector<Sized> outside_activations(const StepBasis& b) {
  std::vector<Sized> out;
  keep_norm(out, b, "final norm", b.h, b.liger);
  if (b.setup.objective == Objective::sft && b.setup.loss == Loss::chunked) {
    // TRL's chunked loss keeps the label-kept positions' final hidden states, gathered into a new
    // tensor (hidden[order]) that every chunk's checkpoint holds until the backward, trained head
    // or not (the lm_head keeps no input of its own).
    keep(out, "chunked loss: gathered hidden states", b.w.norm_out * b.h);
  } else if (b.full && b.setup.loss != Loss::fused) {
    // (Liger's fused loss keeps no input of the output layer: it made its gradients in the forward.)
    keep(out, b.setup.amp ? "lm_head input (autocast copy)" : "lm_head input",
         (b.setup.amp ? b.w.compute : b.w.norm_out) * b.h);
  }
  // cos/sin of the rotary embedding, computed once and kept by every layer's RoPE (Gemma 3 computes one
  // pair for its sliding-window layers and one for its full-attention layers).
  keep(out, "rotary cos/sin", 2.0 * b.w.compute * as_d(b.model.rotary_dim()) * as_d(b.model.rotary_tables));
  if (b.setup.attention == Attention::eager) keep(out, "causal mask", b.w.compute * b.seq);
  // gpt-oss's sliding-window layers take a mask of their own (transformers makes one per layer type).
  if (b.setup.attention == Attention::eager && b.model.attention_sinks && b.model.sliding_layers > 0)
    keep(out, "sliding-window mask", b.w.compute * b.seq);
  return out;
}

double total_bytes(const std::vector<Sized>& v) {
  double total = 0;
  for (const auto& s : v) total += s.bytes;
  return total;
}

// Temporaries: freed within the step, but alive together at some moment of it.
struct Transients {
  double layer_backward_per_token = 0;
  double layer_forward_per_token = 0;
  double dequant = 0;
};

Transients transients(const StepBasis& b, const LinearTotals& lin) {
  const ModelSpec& model = b.model;
  Transients t;
  double state_space_forward_widest = 0;  // a Mamba-2 layer's largest product (below)
  // Gradients in flight inside one layer's backward: the MLP's intermediate gradients and a
  // few residual-width ones.
  // Liger's activation kernel writes the gate's and the up's gradients over its saved inputs (its
  // backward is in place): of the three, only the product's gradient is a new tensor. Unless LoRA
  // wraps gate or up: PEFT's branch then casts each output gradient to fp32 for the adapter and
  // hands the base its compute-dtype share (3 x c a position together), whatever made the gradient.
  bool lora_on_mlp_input = false;
  for (const auto& [m, lora_target, wrapped] : b.linears.dense)
    lora_on_mlp_input = lora_on_mlp_input || (lora_target && !wrapped && is_mlp_input_side(m.role));
  const double mlp_gradients = b.liger && !lora_on_mlp_input ? 1.0 : 3.0;
  t.layer_backward_per_token =
      mlp_gradients * b.w.compute *
          as_d(model.is_moe() ? model.moe_intermediate_size * model.expert_rows_per_token() : model.intermediate_size) +
      4.0 * b.w.residual * b.h;
  // A Gated DeltaNet layer's kernel backward recomputes the chunk states h and makes their gradient
  // dh (a key x value matrix a value head, once a chunk, in the compute dtype), recomputes w and u
  // and v_new, and makes dv, dq, dk and dw.
  if (const LinearAttention& la = model.linear_attention; la.layers > 0) {
    const double hv = as_d(la.value_heads), vd = as_d(la.value_width()), rep_qk = hv * as_d(la.key_head_dim);
    const double states = hv * as_d(la.key_head_dim) * as_d(la.value_head_dim) / kGatedDeltaChunk;
    t.layer_backward_per_token =
        std::max(t.layer_backward_per_token,
                 b.w.compute * (2.0 * states + 4.0 * rep_qk + 3.0 * vd) + 4.0 * b.w.residual * b.h);
  }

  // A Mamba-2 layer's PyTorch scan multiplies broadcast tensors and sums the product (G = C B^T,
  // Y_diag = M x, the chunk states B^T x and C h): the product is whole for a moment, in fp32, a
  // chunk of positions (or the state) wide. Its backward makes both factors' gradients at the
  // product's size before reducing them (MulBackward0 returns both; the engine sums each to its
  // input's shape after), so twice the largest.
  if (const StateSpace& ss = model.state_space; ss.layers > 0) {
    const double widest = kFp32Bytes * state_space_padding(ss, b.seq) *
                          std::max({as_d(ss.heads * ss.chunk_size * ss.state_size),
                                    as_d(ss.inner_width() * ss.chunk_size), as_d(ss.inner_width() * ss.state_size)});
    t.layer_backward_per_token = std::max(t.layer_backward_per_token, 2.0 * widest + 4.0 * b.w.residual * b.h);
    state_space_forward_widest = widest;
  }

  // The largest set of temporaries a layer's forward holds at once (freed, but their blocks stay
  // reserved): a LoRA branch's fp32 input copy, B's fp32 output and its scaled copy (4 in + 8 out
  // for the widest module); without LoRA, an RMSNorm's two fp32 temporaries; eager attention's raw
  // and masked scores.
  double widest = 8.0 * b.h;
  for (const auto& [m, lora_target, wrapped] : b.linears.dense)
    if (lora_target && !wrapped)
      widest = std::max(widest, b.adapter_bytes * (as_d(m.in_features) + 2.0 * as_d(m.out_features)));
  if (b.setup.attention == Attention::eager) widest = std::max(widest, 2.0 * b.w.compute * b.nq * b.seq);
  t.layer_forward_per_token = std::max(widest, state_space_forward_widest);

  // Forward and backward dequantise one weight at a time into the compute dtype.
  if (b.quantised) t.dequant = lin.largest_linear_module * bytes_per_element(b.setup.quant.compute_dtype);
  return t;
}

// Logits and loss: HF's loss casts the lm_head's logits to fp32 for cross_entropy.
struct LogitsAndLoss {
  double compute_bytes = 0;  // bytes per logit as the lm_head makes them
  bool upcast = false;       // the fp32 cast is a new tensor
  double softcap_bytes = 0;  // gemma2's soft-capping keeps tanh's output
};

LogitsAndLoss logits_and_loss(const StepBasis& b) {
  const TrainingSetup& setup = b.setup;
  LogitsAndLoss l;
  if (b.full) l.compute_bytes = setup.amp ? b.w.compute : bytes_per_element(setup.weights);
  else if (b.quantised) l.compute_bytes = setup.quant.kbit_prepare ? 4.0 : b.w.compute;
  else l.compute_bytes = bytes_per_element(setup.weights);
  // transformers' causal-LM loss casts the logits to fp32; TRL's losses take them as the output
  // layer makes them (selective_log_softmax works row by row in their own dtype).
  // (Llama4ForConditionalGeneration too: transformers 5.17 computes its loss with the same
  // self.loss_function; an older modeling_llama4.py computed it in bf16 itself.)
  l.upcast = l.compute_bytes < 4.0 && setup.objective == Objective::sft;
  // TRL's trainers run under accelerate's mixed precision (their configs set bf16), which wraps the
  // model's forward in convert_outputs_to_fp32: the objectives' losses receive the logits as a new
  // fp32 tensor (the allocator's history of DPOTrainer: _convert_to_fp32 made the policy's and the
  // reference's logits, 4 bytes each; data/bench/h100-trl-objectives-2026-12-06/).
  if (setup.trainer == Trainer::trl && setup.objective != Objective::sft) l.compute_bytes = 4.0;
  if (b.model.final_logit_softcapping > 0) l.softcap_bytes = l.compute_bytes;
  return l;
}

}  // namespace

std::string Sized::name() const {
  std::string n = prefix;
  if (!owner.empty()) n += owner + " ";
  return n + what;
}

double allocator_block(double bytes) {
  using namespace caching_allocator;
  const double rounded = std::ceil(bytes / kMinBlockSize) * kMinBlockSize;
  // Both candidates, then a choice (no branch: pricing a grid of batch sizes crosses the 10 MiB
  // line at every other size, and a mispredicted branch costs more than the second rounding).
  const double segment = std::ceil(rounded / kRoundLarge) * kRoundLarge;
  const bool own_segment = rounded >= kMinLargeAlloc && !(segment - rounded > kSmallSize);
  return own_segment ? segment : rounded;
}

double allocated_for(std::span<const double> bytes_per_token, double tokens) {
  double total = 0;
  for (const double bytes : bytes_per_token) total += allocator_block(bytes * tokens);
  return total;
}

TensorSizes tensor_sizes(std::vector<double> bytes_per_token) {
  TensorSizes t;
  t.ordered = std::move(bytes_per_token);
  t.distinct.reserve(t.ordered.size());
  for (const double bytes : t.ordered) {
    t.bytes_per_token += bytes;
    const auto same = std::find_if(t.distinct.begin(), t.distinct.end(),
                                   [&](const TensorSizes::SameSize& d) { return d.bytes_per_token == bytes; });
    if (same != t.distinct.end()) {
      same->count += 1;
    } else {
      t.distinct.push_back({bytes, 1});
    }
  }
  return t;
}

double allocated_for(const TensorSizes& sizes, double tokens) {
  // Every allocator_block is a whole number of bytes, at most the request plus a 512-byte and a
  // 2 MiB rounding. While the blocks' exact sum stays below 2^53 every partial sum is a whole
  // number a double holds exactly, so adding the blocks in any grouping and order gives the same
  // double: each distinct size's block times its count. Checked against half of 2^53, so that the
  // rounding of this bound itself cannot matter.
  using namespace caching_allocator;
  constexpr double kExactWholeNumbers = 4503599627370496.0;  // 2^52
  const double most = sizes.bytes_per_token * tokens +
                      static_cast<double>(sizes.ordered.size()) * (kRoundLarge + kMinBlockSize);
  if (!(most < kExactWholeNumbers)) return allocated_for(sizes.ordered, tokens);
  double total = 0;
  for (const auto& d : sizes.distinct) total += d.count * allocator_block(d.bytes_per_token * tokens);
  return total;
}

bool module_name_matches(std::string_view module_path, std::string_view name) {
  return module_path == name || (module_path.size() > name.size() && module_path.ends_with(name) &&
                                 module_path[module_path.size() - name.size() - 1] == '.');
}

bool targets_module(const LoraSetup& lora, const LinearModule& m) {
  for (const auto& t : lora.targets) {
    // PEFT's "all-linear" matches every nn.Linear but the output layer. Transformers 5 stores
    // routed experts as fused 3-D parameters, which are not nn.Linear, so they are not matched
    // here (LinearModule::nn_linear); with lora_dropout 0 PEFT wraps them all the same, through
    // ParamWrapper, which layer_linears marks (adapts_fused_experts).
    // A module PEFT refuses is left out of all-linear (the plan then is of the targets PEFT accepts,
    // which plan.cpp names), and a target that names it was refused by check_lora_targets.
    if (t == "all-linear") return m.nn_linear && !m.lora_refused;
    // PEFT matches a target name against the end of the module path.
    if (module_name_matches(m.name, t)) return !m.lora_refused;
  }
  return false;
}

bool targets_tower_module(const TrainingSetup& setup, const TowerLinear& m) {
  if (setup.vision_tower != VisionTowerUse::loaded) return false;  // frozen: LLaMA-Factory narrows the targets
  return std::any_of(setup.lora.targets.begin(), setup.lora.targets.end(),
                     [&](const std::string& t) { return t == "all-linear" || module_name_matches(m.name, t); });
}

bool adapts_tower_layers(const ModelSpec& model, const TrainingSetup& setup) {
  return std::any_of(model.vision.linears.begin(), model.vision.linears.end(), [&](const TowerLinear& m) {
    return m.count == model.vision.shape.layers && targets_tower_module(setup, m);
  });
}

double tower_image_positions(const ModelSpec& model, const TrainingSetup& setup) {
  const TowerLayers& t = model.vision.shape;
  return as_d(setup.image_tokens.value_or(t.default_image_tokens)) * t.positions_per_token;
}

bool trains_tower_layers(const ModelSpec& model, const TrainingSetup& setup) {
  return (setup.method == Method::full && setup.vision_tower == VisionTowerUse::loaded) ||
         adapts_tower_layers(model, setup);
}

double tower_adapter_width(const ModelSpec& model, const TrainingSetup& setup) {
  double width = 0;
  for (const TowerLinear& m : model.vision.linears)
    if (targets_tower_module(setup, m)) width += as_d(m.count) * (as_d(m.in_features) + as_d(m.out_features));
  return width;
}

void check_lora_targets(const ModelSpec& model, const TrainingSetup& setup) {
  if (setup.method == Method::full) return;
  const auto all_linear = [](const std::string& t) { return t == "all-linear"; };
  if (std::all_of(setup.lora.targets.begin(), setup.lora.targets.end(), all_linear)) return;  // nothing to look up
  // The modules of every kind of layer the model has (mixtral has no dense layer, so no gate_proj).
  const std::vector<LinearModule> modules = model_linear_modules(model);
  for (const auto& t : setup.lora.targets) {
    if (t == "all-linear") continue;
    const auto named = [&](const LinearModule& m) { return module_name_matches(m.name, t); };
    if (const auto refused = std::find_if(modules.begin(), modules.end(),
                                          [&](const LinearModule& m) { return m.lora_refused && named(m); });
        refused != modules.end())
      throw SettingError("lora_targets", "'" + t + "' names " + refused->name + " of " + model.name + " (" +
                                             model.model_type +
                                             "), which PEFT 0.21 refuses to give a LoRA adapter (its Mamba "
                                             "check raises in get_peft_model); leave it out of the targets");
    const bool found = std::any_of(modules.begin(), modules.end(), named);
    // A loaded vision tower's modules are PEFT's to match too (a projector's linear_1, say).
    const bool in_tower = setup.vision_tower == VisionTowerUse::loaded &&
                          std::any_of(model.vision.linears.begin(), model.vision.linears.end(),
                                      [&](const TowerLinear& m) { return module_name_matches(m.name, t); });
    if (found || in_tower) continue;
    // The names a target can take for this model, each once, in the layer's order.
    std::vector<std::string> names;
    for (const auto& m : modules)
      if (std::find(names.begin(), names.end(), m.name) == names.end()) names.push_back(m.name);
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    throw SettingError("lora_targets", "'" + t + "' names no module of " + model.name + " (" + model.model_type +
                                           "); its layers' linear modules are " + list + ", or all-linear");
  }
}

bool adapts_fused_experts(const ModelSpec& model, const TrainingSetup& setup) {
  // A router all-linear cannot wrap (PhiMoE's) fails the run before the experts matter.
  // QLoRA alike: bitsandbytes leaves the fused experts unquantised, parameters ParamWrapper takes.
  if (setup.method == Method::full || !all_linear_wraps_fused_experts(model) || setup.lora.dropout != 0) return false;
  return std::any_of(setup.lora.targets.begin(), setup.lora.targets.end(),
                     [](const std::string& t) { return t == "all-linear"; });
}

void check_kernels(const ModelSpec& model, const TrainingSetup& setup) {
  if (setup.kernels != Kernels::liger) return;
  // transformers' use_liger_kernel only warns and trains unpatched when Liger has no function for
  // the model_type: a plan of Liger's kernels there would describe a run that does not happen. The
  // MoE families Liger does patch (Mixtral, Qwen3-MoE) patch their experts their own way, not
  // measured: their rows say no Liger (families.cpp).
  const ModelFamily* wrapper = model.multimodal_type.empty() ? nullptr : find_model_family(model.multimodal_type);
  if (!model_family(model).liger || model.generic_decoder || (wrapper != nullptr && !wrapper->liger))
    throw SettingError("kernels", fmt::format("liger: Liger-Kernel patches no kernel of {} ({}) that trainfit plans; "
                                              "plan it with `kernels` torch",
                                              model.name, model.model_type));
}

// Images need a tower to run through, and their tokens must fit the sequence they are part of.
void check_images(const ModelSpec& model, const TrainingSetup& setup) {
  if (setup.images == 0) return;
  if (model.vision.type.empty())
    throw SettingError("images", fmt::format("{} ({}) is a text model: it has no vision tower to run images through",
                                             model.name, model.model_type));
  if (setup.vision_tower == VisionTowerUse::dropped)
    throw SettingError("images", "the vision tower is dropped (vision_tower dropped): load it to run images");
  const TowerLayers& t = model.vision.shape;
  const std::int64_t tokens = setup.image_tokens.value_or(t.default_image_tokens);
  if (t.fixed_image_tokens && tokens != t.default_image_tokens)
    throw SettingError("image_tokens", fmt::format("{} ({}) pools every image to {} tokens", model.name,
                                                   model.vision.type, t.default_image_tokens));
  if (setup.images * tokens > setup.seq)
    throw SettingError("images", fmt::format("{} images of {} tokens are more than a sequence of {} tokens",
                                             setup.images, tokens, setup.seq));
}

// Packing is planned as TRL runs it on the layers transformers 5.17 gives a packed micro-batch
// (position_ids restarting at each example): the attention kernels' paths, each a term of its
// own. What has no such term is refused by name.
void check_packing(const ModelSpec& model, const TrainingSetup& setup) {
  if (!setup.packing) return;
  if (setup.attention == Attention::eager)
    throw SettingError("packing",
                       "packing under eager attention is not planned (its scores over the flattened "
                       "micro-batch): plan it with `attn` sdpa or flash");
  if (model.linear_attention.layers > 0 || model.state_space.layers > 0)
    throw SettingError("packing", fmt::format("packing is not planned for {}'s {} layers (their scans over the "
                                              "flattened micro-batch)",
                                              model.name, model.state_space.layers > 0 ? "Mamba-2" : "Gated DeltaNet"));
  if (setup.images > 0) throw SettingError("packing", "TRL's SFTTrainer refuses packing for vision-language models");
  if (setup.tp > 1 || setup.cp > 1)
    throw SettingError("packing", "packing with tensor or context parallelism is not planned");
  // PyTorch's fused SDPA kernels take half precision only: fp32 runs the math kernel, whose
  // scores over the flattened micro-batch are not planned.
  if (setup.attention == Attention::sdpa && widths_for(setup).compute >= 4.0)
    throw SettingError("packing", "packing with fp32 compute (SDPA's math kernel) is not planned");
}

// Activation offloading is planned as TRL's OffloadActivations runs on one GPU or under DDP, for the
// objectives whose TRL configs have it (the settings row): what sharded, pipelined or tensor-parallel
// layouts, and PPO's and GRPO's extra models, would do with it has no term.
void check_activation_offloading(const TrainingSetup& setup) {
  if (!setup.activation_offloading) return;
  if (setup.tp > 1 || setup.pp > 1 || setup.cp > 1)
    throw SettingError("activation_offloading",
                       "activation offloading with tensor, pipeline or context parallelism is not planned");
  if (setup.gpus > 1 && setup.parallel != Parallel::ddp)
    throw SettingError(
        "activation_offloading",
        fmt::format("activation offloading under {} is not planned (one GPU or ddp)", to_string(setup.parallel)));
  if (setup.images > 0)
    throw SettingError("activation_offloading",
                       "activation offloading with images through the vision tower is not planned");
}

LayerLinears layer_linears(const ModelSpec& model, const TrainingSetup& setup) {
  // A target that names no module would plan a LoRA run with no adapter at all (0 trainable
  // parameters that "fit"); PEFT itself refuses such targets. Checked here, where the model and
  // the setup meet for the memory model and the time model alike; so are Liger's kernels.
  check_lora_targets(model, setup);
  check_kernels(model, setup);
  check_images(model, setup);
  check_packing(model, setup);
  check_activation_offloading(setup);
  const bool adapters = setup.method != Method::full;
  const bool experts_adapted = adapts_fused_experts(model, setup);
  auto with_targets = [&](std::vector<LinearModule> mods) {
    std::vector<LayerLinear> out;
    out.reserve(mods.size());
    for (auto& m : mods) {
      bool target = adapters && targets_module(setup.lora, m);
      bool wrapped = false;
      if (experts_adapted) {
        // The MLP's parameter names go to ParamWrapper (the experts' 3-D tensors, a router's bare
        // weight); the nn.Linear modules of the same names (a dense layer's MLP, shared experts)
        // are then not wrapped: DeepSeek-V2-Lite's trainable count on the H200 has none of them.
        const bool mlp_name = is_mlp_input_side(m.role) || is_mlp_output_side(m.role);
        if (!m.nn_linear) {
          target = wrapped = true;
        } else if (mlp_name) {
          target = false;
        }
      }
      out.push_back({std::move(m), target, wrapped});
    }
    return out;
  };
  LayerLinears ls;
  const double attention_layers = as_d(model.attention_only_layers());
  if (model.is_moe()) {
    ls.moe = with_targets(layer_linear_modules(model));
    ls.dense = with_targets(dense_layer_linear_modules(model));
    ls.dense_layers = as_d(model.dense_layers);
  } else {
    ls.dense = with_targets(layer_linear_modules(model));
    ls.dense_layers = attention_layers;
  }
  ls.moe_layers = attention_layers - ls.dense_layers;
  ls.linear_attention = with_targets(linear_attention_layer_linear_modules(model));
  ls.linear_attention_layers = as_d(model.linear_attention.layers);
  ls.state_space = with_targets(state_space_layer_linear_modules(model));
  ls.state_space_layers = as_d(model.state_space.layers);
  ls.mlp_only = with_targets(mlp_only_layer_linear_modules(model));
  ls.mlp_only_layers = as_d(model.mlp_only_layers);
  return ls;
}

// Tensor parallelism with sequence parallelism (Megatron's layout, which PyTorch's
// tensor-parallel plans follow): each GPU holds 1/tp of every decoder matrix and of the
// embedding and output layer, and 1/tp of every activation (the norms' and residual's along the
// sequence, the projections' along the heads or features). The logits are the memory model's:
// whole on every GPU, as the Hugging Face plans gather them. Context parallelism (1/cp of the
// tokens on each GPU) is the memory and time models' own: `tokens` stays the micro-batch's.
void split_for_model_parallelism(StepShape& st, const Layout& l) {
  if (l.tp <= 1) return;
  const double t = l.tp;
  ParameterStorage& p = st.params;
  for (double* v : {&p.weights, &p.quant_constants, &p.adapters, &p.trainable_params, &p.idle_trainable_params,
                    &p.untargeted_expert_adapter_params, &p.autocast_copies, &p.largest_trainable, &p.weights_rounding,
                    &p.trainable_rounding, &p.root_weights, &p.layer_weights})
    *v /= t;
  st.gradients /= t;
  st.optimizer_states /= t;
  st.optimizer_transient /= t;
  st.dequant_transient /= t;
  for (auto* list : {&st.layer_activations, &st.outside_activations})
    for (Sized& s : *list) s.bytes /= t;
  st.layer_activation_per_token /= t;
  st.outside_per_token /= t;
  st.checkpoint_per_token /= t;
  st.layer_backward_transient_per_token /= t;
  st.layer_fixed_activations /= t;
  st.layer_fixed_backward_transient /= t;
  st.layer_forward_transient_per_token /= t;
}

double fused_loss_chunk_rows(double positions, double vocab, double hidden) {
  const double inc_factor = std::ceil(vocab / hidden);
  const double rows = std::max(1.0, std::ceil(positions / inc_factor));
  // triton.next_power_of_2; a chunk is at most the micro-batch (its last slice ends at BT).
  return std::min(positions, std::exp2(std::ceil(std::log2(rows))));
}

double kv_cache_bytes_per_position(const ModelSpec& model, const TrainingSetup& setup) {
  const double width = setup.amp                       ? bytes_per_element(*setup.amp)
                       : setup.method == Method::qlora ? bytes_per_element(setup.quant.compute_dtype)
                                                       : bytes_per_element(setup.weights);
  // Keys at head_dim, values at the value head's width: a tensor of each, counted at their mean.
  return as_d(model.num_kv_heads) * (as_d(model.head_dim) + as_d(model.value_head_dim())) / 2.0 * width;
}

ObjectiveShape describe_objective(const ModelSpec& model, const TrainingSetup& setup) {
  ObjectiveShape o;
  o.objective = setup.objective;
  o.seq = as_d(setup.seq);
  o.output_width = as_d(model.vocab_size);
  o.logit_positions = o.seq;
  o.logp_positions = o.seq - 1.0;  // each position predicts the next token
  if (setup.objective == Objective::sft) return o;
  o.sequences_per_example = as_d(trained_sequences_per_example(setup.objective));
  if (has_reference_setting(setup.objective)) o.reference = setup.reference;
  const double completion = as_d(setup.completion_len);
  switch (setup.objective) {
    case Objective::grpo:
      // GRPOTrainer asks the model for logits_to_keep + 1 positions (the completion's and the one
      // before it) and takes the log-probabilities of the completion.
      o.logit_positions = completion + 1.0;
      o.logp_positions = completion;
      break;
    case Objective::ppo:
      // PPOTrainer's forward computes every position's logits, then slices the response's.
      o.logp_positions = completion;
      break;
    case Objective::reward:
      o.output_width = 1.0;  // the score head
      o.logp_positions = 0.0;
      break;
    default: break;
  }
  o.reference_forward = (setup.objective == Objective::dpo || setup.objective == Objective::kto) &&
                        (o.reference == Reference::copy || o.reference == Reference::adapter_off);
  return o;
}

namespace {
// The output layer as a chunked loss (TRL's or Liger's) runs it: its weight (the embedding's when
// tied) as stored (QLoRA leaves it unquantised, in the compute dtype: fp32 after kbit
// preparation), trained under full fine-tuning.
ChunkedLossShape chunked_output_layer(const StepBasis& b) {
  const TrainingSetup& setup = b.setup;
  ChunkedLossShape c;
  c.on = true;
  c.hidden = b.h;
  c.vocab = b.V;
  c.head_elems = as_d(b.pc.lm_head > 0 ? b.pc.lm_head : b.pc.embedding);
  c.weight_bytes = b.full && setup.amp ? 4.0
                   : b.quantised       ? unquantised_parameter_bytes(setup)
                                       : bytes_per_element(setup.weights);
  c.head_trained = b.full;
  return c;
}
}  // namespace

StepShape describe_tensors(const ModelSpec& model, const TrainingSetup& setup, const Layout& layout) {
  StepBasis b(model, setup, layout);
  const LinearTotals lin = sum_linears(b);
  StepShape st;
  st.tokens = micro_batch_tokens(setup.seq, setup.batch);

  st.params = parameter_storage(b, lin);
  st.gradients = st.params.trainable_params * st.params.trainable_bytes_each;
  const OptimizerMemory opt = optimizer_memory(b, lin, st.params);
  st.optimizer_states = opt.states;
  st.optimizer_transient = opt.transient;

  st.layer_activations = layer_activations(b);
  st.layer_activation_per_token = total_bytes(st.layer_activations);
  st.outside_activations = outside_activations(b);
  st.outside_per_token = total_bytes(st.outside_activations);
  if (b.packed_mask) {
    // Every attention layer keeps the additive bias SDPA makes of the block mask, in the compute
    // dtype (1 x 1 x T x T), for its backward, as a sliding-window layer keeps its own; the boolean
    // mask transformers built (one byte a pair) lives through the step.
    st.packed_mask_per_layer = b.w.compute * as_d(model.attention_layers()) / as_d(model.num_layers);
    st.packed_mask_outside = 1.0;
  }
  if (b.tower_layers_trained) {
    // The tower's layers for every image of the micro-batch, counted per text token; under
    // gradient checkpointing (transformers checkpoints the tower's layers too) each keeps its input.
    const double positions = tower_positions_per_token(b);
    const double layers_positions = as_d(model.vision.shape.layers) * positions;
    st.tower_saved_per_token = layers_positions * tower_layer_saved_per_position(b);
    st.tower_checkpoint_per_token = layers_positions * b.w.compute * as_d(model.vision.shape.hidden);
    // Its largest tensor, a block the optimizer's states may take once it is freed: the MLP's
    // intermediate (an adapter's fp32 copy of it when LoRA wraps the down projection).
    double widest = b.w.compute * as_d(model.vision.shape.intermediate);
    for (const TowerLinear& m : model.vision.linears)
      if (m.count == model.vision.shape.layers && !b.full && targets_tower_module(setup, m))
        widest = std::max(widest, 4.0 * as_d(m.in_features));
    st.tower_largest_per_token = positions * widest;
  }
  if (b.images) {
    // The tower's linear modules run on every position of every image, its projector on the
    // merged tokens; attention spans an image's positions (a window's in Qwen2.5-VL's windowed
    // blocks): 2 x hidden FLOPs for QK^T and as many for PV, per position attended.
    const TowerLayers& t = model.vision.shape;
    const double positions = tower_positions_per_token(b);
    const double image_positions = tower_image_positions(model, setup);
    double per_position = 0, per_image_token = 0;
    for (const TowerLinear& m : model.vision.linears) {
      const double flops = 2.0 * as_d(m.in_features) * as_d(m.out_features) * as_d(m.count);
      (m.count == t.layers ? per_position : per_image_token) += flops;
    }
    st.tower_linear_flops_per_token = positions * per_position + positions / t.positions_per_token * per_image_token;
    const double windowed = as_d(t.windowed_layers);
    const double spans =
        windowed * std::min(as_d(t.window), image_positions) + (as_d(t.layers) - windowed) * image_positions;
    st.tower_attention_flops_per_token = positions * 4.0 * as_d(t.hidden) * spans;
    st.tower_trained = b.tower_layers_trained;
  }
  // Non-reentrant checkpointing keeps each layer's input (the residual stream).
  st.checkpoint_per_token = b.w.residual * b.h;

  // ParamWrapper's merged weights (W + B A, a new tensor each forward) are kept by the grouped
  // matmul for its input gradient, with A and B cast to the weight dtype for the fold (no copy when
  // they already are): a second copy of every adapted expert weight while the layer's saved tensors
  // live. Its backward makes the merged gate/up weight's gradient after the merged down weight has
  // gone.
  if (b.linears.moe_layers > 0) {
    const double wb = bytes_per_element(setup.weights);
    double kept_layer = 0, gate_up = 0, down = 0;
    for (const auto& l : b.linears.moe) {
      if (!l.param_wrapped) continue;
      const LinearModule& m = l.module;
      const double merged = as_d(m.in_features) * as_d(m.out_features) * as_d(m.count) * wb;
      kept_layer += merged + (b.adapter_bytes != wb ? adapter_params_of(m, true, b.r) * wb : 0.0);
      if (m.count > 1) (is_mlp_input_side(m.role) ? gate_up : down) += merged;
    }
    st.layer_fixed_activations = kept_layer * b.linears.moe_layers / b.L;
    st.layer_fixed_backward_transient = std::max(0.0, gate_up - down);
  }
  const Transients tr = transients(b, lin);
  st.layer_backward_transient_per_token = tr.layer_backward_per_token;
  st.layer_forward_transient_per_token = tr.layer_forward_per_token;
  st.dequant_transient = tr.dequant;

  const LogitsAndLoss logits = logits_and_loss(b);
  st.logits_compute_bytes = logits.compute_bytes;
  st.final_hidden_bytes = b.w.norm_out;
  st.lora_branch_autocast = b.lora_branch_autocast;
  st.logits_upcast = logits.upcast;
  st.softcap_bytes = logits.softcap_bytes;
  st.counts = b.pc;
  if (setup.objective == Objective::sft && setup.loss == Loss::chunked) {
    ChunkedLossShape& c = st.chunked_loss = chunked_output_layer(b);
    // The GEMM's dtype: autocast's when one runs (TRL's configs set bf16=True, so TRL autocasts
    // over 16-bit weights too), else fp32, as h.float() @ w.float().t() asks.
    if (setup.amp) c.gemm_bytes = bytes_per_element(*setup.amp);
    else if (setup.trainer == Trainer::trl && c.weight_bytes < 4.0) c.gemm_bytes = c.weight_bytes;
    // No logits of the whole micro-batch exist.
    st.logits_upcast = false;
    st.softcap_bytes = 0;
  }
  if (setup.objective == Objective::sft && setup.loss == Loss::fused) {
    // Liger's fused linear cross-entropy: the output layer's weight as stored, its chunk GEMMs in
    // the autocast dtype when one runs (its forward keeps autocast on), its gradient in the weight's
    // own dtype (accum_dtype unset, as transformers' and TRL's calls leave it).
    ChunkedLossShape& f = st.fused_loss = chunked_output_layer(b);
    f.gemm_bytes = setup.amp ? bytes_per_element(*setup.amp) : f.weight_bytes;
    f.chunk_rows = 0;  // set by the micro-batch (fused_loss_chunk_rows)
    st.logits_upcast = false;
    st.softcap_bytes = 0;
  }
  st.objective = describe_objective(model, setup);
  if (setup.objective != Objective::sft) {
    ObjectiveShape& o = st.objective;
    // A frozen copy is the model as the policy's base is stored: the same dtype (quantised, with
    // its constants, under QLoRA: TRL loads it with the same quantization_config).
    if (o.reference == Reference::copy)
      o.reference_weights = st.params.weights + st.params.weights_rounding + st.params.quant_constants;
    // A layer's forward without autograd: the MLP's activation, up and product alive together,
    // with the layer's input and its residual.
    const double inter =
        as_d(model.is_moe() ? model.moe_intermediate_size * model.expert_rows_per_token() : model.intermediate_size);
    o.no_grad_layer_per_token = b.w.compute * (3.0 * inter + 2.0 * b.h);
    if (setup.objective == Objective::ppo) {
      o.hidden_states_layers_per_token = b.L * b.w.residual * b.h;
      // Full fine-tuning saves the final norm's output anyway (the output layer's input).
      o.hidden_states_final_per_token = b.full ? 0.0 : b.w.norm_out * b.h;
    }
  }
  st.objective.value = ValueModelShape{};
  if (setup.objective == Objective::ppo) {
    // The value model (and the reward model, the same classifier frozen): the policy's
    // architecture with a score head, every weight trained, in the base's dtype.
    TrainingSetup v = setup;
    v.objective = Objective::reward;
    v.method = Method::full;
    v.grad_ckpt = false;
    // Trained whole, it has a layout of its own: DeepSpeed's mixed precision computes a fully
    // trained model in its compute dtype (layout_of), which the policy's LoRA step does not.
    const Layout value_layout = layout_of(v);
    const StepShape vs = describe_tensors(model, compute_setup(v, value_layout), value_layout);
    ValueModelShape& value = st.objective.value;
    value.weights = vs.params.weights + vs.params.weights_rounding;
    value.gradients = vs.gradients + vs.params.trainable_rounding;
    const double states_per_param_copy = keeps_two_moments(setup.optimizer) ? 2.0
                                         : setup.optimizer == Optimizer::sgd_momentum ? 1.0 : 0.0;
    value.optimizer_states = vs.optimizer_states + states_per_param_copy * vs.params.trainable_rounding;
    value.parameters = vs.params.trainable_params;
    for (const auto& a : vs.layer_activations) value.layer_activations.push_back(a.bytes);
    for (const auto& a : vs.outside_activations) value.outside_activations.push_back(a.bytes);
    value.layer_backward_transient_per_token = vs.layer_backward_transient_per_token;
    value.head_gradient = as_d(model.hidden_size) * vs.params.trainable_bytes_each;
    st.objective.reward_weights = value.weights;
  }
  st.linears = std::move(b.linears);
  split_for_model_parallelism(st, layout);
  return st;
}

}  // namespace trainfit::detail
