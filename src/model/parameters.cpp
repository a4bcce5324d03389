// The linear modules of a decoder layer and the parameter count of a whole model, laid
// out as transformers builds them (see docs/models.md for the formula per family).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "trainfit/error.hpp"
#include "trainfit/model.hpp"

namespace trainfit {
namespace {

// A ModelSpec can be built by hand (or by a search over hypothetical models), so the
// count must not silently wrap when someone asks about an absurd shape.
std::int64_t mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw InputError("model shape too large: its parameter count overflows 64 bits");
  return r;
}
std::int64_t add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw InputError("model shape too large: its parameter count overflows 64 bits");
  return r;
}

std::int64_t numel(const LinearModule& m) {
  return mul(m.count, add(mul(m.in_features, m.out_features), m.bias ? m.out_features : 0));
}

// A module of the role, named as the model's family names it (model/families.cpp).
using ModuleNames = std::array<std::string, kModuleRoles>;
LinearModule module(const ModuleNames& names, ModuleRole role, std::int64_t in, std::int64_t out,
                    std::int64_t count = 1, bool bias = false, double token_fraction = 1.0, bool nn_linear = true) {
  return {role, names[static_cast<std::size_t>(role)], in, out, count, bias, token_fraction, nn_linear};
}

// Multi-head latent attention (DeepseekV2Attention, DeepseekV3Attention): the query through q_a_proj and
// q_b_proj (or one q_proj when q_lora_rank is null), keys and values expanded by kv_b_proj from the
// compressed kv_a_proj_with_mqa output, whose last qk_rope_head_dim features are the rotary key shared
// by every head. Only q_a_proj, kv_a_proj_with_mqa and o_proj take attention_bias.
void add_latent_attention(const ModelSpec& s, std::vector<LinearModule>& out) {
  using R = ModuleRole;
  const ModuleNames& n = module_names(s);
  const std::int64_t h = s.hidden_size;
  const std::int64_t q = mul(s.num_heads, s.head_dim);
  if (s.q_lora_rank > 0) {
    out.push_back(module(n, R::latent_query_down, h, s.q_lora_rank, 1, s.attention_bias));
    out.push_back(module(n, R::latent_query_up, s.q_lora_rank, q));
  } else {
    out.push_back(module(n, R::attention_query, h, q));
  }
  out.push_back(module(n, R::latent_kv_down, h, add(s.kv_lora_rank, s.qk_rope_head_dim), 1, s.attention_bias));
  const std::int64_t key_nope = s.head_dim - s.qk_rope_head_dim;
  out.push_back(module(n, R::latent_kv_up, s.kv_lora_rank, mul(s.num_heads, add(key_nope, s.v_head_dim))));
  out.push_back(module(n, R::attention_output, mul(s.num_heads, s.v_head_dim), h, 1, s.attention_out_bias));
}

void add_attention(const ModelSpec& s, std::vector<LinearModule>& out) {
  using R = ModuleRole;
  const ModuleNames& n = module_names(s);
  if (s.is_mla()) {
    add_latent_attention(s, out);
    return;
  }
  const std::int64_t q = mul(s.num_heads, s.head_dim);
  const std::int64_t kv = mul(s.num_kv_heads, s.head_dim);
  // Qwen3-Next's q_proj makes the query and its output gate, each heads x head_dim wide.
  const std::int64_t q_out = s.attention_output_gate ? mul(2, q) : q;
  if (s.fused_qkv) {
    out.push_back(module(n, R::attention_qkv, s.hidden_size, add(q, mul(2, kv)), 1, s.attention_bias));
  } else {
    out.push_back(module(n, R::attention_query, s.hidden_size, q_out, 1, s.attention_bias));
    out.push_back(module(n, R::attention_key, s.hidden_size, kv, 1, s.attention_bias));
    out.push_back(module(n, R::attention_value, s.hidden_size, kv, 1, s.attention_bias));
  }
  out.push_back(module(n, R::attention_output, q, s.hidden_size, 1, s.attention_out_bias));
}

void add_dense_mlp(const ModelSpec& s, std::vector<LinearModule>& out) {
  using R = ModuleRole;
  const ModuleNames& n = module_names(s);
  const std::int64_t h = s.hidden_size;
  const std::int64_t i = s.intermediate_size;
  if (!s.gated_mlp) {
    out.push_back(module(n, R::mlp_up, h, i, 1, s.mlp_bias));  // Nemotron-H: up, relu2, down
  } else if (s.fused_gate_up) {
    out.push_back(module(n, R::mlp_gate_up, h, mul(2, i), 1, s.mlp_bias));
  } else {
    out.push_back(module(n, R::mlp_gate, h, i, 1, s.mlp_bias));
    out.push_back(module(n, R::mlp_up, h, i, 1, s.mlp_bias));
  }
  out.push_back(module(n, R::mlp_down, i, h, 1, s.mlp_bias));
}

void add_moe_mlp(const ModelSpec& s, std::vector<LinearModule>& out) {
  using R = ModuleRole;
  const ModuleNames& n = module_names(s);
  const std::int64_t h = s.hidden_size;
  const std::int64_t e = s.num_experts;
  const std::int64_t m = s.moe_intermediate_size;
  // The share of the layer's tokens one expert runs on: k/E, or every token (Llama 4).
  const double routed =
      s.dense_expert_routing ? 1.0 : static_cast<double>(s.experts_per_token) / static_cast<double>(e);
  const ModelFamily& family = model_family(s);
  if (family.fused_experts) {
    // Two 3-D parameters, gate and up fused: gate_up_proj [E, 2M, h] and down_proj [E, h, M]
    // (model/families.cpp says which families transformers 5 builds so).
    out.push_back(module(n, R::router, h, e, 1, s.expert_bias, 1.0, !family.bare_router));
    out.push_back(module(n, R::expert_gate_up, h, mul(2, m), e, s.expert_bias, routed, false));
    out.push_back(module(n, R::expert_down, m, h, e, s.expert_bias, routed, false));
    if (s.shared_expert_intermediate_size > 0) {
      const std::int64_t sh = s.shared_expert_intermediate_size;
      if (s.fused_gate_up) {
        out.push_back(module(n, R::shared_expert_gate_up, h, mul(2, sh), 1, s.mlp_bias));
      } else {
        out.push_back(module(n, R::shared_expert_gate, h, sh, 1, s.mlp_bias));
        out.push_back(module(n, R::shared_expert_up, h, sh, 1, s.mlp_bias));
      }
      out.push_back(module(n, R::shared_expert_down, sh, h, 1, s.mlp_bias));
      if (s.shared_expert_scaled) out.push_back(module(n, R::shared_expert_scale, h, 1));
    }
    return;
  }
  out.push_back(module(n, R::router, h, e));
  out.push_back(module(n, R::expert_gate, h, m, e, false, routed, false));
  out.push_back(module(n, R::expert_up, h, m, e, false, routed, false));
  out.push_back(module(n, R::expert_down, m, h, e, false, routed, false));
  if (s.shared_expert_intermediate_size > 0) {
    const std::int64_t sh = s.shared_expert_intermediate_size;
    out.push_back(module(n, R::shared_expert_gate, h, sh));
    out.push_back(module(n, R::shared_expert_up, h, sh));
    out.push_back(module(n, R::shared_expert_down, sh, h));
    if (s.shared_expert_scaled) out.push_back(module(n, R::shared_expert_scale, h, 1));
  }
}

// Qwen3NextGatedDeltaNet's nn.Linear modules: in_proj_qkvz (q and k key_width wide, v and the
// output gate z value_width wide), in_proj_ba (b and a, a value head each), out_proj. None has a bias.
void add_linear_attention(const ModelSpec& s, std::vector<LinearModule>& out) {
  using R = ModuleRole;
  const ModuleNames& n = module_names(s);
  const LinearAttention& la = s.linear_attention;
  const std::int64_t h = s.hidden_size;
  out.push_back(module(n, R::linear_attention_qkvz, h, mul(2, add(la.key_width(), la.value_width()))));
  out.push_back(module(n, R::linear_attention_ba, h, mul(2, la.value_heads)));
  out.push_back(module(n, R::linear_attention_output, la.value_width(), h));
}

// GraniteMoeHybridMambaLayer's and FalconH1Mixer's nn.Linear modules: in_proj (to z, x, B, C and
// dt) and out_proj, with their biases; Falcon-H1's layer has its attention's beside them.
void add_state_space(const ModelSpec& s, std::vector<LinearModule>& out) {
  using R = ModuleRole;
  const ModuleNames& n = module_names(s);
  const StateSpace& ss = s.state_space;
  if (ss.parallel_attention) add_attention(s, out);
  out.push_back(module(n, R::state_space_input, s.hidden_size, ss.input_width(), 1, ss.input_bias));
  out.push_back(module(n, R::state_space_output, ss.inner_width(), s.hidden_size, 1, ss.output_bias));
  out.back().lora_refused = model_family(s).lora_refuses_state_space_output;
}

// The MLP of the model's main kind of layer: its experts, or its dense MLP.
void add_mlp(const ModelSpec& s, std::vector<LinearModule>& out) {
  if (s.is_moe()) {
    add_moe_mlp(s, out);
  } else {
    add_dense_mlp(s, out);
  }
}

// A layer that mixes its tokens otherwise than by attention (add_mixer's modules) and has the
// model's MLP kind; none when the model has no such layers.
std::vector<LinearModule> mixer_layer_linear_modules(const ModelSpec& model, std::int64_t layers,
                                                     void (*add_mixer)(const ModelSpec&, std::vector<LinearModule>&)) {
  std::vector<LinearModule> out;
  if (layers == 0) return out;
  add_mixer(model, out);
  if (!model.mixer_only_layers) add_mlp(model, out);
  return out;
}

}  // namespace

std::vector<LinearModule> layer_linear_modules(const ModelSpec& model) {
  std::vector<LinearModule> out;
  add_attention(model, out);
  if (!model.mixer_only_layers) add_mlp(model, out);
  return out;
}

std::vector<LinearModule> mlp_only_layer_linear_modules(const ModelSpec& model) {
  std::vector<LinearModule> out;
  if (model.mlp_only_layers > 0) add_mlp(model, out);
  return out;
}

std::vector<LinearModule> dense_layer_linear_modules(const ModelSpec& model) {
  std::vector<LinearModule> out;
  if (!model.is_moe()) return out;
  add_attention(model, out);
  add_dense_mlp(model, out);
  return out;
}

std::vector<LinearModule> linear_attention_layer_linear_modules(const ModelSpec& model) {
  return mixer_layer_linear_modules(model, model.linear_attention.layers, add_linear_attention);
}

std::vector<LinearModule> state_space_layer_linear_modules(const ModelSpec& model) {
  return mixer_layer_linear_modules(model, model.state_space.layers, add_state_space);
}

std::vector<LinearModule> model_linear_modules(const ModelSpec& model) {
  std::vector<LinearModule> out;
  if (model.attention_only_layers() > model.dense_layers) out = layer_linear_modules(model);
  if (model.dense_layers > 0)
    for (LinearModule& m : dense_layer_linear_modules(model)) out.push_back(std::move(m));
  for (LinearModule& m : linear_attention_layer_linear_modules(model)) out.push_back(std::move(m));
  for (LinearModule& m : state_space_layer_linear_modules(model)) out.push_back(std::move(m));
  for (LinearModule& m : mlp_only_layer_linear_modules(model)) out.push_back(std::move(m));
  return out;
}

ParameterCounts count_parameters(const ModelSpec& model) {
  ParameterCounts c;
  c.embedding = mul(model.vocab_size, model.hidden_size);
  c.lm_head = add(model.tie_word_embeddings ? 0 : c.embedding, model.lm_head_bias ? model.vocab_size : 0);

  const LinearAttention& la = model.linear_attention;
  const StateSpace& ss = model.state_space;
  const std::int64_t main_layers =
      model.num_layers - model.dense_layers - la.layers - ss.layers - model.mlp_only_layers;
  std::int64_t unrouted = 0;  // the routed experts' parameters one token's forward does not use
  auto add_layers = [&](const std::vector<LinearModule>& modules, std::int64_t layers) {
    for (const LinearModule& m : modules) {
      std::int64_t& bucket = is_router_like(m.role) ? c.other : c.linear;
      bucket = add(bucket, mul(layers, numel(m)));
      if (m.count > 1) {
        LinearModule one = m;
        one.count = 1;
        unrouted = add(unrouted, mul(mul(layers, m.count - model.experts_per_token), numel(one)));
      }
    }
  };
  add_layers(layer_linear_modules(model), main_layers);
  add_layers(linear_attention_layer_linear_modules(model), la.layers);
  // A Gated DeltaNet layer's other parameters: the depthwise convolution over q, k and v (no
  // bias), dt_bias and A_log (a value head each); its gated RMSNorm over a value head is a norm.
  c.other = add(c.other, mul(la.layers, add(mul(la.conv_width(), la.conv_kernel), mul(2, la.value_heads))));
  add_layers(state_space_layer_linear_modules(model), ss.layers);
  add_layers(mlp_only_layer_linear_modules(model), model.mlp_only_layers);
  // A Mamba-2 layer's other parameters: the depthwise convolution over x, B and C (and its bias),
  // dt_bias, A_log and D (one a head); its gated RMSNorm over the inner width (none in Falcon-H1
  // without mamba_rms_norm) is a norm.
  c.other = add(c.other, mul(ss.layers, add(mul(ss.conv_width(), add(ss.conv_kernel, ss.conv_bias ? 1 : 0)),
                                            mul(3, ss.heads))));
  add_layers(dense_layer_linear_modules(model), model.dense_layers);
  c.per_layer_linear = model.num_layers > 0 ? c.linear / model.num_layers : 0;

  // Norm weights (and LayerNorm biases): norms_per_layer of width hidden per layer, the q/k norms (over
  // one head, or over the whole projection), the latent attention's q_a and kv_a norms, one final norm.
  const std::int64_t per_norm = model.layer_norm ? 2 : 1;
  std::int64_t per_layer_norms = mul(mul(model.norms_per_layer, model.hidden_size), per_norm);
  std::int64_t attention_norms = 0;  // only the attention layers have them
  if (model.qk_norm) {
    attention_norms = model.qk_norm_whole_projection ? mul(add(model.num_heads, model.num_kv_heads), model.head_dim)
                                                     : mul(2, model.head_dim);
  }
  if (model.is_mla()) per_layer_norms = add(per_layer_norms, add(model.q_lora_rank, model.kv_lora_rank));
  c.norms = add(add(mul(model.num_layers, per_layer_norms), mul(model.attention_layers(), attention_norms)),
                add(add(mul(model.hidden_size, per_norm), mul(la.layers, la.value_head_dim)),
                    mul(ss.gated_norm ? ss.layers : 0, ss.inner_width())));

  if (model.attention_sinks) c.other = add(c.other, mul(model.num_layers, model.num_heads));  // a sink a head
  c.vision = model.vision.parameters();
  c.total = add(add(add(add(c.embedding, c.lm_head), add(c.linear, c.norms)), c.other), c.vision);
  // A text token's forward never reaches the vision tower.
  c.activated = c.total - unrouted - c.vision;
  return c;
}

}  // namespace trainfit
