// What each family calls the linear modules of its decoder layers: the one table of module names
// (trainfit/model.hpp, ModuleRole). Read off transformers 5.17's modeling files and checked on the
// H200 where a name matters to a measurement (data/bench/h200-mixtral-shape-2026-12-04.modules.txt
// prints what Mixtral's layer holds). A family that names a role as Llama does is not listed.
#include <algorithm>
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "trainfit/model.hpp"

namespace trainfit {
namespace {

constexpr std::array<const char*, kModuleRoles> kRoleWords = {
    "attention_query",    "attention_key",    "attention_value",
    "attention_qkv",      "attention_output", "latent_query_down",
    "latent_query_up",    "latent_kv_down",   "latent_kv_up",
    "mlp_gate",           "mlp_up",           "mlp_gate_up",
    "mlp_down",           "router",           "expert_gate",
    "expert_up",          "expert_gate_up",   "expert_down",
    "shared_expert_gate", "shared_expert_up", "shared_expert_down",
    "shared_expert_scale"};

std::size_t index_of(ModuleRole role) {
  return static_cast<std::size_t>(role);
}

std::vector<FamilyModuleNames> make_table() {
  using R = ModuleRole;
  return {
      // Llama's names, which most families share: the paths under the decoder layer's self_attn and
      // mlp that PEFT matches a target against.
      {"",
       {{R::attention_query, "q_proj"},
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
        {R::shared_expert_scale, "mlp.shared_expert_gate"}}},
      // DeepSeek's shared experts are one MLP n_shared_experts wide, named in the plural.
      {"deepseek_v2",
       {{R::shared_expert_gate, "shared_experts.gate_proj"},
        {R::shared_expert_up, "shared_experts.up_proj"},
        {R::shared_expert_down, "shared_experts.down_proj"}}},
      {"deepseek_v3",
       {{R::shared_expert_gate, "shared_experts.gate_proj"},
        {R::shared_expert_up, "shared_experts.up_proj"},
        {R::shared_expert_down, "shared_experts.down_proj"}}},
      // PhimoeTopKRouter is an nn.Linear under the MLP block, named router.
      {"phimoe", {{R::router, "mlp.router"}}},
  };
}

}  // namespace

std::string to_string(ModuleRole role) {
  return kRoleWords.at(index_of(role));
}

bool is_attention(ModuleRole role) {
  return index_of(role) <= index_of(ModuleRole::latent_kv_up);
}
bool is_mlp_input_side(ModuleRole role) {
  switch (role) {
    case ModuleRole::mlp_gate:
    case ModuleRole::mlp_up:
    case ModuleRole::mlp_gate_up:
    case ModuleRole::expert_gate:
    case ModuleRole::expert_up:
    case ModuleRole::expert_gate_up:
    case ModuleRole::shared_expert_gate:
    case ModuleRole::shared_expert_up:
      return true;
    default:
      return false;
  }
}
bool is_mlp_output_side(ModuleRole role) {
  return role == ModuleRole::mlp_down || role == ModuleRole::expert_down || role == ModuleRole::shared_expert_down;
}
bool is_routed_expert(ModuleRole role) {
  return role == ModuleRole::expert_gate || role == ModuleRole::expert_up || role == ModuleRole::expert_gate_up ||
         role == ModuleRole::expert_down;
}
bool is_shared_expert(ModuleRole role) {
  return role == ModuleRole::shared_expert_gate || role == ModuleRole::shared_expert_up ||
         role == ModuleRole::shared_expert_down;
}
bool is_router_like(ModuleRole role) {
  return role == ModuleRole::router || role == ModuleRole::shared_expert_scale;
}

const std::vector<FamilyModuleNames>& module_names_table() {
  static const std::vector<FamilyModuleNames> table = make_table();
  return table;
}

const std::array<std::string, kModuleRoles>& module_names(const ModelSpec& model) {
  // Each family's names resolved once, indexed by role: planning asks for them every time it lists
  // a layer's modules (a few times a plan, thousands of times a search).
  struct Resolved {
    std::string family;
    std::array<std::string, kModuleRoles> names;
  };
  static const std::vector<Resolved> resolved = [] {
    const auto& table = module_names_table();
    std::vector<Resolved> out;
    for (const FamilyModuleNames& f : table) {
      Resolved r{f.family, {}};
      for (const auto& [role, name] : table.front().names) r.names.at(index_of(role)) = name;
      for (const auto& [role, name] : f.names) r.names.at(index_of(role)) = name;
      out.push_back(std::move(r));
    }
    return out;
  }();
  for (const Resolved& r : resolved)
    if (!r.family.empty() && r.family == model.model_type) return r.names;
  return resolved.front().names;
}

std::string module_name(const ModelSpec& model, ModuleRole role) {
  return module_names(model).at(index_of(role));
}

}  // namespace trainfit
