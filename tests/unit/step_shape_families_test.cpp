// What a step of the issue-15 families keeps, by the module structure transformers 5 gives them:
// DeepSeek's latent attention and shared experts, OLMo 2's norms after the sublayers, PhiMoE's
// LayerNorms, Gemma 3's two rotary tables; which modules all-linear reaches; the plan's warnings.
#include <gtest/gtest.h>

#include <algorithm>

#include <string>
#include <vector>

#include "step/step.hpp"
#include "support/saved_tensors.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::detail {
namespace {

using testing::kept;

// DeepSeek's attention and MoE on a few layers, all of them MoE, so that no layer-kind average
// scales the figures below.
ModelSpec small_deepseek(const std::string& type = "deepseek_v3") {
  return parse_model_config(R"({"model_type": ")" + type + R"(", "hidden_size": 1024, "num_hidden_layers": 2,
      "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 1000, "q_lora_rank": 384,
      "kv_lora_rank": 128, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 48,
      "n_routed_experts": 16, "num_experts_per_tok": 4, "n_shared_experts": 1, "moe_intermediate_size": 256,
      "first_k_dense_replace": 0})",
                            "deepseek");
}

TEST(LatentAttention, KeepsTheExpandedKeysAndValuesNotTheCompressedOnes) {
  TrainingSetup s;
  s.lora.dropout = 0;
  s.lora.adapter_dtype = DType::bf16;  // LoRA branches then read their module's input as it is, shared
  const StepShape st = describe_step(small_deepseek(), s).tensors;
  const auto& a = st.layer_activations;
  const double c = 2;  // bf16
  EXPECT_EQ(kept(a, "q_a norm fp32 input"), 4.0 * 384);
  EXPECT_EQ(kept(a, "kv_a norm fp32 input"), 4.0 * 128);
  EXPECT_EQ(kept(a, "query (position-free and rotary parts joined)"), c * 8 * (64 + 32));
  EXPECT_EQ(kept(a, "key (position-free part and the shared rotary key joined)"), c * 8 * (64 + 32));
  // The value is a slice of kv_b_proj's output (keys' position-free part and values, every head).
  EXPECT_EQ(kept(a, "kv_b_proj output (the value is a slice of it)"), c * 8 * (64 + 48));
  EXPECT_EQ(kept(a, "attention output"), c * 8 * 48);  // o_proj's input: heads x v_head_dim
  // The LoRA branches of q_b_proj and kv_b_proj read the norms' outputs, in the compute dtype.
  EXPECT_EQ(kept(a, "q_a norm output"), c * 384);
  EXPECT_EQ(kept(a, "kv_a norm output"), c * 128);
  // The rotary tables are as wide as the rotary part of a head.
  EXPECT_EQ(kept(st.outside_activations, "rotary cos/sin"), 2.0 * c * 32);
  // No key/value repeat: as many key/value heads as query heads.
  s.attention = Attention::eager;
  EXPECT_EQ(kept(describe_step(small_deepseek(), s).tensors.layer_activations, "key repeated to query heads"), -1);
}

TEST(LatentAttention, TheRouterAndTheExpertsAreNotAdaptedByAllLinear) {
  const ModelSpec m = small_deepseek();
  const LayerLinears ls = layer_linears(m, TrainingSetup{});
  for (const auto& l : ls.moe) {
    const bool reached = l.module.name != "mlp.gate" && !l.module.name.starts_with("experts.");
    EXPECT_EQ(l.lora_target, reached) << l.module.name;
  }
  // What adapters on the routed experts would add: r x (in + out) per expert and projection, twice
  // the rank for the fused gate/up (as PEFT's ParamWrapper makes them), every layer.
  const StepShape st = describe_step(m, TrainingSetup{}).tensors;
  EXPECT_EQ(st.params.untargeted_expert_adapter_params, 2.0 * 16 * 16 * (2 * (1024 + 512) + (256 + 1024)));
  // DeepSeek-V2's router is an nn.Linear, which all-linear wraps, but its forward multiplies the
  // weight itself: the adapter keeps nothing.
  const ModelSpec v2 = small_deepseek("deepseek_v2");
  for (const auto& l : layer_linears(v2, TrainingSetup{}).moe)
    if (l.module.name == "mlp.gate") {
      EXPECT_TRUE(l.lora_target);
    }
  EXPECT_EQ(kept(describe_step(v2, TrainingSetup{}).tensors.layer_activations, "mlp.gate lora A output"), -1);
  // In full fine-tuning the router's weight gradient keeps an fp32 copy of the bf16 hidden states.
  TrainingSetup full;
  full.method = Method::full;
  EXPECT_EQ(kept(describe_step(m, full).tensors.layer_activations, "router input (fp32 copy)"), 4.0 * 1024);
  EXPECT_EQ(describe_step(m, full).tensors.params.untargeted_expert_adapter_params, 0);
}

TEST(LatentAttention, SharedExpertsRunForEveryTokenWithoutAGate) {
  TrainingSetup full;
  full.method = Method::full;
  const auto a = describe_step(small_deepseek(), full).tensors.layer_activations;
  EXPECT_EQ(kept(a, "shared expert activation output"), 2.0 * 256);    // one shared expert, every token
  EXPECT_EQ(kept(a, "shared expert output and gate"), -1);             // DeepSeek adds it, no sigmoid gate
  EXPECT_EQ(kept(a, "expert activation output"), 2.0 * 256 * 4);  // each token's 4 routed rows
}

// transformers 5's grouped_mm experts: every token is gathered into k rows, one for each expert it is
// routed to, and the expert MLP's intermediates are those rows (measured on the H200 for Qwen3-MoE and
// Phi-MoE: 3 x 2 x k x moe_intermediate_size bytes a token, whatever the number of experts).
TEST(MoeStep, TheRoutedExpertsKeepEveryTokensKRoutedRows) {
  const ModelSpec m = load_model("qwen3-30b-a3b");  // 128 experts, 8 a token, 768 wide, hidden 2048
  TrainingSetup lora;
  lora.lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj"};
  const auto a = describe_step(m, lora).tensors.layer_activations;
  for (const char* name : {"expert gate output (activation input)", "expert activation output", "expert up output"})
    EXPECT_EQ(kept(a, name), 2.0 * 8 * 768) << name;
  EXPECT_EQ(kept(a, "expert outputs (for routing-weight gradient)"), 2.0 * 8 * 2048);
  EXPECT_EQ(kept(a, "expert mlp input"), -1);  // frozen experts: no weight gradient to keep it for
  TrainingSetup full;
  full.method = Method::full;
  const auto f = describe_step(m, full).tensors.layer_activations;
  EXPECT_EQ(kept(f, "expert mlp input"), 2.0 * 8 * 2048);  // the gathered rows, once for gate and up
  EXPECT_EQ(kept(f, "expert activation x up (down input)"), 2.0 * 8 * 768);
}

TEST(Olmo2Step, NormsFollowTheSublayers) {
  const ModelSpec m = load_model("olmo2-7b");
  TrainingSetup s;
  s.lora.dropout = 0;
  s.lora.adapter_dtype = DType::bf16;
  const auto a = describe_step(m, s).tensors.layer_activations;
  EXPECT_EQ(kept(a, "input norm fp32 input"), -1);
  EXPECT_EQ(kept(a, "post-attention norm fp32 input"), 4.0 * 4096);
  EXPECT_EQ(kept(a, "post-feedforward norm fp32 input"), 4.0 * 4096);
  // q_norm and k_norm keep their fp32 inputs, the whole projections.
  EXPECT_EQ(kept(a, "q/k norm fp32 inputs"), 4.0 * (4096 + 4096));
  // Attention and the MLP read the residual stream: the LoRA branches share it as their input.
  EXPECT_EQ(kept(a, "attention input"), 2.0 * 4096);
  EXPECT_EQ(kept(a, "mlp input"), 2.0 * 4096);
  // Multi-head attention: eager attention repeats nothing.
  s.attention = Attention::eager;
  EXPECT_EQ(kept(describe_step(m, s).tensors.layer_activations, "value repeated to query heads"), -1);
}

TEST(PhiMoeStep, LayerNormsKeepTheirInputAndTwoFp32Statistics) {
  const StepShape st = describe_step(load_model("phi3.5-moe"), TrainingSetup{}).tensors;
  EXPECT_EQ(kept(st.layer_activations, "input norm input"), 2.0 * 4096);
  EXPECT_EQ(kept(st.layer_activations, "input norm mean and rstd (fp32)"), 8.0);
  EXPECT_EQ(kept(st.layer_activations, "input norm fp32 input"), -1);
  EXPECT_EQ(kept(st.outside_activations, "final norm input"), 2.0 * 4096);
  // all-linear adapts the nn.Linear router, not the fused experts.
  const LayerLinears ls = layer_linears(load_model("phi3.5-moe"), TrainingSetup{});
  for (const auto& l : ls.moe) EXPECT_EQ(l.lora_target, !l.module.name.starts_with("experts.")) << l.module.name;
}

// PhimoeSparseMoeBlock and PhimoeTopKRouter each multiply the hidden states by fresh noise in
// training when input_jitter_noise is set (0.01 in Phi-3.5-MoE's config), and each noise is kept
// (measured on the H200: two hidden-size bf16 tensors a token, LoRA and full fine-tuning alike).
TEST(PhiMoeStep, InputJitterKeepsBothNoiseTensors) {
  const ModelSpec m = load_model("phi3.5-moe");
  EXPECT_EQ(m.jitter_noise_tensors, 2);
  EXPECT_EQ(kept(describe_step(m, TrainingSetup{}).tensors.layer_activations, "input jitter noise"), 2.0 * 2.0 * 4096);
  const ModelSpec quiet = parse_model_config(R"({"model_type": "phimoe", "hidden_size": 256, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000,
      "num_local_experts": 4, "num_experts_per_tok": 2})",
                                             "quiet");
  EXPECT_EQ(quiet.jitter_noise_tensors, 0);  // PhimoeConfig's default: no noise
  EXPECT_EQ(kept(describe_step(quiet, TrainingSetup{}).tensors.layer_activations, "input jitter noise"), -1);
}

// Gemma's RMSNorm multiplies by (1 + weight) in fp32 and casts after, so the weight's gradient keeps
// the fp32 normalised input (measured on the H200 for Gemma 3: 4 bytes a channel, every norm of the
// layer and q/k's); Qwen's and Llama's multiply after the cast and keep it in the compute dtype.
TEST(Gemma3Step, FullFineTuningKeepsTheNormsFp32NormalisedInputs) {
  TrainingSetup full;
  full.method = Method::full;
  const auto g = describe_step(load_model("gemma3-1b"), full).tensors.layer_activations;  // hidden 1152, 4 x 256 q, 256 kv
  EXPECT_EQ(kept(g, "input norm normalised input"), 4.0 * 1152);
  EXPECT_EQ(kept(g, "extra norm 3 normalised input"), 4.0 * 1152);
  EXPECT_EQ(kept(g, "q/k norm normalised inputs"), 4.0 * (1024 + 256));
  const auto q = describe_step(load_model("qwen3-8b"), full).tensors.layer_activations;  // hidden 4096
  EXPECT_EQ(kept(q, "input norm normalised input"), 2.0 * 4096);
  EXPECT_EQ(kept(describe_step(load_model("gemma3-1b"), TrainingSetup{}).tensors.layer_activations,
                 "input norm normalised input"),
            -1);  // LoRA: the norm's weight is frozen
}

TEST(Gemma3Step, KeepsARotaryTableForEachAttentionKind) {
  const StepShape st = describe_step(load_model("gemma3-1b"), TrainingSetup{}).tensors;
  EXPECT_EQ(kept(st.outside_activations, "rotary cos/sin"), 2.0 * 2.0 * 256 * 2);
  EXPECT_EQ(kept(st.layer_activations, "extra norm 3 fp32 input"), 4.0 * 1152);  // four norms a layer
}

TEST(PlanWarnings, SequencePastTheTrainedPositions) {
  const ModelSpec m = load_model("olmo2-7b");  // 4096 positions
  TrainingSetup s;
  s.seq = 4096;
  EXPECT_TRUE(plan_warnings(m, s).empty());
  s.seq = 4097;
  const auto w = plan_warnings(m, s);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("max_position_embeddings (4096)"), std::string::npos) << w[0];
  // A config that does not say has nothing to warn about.
  ModelSpec unknown = m;
  unknown.max_position_embeddings = 0;
  EXPECT_TRUE(plan_warnings(unknown, s).empty());
}

TEST(PlanWarnings, AMultimodalConfigSaysItsTowerIsIdleOrDropped) {
  TrainingSetup s;
  auto w = plan_warnings(load_model("gemma3-4b"), s);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("text-only"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("0.42B parameters"), std::string::npos) << w[0];
  s.vision_tower = VisionTowerUse::dropped;
  w = plan_warnings(load_model("gemma3-4b"), s);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("text model alone"), std::string::npos) << w[0];
  EXPECT_TRUE(plan_warnings(load_model("gemma3-1b"), TrainingSetup{}).empty());
}

}  // namespace
}  // namespace trainfit::detail

namespace trainfit::detail {
namespace {

// transformers 5 runs the experts with grouped_mm: a layer's operations do not grow with the
// number of experts (transformers 4's loop did: six a expert), so the host's dispatch time of a
// LoRA step on the attention is the same with 16 experts as with 64.
TEST(MoeStep, TheHostsOperationsDoNotGrowWithTheExperts) {
  const auto host_seconds = [](int experts) {
    const ModelSpec m = parse_model_config(
        R"({"model_type": "qwen3_moe", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
            "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 1000, "intermediate_size": 2048,
            "moe_intermediate_size": 256, "num_experts_per_tok": 4, "num_experts": )" +
            std::to_string(experts) + "}",
        "qwen3-moe");
    TrainingSetup s;
    s.method = Method::lora;
    s.lora.targets = parse_lora_targets("q,k,v,o");
    s.seq = 1024;
    return make_plan(m, s, find_gpu("h200")).time.host_seconds;
  };
  EXPECT_GT(host_seconds(16), 0.0);
  EXPECT_DOUBLE_EQ(host_seconds(16), host_seconds(64));
}

// all-linear LoRA on fused experts: PEFT 0.21 wraps them and refuses dropout, so the default
// dropout there is 0 and the plan names what all-linear wrapped; a dropout given says PEFT refuses
// it, and named targets say nothing.
TEST(MoeStep, AllLinearOnFusedExpertsWarnsOfPeftsParamWrapper) {
  const ModelSpec m = load_model("qwen3-30b-a3b");
  const auto warned = [&](const TrainingSetup& t, const std::string& what) {
    const Plan p = make_plan(m, t, find_gpu("h200"));
    return std::any_of(p.warnings.begin(), p.warnings.end(),
                       [&](const std::string& w) { return w.find(what) != std::string::npos; });
  };
  // The default setup of this model, as every front end resolves it.
  TrainingSetup s = resolve_setup({GivenSetting(find_setting("model"), std::string("qwen3-30b-a3b"))});
  EXPECT_EQ(s.lora.dropout, 0.0);
  EXPECT_TRUE(warned(s, "through lora.ParamWrapper, the fused expert parameters (experts.gate_proj"));
  EXPECT_FALSE(warned(s, "refuses to build the model"));
  EXPECT_EQ(resolve_setup({GivenSetting(find_setting("model"), std::string("qwen2.5-7b"))}).lora.dropout, 0.05);
  s.lora.dropout = 0.05;  // given: PEFT refuses it
  EXPECT_TRUE(warned(s, "refuses to build the model"));
  s.lora.dropout = 0;
  s.lora.targets = parse_lora_targets("q,k,v,o");
  EXPECT_FALSE(warned(s, "ParamWrapper"));
  // PhiMoE's router: all-linear fails in PEFT's forward; named targets do not.
  TrainingSetup phi;
  phi.method = Method::lora;
  const auto phi_warned = [&](const TrainingSetup& t) {
    const Plan p = make_plan(load_model("phi3.5-moe"), t, find_gpu("h200"));
    return std::any_of(p.warnings.begin(), p.warnings.end(),
                       [](const std::string& w) { return w.find("the router of phimoe") != std::string::npos; });
  };
  EXPECT_TRUE(phi_warned(phi));
  phi.lora.targets = parse_lora_targets("q,k,v,o");
  EXPECT_FALSE(phi_warned(phi));
}

// all-linear LoRA with dropout 0 on fused experts, as PEFT 0.21 builds it: the experts' 3-D weights
// and a router's bare weight through ParamWrapper (the fused gate/up at twice the rank), the MLP
// names' nn.Linear modules (a dense layer's MLP, shared experts) left alone. The trainable counts are
// what the runner counted on the H200 (data/bench/h200-layer-sweep-2026-12-02: per layer of
// Qwen3-MoE 20,760,576, of Mixtral 11,239,552; DeepSeek-V2-Lite's dense first layer 263,168 and each
// MoE layer 13,797,376), and every layer keeps a merged copy of its expert weights to its backward.
TEST(MoeStep, ExpertAdaptersAreCountedAsPeftBuildsThem) {
  const auto plan_of = [](const std::string& model) {
    TrainingSetup s;
    s.method = Method::lora;
    s.lora.dropout = 0;
    return describe_step(load_model(model), s).tensors;
  };
  EXPECT_EQ(plan_of("qwen3-30b-a3b").params.trainable_params, 48.0 * 20760576);
  EXPECT_EQ(plan_of("mixtral-8x7b").params.trainable_params, 32.0 * 11239552);
  EXPECT_EQ(plan_of("deepseek-v2-lite").params.trainable_params, 263168.0 + 26.0 * 13797376);
  const StepShape q = plan_of("qwen3-30b-a3b");
  EXPECT_EQ(q.params.untargeted_expert_adapter_params, 0);
  // Merged gate/up and down weights, bf16, plus A and B cast from fp32 to bf16 for the fold.
  const double experts = 128.0 * (2048.0 * 1536 + 768.0 * 2048) * 2;
  EXPECT_DOUBLE_EQ(q.layer_fixed_activations, experts + 2.0 * 128 * 16 * (2 * (2048 + 1536) + (768 + 2048)));
  EXPECT_DOUBLE_EQ(q.layer_fixed_backward_transient, 128.0 * (2048.0 * 1536 - 768.0 * 2048) * 2);
  // The experts' inputs are kept for the merged weights' gradient, as in full fine-tuning.
  EXPECT_EQ(kept(q.layer_activations, "expert mlp input"), 2.0 * 8 * 2048);
  // With dropout, or named targets, or on PhiMoE, nothing is ParamWrapped.
  TrainingSetup named;
  named.lora.dropout = 0;
  named.lora.targets = parse_lora_targets("q,k,v,o");
  for (const TrainingSetup& t : {TrainingSetup{}, named})
    EXPECT_EQ(describe_step(load_model("qwen3-30b-a3b"), t).tensors.layer_fixed_activations, 0);
  TrainingSetup phi;
  phi.lora.dropout = 0;
  EXPECT_FALSE(adapts_fused_experts(load_model("phi3.5-moe"), phi));
}

// Which layers attend through a sliding window, as transformers 5 assigns them.
TEST(SlidingWindow, LayersAndWindowFromTheConfig) {
  const std::string dims = R"("hidden_size": 256, "num_hidden_layers": 26, "num_attention_heads": 4,
      "num_key_value_heads": 1, "intermediate_size": 512, "vocab_size": 1000)";
  const ModelSpec g3 = parse_model_config(
      R"({"model_type": "gemma3_text", "sliding_window": 512, "sliding_window_pattern": 6, )" + dims + "}", "g3");
  EXPECT_EQ(g3.sliding_window, 512);
  EXPECT_EQ(g3.sliding_layers, 22);  // every sixth layer is full: 26 - 4
  const ModelSpec g2 = parse_model_config(R"({"model_type": "gemma2", )" + dims + "}", "g2");
  EXPECT_EQ(g2.sliding_window, 4096);  // Gemma2Config's default
  EXPECT_EQ(g2.sliding_layers, 13);    // the even layers
  const ModelSpec listed = parse_model_config(
      R"({"model_type": "gemma3_text", "sliding_window": 1024, "layer_types": ["sliding_attention",
      "full_attention", "sliding_attention"], "hidden_size": 256, "num_hidden_layers": 3, "num_attention_heads": 4,
      "num_key_value_heads": 1, "intermediate_size": 512, "vocab_size": 1000})",
      "listed");
  EXPECT_EQ(listed.sliding_layers, 2);
  EXPECT_EQ(parse_model_config(R"({"model_type": "mistral", "sliding_window": null, )" + dims + "}", "m")
                .sliding_layers,
            0);
  const ModelSpec mistral = parse_model_config(R"({"model_type": "mistral", )" + dims + "}", "m");
  EXPECT_EQ(mistral.sliding_window, 4096);  // MistralConfig's default
  EXPECT_EQ(mistral.sliding_layers, 26);
  EXPECT_EQ(parse_model_config(R"({"model_type": "llama", )" + dims + "}", "l").sliding_layers, 0);
  // The mask only exists once the sequence reaches the window.
  EXPECT_FALSE(g3.sliding_mask_at(511));
  EXPECT_TRUE(g3.sliding_mask_at(512));
}

TEST(SlidingWindow, TheMaskIsKeptAsABiasByEachSlidingLayerUnderSdpa) {
  const ModelSpec g3 = parse_model_config(R"({"model_type": "gemma3_text", "sliding_window": 512,
      "hidden_size": 256, "num_hidden_layers": 26, "num_attention_heads": 4, "num_key_value_heads": 1,
      "intermediate_size": 512, "vocab_size": 1000})",
                                          "g3");
  TrainingSetup s;
  s.method = Method::full;
  s.seq = 4096;
  // bf16 bias, seq bytes x 2 per token, in 22 of the 26 layers (the per-layer figure is their average).
  EXPECT_DOUBLE_EQ(kept(describe_step(g3, s).tensors.layer_activations, "sliding-window mask (additive bias)"),
                   2.0 * 4096 * 22 / 26);
  s.seq = 256;  // shorter than the window: SDPA's causal kernels, no mask
  EXPECT_EQ(kept(describe_step(g3, s).tensors.layer_activations, "sliding-window mask (additive bias)"), -1);
}

// With a mask, transformers repeats grouped key/value heads to the query heads before SDPA, and the
// repeated copies are kept in place of the originals; one key/value head repeats as a view.
TEST(SlidingWindow, MaskedLayersKeepKeysAndValuesRepeatedToTheQueryHeads) {
  const std::string dims = R"("hidden_size": 256, "num_hidden_layers": 26, "num_attention_heads": 8,
      "head_dim": 32, "intermediate_size": 512, "vocab_size": 1000, "sliding_window": 512, )";
  const ModelSpec two_kv =
      parse_model_config(R"({"model_type": "gemma3_text", )" + dims + R"("num_key_value_heads": 2})", "g3");
  TrainingSetup s;
  s.seq = 4096;
  const char* repeated = "key and value repeated to query heads (masked SDPA)";
  // Keys and values of 8 heads in place of 2, 32 wide, bf16, in 22 of the 26 layers.
  EXPECT_DOUBLE_EQ(kept(describe_step(two_kv, s).tensors.layer_activations, repeated), 2.0 * 2 * (8 - 2) * 32 * 22 / 26);
  const ModelSpec one_kv =
      parse_model_config(R"({"model_type": "gemma3_text", )" + dims + R"("num_key_value_heads": 1})", "g3");
  EXPECT_EQ(kept(describe_step(one_kv, s).tensors.layer_activations, repeated), -1);
  s.seq = 256;  // no mask: SDPA takes the grouped heads as they are
  EXPECT_EQ(kept(describe_step(two_kv, s).tensors.layer_activations, repeated), -1);
}

}  // namespace
}  // namespace trainfit::detail
