// What PEFT 0.21's all-linear wrapped on every family of issue 37, as transformers 5.17 built it on
// the GPU machine (data/bench/h100-families-2026-12-08/inspect.json, written by
// python/family_jobs/measure_families.py's inspect): where PEFT built the model, the plan counts its
// trainable parameters to the parameter; where PEFT raised, the plan says so. And the built models'
// parameter counts are trainfit's.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

nlohmann::json inspected() {
  std::ifstream in(std::string(TRAINFIT_SOURCE_DIR) + "/data/bench/h100-families-2026-12-08/inspect.json");
  return nlohmann::json::parse(in);
}

bool warns(const Plan& plan, const std::string& start) {
  for (const std::string& w : plan.warnings)
    if (w.starts_with(start)) return true;
  return false;
}

TEST(PeftAllLinear, EveryFamilyAsPeftWrappedIt) {
  const nlohmann::json models = inspected();
  ASSERT_GE(models.size(), 18U);
  for (const auto& [name, built] : models.items()) {
    const ModelSpec model = load_model(name);
    for (const double dropout : {0.05, 0.0}) {
      SCOPED_TRACE(name + " at lora_dropout " + std::to_string(dropout));
      const nlohmann::json& peft =
          built.at(dropout == 0.0 ? "lora_all_linear_dropout_0" : "lora_all_linear_dropout_0.05");
      TrainingSetup setup;  // LoRA r16, alpha 32, all-linear: the inspect's LoraConfig
      setup.lora.dropout = dropout;
      const Plan plan = make_plan(model, setup, find_gpu("h200"));
      if (peft.contains("trainable")) {
        EXPECT_EQ(plan.memory.trainable_parameters, peft.at("trainable").get<std::int64_t>());
        continue;
      }
      const std::string error = peft.at("error").get<std::string>();
      if (error.find("ParamWrapper does not work with lora_dropout") != std::string::npos)
        EXPECT_TRUE(warns(plan, "PEFT 0.21 with transformers 5 wraps the fused experts too")) << error;
      else if (error.find("incompatible with Mamba-based models") != std::string::npos)
        EXPECT_TRUE(warns(plan, "all-linear on " + model.model_type + ": PEFT 0.21 refuses it")) << error;
      else
        ADD_FAILURE() << "PEFT raised what the plan does not know: " << error;
    }
  }
}

// sum(p.numel()) of the model transformers built from each config, as from_pretrained leaves it
// (Mistral Small 3.1 untied, as its checkpoint holds both matrices: measure_families.py).
TEST(PeftAllLinear, TheBuiltModelsCountAsTrainfitCounts) {
  const nlohmann::json models = inspected();
  for (const auto& [name, built] : models.items())
    EXPECT_EQ(count_parameters(load_model(name)).total, built.at("params_total").get<std::int64_t>()) << name;
}

}  // namespace
}  // namespace trainfit
