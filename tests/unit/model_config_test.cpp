// parse_model_config: what it reads from each family, and how it rejects bad input.
#include <string>

#include <gtest/gtest.h>

#include "trainfit/error.hpp"
#include "trainfit/model.hpp"

namespace trainfit {
namespace {

const std::string kLlama = R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
  "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 100)";

// The message of the InputError that parsing `text` throws; fails the test if none is thrown.
std::string error_of(const std::string& text) {
  try {
    parse_model_config(text, "config.json");
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError for: " << text;
  return {};
}

TEST(ModelConfig, EveryBuiltinParses) {
  const auto names = builtin_model_names();
  ASSERT_GE(names.size(), 19u);
  for (const std::string& name : names) {
    const ModelSpec m = load_model(name);
    EXPECT_EQ(m.name, name);
    EXPECT_GT(count_parameters(m).total, 0) << name;
  }
}

TEST(ModelConfig, CatalogueOrderIsFamilyThenSize) {
  const auto names = builtin_model_names();
  ASSERT_GE(names.size(), 7u);
  EXPECT_EQ(names[0], "qwen2.5-0.5b");
  EXPECT_EQ(names[1], "qwen2.5-1.5b");
  EXPECT_EQ(names[6], "qwen2.5-72b");
}

TEST(ModelConfig, ReadsTheShapeOfQwen25_7B) {
  const ModelSpec m = load_model("qwen2.5-7b");
  EXPECT_EQ(m.model_type, "qwen2");
  EXPECT_EQ(m.hidden_size, 3584);
  EXPECT_EQ(m.num_layers, 28);
  EXPECT_EQ(m.num_heads, 28);
  EXPECT_EQ(m.num_kv_heads, 4);
  EXPECT_EQ(m.head_dim, 128);
  EXPECT_EQ(m.intermediate_size, 18944);
  EXPECT_EQ(m.vocab_size, 152064);
  EXPECT_FALSE(m.tie_word_embeddings);
  EXPECT_TRUE(m.attention_bias);
  EXPECT_FALSE(m.attention_out_bias);
  EXPECT_EQ(m.max_position_embeddings, 131072);
  EXPECT_FALSE(m.is_moe());
}

TEST(ModelConfig, FamilyDefaults) {
  const ModelSpec gemma2 = load_model("gemma2-9b");
  EXPECT_EQ(gemma2.norms_per_layer, 4);
  EXPECT_TRUE(gemma2.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(gemma2.final_logit_softcapping, 30.0);
  EXPECT_EQ(gemma2.head_dim, 256);
  EXPECT_EQ(gemma2.hidden_act, "gelu_pytorch_tanh");

  const ModelSpec mixtral = load_model("mixtral-8x7b");
  EXPECT_EQ(mixtral.num_experts, 8);
  EXPECT_EQ(mixtral.experts_per_token, 2);
  EXPECT_EQ(mixtral.moe_intermediate_size, 14336);

  // Qwen3 defaults head_dim to 128 rather than hidden / heads.
  const ModelSpec qwen3 = parse_model_config(R"({"model_type": "qwen3", "hidden_size": 1024,
      "intermediate_size": 3072, "num_attention_heads": 16, "num_key_value_heads": 8, "num_hidden_layers": 2,
      "vocab_size": 100})", "t");
  EXPECT_EQ(qwen3.head_dim, 128);
  EXPECT_TRUE(qwen3.qk_norm);

  // null means "use the default", as in transformers.
  const ModelSpec nulls = parse_model_config(kLlama + R"(, "num_key_value_heads": null, "tie_word_embeddings": null})",
                                             "t");
  EXPECT_EQ(nulls.num_kv_heads, 4);
  EXPECT_FALSE(nulls.tie_word_embeddings);
}

TEST(ModelConfig, GemmaTieCanBeTurnedOff) {
  const ModelSpec m = parse_model_config(R"({"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100, "tie_word_embeddings": false,
      "final_logit_softcapping": null})", "t");
  EXPECT_FALSE(m.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(m.final_logit_softcapping, 0.0);
}

TEST(ModelConfigErrors, NotJson) {
  const std::string e = error_of(R"({"model_type": "llama", "hidden_size": 40)");
  EXPECT_NE(e.find("config.json: not valid JSON"), std::string::npos) << e;
  EXPECT_NE(error_of("").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("\xff\xfe").find("not valid JSON"), std::string::npos);
}

TEST(ModelConfigErrors, NotAnObject) {
  EXPECT_NE(error_of("[1, 2]").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(error_of("42").find("expected a JSON object"), std::string::npos);
}

TEST(ModelConfigErrors, UnknownOrMissingFamilyListsSupported) {
  const std::string unknown = error_of(R"({"model_type": "bert", "hidden_size": 768})");
  EXPECT_NE(unknown.find("\"bert\" is not supported"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("qwen3_moe"), std::string::npos) << unknown;
  const std::string missing = error_of(R"({"hidden_size": 768})");
  EXPECT_NE(missing.find("missing required field \"model_type\""), std::string::npos) << missing;
  EXPECT_NE(missing.find("llama"), std::string::npos) << missing;
  EXPECT_NE(error_of(R"({"model_type": 7})").find("model_type 7 is not supported"), std::string::npos);
}

TEST(ModelConfigErrors, MissingRequiredField) {
  const std::string e = error_of(R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
      "num_hidden_layers": 2, "vocab_size": 100})");
  EXPECT_EQ(e, "config.json: missing required field \"intermediate_size\"");
}

TEST(ModelConfigErrors, WrongTypes) {
  EXPECT_EQ(error_of(kLlama + R"(, "hidden_size": "64"})"),
            "config.json: field \"hidden_size\" must be a positive integer (got \"64\")");
  EXPECT_EQ(error_of(kLlama + R"(, "num_hidden_layers": 2.5})"),
            "config.json: field \"num_hidden_layers\" must be a positive integer (got 2.5)");
  EXPECT_EQ(error_of(kLlama + R"(, "vocab_size": [1]})"),
            "config.json: field \"vocab_size\" must be a positive integer (got an array)");
  EXPECT_EQ(error_of(kLlama + R"(, "tie_word_embeddings": "yes"})"),
            "config.json: field \"tie_word_embeddings\" must be true or false (got \"yes\")");
  EXPECT_EQ(error_of(kLlama + R"(, "hidden_act": 3})"), "config.json: field \"hidden_act\" must be a string (got 3)");
}

TEST(ModelConfigErrors, NegativeAndZeroSizes) {
  EXPECT_EQ(error_of(kLlama + R"(, "hidden_size": -5})"),
            "config.json: field \"hidden_size\" must be a positive integer (got -5)");
  EXPECT_EQ(error_of(kLlama + R"(, "num_attention_heads": 0})"),
            "config.json: field \"num_attention_heads\" must be a positive integer (got 0)");
  EXPECT_NE(error_of(kLlama + R"(, "head_dim": -1})").find("\"head_dim\""), std::string::npos);
}

TEST(ModelConfigErrors, HugeValues) {
  EXPECT_EQ(error_of(kLlama + R"(, "hidden_size": 5000000})"),
            "config.json: field \"hidden_size\" must be at most 1000000 (got 5000000)");
  EXPECT_NE(error_of(kLlama + R"(, "num_hidden_layers": 10001})").find("\"num_hidden_layers\" must be at most 10000"),
            std::string::npos);
  EXPECT_NE(error_of(kLlama + R"(, "vocab_size": 18446744073709551615})").find("\"vocab_size\" must be at most"),
            std::string::npos);
  EXPECT_NE(error_of(kLlama + R"(, "vocab_size": 1e400})").find("config.json"), std::string::npos);
  // Each field within bounds, but together far past any real model.
  const std::string e = error_of(R"({"model_type": "mixtral", "hidden_size": 1000000, "intermediate_size": 10000000,
      "num_attention_heads": 1, "num_hidden_layers": 10000, "vocab_size": 10, "num_local_experts": 100000,
      "num_experts_per_tok": 1})");
  EXPECT_NE(e.find("parameters"), std::string::npos) << e;
  EXPECT_NE(e.find("\"hidden_size\""), std::string::npos) << e;
}

TEST(ModelConfigErrors, HeadsNotDivisibleByKvHeads) {
  EXPECT_EQ(error_of(kLlama + R"(, "num_key_value_heads": 3})"),
            "config.json: field \"num_key_value_heads\" (3) must divide \"num_attention_heads\" (4)");
  EXPECT_NE(error_of(kLlama + R"(, "num_key_value_heads": 8})").find("\"num_key_value_heads\" (8)"), std::string::npos);
}

TEST(ModelConfigErrors, MoreHeadsThanHiddenNeedsHeadDim) {
  EXPECT_NE(error_of(kLlama + R"(, "num_attention_heads": 128, "num_key_value_heads": 1})").find("\"head_dim\""),
            std::string::npos);
}

TEST(ModelConfigErrors, ExpertsPerTokenAboveExperts) {
  const std::string e = error_of(R"({"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128,
      "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100, "num_local_experts": 8,
      "num_experts_per_tok": 9})");
  EXPECT_EQ(e, "config.json: field \"num_experts_per_tok\" (9) must not exceed the number of experts (8)");
}

TEST(ModelConfigErrors, MoeFields) {
  const std::string base = R"({"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 4,
      "num_hidden_layers": 2, "vocab_size": 100, "num_experts": 4, "num_experts_per_tok": 2)";
  EXPECT_EQ(error_of(base + "}"), "config.json: missing required field \"moe_intermediate_size\"");
  EXPECT_NE(error_of(base + R"(, "moe_intermediate_size": 8, "decoder_sparse_step": 0})").find("\"decoder_sparse_step\""),
            std::string::npos);
  EXPECT_NE(error_of(base + R"(, "moe_intermediate_size": 8, "mlp_only_layers": [0]})").find("\"intermediate_size\""),
            std::string::npos);
  EXPECT_NE(error_of(base + R"(, "moe_intermediate_size": 8, "mlp_only_layers": ["a"]})").find("\"mlp_only_layers\""),
            std::string::npos);
  EXPECT_NE(error_of(base + R"(, "moe_intermediate_size": 8, "mlp_only_layers": 3})").find("\"mlp_only_layers\""),
            std::string::npos);
  // All layers sparse: the dense intermediate_size is never built, so it may be absent.
  EXPECT_EQ(parse_model_config(base + R"(, "moe_intermediate_size": 8})", "t").dense_layers, 0);
}

TEST(ModelConfigErrors, MessageNamesTheSource) {
  try {
    parse_model_config("{}", "/models/x/config.json");
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("/models/x/config.json: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace trainfit
