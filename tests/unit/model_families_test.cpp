// The families added for issue 15 (Gemma 3, OLMo 2, DeepSeek V2/V3, PhiMoE): each built-in's parameter
// count derived by hand from the transformers 5 module tree (the comment beside each), and against the
// figure its publisher states, to that figure's rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "trainfit/error.hpp"
#include "trainfit/model.hpp"

namespace trainfit {
namespace {

// `count` in units of `unit` (1e9 for "B"), rounded to the published figure's one or two digits.
double rounded(std::int64_t count, double unit, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(static_cast<double>(count) / unit * scale) / scale;
}

TEST(Gemma3, OneBHasThePublishedSplitOfEmbeddingAndTheRest) {
  const ModelSpec m = load_model("gemma3-1b");
  EXPECT_EQ(m.model_type, "gemma3_text");
  EXPECT_FALSE(m.text_of_multimodal);
  EXPECT_TRUE(m.tie_word_embeddings);
  EXPECT_TRUE(m.qk_norm);
  EXPECT_FALSE(m.qk_norm_whole_projection);
  EXPECT_EQ(m.norms_per_layer, 4);
  EXPECT_EQ(m.rotary_tables, 2);  // sliding-window layers and every sixth, full-attention, layer
  EXPECT_DOUBLE_EQ(m.final_logit_softcapping, 0.0);
  // Per layer: q 1152x1024, k and v 1152x256 (one kv head of 256), o 1024x1152, three 1152x6912 MLP
  // matrices; four norms of 1152 and q_norm, k_norm of one head (256). Tied embedding 262144x1152, final norm.
  const std::int64_t layer = 1152 * 1024 + 2 * 1152 * 256 + 1024 * 1152 + 3 * 1152 * 6912 + 4 * 1152 + 2 * 256;
  const ParameterCounts c = count_parameters(m);
  EXPECT_EQ(c.total, 262'144LL * 1152 + 26 * layer + 1152);
  EXPECT_EQ(c.total, 999'885'952);
  // The Gemma 3 report: 302M embedding parameters, 698M the rest; "1B".
  EXPECT_EQ(rounded(c.embedding, 1e6, 0), 302);
  EXPECT_EQ(rounded(c.total - c.embedding, 1e6, 0), 698);
  EXPECT_EQ(rounded(c.total, 1e9, 0), 1);
  EXPECT_EQ(c.activated, c.total);
}

TEST(Gemma3, FourBIsTheTextModelOfTheMultimodalConfig) {
  const ModelSpec m = load_model("gemma3-4b");
  EXPECT_EQ(m.model_type, "gemma3_text");
  EXPECT_TRUE(m.text_of_multimodal);
  // The published text_config gives only hidden_size, intermediate_size and num_hidden_layers; the rest
  // are Gemma3TextConfig's defaults.
  EXPECT_EQ(m.vocab_size, 262'208);
  EXPECT_EQ(m.num_heads, 8);
  EXPECT_EQ(m.num_kv_heads, 4);
  EXPECT_EQ(m.head_dim, 256);
  EXPECT_EQ(m.max_position_embeddings, 131'072);
  EXPECT_TRUE(m.tie_word_embeddings);
  // Per layer: q 2560x2048, k and v 2560x1024, o 2048x2560, three 2560x10240; 4 x 2560 + 2 x 256 norms.
  const std::int64_t layer = 2560 * 2048 + 2 * 2560 * 1024 + 2048 * 2560 + 3 * 2560 * 10240 + 4 * 2560 + 2 * 256;
  const ParameterCounts c = count_parameters(m);
  EXPECT_EQ(c.total - c.vision, 262'208LL * 2560 + 34 * layer + 2560);
  EXPECT_EQ(c.total - c.vision, 3'880'263'168);
  // The Gemma 3 report gives the 4B's language model 3,209M non-embedding parameters and a 417M
  // vision encoder: SigLIP's 27 layers (q/k/v/out and fc1/fc2, all biased, two LayerNorms), its
  // biased 14 x 14 patch convolution, 4096 learned positions and a final LayerNorm; the projector
  // is a 1152 x 2560 matrix and an RMSNorm.
  EXPECT_EQ(rounded(c.total - c.vision - c.embedding, 1e6, 0), 3209);
  const std::int64_t siglip_layer = 4 * (1152 * 1152 + 1152) + 2 * 1152 * 4304 + 4304 + 1152 + 4 * 1152;
  const std::int64_t tower = 3 * 14 * 14 * 1152 + 1152 + 4096 * 1152 + 27 * siglip_layer + 2 * 1152;
  EXPECT_EQ(c.vision, tower + 1152 * 2560 + 1152);
  EXPECT_EQ(rounded(static_cast<double>(tower), 1e6, 0), 417);
  EXPECT_EQ(c.total, 4'300'079'472);           // the checkpoint's safetensors count
  EXPECT_EQ(c.activated, c.total - c.vision);  // a text token never reaches the tower
}

TEST(Gemma3, MultimodalConfigErrorsNameTheTextConfigField) {
  try {
    parse_model_config(R"({"model_type": "gemma3", "text_config": {"hidden_size": -1}})", "config.json");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("\"text_config.hidden_size\""), std::string::npos) << e.what();
  }
  try {
    parse_model_config(R"({"model_type": "gemma3"})", "config.json");
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("\"text_config\""), std::string::npos) << e.what();
  }
}

TEST(Gemma3, RotaryTablesFollowTheLayerTypes) {
  const std::string base = R"({"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 4, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32, "vocab_size": 10)";
  EXPECT_EQ(parse_model_config(base + R"(, "layer_types": ["full_attention", "full_attention"]})", "t").rotary_tables,
            1);
  EXPECT_EQ(
      parse_model_config(base + R"(, "layer_types": ["sliding_attention", "full_attention"]})", "t").rotary_tables, 2);
  // Without layer_types, every sliding_window_pattern-th layer is full: 4 layers with a pattern of 6 are all sliding.
  EXPECT_EQ(parse_model_config(base + "}", "t").rotary_tables, 1);
  EXPECT_EQ(parse_model_config(base + R"(, "sliding_window_pattern": 2})", "t").rotary_tables, 2);
}

TEST(Olmo2, NormsFollowTheSublayersAndQkNormsSpanTheProjection) {
  const ModelSpec m = load_model("olmo2-7b");
  EXPECT_TRUE(m.post_norms);
  EXPECT_TRUE(m.qk_norm);
  EXPECT_TRUE(m.qk_norm_whole_projection);
  EXPECT_EQ(m.max_position_embeddings, 4096);
  // Per layer: q, k, v, o 4096x4096 (32 heads of 128, no GQA), three 4096x11008; post-attention and
  // post-feedforward norms (4096 each) and q_norm, k_norm over the whole projection (4096 each).
  const std::int64_t layer = 4 * 4096LL * 4096 + 3 * 4096LL * 11008 + 2 * 4096 + 2 * 4096;
  const ParameterCounts c = count_parameters(m);
  EXPECT_EQ(c.norms, 32 * 4 * 4096 + 4096);
  EXPECT_EQ(c.total, 2 * 100'352LL * 4096 + 32 * layer + 4096);
  EXPECT_EQ(c.total, 7'298'617'344);
  EXPECT_EQ(rounded(c.total, 1e9, 1), 7.3);  // "OLMo 2 7B": 7.3B on its model page
}

TEST(Olmo2, ThirteenBEqualsItsCheckpoint) {
  // allenai/OLMo-2-1124-13B's model.safetensors.index.json: total_size 54,864,793,600 bytes of fp32.
  EXPECT_EQ(count_parameters(load_model("olmo2-13b")).total, 54'864'793'600 / 4);
}

TEST(PhiMoe, LayerNormsBiasesAndTheRouter) {
  const ModelSpec m = load_model("phi3.5-moe");
  EXPECT_TRUE(m.layer_norm);
  EXPECT_TRUE(m.lm_head_bias);
  EXPECT_TRUE(m.attention_bias);
  EXPECT_TRUE(m.attention_out_bias);
  EXPECT_EQ(m.moe_intermediate_size, 6400);
  const auto mods = layer_linear_modules(m);
  ASSERT_EQ(mods.size(), 7u);
  EXPECT_EQ(mods[4].name, "mlp.router");
  EXPECT_TRUE(mods[4].nn_linear);  // PhimoeTopKRouter is an nn.Linear: all-linear wraps it
  EXPECT_EQ(mods[5].name, "experts.gate_up_proj");
  EXPECT_EQ(mods[5].out_features, 2 * 6400);
  EXPECT_EQ(mods[5].count, 16);
  EXPECT_FALSE(mods[5].nn_linear);
  EXPECT_EQ(mods[6].name, "experts.down_proj");

  // Per layer: q and o 4096x4096 with biases, k and v 4096x1024 (8 kv heads of 128) with biases; router
  // 4096x16; 16 experts of gate_up 4096x12800 and down 6400x4096; two LayerNorms (weight and bias).
  const std::int64_t attention = 2 * (4096LL * 4096 + 4096) + 2 * (4096LL * 1024 + 1024);
  const std::int64_t expert = 4096LL * 12800 + 6400LL * 4096;
  const std::int64_t layer = attention + 4096 * 16 + 16 * expert + 2 * 2 * 4096;
  // Embedding and output layer 32064x4096, the output layer's bias, the final LayerNorm.
  const std::int64_t outside = 2 * 32'064LL * 4096 + 32'064 + 2 * 4096;
  const ParameterCounts c = count_parameters(m);
  EXPECT_EQ(c.total, 32 * layer + outside);
  EXPECT_EQ(c.total, 41'873'153'344);
  // Two of the 16 experts a token: 14 experts' matrices idle.
  EXPECT_EQ(c.activated, c.total - 32 * 14 * expert);
  // Microsoft: "41.9B parameters", "6.6B active parameters" (the embedding counted).
  EXPECT_EQ(rounded(c.total, 1e9, 1), 41.9);
  EXPECT_EQ(rounded(c.activated, 1e9, 1), 6.6);
}

TEST(DeepSeek, V2LiteHasNoQueryCompressionAndOneDenseLayer) {
  const ModelSpec m = load_model("deepseek-v2-lite");
  EXPECT_TRUE(m.is_mla());
  EXPECT_EQ(m.q_lora_rank, 0);  // "q_lora_rank": null
  EXPECT_EQ(m.head_dim, 128 + 64);
  EXPECT_EQ(m.value_head_dim(), 128);
  EXPECT_EQ(m.rotary_dim(), 64);
  EXPECT_EQ(m.dense_layers, 1);
  EXPECT_EQ(m.shared_expert_intermediate_size, 2 * 1408);
  const auto mods = layer_linear_modules(m);
  ASSERT_EQ(mods.size(), 10u);  // 4 attention, router, 2 fused expert tensors, 3 shared-expert matrices
  EXPECT_EQ(mods[0].name, "q_proj");
  EXPECT_EQ(mods[0].out_features, 16 * 192);
  EXPECT_EQ(mods[1].name, "kv_a_proj_with_mqa");
  EXPECT_EQ(mods[1].out_features, 512 + 64);
  EXPECT_EQ(mods[2].name, "kv_b_proj");
  EXPECT_EQ(mods[2].out_features, 16 * (128 + 128));
  EXPECT_EQ(mods[4].name, "mlp.gate");
  EXPECT_TRUE(mods[4].nn_linear);  // DeepseekV2Moe's gate is an nn.Linear

  // Attention: q_proj 2048x3072, kv_a_proj_with_mqa 2048x576, kv_b_proj 512x4096, o_proj 2048x2048;
  // kv_a_layernorm 512; input and post-attention norms 2 x 2048.
  const std::int64_t attention = 2048LL * 3072 + 2048LL * 576 + 512LL * 4096 + 2048LL * 2048 + 512 + 2 * 2048;
  const std::int64_t dense_mlp = 3 * 2048LL * 10944;
  const std::int64_t expert = 3 * 2048LL * 1408;
  // Router 2048x64, 64 routed experts, the shared MLP 2 experts wide.
  const std::int64_t moe_mlp = 2048 * 64 + 64 * expert + 3 * 2048LL * 2816;
  const std::int64_t outside = 2 * 102'400LL * 2048 + 2048;
  const ParameterCounts c = count_parameters(m);
  EXPECT_EQ(c.total, (attention + dense_mlp) + 26 * (attention + moe_mlp) + outside);
  EXPECT_EQ(c.total, 15'706'484'224);
  EXPECT_EQ(c.activated, c.total - 26 * (64 - 6) * expert);
  // DeepSeek: "15.7B total parameters, of which 2.4B are activated for each token". DeepSeek leaves the
  // embedding table (a lookup) out of the activated figure: 2,451,435,008, which it truncates to 2.4B.
  EXPECT_EQ(rounded(c.total, 1e9, 1), 15.7);
  EXPECT_EQ(c.activated - c.embedding, 2'451'435'008);
  EXPECT_EQ(std::floor(static_cast<double>(c.activated - c.embedding) / 1e8), 24);
}

TEST(DeepSeek, V3CountsWhatTransformersBuilds) {
  const ModelSpec m = load_model("deepseek-v3");
  EXPECT_EQ(m.q_lora_rank, 1536);
  EXPECT_EQ(m.kv_lora_rank, 512);
  EXPECT_EQ(m.dense_layers, 3);
  EXPECT_EQ(m.num_experts, 256);
  EXPECT_EQ(m.experts_per_token, 8);
  const auto mods = layer_linear_modules(m);
  EXPECT_EQ(mods[0].name, "q_a_proj");
  EXPECT_EQ(mods[1].name, "q_b_proj");
  EXPECT_EQ(mods[1].in_features, 1536);
  EXPECT_EQ(mods[5].name, "mlp.gate");
  EXPECT_FALSE(mods[5].nn_linear);  // DeepseekV3TopkRouter holds a bare weight

  // Attention: q_a 7168x1536, q_b 1536x(128x192), kv_a 7168x576, kv_b 512x(128x256), o (128x128)x7168;
  // q_a_layernorm 1536 and kv_a_layernorm 512; two norms of 7168.
  const std::int64_t attention =
      7168LL * 1536 + 1536LL * 24576 + 7168LL * 576 + 512LL * 32768 + 16384LL * 7168 + 1536 + 512 + 2 * 7168;
  const std::int64_t dense_mlp = 3 * 7168LL * 18432;
  const std::int64_t expert = 3 * 7168LL * 2048;
  const std::int64_t moe_mlp = 7168LL * 256 + 256 * expert + expert;  // router, routed experts, one shared
  const std::int64_t outside = 2 * 129'280LL * 7168 + 7168;
  const ParameterCounts c = count_parameters(m);
  EXPECT_EQ(c.total, 3 * (attention + dense_mlp) + 58 * (attention + moe_mlp) + outside);
  EXPECT_EQ(c.total, 671'026'404'352);
  // DeepSeek: "671B total parameters with 37B activated for each token" (the multi-token-prediction
  // module, which transformers does not build, is outside the 671B). Activated without the embedding
  // table, as for V2-Lite: 36.6B.
  EXPECT_EQ(rounded(c.total, 1e9, 0), 671);
  EXPECT_EQ(c.activated, c.total - 58 * (256 - 8) * expert);
  EXPECT_EQ(rounded(c.activated - c.embedding, 1e9, 0), 37);
}

TEST(DeepSeek, ConfigDefaultsAndNulls) {
  const std::string base = R"({"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 4,
      "num_attention_heads": 4, "vocab_size": 10, "n_routed_experts": 8, "num_experts_per_tok": 2,
      "moe_intermediate_size": 16, "intermediate_size": 128)";
  // Absent fields take DeepseekV3Config's defaults: q_lora_rank 1536, three dense layers, one shared expert.
  const ModelSpec defaults = parse_model_config(base + "}", "t");
  EXPECT_EQ(defaults.q_lora_rank, 1536);
  EXPECT_EQ(defaults.kv_lora_rank, 512);
  EXPECT_EQ(defaults.dense_layers, 3);
  EXPECT_EQ(defaults.shared_expert_intermediate_size, 16);
  // An explicit null q_lora_rank is a plain q_proj; first_k_dense_replace past the layers makes all dense.
  const ModelSpec no_q = parse_model_config(base + R"(, "q_lora_rank": null, "first_k_dense_replace": 9})", "t");
  EXPECT_EQ(no_q.q_lora_rank, 0);
  EXPECT_EQ(layer_linear_modules(no_q)[0].name, "q_proj");
  EXPECT_EQ(no_q.dense_layers, 4);
  // Dense layers need intermediate_size.
  const std::string no_dense_size = R"({"model_type": "deepseek_v2", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "vocab_size": 10, "n_routed_experts": 8, "num_experts_per_tok": 2,
      "moe_intermediate_size": 16, "first_k_dense_replace": 1})";
  EXPECT_THROW(parse_model_config(no_dense_size, "t"), InputError);
}

TEST(ParameterCounts, ActivatedOfADenseModelIsTheTotal) {
  const ParameterCounts c = count_parameters(load_model("qwen2.5-7b"));
  EXPECT_EQ(c.activated, c.total);
  // Qwen3-30B-A3B: 8 of 128 experts of 3 x 2048 x 768 in each of 48 layers; Qwen's "3.3B activated"
  // is 3.35B truncated.
  const ParameterCounts moe = count_parameters(load_model("qwen3-30b-a3b"));
  EXPECT_EQ(moe.activated, moe.total - 48LL * 120 * 3 * 2048 * 768);
  EXPECT_EQ(std::floor(static_cast<double>(moe.activated) / 1e8), 33);
}

}  // namespace
}  // namespace trainfit
