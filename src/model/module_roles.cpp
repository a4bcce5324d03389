// The roles a decoder layer's linear modules play (trainfit/model.hpp, ModuleRole): their words and
// the groups the memory and time models ask about. What each family names them is in families.cpp.
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
    "shared_expert_scale", "linear_attention_qkvz", "linear_attention_ba",
    "linear_attention_output", "state_space_input", "state_space_output",
    "shared_expert_gate_up"};

std::size_t index_of(ModuleRole role) {
  return static_cast<std::size_t>(role);
}

}  // namespace

std::string to_string(ModuleRole role) {
  return kRoleWords.at(index_of(role));
}

bool is_attention(ModuleRole role) {
  return index_of(role) <= index_of(ModuleRole::latent_kv_up) || role == ModuleRole::linear_attention_qkvz ||
         role == ModuleRole::linear_attention_ba || role == ModuleRole::linear_attention_output ||
         role == ModuleRole::state_space_input || role == ModuleRole::state_space_output;
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
    case ModuleRole::shared_expert_gate_up:
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
         role == ModuleRole::shared_expert_gate_up || role == ModuleRole::shared_expert_down;
}
bool is_router_like(ModuleRole role) {
  return role == ModuleRole::router || role == ModuleRole::shared_expert_scale;
}

}  // namespace trainfit
