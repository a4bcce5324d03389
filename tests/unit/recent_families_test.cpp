// The families of issue 37 that build Llama's layers: SmolLM3 (no rotary embedding in every fourth
// layer) and Granite (multipliers on the residual stream and the logits). Their parameter counts by
// hand from transformers' module tree and against the published figures; what they keep is Llama's,
// what they run is Llama's less or more a few elementwise passes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

// A built-in's config.json with another model_type: the same shapes read as that family.
ModelSpec as_family(const std::string& builtin, const std::string& model_type) {
  ModelSpec m = load_model(builtin);
  m.model_type = model_type;
  m.rope_free_layers = 0;
  m.scaled_residuals = m.scaled_logits = false;
  return m;
}

TEST(SmolLM3, CountsAndNoRopeLayers) {
  const ModelSpec m = load_model("HuggingFaceTB/SmolLM3-3B");
  EXPECT_EQ(m.model_type, "smollm3");
  EXPECT_TRUE(m.tie_word_embeddings);
  EXPECT_EQ(m.rope_free_layers, 9);  // layers 4, 8, ..., 36
  // Per layer: q and o 2048 x 2048, k and v 2048 x 512 (4 kv heads of 128), three 2048 x 11008 MLP
  // matrices, two norms; the tied embedding 128256 x 2048 and the final norm.
  const std::int64_t layer = 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 11008 + 2 * 2048;
  const ParameterCounts c = count_parameters(m);
  EXPECT_EQ(c.total, 128'256LL * 2048 + 36 * layer + 2048);
  EXPECT_EQ(c.total, 3'075'098'624);
  EXPECT_NEAR(static_cast<double>(c.total), published_parameters("smollm3-3b").total, 0.005e9);
}

TEST(SmolLM3, NoRopeLayersAreReadOrDerivedFromTheInterval) {
  const std::string head = R"({"model_type": "smollm3", "hidden_size": 64, "num_hidden_layers": 8,
      "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 100)";
  EXPECT_EQ(parse_model_config(head + "}", "t").rope_free_layers, 2);  // every 4th
  EXPECT_EQ(parse_model_config(head + R"(, "no_rope_layer_interval": 2})", "t").rope_free_layers, 4);
  EXPECT_EQ(parse_model_config(head + R"(, "no_rope_layers": [1,0,1,1,1,1,1,0]})", "t").rope_free_layers, 2);
  EXPECT_THROW(
      {
        try {
          (void)parse_model_config(head + R"(, "no_rope_layers": [1,0]})", "t");
        } catch (const InputError& e) {
          EXPECT_NE(std::string(e.what()).find("\"no_rope_layers\""), std::string::npos) << e.what();
          throw;
        }
      },
      InputError);
  EXPECT_THROW((void)parse_model_config(head + R"(, "no_rope_layers": [1,2,1,1,1,1,1,0]})", "t"), InputError);
}

TEST(Granite, CountsAndMultipliers) {
  for (const auto& [name, h, inter, kv] : {std::tuple{"ibm-granite/granite-3.3-2b-instruct", 2048LL, 8192LL, 512LL},
                                           std::tuple{"granite-3.3-8b-base", 4096LL, 12800LL, 1024LL}}) {
    const ModelSpec m = load_model(name);
    EXPECT_EQ(m.model_type, "granite") << name;
    EXPECT_TRUE(m.scaled_residuals && m.scaled_logits) << name;
    EXPECT_TRUE(m.tie_word_embeddings) << name;
    // q and o h x h, k and v h x 8 kv heads, three MLP matrices, two norms; 40 layers; the tied
    // 49159-token embedding and the final norm.
    const std::int64_t layer = 2 * h * h + 2 * h * kv + 3 * h * inter + 2 * h;
    EXPECT_EQ(count_parameters(m).total, 49'159LL * h + 40 * layer + h) << name;
  }
  EXPECT_EQ(count_parameters(load_model("granite3.3-2b")).total, 2'533'539'840);
  EXPECT_EQ(count_parameters(load_model("granite3.3-8b")).total, 8'170'864'640);
}

// Neither family keeps a tensor Llama's layers would not: the same shapes plan the same memory.
// The time differs by the rotary embedding SmolLM3 leaves out and the scalings Granite adds.
TEST(RecentFamilies, KeepWhatLlamaKeepsAndRunASlightlyDifferentStep) {
  TrainingSetup s;
  s.seq = 2048;
  s.batch = 2;
  const GpuSpec gpu = find_gpu("h100-sxm");
  for (const char* name : {"smollm3-3b", "granite3.3-2b"}) {
    for (const Method method : {Method::lora, Method::full}) {
      s.method = method;
      const Plan own = make_plan(load_model(name), s, gpu);
      const Plan llama = make_plan(as_family(name, "llama"), s, gpu);
      EXPECT_EQ(own.memory.peak_allocated_bytes, llama.memory.peak_allocated_bytes) << name;
      if (std::string(name) == "smollm3-3b") {
        EXPECT_LT(own.time.step_seconds, llama.time.step_seconds) << name;
      } else {
        EXPECT_GT(own.time.step_seconds, llama.time.step_seconds) << name;
      }
    }
  }
}

// `trainfit models` shows the publisher's figure beside trainfit's: every built-in with one is
// within 1% of it (the checkpoints whose safetensors count is published are held to it exactly in
// their families' tests).
TEST(PublishedParameters, EveryBuiltinIsWithinOnePercentOfItsPublishedCount) {
  for (const std::string& name : builtin_model_names()) {
    const PublishedParameters p = published_parameters(name);
    if (p.total <= 0) continue;
    const double ours = static_cast<double>(count_parameters(load_model(name)).total);
    EXPECT_NEAR(ours / p.total, 1.0, 0.01) << name;
  }
  EXPECT_EQ(published_parameters("no-such-model").total, 0);
  EXPECT_GT(published_parameters("mixtral-8x7b").active, 0);
}

}  // namespace
}  // namespace trainfit

namespace trainfit {
namespace {

// A decoder family trainfit does not read plans as Llama's layers, with a warning that says so and
// names the config's fields it did not read; an encoder, a config missing its shapes and a mixture
// of experts are refused with what is missing.
TEST(OtherDecoderFamilies, PlanAsLlamaLayersWithANamedWarning) {
  const std::string cohere = R"({"architectures": ["CohereForCausalLM"], "model_type": "cohere",
      "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "intermediate_size": 512, "vocab_size": 1000, "logit_scale": 0.125, "use_qk_norm": false,
      "layer_norm_eps": 1e-05, "rope_theta": 10000, "tie_word_embeddings": true, "torch_dtype": "bfloat16"})";
  const ModelSpec m = parse_model_config(cohere, "cohere.json");
  EXPECT_TRUE(m.generic_decoder);
  EXPECT_EQ(m.model_type, "cohere");
  EXPECT_EQ(m.unread_fields, std::vector<std::string>{"logit_scale"});  // use_qk_norm false switches nothing on
  // Its shapes are Llama's: the same fields as a llama config count the same parameters.
  ModelSpec llama = m;
  llama.model_type = "llama";
  llama.generic_decoder = false;
  EXPECT_EQ(count_parameters(m).total, count_parameters(llama).total);
  TrainingSetup s;
  const Plan p = make_plan(m, s, find_gpu("h100-sxm"));
  ASSERT_FALSE(p.warnings.empty());
  EXPECT_NE(p.warnings.front().find("model_type cohere is not a family trainfit reads"), std::string::npos);
  EXPECT_NE(p.warnings.front().find("logit_scale"), std::string::npos);
  EXPECT_EQ(p.memory.peak_allocated_bytes, make_plan(llama, s, find_gpu("h100-sxm")).memory.peak_allocated_bytes);
  // Liger patches by model_type: nothing of an unknown family.
  s.kernels = Kernels::liger;
  EXPECT_THROW((void)make_plan(m, s, find_gpu("h100-sxm")), SettingError);
}

std::string refusal(const std::string& text) {
  try {
    (void)parse_model_config(text, "c.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(read)";
}

TEST(OtherDecoderFamilies, EncodersMissingShapesAndExpertsAreRefused) {
  EXPECT_NE(refusal(R"({"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": 768})")
                .find("no ForCausalLM"),
            std::string::npos);
  const std::string missing = refusal(R"({"model_type": "x", "hidden_size": 64, "num_hidden_layers": 2})");
  EXPECT_NE(missing.find("\"num_attention_heads\", \"intermediate_size\", \"vocab_size\" are missing"),
            std::string::npos)
      << missing;
  const std::string moe = refusal(R"({"model_type": "x", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100, "num_local_experts": 8})");
  EXPECT_NE(moe.find("mixture of experts (\"num_local_experts\": 8)"), std::string::npos) << moe;
  EXPECT_NE(moe.find("qwen3_moe"), std::string::npos) << moe;  // the families it does read
}

}  // namespace
}  // namespace trainfit

namespace trainfit {
namespace {

// gpt-oss: every layer's attention with biased q/k/v/o and a sink logit a head, a biased router
// (mlp.router, no nn.Linear) over num_local_experts experts whose fused gate_up and down carry
// biases too, two RMSNorms; untied embedding and output layer. The model card's totals, and its
// active figures, which leave the embedding out.
TEST(GptOss, CountsAgainstTheModelCard) {
  for (const auto& [name, layers, experts] :
       {std::tuple{"openai/gpt-oss-20b", 24LL, 32LL}, std::tuple{"gpt-oss-120b", 36LL, 128LL}}) {
    const ModelSpec m = load_model(name);
    EXPECT_EQ(m.model_type, "gpt_oss");
    EXPECT_TRUE(m.attention_sinks && m.expert_bias && m.attention_bias && m.attention_out_bias);
    EXPECT_EQ(m.sliding_window, 128);
    EXPECT_EQ(m.sliding_layers, layers / 2);
    const std::int64_t h = 2880, q = 64 * 64, kv = 8 * 64, inter = 2880;
    const std::int64_t attention = (h * q + q) + 2 * (h * kv + kv) + (q * h + h) + 64;
    const std::int64_t router = experts * h + experts;
    const std::int64_t expert = (h * 2 * inter + 2 * inter) + (inter * h + h);
    const std::int64_t layer = attention + router + experts * expert + 2 * h;
    const ParameterCounts c = count_parameters(m);
    EXPECT_EQ(c.total, 2 * 201'088LL * h + layers * layer + h) << name;
    const PublishedParameters p = published_parameters(m.name);
    EXPECT_NEAR(static_cast<double>(c.total) / p.total, 1.0, 0.0005) << name;
    EXPECT_NEAR(static_cast<double>(c.activated - c.embedding) / p.active, 1.0, 0.005) << name;
  }
}

}  // namespace
}  // namespace trainfit

namespace trainfit {
namespace {

// Mistral Small 3.1's multimodal config: its text_config names its family (mistral), which is read
// and planned, with the warning that the Pixtral tower is not.
TEST(MistralSmall31, PlansItsTextModelByItsHubId) {
  const ModelSpec m = load_model("mistralai/Mistral-Small-3.1-24B-Instruct-2503");
  EXPECT_EQ(m.model_type, "mistral");
  EXPECT_TRUE(m.text_of_multimodal);
  EXPECT_EQ(m.multimodal_type, "mistral3");
  EXPECT_EQ(m.sliding_window, 0);  // text_config's explicit null
  // q 5120 x 4096, k and v 5120 x 1024, o 4096 x 5120, three 5120 x 32768 MLP matrices, two norms; 40
  // layers; untied 131072-token embedding and output layer; the final norm.
  const std::int64_t layer = 2 * 5120 * 4096 + 2 * 5120 * 1024 + 3 * 5120 * 32768 + 2 * 5120;
  const ParameterCounts c = count_parameters(m);
  EXPECT_EQ(c.total - c.vision, 2 * 131'072LL * 5120 + 40 * layer + 5120);
  // Pixtral's 24 unbiased layers (q/k/v/o, gate/up/down, two RMSNorms), its unbiased patch
  // convolution and ln_pre; the projector's RMSNorm, 2 x 2 patch merger and two linears.
  const std::int64_t pixtral = 24 * (4 * 1024 * 1024 + 3 * 1024 * 4096 + 2 * 1024) + 3 * 14 * 14 * 1024 + 1024;
  EXPECT_EQ(c.vision, pixtral + 1024 + 4096 * 1024 + 1024 * 5120 + 5120 * 5120);
  EXPECT_EQ(c.total, 24'011'361'280);
  TrainingSetup s;
  const Plan p = make_plan(m, s, find_gpu("h200"));
  ASSERT_FALSE(p.warnings.empty());
  EXPECT_NE(p.warnings.back().find("a multimodal mistral3 config"), std::string::npos) << p.warnings.back();
  s.kernels = Kernels::liger;  // Liger's patches for Mistral3ForConditionalGeneration are not read
  EXPECT_THROW((void)make_plan(m, s, find_gpu("h200")), SettingError);
}

// GLM-4.5-Air: one dense layer, then 45 of DeepSeek-V3's MoE layers (a bare fp32-scored router, 128
// fused experts, one shared MLP) behind grouped-query attention with biased q, k, v (not o).
TEST(Glm45Air, CountsAgainstThePublishedTotal) {
  const ModelSpec m = load_model("zai-org/GLM-4.5-Air");
  EXPECT_EQ(m.model_type, "glm4_moe");
  EXPECT_EQ(m.dense_layers, 1);
  EXPECT_TRUE(m.router_in_fp32);
  EXPECT_TRUE(m.attention_bias);
  EXPECT_FALSE(m.attention_out_bias);
  EXPECT_FALSE(m.is_mla());
  const std::int64_t h = 4096, q = 96 * 128, kv = 8 * 128, e = 128, mi = 1408;
  const std::int64_t attention = (h * q + q) + 2 * (h * kv + kv) + q * h;
  const std::int64_t moe = e * h + e * (h * 2 * mi + mi * h) + 3 * h * mi;
  const std::int64_t dense = 3 * h * 10944;
  const ParameterCounts c = count_parameters(m);
  EXPECT_EQ(c.total, 2 * 151'552LL * h + 46 * (attention + 2 * h) + dense + 45 * moe + h);
  EXPECT_NEAR(static_cast<double>(c.total) / published_parameters(m.name).total, 1.0, 0.01);
}

// GLM-4.5 (and 4.6, the same shapes): three dense layers, then 89 MoE layers of 160 experts, and
// per-head q/k RMSNorms (use_qk_norm), which the Air model has not. 355B published with the
// multi-token-prediction layer, which transformers does not build.
TEST(Glm45, CountsAgainstThePublishedTotal) {
  for (const char* id : {"zai-org/GLM-4.5", "zai-org/GLM-4.6"}) {
    const ModelSpec m = load_model(id);
    EXPECT_EQ(m.dense_layers, 3) << id;
    const std::int64_t h = 5120, q = 96 * 128, kv = 8 * 128, e = 160, mi = 1536;
    const std::int64_t attention = (h * q + q) + 2 * (h * kv + kv) + q * h + 2 * 128;
    const std::int64_t moe = e * h + e * (h * 2 * mi + mi * h) + 3 * h * mi;
    const ParameterCounts c = count_parameters(m);
    EXPECT_EQ(c.total, 2 * 151'552LL * h + 92 * (attention + 2 * h) + 3 * (3 * h * 12288) + 89 * moe + h) << id;
    EXPECT_NEAR(static_cast<double>(c.total) / published_parameters(m.name).total, 1.0, 0.01) << id;
  }
  EXPECT_EQ(load_model("zai-org/GLM-4.6").max_position_embeddings, 202'752);
}

}  // namespace
}  // namespace trainfit

namespace trainfit {
namespace {

std::int64_t breakdown_bytes(const Plan& p, const std::string& category) {
  for (const MemoryTerm& t : p.memory.breakdown)
    if (t.category == category) return t.bytes;
  return -1;
}

// bitsandbytes replaces nn.Linear modules only: transformers 5's fused 3-D experts stay in the
// compute dtype under QLoRA, and only the nn.Linear matrices get 4-bit storage and constants.
TEST(QloraOnFusedExperts, TheExpertsStayInTheComputeDtype) {
  const ModelSpec m = load_model("mixtral-8x7b");
  TrainingSetup s;
  s.method = Method::qlora;
  s.weights = DType::nf4;
  const Plan p = make_plan(m, s, find_gpu("h200"));
  const double experts = 32.0 * 8 * 3 * 4096 * 14336;  // gate_up and down of 8 experts, 32 layers
  const double attention = 32.0 * (2 * 4096 * 4096 + 2 * 4096 * 1024);
  const double rest = static_cast<double>(count_parameters(m).total) - experts - attention;
  const double weights = static_cast<double>(breakdown_bytes(p, "weights"));
  // bf16 experts and the rest, 4-bit attention; the allocator's rounding on top (well under 1%).
  EXPECT_NEAR(weights / (2.0 * (experts + rest) + 0.5 * attention), 1.0, 0.01);
  // The constants are the attention matrices' alone (one fp32 absmax a 64-block, double-quantised).
  EXPECT_LT(static_cast<double>(breakdown_bytes(p, "quant_constants")), attention * 0.05);
}

}  // namespace
}  // namespace trainfit

namespace trainfit {
namespace {

// A hybrid family (Mamba-2 or linear-attention layers beside attention) is no Llama: refused,
// naming the field that says so, whichever it is.
TEST(OtherDecoderFamilies, HybridLayersAreRefusedByTheFieldThatNamesThem) {
  const std::string base = R"("architectures": ["BambaForCausalLM"], "model_type": "bamba",
      "hidden_size": 1536, "num_hidden_layers": 4, "num_attention_heads": 12, "intermediate_size": 512,
      "vocab_size": 1000)";
  for (const std::string& extra : {std::string(R"("mamba_n_heads": 48)"),
                                   std::string(R"("layer_types": ["mamba", "attention", "mamba", "mamba"])"),
                                   std::string(R"("hybrid_override_pattern": "M-M*")")}) {
    try {
      (void)parse_model_config("{" + base + ", " + extra + "}", "config.json");
      ADD_FAILURE() << extra << " planned";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("not all attention layers"), std::string::npos) << e.what();
    }
  }
  // Attention kinds alone (sliding and full) are attention layers.
  EXPECT_NO_THROW((void)parse_model_config(
      "{" + base +
          R"(, "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]})",
      "config.json"));
}

}  // namespace
}  // namespace trainfit
