// The families table (src/model/families.cpp): every family's modules carry their role and
// the name the table gives it, and the step finds a family's modules by role whatever their names.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "step/step.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

TEST(ModuleRoles, LlamasRowNamesEveryRoleOnce) {
  const ModelFamily* llama = find_model_family("llama");
  ASSERT_NE(llama, nullptr);
  const std::set<std::string> names(llama->names.begin(), llama->names.end());
  EXPECT_EQ(names.size(), kModuleRoles);  // every role named, no two roles share a name
  EXPECT_EQ(names.count(""), 0u);
}

TEST(ModuleRoles, EveryFamilyReadsAsABuiltInAndNamesEveryRole) {
  for (const ModelFamily* f : model_families()) {
    const ModelFamily* base = find_model_family(f->reads_as);
    ASSERT_NE(base, nullptr) << f->model_type;
    EXPECT_EQ(base->reads_as, base->model_type) << f->model_type;
    for (const std::string& name : f->names) EXPECT_FALSE(name.empty()) << f->model_type;
  }
  // The structure transformers 5 gives each MoE family's experts and router.
  EXPECT_TRUE(find_model_family("mixtral")->fused_experts);
  EXPECT_TRUE(find_model_family("mixtral")->bare_router);
  EXPECT_FALSE(find_model_family("qwen3_moe")->fused_experts);
  EXPECT_TRUE(find_model_family("phimoe")->router_returns_tuple);
  EXPECT_FALSE(find_model_family("deepseek_v2")->bare_router);
}

TEST(ModuleRoles, EveryBuiltInModuleIsNamedByTheTable) {
  for (const std::string& name : builtin_model_names()) {
    const ModelSpec m = load_model(name);
    for (const auto& list : {layer_linear_modules(m), dense_layer_linear_modules(m)})
      for (const LinearModule& mod : list) EXPECT_EQ(mod.name, module_name(m, mod.role)) << name;
  }
}

TEST(ModuleRoles, FamiliesNameTheirOwnModules) {
  EXPECT_EQ(module_name(load_model("phi3.5-moe"), ModuleRole::router), "mlp.router");
  EXPECT_EQ(module_name(load_model("deepseek-v2-lite"), ModuleRole::shared_expert_down), "shared_experts.down_proj");
  EXPECT_EQ(module_name(load_model("qwen2.5-7b"), ModuleRole::attention_query), "q_proj");
  EXPECT_EQ(to_string(ModuleRole::expert_gate_up), "expert_gate_up");
}

// Mixtral's experts were named w1/w2/w3 and matched by suffix nowhere in the MoE activations: a full
// fine-tune kept none of their inputs. Found by role, they keep what every family's experts keep.
TEST(ModuleRoles, MixtralsExpertsKeepTheirInputsLikeEveryFamilys) {
  TrainingSetup full;
  full.method = Method::full;
  for (const char* model : {"mixtral-8x7b", "qwen3-30b-a3b"}) {
    const detail::Step step = detail::describe_step(load_model(model), full);
    bool expert_input = false, down_input = false;
    for (const detail::Sized& s : step.tensors.layer_activations) {
      expert_input |= s.name() == "expert mlp input";
      down_input |= s.name() == "expert activation x up (down input)";
    }
    EXPECT_TRUE(expert_input) << model;
    EXPECT_TRUE(down_input) << model;
  }
}

}  // namespace
}  // namespace trainfit
