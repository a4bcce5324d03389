// The model families: for each config.json model_type, the built-in family whose reading code
// and layer structure it has, the names it gives its modules (ModuleRole) and how transformers
// lays out its experts. The one table of module names: read off transformers 5.17's modeling
// files and checked on the H200 where a name matters to a measurement
// (data/bench/h200-mixtral-shape-2026-12-04.modules.txt prints what Mixtral's layer holds).
#include <algorithm>
#include <deque>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainfit/error.hpp"
#include "trainfit/model.hpp"

namespace trainfit {
namespace {

using R = ModuleRole;

// Llama's names, which most families share: the paths under the decoder layer's self_attn and mlp
// that PEFT matches a target against.
const std::vector<std::pair<ModuleRole, std::string>>& llama_names() {
  static const std::vector<std::pair<ModuleRole, std::string>> names = {
      {R::attention_query, "q_proj"},
      {R::attention_key, "k_proj"},
      {R::attention_value, "v_proj"},
      {R::attention_qkv, "qkv_proj"},
      {R::attention_output, "o_proj"},
      {R::latent_query_down, "q_a_proj"},
      {R::latent_query_up, "q_b_proj"},
      {R::latent_kv_down, "kv_a_proj_with_mqa"},
      {R::latent_kv_up, "kv_b_proj"},
      {R::mlp_gate, "gate_proj"},
      {R::mlp_up, "up_proj"},
      {R::mlp_gate_up, "gate_up_proj"},
      {R::mlp_down, "down_proj"},
      {R::router, "mlp.gate"},
      {R::expert_gate, "experts.gate_proj"},
      {R::expert_up, "experts.up_proj"},
      {R::expert_gate_up, "experts.gate_up_proj"},
      {R::expert_down, "experts.down_proj"},
      {R::shared_expert_gate, "shared_expert.gate_proj"},
      {R::shared_expert_up, "shared_expert.up_proj"},
      {R::shared_expert_down, "shared_expert.down_proj"},
      {R::shared_expert_scale, "mlp.shared_expert_gate"},
      {R::linear_attention_qkvz, "linear_attn.in_proj_qkvz"},
      {R::linear_attention_ba, "linear_attn.in_proj_ba"},
      {R::linear_attention_output, "linear_attn.out_proj"},
      {R::state_space_input, "mamba.in_proj"},
      {R::state_space_output, "mamba.out_proj"},
      {R::shared_expert_gate_up, "shared_expert.gate_up_proj"}};
  return names;
}

ModelFamily built_in(std::string model_type, std::vector<std::pair<ModuleRole, std::string>> renamed = {}) {
  ModelFamily f;
  f.reads_as = model_type;
  f.model_type = std::move(model_type);
  f.renamed = std::move(renamed);
  return f;
}

// DeepSeek's shared experts are one MLP n_shared_experts wide, named in the plural.
std::vector<std::pair<ModuleRole, std::string>> deepseek_shared_experts() {
  return {{R::shared_expert_gate, "shared_experts.gate_proj"},
          {R::shared_expert_up, "shared_experts.up_proj"},
          {R::shared_expert_down, "shared_experts.down_proj"}};
}

std::vector<ModelFamily> built_in_families() {
  std::vector<ModelFamily> rows;
  for (const char* plain :
       {"llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "gemma3", "gemma3_text", "olmo2", "phi3"}) {
    rows.push_back(built_in(plain));
    // Liger patches every dense built-in; of their q/k norms only Gemma 3's (apply_liger_kernel_to_qwen3
    // and _to_olmo2 leave them as transformers built them).
    rows.back().liger = true;
    rows.back().liger_qk_norm = rows.back().model_type.starts_with("gemma3");
  }
  // SmolLM3 and Granite build Llama's layers (SmolLM3 leaves the rotary embedding out of every
  // fourth, Granite scales the residual stream and the logits). Liger-Kernel patches both, but its
  // patches for them have not been read here, so a plan with Liger refuses them.
  for (const char* llama_like : {"smollm3", "granite"}) rows.push_back(built_in(llama_like));
  // Mistral Small 3.1's multimodal config: its text model is planned (model_config.cpp), as its own
  // text_config family; Liger's patches for Mistral3ForConditionalGeneration have not been read.
  rows.push_back(built_in("mistral3"));
  // Qwen2.5-VL and Qwen3-VL: Qwen2's and Qwen3's decoder layers behind a vision tower
  // (model/vision_towers.cpp), under the same module names.
  rows.push_back(built_in("qwen2_5_vl"));
  rows.push_back(built_in("qwen3_vl"));
  // Llama 4's text model (Llama4ForCausalLM) and its multimodal config (Llama4ForConditionalGeneration,
  // a vision tower beside it). Its MoE layer is feed_forward: Llama4Router, an nn.Linear whose
  // forward returns a tuple (router scores and logits), Llama4TextExperts' fused 3-D gate_up_proj
  // [E, h, 2I] and down_proj, and shared_expert, a gated MLP every token runs.
  ModelFamily llama4 = built_in("llama4_text", {{R::router, "feed_forward.router"}});
  llama4.fused_experts = llama4.router_returns_tuple = llama4.mixture_of_experts = true;
  rows.push_back(llama4);
  rows.push_back(built_in("llama4"));
  // Transformers 5 stores these experts as two 3-D parameters, gate and up fused: gate_up_proj
  // [E, 2M, h] and down_proj [E, h, M]. Mixtral's checkpoint names w1, w3 and w2 are converted on
  // loading. MixtralTopKRouter and DeepseekV3TopkRouter hold a bare weight; PhimoeTopKRouter and
  // DeepseekV2Moe's gate are nn.Linear.
  ModelFamily mixtral = built_in("mixtral");
  mixtral.fused_experts = mixtral.bare_router = mixtral.mixture_of_experts = true;
  rows.push_back(mixtral);
  for (const char* qwen_moe : {"qwen2_moe", "qwen3_moe"}) {
    rows.push_back(built_in(qwen_moe));
    rows.back().mixture_of_experts = true;
  }
  // Qwen3-Next: three of four layers Gated DeltaNet (linear_attn), the fourth gated attention;
  // Qwen3NextTopKRouter holds a bare weight under mlp.gate, Qwen3NextExperts fused 3-D experts,
  // beside Qwen2-MoE's shared expert and its sigmoid gate.
  ModelFamily next = built_in("qwen3_next");
  next.fused_experts = next.bare_router = next.mixture_of_experts = true;
  rows.push_back(next);
  // Granite 4.0 (GraniteMoeHybrid): attention or Mamba-2 (mamba) layers, each with shared_mlp, a
  // gated MLP whose gate and up are one nn.Linear (input_linear), the layer's whole MLP when the
  // config has no experts and its shared expert beside block_sparse_moe when it has:
  // GraniteMoeHybridTopKRouter holds a bare weight, GraniteMoeHybridExperts fused 3-D experts.
  // PEFT 0.21's all-linear wraps neither, at lora_dropout 0.05 or 0, as it leaves gpt-oss's: the
  // family runs' inspect.json (H100, 2026-12-07) counts 11,840,512 trainable parameters for
  // Granite 4.0-H Tiny either way, its q/k/v/o, mamba in/out and shared_mlp modules alone.
  ModelFamily granite4 = built_in("granitemoehybrid", {{R::mlp_gate_up, "shared_mlp.input_linear"},
                                                       {R::mlp_down, "shared_mlp.output_linear"},
                                                       {R::shared_expert_gate_up, "shared_mlp.input_linear"},
                                                       {R::shared_expert_down, "shared_mlp.output_linear"},
                                                       {R::router, "block_sparse_moe.router"},
                                                       {R::expert_gate_up, "block_sparse_moe.experts.gate_up_proj"},
                                                       {R::expert_down, "block_sparse_moe.experts.down_proj"}});
  granite4.fused_experts = granite4.bare_router = granite4.mixture_of_experts = granite4.all_linear_skips_experts =
      true;
  rows.push_back(granite4);
  // Falcon-H1: every layer runs Llama's attention (self_attn) and a Mamba-2 mixer (mamba) side by
  // side, then Llama's gated MLP (feed_forward.gate_proj, up_proj, down_proj).
  // PEFT 0.21 refuses LoRA on its Mamba mixer's out_proj (ModelFamily::lora_refuses_state_space_output).
  ModelFamily falcon_h1 = built_in("falcon_h1");
  falcon_h1.lora_refuses_state_space_output = true;
  rows.push_back(falcon_h1);
  // Nemotron-H: each block is one mixer under backbone.layers.N.mixer (NemotronHBlock): attention's
  // q/k/v/o, the Mamba-2 mixer's in_proj and out_proj, or the MLP's up_proj and down_proj. PEFT 0.21
  // refuses LoRA on its out_proj, as on Falcon-H1's.
  ModelFamily nemotron_h =
      built_in("nemotron_h", {{R::state_space_input, "mixer.in_proj"}, {R::state_space_output, "mixer.out_proj"}});
  nemotron_h.lora_refuses_state_space_output = true;
  rows.push_back(nemotron_h);
  // PhimoeTopKRouter is an nn.Linear under the MLP block, named router; its forward returns a tuple
  // (logits and routing weights), which PEFT's LoRA forward cannot take ("'tuple' object has no
  // attribute 'dtype'", on the GPU machine).
  ModelFamily phimoe = built_in("phimoe", {{R::router, "mlp.router"}});
  phimoe.fused_experts = phimoe.router_returns_tuple = phimoe.mixture_of_experts = true;
  rows.push_back(phimoe);
  ModelFamily v2 = built_in("deepseek_v2", deepseek_shared_experts());
  v2.fused_experts = v2.mixture_of_experts = true;
  rows.push_back(v2);
  ModelFamily v3 = built_in("deepseek_v3", deepseek_shared_experts());
  v3.fused_experts = v3.bare_router = v3.mixture_of_experts = true;
  rows.push_back(v3);
  // GLM-4.5's MoE layers are DeepSeek-V3's (Glm4MoeTopkRouter a bare weight under mlp.gate, sigmoid
  // scores in fp32, fused experts, one shared MLP named shared_experts) behind grouped-query attention.
  ModelFamily glm = built_in("glm4_moe", deepseek_shared_experts());
  glm.fused_experts = glm.bare_router = glm.mixture_of_experts = true;
  rows.push_back(glm);
  // GptOssTopKRouter is mlp.router, a weight and a bias of its own (no nn.Linear); GptOssExperts holds
  // gate_up_proj [E, h, 2M] (gate and up interleaved), down_proj [E, M, h] and their biases.
  ModelFamily oss = built_in("gpt_oss", {{R::router, "mlp.router"}});
  oss.fused_experts = oss.bare_router = oss.mixture_of_experts = oss.all_linear_skips_experts = true;
  rows.push_back(oss);
  return rows;
}

void resolve_names(ModelFamily& f, const std::array<std::string, kModuleRoles>& base) {
  f.names = base;
  for (const auto& [role, name] : f.renamed) f.names.at(static_cast<std::size_t>(role)) = name;
}

// Rows live in a deque: adding one leaves every reference to the others valid.
struct FamilyTable {
  std::deque<ModelFamily> rows;
  std::vector<const ModelFamily*> index;
  const ModelFamily* find(std::string_view model_type) const {
    for (const ModelFamily* f : index)
      if (f->model_type == model_type) return f;
    return nullptr;
  }
};

FamilyTable& table() {
  static FamilyTable t = [] {
    FamilyTable out;
    std::array<std::string, kModuleRoles> llama{};
    for (const auto& [role, name] : llama_names()) llama.at(static_cast<std::size_t>(role)) = name;
    for (ModelFamily& f : built_in_families()) {
      resolve_names(f, llama);
      out.rows.push_back(std::move(f));
      out.index.push_back(&out.rows.back());
    }
    return out;
  }();
  return t;
}

}  // namespace

const std::vector<const ModelFamily*>& model_families() {
  return table().index;
}

const ModelFamily* find_model_family(std::string_view model_type) {
  return table().find(model_type);
}

const ModelFamily& model_family(const ModelSpec& model) {
  // A ModelSpec built in code may leave model_type empty: it is then shaped, and named, as Llama.
  if (const ModelFamily* f = table().find(model.model_type)) return *f;
  return *table().find("llama");
}

std::vector<std::string> expert_wrapping_model_types() {
  std::vector<std::string> types;
  for (const ModelFamily* f : table().index)
    if (f->mixture_of_experts && !f->router_returns_tuple && !f->all_linear_skips_experts)
      types.push_back(f->model_type);
  return types;
}

bool all_linear_wraps_fused_experts(const ModelSpec& model) {
  const ModelFamily& f = model_family(model);
  return model.is_moe() && !f.router_returns_tuple && !f.all_linear_skips_experts;
}

void add_model_family(const ModelFamily& family) {
  FamilyTable& t = table();
  if (family.model_type.empty()) throw InputError("a model family needs a model_type");
  if (t.find(family.model_type) != nullptr)
    throw InputError("model family \"" + family.model_type + "\" exists already");
  const ModelFamily* base = t.find(family.reads_as);
  if (base == nullptr || base->reads_as != base->model_type)
    throw InputError("model family \"" + family.model_type + "\" must read as a built-in family (got \"" +
                     family.reads_as + "\")");
  ModelFamily row = *base;  // its structure, then its own names
  row.model_type = family.model_type;
  row.renamed = family.renamed;
  resolve_names(row, base->names);
  t.rows.push_back(std::move(row));
  t.index.push_back(&t.rows.back());
}

const std::array<std::string, kModuleRoles>& module_names(const ModelSpec& model) {
  return model_family(model).names;
}

std::string module_name(const ModelSpec& model, ModuleRole role) {
  return module_names(model).at(static_cast<std::size_t>(role));
}

}  // namespace trainfit
