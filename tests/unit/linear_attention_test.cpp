// Qwen3-Next: Gated DeltaNet (linear attention) layers beside gated attention layers, every layer
// with 512 routed experts and a gated shared expert. Its parameter count by hand from transformers'
// module tree against the model card; which layers are which; what a Gated DeltaNet layer keeps
// (flash-linear-attention's kernel, PyTorch's convolution, the eager gated norm), by hand from the
// code docs/model.md cites; and what its step runs.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "step/step.hpp"
#include "support/saved_tensors.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::detail {
namespace {

using testing::kept;

// A Qwen3-Next config of `layers` layers (the published shapes otherwise), with extra fields.
std::string qwen3_next(int layers, const std::string& extra = "") {
  return R"({"model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": )" + std::to_string(layers) +
         R"(, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 151936,
      "intermediate_size": 5120, "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
      "shared_expert_intermediate_size": 512, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
      "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4)" +
         extra + "}";
}

TEST(Qwen3Next, CountsAgainstTheModelCard) {
  const ModelSpec m = load_model("Qwen/Qwen3-Next-80B-A3B-Instruct");
  EXPECT_EQ(m.model_type, "qwen3_next");
  EXPECT_EQ(m.linear_attention.layers, 36);  // full_attention_interval 4: layers 3, 7, ..., 47 attend
  EXPECT_EQ(m.attention_layers(), 12);
  EXPECT_TRUE(m.attention_output_gate);
  EXPECT_TRUE(m.shared_expert_scaled);
  EXPECT_TRUE(m.norm_scale_in_fp32);  // Qwen3NextRMSNorm: (1 + weight) in fp32
  const std::int64_t h = 2048, e = 512, mi = 512;
  // Gated DeltaNet: in_proj_qkvz (2 x 2048 + 2 x 4096 wide), in_proj_ba (2 x 32), the depthwise
  // convolution over q, k and v (8192 channels x 4), dt_bias and A_log (32 each), the gated norm
  // over a value head (128), out_proj.
  const std::int64_t gdn = h * 12288 + h * 64 + 8192 * 4 + 64 + 128 + 4096 * h;
  // Gated attention: q_proj twice the query's width, k and v, o_proj, the q and k norms.
  const std::int64_t attention = h * 8192 + 2 * h * 512 + 4096 * h + 2 * 256;
  // Router (a bare weight), the fused experts, the shared expert and its h -> 1 gate.
  const std::int64_t moe = e * h + e * (h * 2 * mi + mi * h) + 3 * h * mi + h;
  const ParameterCounts c = count_parameters(m);
  EXPECT_EQ(c.total, 2 * 151'936LL * h + 36 * gdn + 12 * attention + 48 * (moe + 2 * h) + h);
  EXPECT_EQ(c.total, 79'674'391'296);
  // One token runs 10 of the 512 experts.
  EXPECT_EQ(c.activated, c.total - 48LL * (e - 10) * 3 * h * mi);
  EXPECT_EQ(c.activated, 3'874'929'408);
  EXPECT_NEAR(static_cast<double>(c.total) / published_parameters(m.name).total, 1.0, 0.01);
}

// PEFT 0.21's all-linear on the model transformers 5.17 builds (the family job's inspect on the
// GPU machine, data/bench/h100-families-2026-12-08/inspect.json): the token mixers' nn.Linear
// modules and the shared expert's gate, ParamWrapper on the router and the fused experts; the shared
// expert's MLP, whose names the experts' take, unwrapped. 3,443,233,536 trainable parameters.
TEST(Qwen3Next, AllLinearWrapsWhatPeftWraps) {
  const ModelSpec m = load_model("qwen3-next-80b-a3b");
  TrainingSetup s;
  s.lora.dropout = 0;  // ParamWrapper's condition (the default a mixture of experts resolves to)
  const Plan p = make_plan(m, s, find_gpu("h200"));
  EXPECT_EQ(p.memory.trainable_parameters, 3'443'233'536);
  std::string wraps;
  for (const std::string& w : p.warnings)
    if (w.starts_with("all-linear on qwen3_next")) wraps = w;
  EXPECT_NE(wraps.find("(q_proj, k_proj, v_proj, o_proj, mlp.shared_expert_gate, linear_attn.in_proj_qkvz, "
                       "linear_attn.in_proj_ba, linear_attn.out_proj)"),
            std::string::npos)
      << wraps;
  EXPECT_NE(wraps.find("(mlp.gate, experts.gate_up_proj, experts.down_proj)"), std::string::npos) << wraps;
}

TEST(Qwen3Next, LayerTypesDecideWhichLayersAttend) {
  EXPECT_EQ(parse_model_config(qwen3_next(8), "c").linear_attention.layers, 6);
  EXPECT_EQ(parse_model_config(qwen3_next(8, R"(, "full_attention_interval": 2)"), "c").linear_attention.layers, 4);
  const ModelSpec listed = parse_model_config(
      qwen3_next(4, R"(, "layer_types": ["linear_attention", "full_attention", "full_attention", "full_attention"])"),
      "c");
  EXPECT_EQ(listed.linear_attention.layers, 1);
  // Reduced to one layer with the default interval: that layer is a Gated DeltaNet layer.
  EXPECT_EQ(parse_model_config(qwen3_next(1), "c").attention_layers(), 0);
  for (const std::string& bad : {std::string(R"(, "layer_types": ["linear_attention", "mamba"])"),
                                 std::string(R"(, "layer_types": ["linear_attention"])"),
                                 std::string(R"(, "linear_num_value_heads": 24, "linear_num_key_heads": 16)"),
                                 std::string(R"(, "mlp_only_layers": [0])")}) {
    EXPECT_THROW((void)parse_model_config(qwen3_next(2, bad), "c"), InputError) << bad;
  }
}

// What a Gated DeltaNet layer keeps a token, LoRA on every nn.Linear without dropout and with bf16
// adapters (so the branches read their modules' inputs as they are, shared), bf16 compute: by hand.
TEST(Qwen3Next, AGatedDeltaNetLayerKeepsItsKernelsTensorsNotScores) {
  // Every layer a Gated DeltaNet layer, so no layer-kind average scales the figures.
  const ModelSpec m = parse_model_config(qwen3_next(3, R"(, "full_attention_interval": 4)"), "c");
  ASSERT_EQ(m.attention_layers(), 0);
  TrainingSetup s;
  s.lora.dropout = 0;
  s.lora.adapter_dtype = DType::bf16;
  s.seq = 1024;
  const auto a = describe_step(m, s).tensors.layer_activations;
  const double c = 2;
  EXPECT_EQ(kept(a, "q, k and v joined (convolution input)"), c * 8192);
  EXPECT_DOUBLE_EQ(kept(a, "convolution output (SiLU input)"), c * 8192 * (1024 + 3) / 1024.0);
  EXPECT_EQ(kept(a, "q and k l2-normalised, repeated to the value heads"), 2 * c * 32 * 128);
  EXPECT_EQ(kept(a, "v (contiguous copy)"), c * 4096);
  EXPECT_EQ(kept(a, "WY matrix A (a chunk's width a value head)"), c * 32 * 64);
  EXPECT_EQ(kept(a, "gated norm fp32 input"), 4.0 * 4096);
  EXPECT_EQ(kept(a, "output gate SiLU output (fp32)"), 4.0 * 4096);
  EXPECT_EQ(kept(a, "gated norm output"), c * 4096);  // out_proj's input, kept by its LoRA branch
  EXPECT_EQ(kept(a, "attention input"), c * 2048);    // in_proj_qkvz's and in_proj_ba's, shared
  // No attention layer: no scores, no rotated query.
  EXPECT_EQ(kept(a, "query after RoPE"), -1);
  EXPECT_EQ(kept(a, "attention log-sum-exp"), -1);
  // A_log's gradient needs softplus's output only when A_log trains; the gated norm's weight, its
  // normalised input.
  EXPECT_EQ(kept(a, "decay softplus output (fp32, for A_log)"), -1);
  s.method = Method::full;
  const auto full = describe_step(m, s).tensors.layer_activations;
  EXPECT_EQ(kept(full, "decay softplus output (fp32, for A_log)"), 4.0 * 32);
  EXPECT_EQ(kept(full, "gated norm normalised input"), c * 4096);
}

// The attention layers gate their output: the sigmoid's output and o_proj's new input are kept; the
// layers' shared norms and MLP are one entry each, whatever the kind of the layer.
TEST(Qwen3Next, LayerKindsAverageOverTheLayers) {
  const ModelSpec m = parse_model_config(qwen3_next(4), "c");  // three Gated DeltaNet, one attention
  TrainingSetup s;
  s.lora.dropout = 0;
  s.lora.adapter_dtype = DType::bf16;
  const auto a = describe_step(m, s).tensors.layer_activations;
  const double c = 2;
  EXPECT_EQ(kept(a, "output gate (sigmoid output)"), c * 16 * 256 / 4.0);
  EXPECT_EQ(kept(a, "gated attention output"), c * 16 * 256 / 4.0);
  EXPECT_EQ(kept(a, "v (contiguous copy)"), c * 4096 * 3 / 4.0);
  EXPECT_EQ(kept(a, "shared expert gate output (activation input)"), c * 512);
  int norms = 0;
  for (const auto& t : a) norms += t.name() == "input norm fp32 input" ? 1 : 0;
  EXPECT_EQ(norms, 1);
  EXPECT_EQ(kept(a, "input norm fp32 input"), 4.0 * 2048);
}

// Only the attention layers attend: a Gated DeltaNet model's step grows linearly with the sequence,
// where an attention model of the same layers grows quadratically.
TEST(Qwen3Next, AttentionFlopsAreTheAttentionLayersAlone) {
  const ModelSpec hybrid = load_model("qwen3-next-80b-a3b");
  ModelSpec attending = hybrid;
  attending.linear_attention.layers = 0;
  TrainingSetup s;
  s.seq = 8192;
  const auto attention_seconds = [&](const ModelSpec& m) {
    for (const TimeTerm& t : make_plan(m, s, find_gpu("h200")).time.breakdown)
      if (t.name == "attention") return t.seconds;
    return -1.0;
  };
  ASSERT_GT(attention_seconds(hybrid), 0);
  EXPECT_LT(attention_seconds(hybrid), attention_seconds(attending) / 2.0);
}

}  // namespace
}  // namespace trainfit::detail
