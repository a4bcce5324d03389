// Reads the shape of a decoder-only transformer from a Hugging Face config.json.
//
// Each family is read the way transformers' own Config and modeling classes read it:
// the same field names, the same defaults when a field is absent or null, and bias /
// norm layouts that mirror the nn.Module tree, so that count_parameters() equals
// sum(p.numel() for p in model.parameters()) exactly.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config_reader.hpp"
#include "model/vision_towers.hpp"
#include "trainfit/error.hpp"
#include "trainfit/model.hpp"

namespace trainfit {
namespace {

using detail::ConfigReader;
using detail::describe;
using detail::json;
using namespace detail::config_bounds;

// The families config.json's model_type may name (model/families.cpp), for messages.
std::string supported_families() {
  std::string out;
  for (const ModelFamily* f : model_families()) out += (out.empty() ? "" : ", ") + f->model_type;
  return out;
}

// The refusal of a model_type no family reads: `type` as the config gives it (a string or not).
std::string not_supported(const json& type) {
  return "model_type " + describe(type) + " is not supported (supported: " + supported_families() + ")";
}

bool is_deepseek(std::string_view t) {
  return t == "deepseek_v2" || t == "deepseek_v3";
}

// DeepSeek's MoE layers: routed experts in fp32-scored groups beside a shared MLP, the first layers
// dense. GLM-4.5 (glm4_moe) builds them too, behind grouped-query attention.
bool deepseek_moe(std::string_view t) {
  return is_deepseek(t) || t == "glm4_moe";
}

// Gemma3TextConfig's defaults: the multimodal Gemma 3 configs leave these out of their text_config.
constexpr std::int64_t kGemma3Vocab = 262'208;
constexpr std::int64_t kGemma3Heads = 8;
constexpr std::int64_t kGemma3KvHeads = 4;
constexpr std::int64_t kGemma3MaxPositions = 131'072;
constexpr std::int64_t kGemma3SlidingWindowPattern = 6;
// Gemma2Config's and Gemma3TextConfig's default window (the published configs set their own).
constexpr std::int64_t kGemmaSlidingWindow = 4096;
// DeepseekV2Config's and DeepseekV3Config's shared defaults for the latent attention.
constexpr std::int64_t kDeepseekQLoraRank = 1536;
constexpr std::int64_t kDeepseekKvLoraRank = 512;
constexpr std::int64_t kDeepseekQkNopeHeadDim = 128;
constexpr std::int64_t kDeepseekQkRopeHeadDim = 64;
constexpr std::int64_t kDeepseekVHeadDim = 128;

// Multi-head latent attention: the query and key heads are qk_nope_head_dim + qk_rope_head_dim wide.
// q_lora_rank absent takes the configs' default; an explicit null (DeepSeek-V2-Lite) means no query
// compression, one q_proj.
void read_latent_attention(const ConfigReader& r, ModelSpec& m) {
  m.q_lora_rank =
      r.is_explicit_null("q_lora_rank") ? 0 : r.optional_int("q_lora_rank", kDeepseekQLoraRank, 1, kMaxIntermediate);
  m.kv_lora_rank = r.optional_int("kv_lora_rank", kDeepseekKvLoraRank, 1, kMaxIntermediate);
  const std::int64_t nope = r.optional_int("qk_nope_head_dim", kDeepseekQkNopeHeadDim, 0, kMaxHeadDim);
  m.qk_rope_head_dim = r.optional_int("qk_rope_head_dim", kDeepseekQkRopeHeadDim, 1, kMaxHeadDim);
  m.v_head_dim = r.optional_int("v_head_dim", kDeepseekVHeadDim, 1, kMaxHeadDim);
  m.head_dim = nope + m.qk_rope_head_dim;
  if (m.num_heads * std::max(m.head_dim, m.v_head_dim) > kMaxIntermediate) {
    r.fail("fields " + r.quoted("qk_nope_head_dim") + ", " + r.quoted("qk_rope_head_dim") + " and " +
           r.quoted("v_head_dim") + " times " + r.quoted("num_attention_heads") + " must be at most " +
           std::to_string(kMaxIntermediate));
  }
}

void read_attention(const ConfigReader& r, ModelSpec& m) {
  const std::string& t = m.model_type;
  const bool gemma3 = t == "gemma3_text";
  // The multimodal Gemma 3 configs leave the head counts to Gemma3TextConfig's defaults.
  m.num_heads = gemma3 ? r.optional_int("num_attention_heads", kGemma3Heads, 1, kMaxHeads)
                       : r.require_int("num_attention_heads", 1, kMaxHeads);
  m.num_kv_heads = r.optional_int("num_key_value_heads", gemma3 ? kGemma3KvHeads : m.num_heads, 1, kMaxHeads);
  if (m.num_kv_heads > m.num_heads || m.num_heads % m.num_kv_heads != 0) {
    r.fail("field " + r.quoted("num_key_value_heads") + " (" + std::to_string(m.num_kv_heads) + ") must divide " +
           r.quoted("num_attention_heads") + " (" + std::to_string(m.num_heads) + ")");
  }
  if (is_deepseek(t)) {
    read_latent_attention(r, m);
  } else {
    // Gemma and Qwen3 configs default head_dim to a constant; everyone else divides.
    std::int64_t default_head_dim = m.hidden_size / m.num_heads;
    if (t == "gemma" || t == "gemma2" || gemma3) default_head_dim = 256;
    if (t == "qwen3" || t == "llama4_text") default_head_dim = 128;
    if (t == "qwen3_next") default_head_dim = 256;
    if (t == "nemotron_h") default_head_dim = 128;  // NemotronHConfig's head_dim
    m.head_dim = r.optional_int("head_dim", default_head_dim, 1, kMaxHeadDim);
    if (m.head_dim == 0) {
      r.fail("field " + r.quoted("num_attention_heads") + " (" + std::to_string(m.num_heads) + ") exceeds " +
             r.quoted("hidden_size") + " (" + std::to_string(m.hidden_size) +
             "), which leaves no head dimension; give " + r.quoted("head_dim"));
    }
    if (m.num_heads * m.head_dim > kMaxIntermediate) {
      r.fail("field " + r.quoted("head_dim") + " (" + std::to_string(m.head_dim) + ") times " +
             r.quoted("num_attention_heads") + " (" + std::to_string(m.num_heads) + ") must be at most " +
             std::to_string(kMaxIntermediate));
    }
  }

  if (t == "qwen2") {
    m.attention_bias = true;  // Qwen2Attention hard-codes bias on q/k/v and none on o
  } else if (t == "glm4_moe") {
    m.attention_bias = r.optional_bool("attention_bias", false);  // Glm4MoeAttention: on q, k, v; never on o
  } else if (t == "qwen2_moe") {
    m.attention_bias = r.optional_bool("qkv_bias", true);
  } else if (t == "llama" || t == "smollm3" || t == "granite" || t == "granitemoehybrid" || t == "gpt_oss" ||
             t == "qwen3" || t == "qwen3_moe" || t == "qwen3_next" ||
             t == "gemma" || t == "gemma2" || gemma3 || t == "olmo2" || t == "phimoe" || is_deepseek(t)) {
    // Llama's attention_bias covers q, k, v and o (OLMo 2 and PhiMoE build LlamaAttention's
    // projections); DeepSeek's covers q_a_proj, kv_a_proj_with_mqa and o_proj.
    m.attention_bias = r.optional_bool("attention_bias", false);
    m.attention_out_bias = m.attention_bias;
  }
  // mistral, mixtral and phi3 build every projection with bias=False whatever the config says.
  // DeepseekV2MLP is LlamaMLP, which reads mlp_bias; DeepseekV3MLP has no bias.
  m.mlp_bias = (t == "llama" || t == "smollm3" || t == "granite" || t == "deepseek_v2" || t == "nemotron_h") &&
               r.optional_bool("mlp_bias", false);
  m.qk_norm = t == "qwen3" || t == "qwen3_moe" || t == "qwen3_next" || gemma3 || t == "olmo2" ||
              (t == "glm4_moe" && r.optional_bool("use_qk_norm", false));
  m.qk_norm_whole_projection = t == "olmo2";  // Olmo2Attention's q_norm is heads x head_dim wide
  m.fused_qkv = t == "phi3";
  m.fused_gate_up = t == "phi3" || t == "granitemoehybrid";
  m.attention_output_gate = t == "qwen3_next";  // Qwen3NextAttention: q_proj makes query and gate
}

void read_experts(const ConfigReader& r, ModelSpec& m) {
  const std::string& t = m.model_type;
  if (t == "mixtral" || t == "phimoe" || t == "gpt_oss") {
    m.num_experts = r.require_int("num_local_experts", 1, kMaxExperts);
    m.moe_intermediate_size = m.intermediate_size;  // their experts are intermediate_size wide
  } else if (t == "granitemoehybrid") {
    // GraniteMoeHybridConfig: num_local_experts experts (8 by default) intermediate_size wide, and
    // shared_mlp beside them, shared_intermediate_size wide (1024), added as it is; the router's
    // softmax runs over each token's top k logits only.
    m.num_experts = r.optional_int("num_local_experts", 8, 1, kMaxExperts);
    m.moe_intermediate_size = m.intermediate_size;
    m.intermediate_size = 0;
    m.shared_expert_intermediate_size = r.optional_int("shared_intermediate_size", 1024, 1, kMaxIntermediate);
    m.router_softmax_over_top_k = true;
  } else if (t == "llama4_text") {
    // Llama4TextConfig: num_local_experts experts and a shared expert, all intermediate_size wide
    // (16 and 8192 by default); the dense layers' MLP is intermediate_size_mlp wide (16384).
    m.num_experts = r.optional_int("num_local_experts", 16, 1, kMaxExperts);
    m.moe_intermediate_size = m.shared_expert_intermediate_size = m.intermediate_size;
    m.intermediate_size = r.optional_int("intermediate_size_mlp", 16384, 1, kMaxIntermediate);
    m.dense_expert_routing = true;
  } else if (deepseek_moe(t)) {
    m.num_experts = r.require_int("n_routed_experts", 1, kMaxExperts);
    m.moe_intermediate_size = r.require_int("moe_intermediate_size", 1, kMaxIntermediate);
    // One shared MLP, n_shared_experts experts wide, beside the routed ones (0: none).
    const std::int64_t shared = r.optional_int("n_shared_experts", t == "deepseek_v2" ? 2 : 1, 0, kMaxExperts);
    if (shared * m.moe_intermediate_size > kMaxIntermediate) {
      r.fail("field " + r.quoted("n_shared_experts") + " times " + r.quoted("moe_intermediate_size") +
             " must be at most " + std::to_string(kMaxIntermediate));
    }
    m.shared_expert_intermediate_size = shared * m.moe_intermediate_size;
    m.router_in_fp32 = true;
  } else {
    m.num_experts = r.require_int("num_experts", 1, kMaxExperts);
    m.moe_intermediate_size = r.require_int("moe_intermediate_size", 1, kMaxIntermediate);
    if (t == "qwen2_moe") {
      m.shared_expert_intermediate_size = r.require_int("shared_expert_intermediate_size", 1, kMaxIntermediate);
    } else if (t == "qwen3_next") {
      m.shared_expert_intermediate_size = r.optional_int("shared_expert_intermediate_size", 512, 1, kMaxIntermediate);
    }
    m.shared_expert_scaled = t == "qwen2_moe" || t == "qwen3_next";
  }
  // GptOssConfig defaults num_experts_per_tok to 4 (the published configs also say experts_per_token).
  m.experts_per_token = t == "gpt_oss"            ? r.optional_int("num_experts_per_tok", 4, 1, kMaxExperts)
                        : t == "llama4_text"      ? r.optional_int("num_experts_per_tok", 1, 1, kMaxExperts)
                        : t == "granitemoehybrid" ? r.optional_int("num_experts_per_tok", 2, 1, kMaxExperts)
                                                  : r.require_int("num_experts_per_tok", 1, kMaxExperts);
  if (m.experts_per_token > m.num_experts) {
    r.fail("field " + r.quoted("num_experts_per_tok") + " (" + std::to_string(m.experts_per_token) +
           ") must not exceed the number of experts (" + std::to_string(m.num_experts) + ")");
  }
  if (t == "mixtral" || t == "phimoe" || t == "gpt_oss" || t == "granitemoehybrid") return;

  if (t == "llama4_text") {
    // Llama4TextDecoderLayer i has experts when i is in moe_layers, which defaults to every
    // interleave_moe_layer_step-th layer (1: every layer, Scout; 2: every other, Maverick).
    if (r.find("moe_layers") != nullptr) {
      const std::vector<bool> moe = r.layer_set("moe_layers", m.num_layers);
      m.dense_layers = m.num_layers - std::count(moe.begin(), moe.end(), true);
    } else {
      const std::int64_t step = r.optional_int("interleave_moe_layer_step", 1, 1, kMaxLayers);
      m.dense_layers = m.num_layers - m.num_layers / step;
    }
  } else if (deepseek_moe(t)) {
    // DeepseekV2DecoderLayer / DeepseekV3DecoderLayer / Glm4MoeDecoderLayer: layer i has experts when
    // i >= first_k_dense_replace (defaults 0, 3 and 1). transformers does not read moe_layer_freq (1 in
    // every published config), so neither does trainfit.
    const std::int64_t first_dense = r.optional_int("first_k_dense_replace",
                                                    t == "deepseek_v2" ? 0
                                                    : t == "glm4_moe"  ? 1
                                                                       : 3,
                                                    0, kMaxLayers);
    m.dense_layers = std::min(first_dense, m.num_layers);
  } else {
    // Qwen MoE decoder layer i is sparse when i is not in mlp_only_layers and (i+1) % step == 0.
    const std::int64_t step = r.optional_int("decoder_sparse_step", 1, 1, kMaxLayers);
    const std::vector<bool> mlp_only = r.layer_set("mlp_only_layers", m.num_layers);
    for (std::int64_t i = 0; i < m.num_layers; ++i) {
      if (mlp_only[static_cast<std::size_t>(i)] || (i + 1) % step != 0) ++m.dense_layers;
    }
  }
  if (m.dense_layers > 0 && m.intermediate_size == 0) {
    r.fail("missing required field " + r.quoted("intermediate_size") + " (the dense layers need it)");
  }
}

// Gemma 3's layers alternate sliding-window and full attention (layer_types, else every
// sliding_window_pattern-th layer is full), and each kind has a rotary table of its own base.
std::int64_t gemma3_rotary_tables(const ConfigReader& r, std::int64_t layers) {
  if (const json* types = r.find("layer_types")) {
    if (!types->is_array())
      r.fail("field " + r.quoted("layer_types") + " must be a list (got " + describe(*types) + ")");
    std::vector<std::string> kinds;
    for (const json& kind : *types) {
      if (!kind.is_string()) {
        r.fail("field " + r.quoted("layer_types") + " must be a list of strings (got an element " + describe(kind) +
               ")");
      }
      if (std::find(kinds.begin(), kinds.end(), kind.get_ref<const std::string&>()) == kinds.end()) {
        kinds.push_back(kind.get<std::string>());
      }
    }
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(kinds.size()));
  }
  const std::int64_t pattern = r.optional_int("sliding_window_pattern", kGemma3SlidingWindowPattern, 1, kMaxLayers);
  const bool sliding = pattern > 1;
  const bool full = layers >= pattern;
  return sliding && full ? 2 : 1;
}

// Layers of kind "sliding_attention" in the config's layer_types; -1 without the list.
std::int64_t sliding_layers_listed(const ConfigReader& r) {
  const json* types = r.find("layer_types");
  if (!types || !types->is_array()) return -1;
  std::int64_t n = 0;
  for (const json& kind : *types)
    if (kind.is_string() && kind.get_ref<const std::string&>() == "sliding_attention") ++n;
  return n;
}

// Sliding-window layers as transformers 5 assigns them: gemma2 the even layers (Gemma2Config's
// default layer_types), gemma3 all but every sliding_window_pattern-th, mistral and mixtral every layer;
// layer_types, when the config lists them, decide. A null sliding_window turns it off.
void read_sliding_window(const ConfigReader& r, ModelSpec& m, bool gemma3) {
  const std::string& t = m.model_type;
  const bool every_layer = t == "mistral" || t == "mixtral";
  if (t != "gemma2" && !gemma3 && t != "gpt_oss" && !every_layer) return;
  // MistralConfig defaults to a 4096-token window, MixtralConfig to none.
  if (r.is_explicit_null("sliding_window") || (t == "mixtral" && !r.find("sliding_window"))) return;
  m.sliding_window = r.optional_int("sliding_window", kGemmaSlidingWindow, 1, kMaxPositions);
  const std::int64_t L = m.num_layers;
  if (const std::int64_t listed = sliding_layers_listed(r); listed >= 0) {
    m.sliding_layers = listed;
  } else if (t == "gemma2" || t == "gpt_oss") {
    m.sliding_layers = (L + 1) / 2;  // GptOssConfig's default layer_types: sliding, full, sliding, ...
  } else if (gemma3) {
    const std::int64_t pattern =
        r.optional_int("sliding_window_pattern", kGemma3SlidingWindowPattern, 1, kMaxLayers);
    m.sliding_layers = pattern > 1 ? L - L / pattern : 0;
  } else {
    m.sliding_layers = L;
  }
}

// How many of layer_types' entries are one of `mixing` (layers that mix tokens otherwise than by
// attention), the rest being one of `attending`; -1 without the list. Another kind is refused.
std::int64_t listed_mixing_layers(const ConfigReader& r, std::int64_t layers,
                                  std::initializer_list<std::string_view> mixing,
                                  std::initializer_list<std::string_view> attending) {
  const json* types = r.find("layer_types");
  if (types == nullptr) return -1;
  if (!types->is_array() || static_cast<std::int64_t>(types->size()) != layers)
    r.fail("field " + r.quoted("layer_types") + " must be a list of one kind per layer (" + std::to_string(layers) +
           ")");
  const auto among = [](const json& kind, std::initializer_list<std::string_view> kinds) {
    return kind.is_string() && std::find(kinds.begin(), kinds.end(), kind.get_ref<const std::string&>()) != kinds.end();
  };
  std::int64_t n = 0;
  for (const json& kind : *types) {
    if (!among(kind, mixing) && !among(kind, attending))
      r.fail("field " + r.quoted("layer_types") + " must hold \"" + std::string(*mixing.begin()) + "\" or \"" +
             std::string(*attending.begin()) + "\" (got " + describe(kind) + ")");
    if (among(kind, mixing)) ++n;
  }
  return n;
}

// Qwen3-Next's Gated DeltaNet layers: layer_types' "linear_attention" entries, or, without the
// list, all but every full_attention_interval-th layer (Qwen3NextConfig's default, interval 4).
void read_linear_attention(const ConfigReader& r, ModelSpec& m) {
  LinearAttention& la = m.linear_attention;
  la.layers = listed_mixing_layers(r, m.num_layers, {"linear_attention"}, {"full_attention"});
  if (la.layers < 0) {
    const std::int64_t interval = r.optional_int("full_attention_interval", 4, 1, kMaxLayers);
    la.layers = m.num_layers - m.num_layers / interval;
  }
  la.key_heads = r.optional_int("linear_num_key_heads", 16, 1, kMaxHeads);
  la.value_heads = r.optional_int("linear_num_value_heads", 32, 1, kMaxHeads);
  la.key_head_dim = r.optional_int("linear_key_head_dim", 128, 1, kMaxHeadDim);
  la.value_head_dim = r.optional_int("linear_value_head_dim", 128, 1, kMaxHeadDim);
  la.conv_kernel = r.optional_int("linear_conv_kernel_dim", 4, 1, kMaxHeadDim);
  if (la.value_heads % la.key_heads != 0)
    r.fail("field " + r.quoted("linear_num_value_heads") + " (" + std::to_string(la.value_heads) +
           ") must be a multiple of " + r.quoted("linear_num_key_heads") + " (" + std::to_string(la.key_heads) + ")");
  if (la.layers > 0 && m.dense_layers > 0)
    r.fail("layers with a dense MLP (" + r.quoted("mlp_only_layers") + ", " + r.quoted("decoder_sparse_step") +
           ") beside Gated DeltaNet layers are not planned yet: every layer of the published Qwen3-Next models "
           "has experts");
}

// Mamba-2 layers. Granite 4.0's: layer_types' "mamba" entries (the rest "attention"), or, without
// the list, every layer (GraniteMoeHybridConfig.layers_block_type); the mixer is mamba_expand x
// hidden_size wide. Falcon-H1's: every layer, beside its attention; the mixer is mamba_d_ssm wide
// (FalconH1Config: 1024 when absent, mamba_expand x hidden_size when null). Both in mamba_n_heads
// heads of mamba_d_head ("auto": the width over the heads).
void read_state_space(const ConfigReader& r, ModelSpec& m) {
  const bool falcon = m.model_type == "falcon_h1";
  StateSpace& ss = m.state_space;
  ss.parallel_attention = falcon;
  if (falcon) {
    ss.layers = m.num_layers;
  } else {
    ss.layers = listed_mixing_layers(r, m.num_layers, {"mamba", "linear_attention"}, {"attention", "full_attention"});
    if (ss.layers < 0) ss.layers = m.num_layers;
  }
  const std::int64_t expand = r.optional_int("mamba_expand", 2, 1, kMaxHeads);
  if (expand * m.hidden_size > kMaxIntermediate)
    r.fail("field " + r.quoted("mamba_expand") + " times " + r.quoted("hidden_size") + " must be at most " +
           std::to_string(kMaxIntermediate));
  std::int64_t inner = expand * m.hidden_size;
  if (falcon && !r.is_explicit_null("mamba_d_ssm")) inner = r.optional_int("mamba_d_ssm", 1024, 1, kMaxIntermediate);
  ss.heads = r.optional_int("mamba_n_heads", 128, 1, kMaxHeads);
  if (const json* d = r.find("mamba_d_head"); d == nullptr || *d == "auto") {
    ss.head_dim = inner / ss.heads;
  } else {
    ss.head_dim = r.optional_int("mamba_d_head", 0, 1, kMaxHeadDim);
  }
  if (ss.heads * ss.head_dim != inner)
    r.fail("field " + r.quoted("mamba_n_heads") + " (" + std::to_string(ss.heads) + ") times " +
           r.quoted("mamba_d_head") + " (" + std::to_string(ss.head_dim) + ") must equal the mixer's width (" +
           std::to_string(inner) + ", " + (falcon ? r.quoted("mamba_d_ssm") : r.quoted("mamba_expand") + " x " +
           r.quoted("hidden_size")) + ")");
  ss.state_size = r.optional_int("mamba_d_state", 256, 1, kMaxHeadDim);
  ss.groups = r.optional_int("mamba_n_groups", 1, 1, kMaxHeads);
  if (ss.heads % ss.groups != 0)
    r.fail("field " + r.quoted("mamba_n_groups") + " (" + std::to_string(ss.groups) + ") must divide " +
           r.quoted("mamba_n_heads") + " (" + std::to_string(ss.heads) + ")");
  ss.conv_kernel = r.optional_int("mamba_d_conv", 4, 1, kMaxHeadDim);
  ss.chunk_size = r.optional_int("mamba_chunk_size", 256, 1, kMaxPositions);
  ss.conv_bias = r.optional_bool("mamba_conv_bias", true);
  ss.input_bias = r.optional_bool("mamba_proj_bias", false);
  ss.output_bias = falcon ? r.optional_bool("projectors_bias", false) : ss.input_bias;
  ss.gated_norm = !falcon || r.optional_bool("mamba_rms_norm", false);
}

// Nemotron-H's blocks, one character each as hybrid_override_pattern writes them: M a Mamba-2
// mixer, * attention, - an MLP, E a mixture of experts; or the list NemotronHConfig keeps
// (layers_block_type, or layer_types: linear_attention, full_attention, mlp, moe). Its length is the
// model's layer count (NemotronHConfig derives num_hidden_layers from it).
std::string nemotron_blocks(const ConfigReader& r) {
  std::string blocks;
  if (const json* pattern = r.find("hybrid_override_pattern"); pattern != nullptr && !pattern->is_null()) {
    if (!pattern->is_string()) r.fail("field " + r.quoted("hybrid_override_pattern") + " must be a string");
    blocks = pattern->get<std::string>();
  } else {
    const json* list = r.find("layers_block_type");
    if (list == nullptr) list = r.find("layer_types");
    if (list == nullptr || !list->is_array())
      r.fail("a nemotron_h config names its blocks in " + r.quoted("hybrid_override_pattern") + " or " +
             r.quoted("layers_block_type"));
    for (const json& kind : *list) {
      const std::string k = kind.is_string() ? kind.get<std::string>() : "";
      blocks += k == "linear_attention" || k == "mamba"     ? 'M'
                : k == "full_attention" || k == "attention" ? '*'
                : k == "mlp"                                ? '-'
                : k == "moe"                                ? 'E'
                                                            : '?';
      if (blocks.back() == '?')
        r.fail("field " + r.quoted("layers_block_type") +
               " must hold linear_attention, full_attention, mlp or moe (got " + describe(kind) + ")");
    }
  }
  if (blocks.empty() || static_cast<std::int64_t>(blocks.size()) > kMaxLayers)
    r.fail("field " + r.quoted("hybrid_override_pattern") + " must name between 1 and " + std::to_string(kMaxLayers) +
           " blocks");
  for (const char c : blocks)
    if (c != 'M' && c != '*' && c != '-' && c != 'E')
      r.fail("field " + r.quoted("hybrid_override_pattern") + " must hold M, *, - or E (got '" + std::string(1, c) +
             "')");
  if (blocks.find('E') != std::string::npos)
    r.fail("a nemotron_h config with mixture-of-experts blocks (E in " + r.quoted("hybrid_override_pattern") +
           ", Nemotron 3) is not planned yet: its Mamba-2, attention and MLP blocks are");
  if (r.optional_int("num_nextn_predict_layers", 0, 0, kMaxLayers) > 0)
    r.fail("field " + r.quoted("num_nextn_predict_layers") +
           ": Nemotron-H's multi-token prediction layers are not "
           "planned yet");
  return blocks;
}

// Nemotron-H (NemotronHBlock): every block is one RMSNorm, one mixer and a residual add. Its
// Mamba-2 mixer is mamba_num_heads x mamba_head_dim wide (not expand x hidden), with Zamba2's
// grouped gated norm; its attention has no rotary embedding; its MLP is up_proj, relu2, down_proj.
void read_nemotron_blocks(const ConfigReader& r, ModelSpec& m, const std::string& blocks) {
  const auto count = [&](char c) { return static_cast<std::int64_t>(std::count(blocks.begin(), blocks.end(), c)); };
  m.mixer_only_layers = true;
  m.mlp_only_layers = count('-');
  m.norms_per_layer = 1;
  m.gated_mlp = false;
  m.hidden_act = r.optional_string("mlp_hidden_act", "relu2");
  if (m.hidden_act != "relu2")
    r.fail("field " + r.quoted("mlp_hidden_act") + " \"" + m.hidden_act +
           "\": Nemotron-H's MLP is planned with relu2 (its ReLU output kept), which the published models use");
  StateSpace& ss = m.state_space;
  ss.layers = count('M');
  ss.heads = r.optional_int("mamba_num_heads", 128, 1, kMaxHeads);
  ss.head_dim = r.optional_int("mamba_head_dim", 64, 1, kMaxHeadDim);
  if (ss.heads * ss.head_dim > kMaxIntermediate)
    r.fail("field " + r.quoted("mamba_num_heads") + " times " + r.quoted("mamba_head_dim") + " must be at most " +
           std::to_string(kMaxIntermediate));
  ss.state_size = r.optional_int("ssm_state_size", 128, 1, kMaxHeadDim);
  // NemotronHConfig takes the Mamba names of its older configs too (mamba_n_groups, mamba_d_conv, ...).
  const auto either = [&](const char* name, const char* legacy, std::int64_t fallback, std::int64_t most) {
    return r.find(name) != nullptr ? r.optional_int(name, fallback, 1, most)
                                   : r.optional_int(legacy, fallback, 1, most);
  };
  ss.groups = either("n_groups", "mamba_n_groups", 8, kMaxHeads);
  if (ss.heads % ss.groups != 0)
    r.fail("field " + r.quoted("n_groups") + " (" + std::to_string(ss.groups) + ") must divide " +
           r.quoted("mamba_num_heads") + " (" + std::to_string(ss.heads) + ")");
  ss.conv_kernel = either("conv_kernel", "mamba_d_conv", 4, kMaxHeadDim);
  ss.chunk_size = either("chunk_size", "mamba_chunk_size", 128, kMaxPositions);
  ss.conv_bias = r.find("use_conv_bias") != nullptr ? r.optional_bool("use_conv_bias", true)
                                                    : r.optional_bool("mamba_conv_bias", true);
  ss.input_bias = ss.output_bias = r.optional_bool("use_bias", false);
  ss.gated_norm = true;
  // NemotronHAttention: q/k/v/o without bias, and no rotary embedding anywhere.
  m.attention_bias = m.attention_out_bias = false;
  m.rotary_tables = 0;
  m.rope_free_layers = m.attention_layers();
}

// SmolLM3's layers without a rotary embedding: the 0 entries of no_rope_layers, or, without the
// list, every no_rope_layer_interval-th layer (SmolLM3Config builds the list so: layer i keeps its
// rotary embedding unless (i + 1) is a multiple of the interval, 4 by default).
// Llama 4 reads its no_rope_layers so too (an empty list, as Scout's base config has, takes the default).
std::int64_t rope_free_layers(const ConfigReader& r, std::int64_t layers) {
  if (const json* list = r.find("no_rope_layers"); list != nullptr && !(list->is_array() && list->empty())) {
    if (!list->is_array() || static_cast<std::int64_t>(list->size()) != layers)
      r.fail("field " + r.quoted("no_rope_layers") + " must be a list of one 0 or 1 per layer (" +
             std::to_string(layers) + ")");
    std::int64_t free = 0;
    for (const json& v : *list) {
      if (!v.is_number_integer() || (v.get<std::int64_t>() != 0 && v.get<std::int64_t>() != 1))
        r.fail("field " + r.quoted("no_rope_layers") + " must hold 0 or 1 (got an element " + describe(v) + ")");
      if (v.get<std::int64_t>() == 0) ++free;
    }
    return free;
  }
  const std::int64_t interval = r.optional_int("no_rope_layer_interval", 4, 1, kMaxLayers);
  return layers / interval;
}

// The decoder of one family, from its config object (the whole file, or a multimodal config's text_config).
ModelSpec read_decoder(const ConfigReader& r, std::string model_type) {
  ModelSpec m;
  m.model_type = std::move(model_type);
  const std::string& t = m.model_type;
  const bool qwen_moe = t == "qwen2_moe" || t == "qwen3_moe" || t == "qwen3_next";
  const bool gemma3 = t == "gemma3_text";
  const bool granite4 = t == "granitemoehybrid";

  m.hidden_size = r.require_int("hidden_size", 1, kMaxHidden);
  const std::string blocks = t == "nemotron_h" ? nemotron_blocks(r) : std::string();
  m.num_layers =
      t == "nemotron_h" ? static_cast<std::int64_t>(blocks.size()) : r.require_int("num_hidden_layers", 1, kMaxLayers);
  m.vocab_size =
      gemma3 ? r.optional_int("vocab_size", kGemma3Vocab, 1, kMaxVocab) : r.require_int("vocab_size", 1, kMaxVocab);
  // An all-sparse MoE never builds its dense MLP, so there intermediate_size may be absent.
  m.intermediate_size = qwen_moe || deepseek_moe(t) ? r.optional_int("intermediate_size", 0, 1, kMaxIntermediate)
                        : granite4                  ? r.optional_int("intermediate_size", 11008, 1, kMaxIntermediate)
                        : t == "falcon_h1"          ? r.optional_int("intermediate_size", 14336, 1, kMaxIntermediate)
                        : t == "nemotron_h"         ? r.optional_int("intermediate_size", 21504, 1, kMaxIntermediate)
                                                    : r.require_int("intermediate_size", 1, kMaxIntermediate);
  read_attention(r, m);
  if (granite4 && r.optional_int("num_local_experts", 8, 0, kMaxExperts) == 0) {
    // No experts: shared_mlp is the layer's MLP.
    m.intermediate_size = r.optional_int("shared_intermediate_size", 1024, 1, kMaxIntermediate);
  } else if (granite4) {
    read_experts(r, m);
  }
  if (t == "mixtral" || t == "phimoe" || t == "gpt_oss" || t == "llama4_text" || qwen_moe || deepseek_moe(t))
    read_experts(r, m);
  m.attention_sinks = m.expert_bias = m.clamped_glu = t == "gpt_oss";

  const bool gemma = t == "gemma" || t == "gemma2" || gemma3;
  m.tie_word_embeddings = r.optional_bool("tie_word_embeddings", gemma);
  m.norms_per_layer = t == "gemma2" || gemma3 ? 4 : 2;
  // Olmo2DecoderLayer has no input norm: its two norms follow attention and the MLP.
  m.post_norms = t == "olmo2";
  // PhimoeDecoderLayer and PhimoeModel build nn.LayerNorm (weight and bias); its output layer may have a bias.
  m.layer_norm = t == "phimoe";
  m.lm_head_bias = t == "phimoe" && r.optional_bool("lm_head_bias", false);
  // Qwen3NextRMSNorm scales by (1 + weight) in fp32 too, and casts after.
  m.norm_scale_in_fp32 = gemma || t == "qwen3_next";
  if (t == "qwen3_next") read_linear_attention(r, m);
  if (granite4 || t == "falcon_h1") read_state_space(r, m);
  // PhimoeSparseMoeBlock and PhimoeTopKRouter each apply input_jitter_noise (PhimoeConfig's default: 0).
  if (t == "phimoe" && r.optional_nonnegative_number("input_jitter_noise", 0.0) > 0) m.jitter_noise_tensors = 2;
  // Gemma names its activation hidden_activation (hidden_act is a legacy duplicate).
  const std::string default_act = gemma ? "gelu_pytorch_tanh" : "silu";
  m.hidden_act = gemma ? r.optional_string("hidden_activation", r.optional_string("hidden_act", default_act))
                       : r.optional_string("hidden_act", default_act);
  if (t == "gemma2") {
    // Absent means Gemma2Config's default of 30; an explicit null turns the cap off.
    m.final_logit_softcapping = r.is_explicit_null("final_logit_softcapping")
                                    ? 0.0
                                    : r.optional_nonnegative_number("final_logit_softcapping", 30.0);
  } else if (gemma3) {
    // Gemma3TextConfig's default is None: no cap unless the config sets one.
    m.final_logit_softcapping = r.optional_nonnegative_number("final_logit_softcapping", 0.0);
    m.rotary_tables = gemma3_rotary_tables(r, m.num_layers);
  }
  m.max_position_embeddings =
      r.optional_int("max_position_embeddings", gemma3 ? kGemma3MaxPositions : 0, 0, kMaxPositions);
  read_sliding_window(r, m, gemma3);
  if (t == "smollm3" || t == "llama4_text") m.rope_free_layers = rope_free_layers(r, m.num_layers);
  if (t == "llama4_text") {
    // Llama4TextAttention: the RoPE layers normalise q and k (use_qk_norm) and attend within fixed
    // chunks of attention_chunk_size tokens; the NoPE layers attend to everything before them.
    // A chunk is no sliding window, but what a layer keeps is the same: nothing more while the
    // sequence fits in one chunk (SDPA's is_causal), a mask and repeated key/value heads from there.
    const std::int64_t roped = m.num_layers - m.rope_free_layers;
    if (r.optional_bool("use_qk_norm", true)) m.qk_l2_norm_layers = roped;
    m.sliding_window = r.optional_int("attention_chunk_size", 8192, 1, kMaxPositions);
    m.sliding_layers = roped;
  }
  // GraniteModel multiplies the embedding output by embedding_multiplier and every sublayer's
  // output by residual_multiplier, and GraniteForCausalLM divides the logits by logits_scaling,
  // whatever their values (1.0 by default).
  // Falcon-H1's multipliers do the same (embedding_multiplier, the mixers' and the MLP's output
  // multipliers, lm_head_multiplier), and scale the mixers' inputs and the keys besides.
  m.scaled_residuals = m.scaled_logits = t == "granite" || granite4 || t == "falcon_h1";
  // GraniteMoeHybridModel builds its rotary embedding only when position_embedding_type is "rope"
  // (Granite 4.0-H's configs say "nope"): otherwise no layer rotates q and k.
  if (granite4 && r.optional_string("position_embedding_type", "") != "rope") {
    m.rotary_tables = 0;
    m.rope_free_layers = m.attention_layers();
  }
  if (t == "nemotron_h") read_nemotron_blocks(r, m, blocks);
  return m;
}

// The fields read_decoder reads for Llama, which a config of another decoder family is read by.
constexpr std::array kGenericDecoderFields = {"model_type",
                                              "hidden_size",
                                              "num_hidden_layers",
                                              "num_attention_heads",
                                              "num_key_value_heads",
                                              "head_dim",
                                              "intermediate_size",
                                              "vocab_size",
                                              "attention_bias",
                                              "mlp_bias",
                                              "tie_word_embeddings",
                                              "hidden_act",
                                              "max_position_embeddings"};
// Fields that change no tensor's size or count: ids, dtypes, initialisation, epsilons, the rotary
// base and scaling (the tables' sizes do not depend on them), dropout probabilities, bookkeeping.
constexpr std::array kShapeFreeFields = {"architectures",
                                         "auto_map",
                                         "bos_token_id",
                                         "eos_token_id",
                                         "pad_token_id",
                                         "torch_dtype",
                                         "dtype",
                                         "transformers_version",
                                         "use_cache",
                                         "initializer_range",
                                         "rms_norm_eps",
                                         "layer_norm_eps",
                                         "norm_eps",
                                         "layer_norm_epsilon",
                                         "rope_theta",
                                         "rope_scaling",
                                         "rope_parameters",
                                         "attention_dropout",
                                         "hidden_dropout",
                                         "embd_pdrop",
                                         "resid_pdrop",
                                         "attn_pdrop",
                                         "dropout",
                                         "pretraining_tp",
                                         "_name_or_path",
                                         "tokenizer_class",
                                         "is_decoder",
                                         "output_attentions",
                                         "output_hidden_states",
                                         "return_dict",
                                         "id2label",
                                         "label2id",
                                         "problem_type",
                                         "bad_words_ids",
                                         "chat_template",
                                         "use_return_dict",
                                         "rope_type",
                                         "original_max_position_embeddings"};
// Expert counts: a mixture of experts planned as one dense MLP would be off by its size.
constexpr std::array kExpertCountFields = {"num_experts", "num_local_experts", "n_routed_experts"};

bool listed(const auto& names, std::string_view field) {
  return std::find(names.begin(), names.end(), field) != names.end();
}

// A decoder config of a family trainfit does not read: Llama's layers from the fields every decoder
// config has, when it names a causal language model and has them. Refused otherwise (an encoder,
// a config missing its shapes, a mixture of experts), naming what is missing.
ModelSpec read_generic_decoder(const ConfigReader& r, const std::string& model_type) {
  const std::string refused = not_supported(json(model_type));
  bool causal = true;
  if (const json* arch = r.find("architectures"); arch != nullptr && arch->is_array()) {
    causal = false;
    for (const json& a : *arch)
      if (a.is_string() && a.get_ref<const std::string&>().ends_with("ForCausalLM")) causal = true;
  }
  if (!causal)
    r.fail(refused + "; its architectures name no ForCausalLM model, which another decoder family would be planned as");
  std::vector<std::string> missing;
  for (const char* field :
       {"hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"})
    if (r.find(field) == nullptr) missing.emplace_back(field);
  if (!missing.empty()) {
    std::string names;
    for (const auto& f : missing) names += (names.empty() ? "" : ", ") + r.quoted(f);
    r.fail(refused + "; another decoder family is planned as Llama's layers from its usual fields, and " + names +
           (missing.size() == 1 ? " is" : " are") + " missing");
  }
  for (const char* field : kExpertCountFields) {
    const json* n = r.find(field);
    if (n != nullptr && n->is_number_integer() && n->get<std::int64_t>() > 1)
      r.fail(refused + "; it is a mixture of experts (" + r.quoted(field) + ": " + describe(*n) +
             "), which Llama's layers would miss by the experts' size");
  }
  // Layers that are no attention layers (Mamba's state-space layers, linear attention: Granite 4,
  // Falcon-H1, Nemotron-H, Qwen3-Next, Jamba...) keep what Llama's layers do not: refused.
  for (const auto& [field, value] : r.object().items()) {
    const bool state_space = field.starts_with("mamba_") || field.starts_with("ssm_") || field.starts_with("linear_") ||
                             field.starts_with("attn_layer_") || field == "hybrid_override_pattern";
    bool other_layers = false;
    if (field == "layer_types" && value.is_array())
      for (const json& kind : value)
        if (kind.is_string() && kind.get_ref<const std::string&>().find("attention") == std::string::npos)
          other_layers = true;
    if ((state_space && !value.is_null()) || other_layers)
      r.fail(refused + "; its layers are not all attention layers (" + r.quoted(field) +
             "): state-space or linear-attention layers keep what Llama's layers would not, and are not read yet");
  }
  ModelSpec m = read_decoder(r, "llama");
  m.model_type = model_type;
  m.generic_decoder = true;
  for (const auto& [field, value] : r.object().items()) {
    if (listed(kGenericDecoderFields, field) || listed(kShapeFreeFields, field)) continue;
    // An absent, null, false or zero setting switches nothing on.
    if (value.is_null() || (value.is_boolean() && !value.get<bool>()) || (value.is_number() && value == 0)) continue;
    m.unread_fields.push_back(field);
  }
  return m;
}

// The multimodal configs: a vision tower and projector beside a text model of a family read here.
bool is_multimodal(std::string_view model_type) {
  return model_type == "gemma3" || model_type == "mistral3" || model_type == "qwen2_5_vl" || model_type == "qwen3_vl" ||
         model_type == "llama4";
}

// Gemma3ForConditionalGeneration (a SigLIP tower), Mistral3ForConditionalGeneration (Mistral Small
// 3.1: a Pixtral tower), Qwen2_5_VLForConditionalGeneration and Qwen3VLForConditionalGeneration:
// the text model is described by the decoder layers of its family, from text_config (Qwen2.5-VL's
// published configs keep the text fields at the top level, which its config class moves into
// text_config), and the tower and projector by vision_config (model/vision_towers.cpp).
ModelSpec read_multimodal(const ConfigReader& r, const std::string& wrapper) {
  const json* text = r.find("text_config");
  const bool flat = wrapper == "qwen2_5_vl" && text == nullptr;
  if (!flat && (text == nullptr || !text->is_object())) {
    r.fail("field \"text_config\" must be an object (a " + wrapper +
           " config describes its language model there; got " +
           (text == nullptr ? std::string("nothing") : describe(*text)) + ")");
  }
  const ConfigReader text_reader(flat ? r.object() : *text, r.source(), flat ? "" : "text_config.");
  std::string text_type;
  if (wrapper == "gemma3") {
    text_type = "gemma3_text";
  } else if (wrapper == "qwen2_5_vl") {
    text_type = "qwen2";  // Qwen2_5_VLTextModel: Qwen2's layers (q/k/v biased) with a 3-axis rotary table
  } else if (wrapper == "qwen3_vl") {
    text_type = "qwen3";  // Qwen3VLTextModel: Qwen3's layers (q/k norms)
  } else if (wrapper == "llama4") {
    text_type = "llama4_text";
  } else {
    // Mistral 3's text_config names its own family (mistral).
    text_type = text_reader.optional_string("model_type", "mistral");
    const ModelFamily* text_family = find_model_family(text_type);
    if (text_family == nullptr || is_multimodal(text_family->reads_as))
      text_reader.fail("field " + text_reader.quoted("model_type") + " names no text family trainfit reads (got \"" +
                       text_type + "\")");
    text_type = text_family->reads_as;
  }
  ModelSpec m = read_decoder(text_reader, text_type);
  // The output layer is tied as text_config says, or as the top level says when text_config is
  // silent (Qwen3-VL's published config). Mistral3Config's own default (tie, since transformers 5.0)
  // is not followed: its checkpoints hold both matrices, and from_pretrained unties them.
  if (!flat && text_reader.find("tie_word_embeddings") == nullptr && r.find("tie_word_embeddings") != nullptr &&
      wrapper != "mistral3")
    m.tie_word_embeddings = r.optional_bool("tie_word_embeddings", m.tie_word_embeddings);
  m.text_of_multimodal = true;
  m.multimodal_type = wrapper;
  m.vision = detail::read_vision_tower(r, wrapper, m.hidden_size);
  return m;
}

}  // namespace

ModelSpec parse_model_config(std::string_view json_text, std::string_view source_name) {
  json config;
  try {
    config = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    // nlohmann prefixes its messages with "[json.exception.parse_error.101] "; the byte position matters, the tag does not.
    std::string what = e.what();
    if (auto pos = what.find("] "); pos != std::string::npos) what.erase(0, pos + 2);
    throw InputError(std::string(source_name) + ": not valid JSON: " + what);
  }
  const ConfigReader r(config, source_name);
  if (!config.is_object()) r.fail("expected a JSON object at the top level (got " + describe(config) + ")");

  const json* type = r.find("model_type");
  if (type == nullptr) r.fail("missing required field \"model_type\" (supported: " + supported_families() + ")");
  const ModelFamily* family = type->is_string() ? find_model_family(type->get_ref<const std::string&>()) : nullptr;
  if (family == nullptr && !type->is_string())
    r.fail(not_supported(*type));

  // A family added beside the built-ins is read by the code of the one it reads as, and keeps its
  // own model_type: its module names and structure are its row's.
  ModelSpec m;
  if (family == nullptr) {
    m = read_generic_decoder(r, type->get_ref<const std::string&>());
  } else if (is_multimodal(family->reads_as)) {
    m = read_multimodal(r, family->reads_as);
  } else {
    m = read_decoder(r, family->reads_as);
  }
  if (family != nullptr && family->reads_as != family->model_type && !m.text_of_multimodal)
    m.model_type = family->model_type;
  m.name = std::string(source_name);

  // The per-field bounds keep each product in range, but their combination can still be absurd.
  std::int64_t total = kMaxTotalParameters + 1;
  try {
    total = count_parameters(m).total;
  } catch (const InputError&) {
    // Only overflow throws here, and that is certainly past the bound.
  }
  if (total > kMaxTotalParameters) {
    r.fail("the shapes describe more than " + std::to_string(kMaxTotalParameters) +
           " parameters; check \"hidden_size\", \"num_hidden_layers\", \"vocab_size\" and the expert counts");
  }
  return m;
}

}  // namespace trainfit
