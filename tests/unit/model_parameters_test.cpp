// Parameter counts against what transformers reports for the real models
// (sum(p.numel() for p in model.parameters())), and LoRA sizes against real PEFT.
#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "trainfit/error.hpp"
#include "trainfit/model.hpp"

namespace trainfit {
namespace {

struct Known {
  const char* name;
  std::int64_t total;
};

class BuiltinCount : public ::testing::TestWithParam<Known> {};

TEST_P(BuiltinCount, EqualsTransformers) {
  const Known k = GetParam();
  const ParameterCounts c = count_parameters(load_model(k.name));
  EXPECT_EQ(c.total, k.total) << k.name;
  EXPECT_EQ(c.total, c.embedding + c.lm_head + c.linear + c.norms + c.other + c.vision) << k.name;
}

INSTANTIATE_TEST_SUITE_P(
    Models, BuiltinCount,
    ::testing::Values(Known{"qwen2.5-0.5b", 494'032'768}, Known{"qwen2.5-1.5b", 1'543'714'304},
                      Known{"qwen2.5-3b", 3'085'938'688}, Known{"qwen2.5-7b", 7'615'616'512},
                      Known{"qwen2.5-14b", 14'770'033'664}, Known{"qwen2.5-32b", 32'763'876'352},
                      Known{"qwen2.5-72b", 72'706'203'648}, Known{"llama3.1-8b", 8'030'261'248},
                      Known{"llama3.2-1b", 1'235'814'400}, Known{"llama3.2-3b", 3'212'749'824},
                      Known{"llama3.1-70b", 70'553'706'496}, Known{"llama3.3-70b", 70'553'706'496},
                      Known{"mistral-7b", 7'248'023'552}, Known{"gemma2-9b", 9'241'705'984},
                      Known{"gemma2-2b", 2'614'341'888}, Known{"mixtral-8x7b", 46'702'792'704},
                      Known{"qwen3-8b", 8'190'735'360}, Known{"phi3-mini", 3'821'079'552},
                      Known{"qwen3-30b-a3b", 30'532'122'624}, Known{"gemma3-1b", 999'885'952},
                      Known{"gemma3-4b", 4'300'079'472}, Known{"olmo2-7b", 7'298'617'344},
                      Known{"olmo2-13b", 13'716'198'400}, Known{"phi3.5-moe", 41'873'153'344},
                      Known{"deepseek-v2-lite", 15'706'484'224}, Known{"deepseek-v3", 671'026'404'352}),
    [](const ::testing::TestParamInfo<Known>& param) {
      std::string n = param.param.name;
      for (char& ch : n) {
        if (ch == '.' || ch == '-') ch = '_';
      }
      return n;
    });

// PEFT adds lora_A (r x in) and lora_B (out x r) to every targeted module of every layer.
std::int64_t lora_trainable(const ModelSpec& m, std::int64_t rank) {
  std::int64_t per_layer = 0;
  for (const LinearModule& mod : layer_linear_modules(m)) {
    per_layer += mod.count * rank * (mod.in_features + mod.out_features);
  }
  return per_layer * m.num_layers;
}

TEST(LoraTrainable, MatchesPeftAllSevenTargetsRank16) {
  EXPECT_EQ(lora_trainable(load_model("qwen2.5-0.5b"), 16), 8'798'208);
  EXPECT_EQ(lora_trainable(load_model("qwen2.5-1.5b"), 16), 18'464'768);
  EXPECT_EQ(lora_trainable(load_model("qwen2.5-3b"), 16), 29'933'568);
}

TEST(ParameterCounts, TiedEmbeddingsHaveNoLmHead) {
  const ParameterCounts small = count_parameters(load_model("qwen2.5-0.5b"));
  EXPECT_EQ(small.lm_head, 0);
  EXPECT_EQ(small.embedding, 151'936LL * 896);
  const ParameterCounts big = count_parameters(load_model("qwen2.5-7b"));
  EXPECT_EQ(big.lm_head, big.embedding);
}

TEST(ParameterCounts, BreakdownOfQwen25HalfB) {
  const ParameterCounts c = count_parameters(load_model("qwen2.5-0.5b"));
  // q 896x896+896, k/v 896x128+128, o 896x896, three 896x4864 MLP matrices.
  const std::int64_t layer = (896 * 896 + 896) + 2 * (896 * 128 + 128) + 896 * 896 + 3 * 896 * 4864;
  EXPECT_EQ(c.per_layer_linear, layer);
  EXPECT_EQ(c.linear, 24 * layer);
  EXPECT_EQ(c.norms, 24 * 2 * 896 + 896);
  EXPECT_EQ(c.other, 0);
}

TEST(LinearModules, Qwen2HasQkvBiasButNoOutputBias) {
  const auto mods = layer_linear_modules(load_model("qwen2.5-7b"));
  ASSERT_EQ(mods.size(), 7u);
  EXPECT_EQ(mods[0].name, "q_proj");
  EXPECT_TRUE(mods[0].bias);
  EXPECT_EQ(mods[1].name, "k_proj");
  EXPECT_EQ(mods[1].out_features, 4 * 128);
  EXPECT_TRUE(mods[2].bias);
  EXPECT_EQ(mods[3].name, "o_proj");
  EXPECT_FALSE(mods[3].bias);
  EXPECT_EQ(mods[6].name, "down_proj");
  EXPECT_EQ(mods[6].in_features, 18'944);
  EXPECT_TRUE(dense_layer_linear_modules(load_model("qwen2.5-7b")).empty());
}

TEST(LinearModules, Phi3IsFused) {
  const auto mods = layer_linear_modules(load_model("phi3-mini"));
  ASSERT_EQ(mods.size(), 4u);
  EXPECT_EQ(mods[0].name, "qkv_proj");
  EXPECT_EQ(mods[0].out_features, 3 * 3072);
  EXPECT_EQ(mods[2].name, "gate_up_proj");
  EXPECT_EQ(mods[2].out_features, 2 * 8192);
}

TEST(LinearModules, MixtralExpertsAndRouter) {
  const ModelSpec m = load_model("mixtral-8x7b");
  const auto mods = layer_linear_modules(m);
  // What transformers 5.17 builds (data/bench/h200-mixtral-shape-2026-12-04.modules.txt): a router
  // holding a bare weight, and the experts as two fused 3-D parameters.
  ASSERT_EQ(mods.size(), 7u);
  EXPECT_EQ(mods[4].name, "mlp.gate");
  EXPECT_EQ(mods[4].role, ModuleRole::router);
  EXPECT_FALSE(mods[4].nn_linear);
  EXPECT_EQ(mods[4].out_features, 8);
  EXPECT_EQ(mods[4].count, 1);
  EXPECT_EQ(mods[5].name, "experts.gate_up_proj");
  EXPECT_EQ(mods[5].out_features, 2 * 14336);
  EXPECT_EQ(mods[6].name, "experts.down_proj");
  for (std::size_t i = 5; i < 7; ++i) {
    EXPECT_EQ(mods[i].count, 8);
    EXPECT_DOUBLE_EQ(mods[i].token_fraction, 0.25);
    EXPECT_FALSE(mods[i].nn_linear);
  }
  EXPECT_EQ(count_parameters(m).other, 32LL * 4096 * 8);
}

TEST(LinearModules, Qwen3MoeRouterAndQkNorm) {
  const ModelSpec m = load_model("qwen3-30b-a3b");
  EXPECT_TRUE(m.qk_norm);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.dense_layers, 0);
  const auto mods = layer_linear_modules(m);
  EXPECT_EQ(mods[4].name, "mlp.gate");
  EXPECT_EQ(mods[5].name, "experts.gate_proj");
  EXPECT_EQ(mods[5].out_features, 768);
  EXPECT_EQ(mods[5].count, 128);
  EXPECT_DOUBLE_EQ(mods[5].token_fraction, 8.0 / 128.0);
  EXPECT_EQ(count_parameters(m).norms, 48LL * (2 * 2048 + 2 * 128) + 2048);
}

// Families with no built-in, against counts published for real checkpoints.
TEST(ParameterCounts, Gemma7B) {
  const ModelSpec m = parse_model_config(R"({"model_type": "gemma", "hidden_size": 3072, "intermediate_size": 24576,
      "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "num_hidden_layers": 28,
      "vocab_size": 256000})", "gemma-7b");
  EXPECT_TRUE(m.tie_word_embeddings);
  EXPECT_EQ(m.hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(count_parameters(m).total, 8'537'680'896);
}

TEST(ParameterCounts, Qwen15MoeA27B) {
  const ModelSpec m = parse_model_config(R"({"model_type": "qwen2_moe", "hidden_size": 2048,
      "intermediate_size": 5632, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
      "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 24, "num_experts": 60,
      "num_experts_per_tok": 4, "vocab_size": 151936, "decoder_sparse_step": 1, "tie_word_embeddings": false})",
                                         "qwen1.5-moe");
  EXPECT_EQ(count_parameters(m).total, 14'315'784'192);
  const auto mods = layer_linear_modules(m);
  EXPECT_EQ(mods.back().name, "mlp.shared_expert_gate");
  EXPECT_EQ(mods.back().out_features, 1);
}

TEST(ParameterCounts, QwenMoeDenseLayersUseTheDenseMlp) {
  const std::string base = R"({"model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 256,
      "moe_intermediate_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
      "num_hidden_layers": 6, "num_experts": 4, "num_experts_per_tok": 2, "vocab_size": 100)";
  const ModelSpec all_sparse = parse_model_config(base + "}", "t");
  const ModelSpec mixed = parse_model_config(base + R"(, "decoder_sparse_step": 2, "mlp_only_layers": [1, 99]})", "t");
  // Step 2 makes layers 0, 2, 4 dense; layer 1 is listed as dense too; 99 is out of range and ignored.
  EXPECT_EQ(all_sparse.dense_layers, 0);
  EXPECT_EQ(mixed.dense_layers, 4);
  const auto dense = dense_layer_linear_modules(mixed);
  ASSERT_EQ(dense.size(), 7u);
  EXPECT_EQ(dense[6].in_features, 256);
  const std::int64_t attn = 64 * 64 + 2 * 64 * 32 + 64 * 64;
  const std::int64_t dense_mlp = 3 * 64 * 256;
  const std::int64_t moe_mlp = 4 * 3 * 64 * 32;
  const ParameterCounts c = count_parameters(mixed);
  EXPECT_EQ(c.linear, 6 * attn + 4 * dense_mlp + 2 * moe_mlp);
  EXPECT_EQ(c.other, 2 * 64 * 4);
}

TEST(ParameterCounts, LlamaBiasFlags) {
  const ModelSpec m = parse_model_config(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 10, "attention_bias": true,
      "mlp_bias": true})", "t");
  EXPECT_EQ(m.num_kv_heads, 4);
  EXPECT_EQ(m.head_dim, 16);
  const ParameterCounts c = count_parameters(m);
  const std::int64_t layer = 4 * (64 * 64 + 64) + 2 * (64 * 128 + 128) + (128 * 64 + 64);
  EXPECT_EQ(c.linear, 2 * layer);
  EXPECT_EQ(c.total, 2 * layer + 2 * 10 * 64 + 2 * 2 * 64 + 64);
}

TEST(ParameterCounts, MistralIgnoresAttentionBias) {
  const ModelSpec m = parse_model_config(R"({"model_type": "mistral", "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10, "attention_bias": true})", "t");
  EXPECT_FALSE(m.attention_bias);
  EXPECT_FALSE(m.attention_out_bias);
}

TEST(ParameterCounts, OverflowingHandBuiltSpecThrows) {
  ModelSpec m;
  m.model_type = "llama";
  m.hidden_size = 1'000'000;
  m.num_layers = 10'000;
  m.num_heads = 1;
  m.num_kv_heads = 1;
  m.head_dim = 1'000'000;
  m.intermediate_size = 1'000'000'000'000;  // no config could say this, but a search might try it
  m.vocab_size = 10'000'000;
  EXPECT_THROW(count_parameters(m), InputError);
}

}  // namespace
}  // namespace trainfit
