// Granite 4.0-H: Mamba-2 layers beside a few attention layers, each layer with shared_mlp (the
// layer's MLP, or the shared expert beside routed experts). Its parameter count by hand from
// transformers' module tree (GraniteMoeHybridMambaLayer, GraniteMoeHybridMLP) against the model
// cards; which layers are which; what a Mamba-2 layer keeps in transformers' PyTorch scan
// (mamba2_chunk_scan, the gated RMSNorm), by hand from the code docs/model.md cites.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "step/step.hpp"
#include "support/saved_tensors.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::detail {
namespace {

using testing::kept;

// Granite 4.0-H-350M's shapes at `layers` layers, with extra fields (no layer_types: every layer Mamba-2).
std::string granite4(int layers, const std::string& extra = "") {
  return R"({"model_type": "granitemoehybrid", "hidden_size": 768, "num_hidden_layers": )" + std::to_string(layers) +
         R"(, "num_attention_heads": 12, "num_key_value_heads": 4, "intermediate_size": 2048,
      "shared_intermediate_size": 2048, "num_local_experts": 0, "num_experts_per_tok": 0, "vocab_size": 100352,
      "tie_word_embeddings": true, "mamba_n_heads": 48, "mamba_d_head": 32, "mamba_d_state": 128,
      "mamba_n_groups": 1, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 256,
      "position_embedding_type": "nope")" +
         extra + "}";
}

// The Mamba-2 layer: in_proj (h -> 2 x 1536 + 2 x 128 + 48), the depthwise convolution over x, B
// and C (1792 channels x 4, with a bias), dt_bias, A_log and D (48 each), the gated norm (1536),
// out_proj (1536 -> h). Attention: q, k, v, o (12 heads of 64, 4 key/value heads). shared_mlp:
// input_linear (h -> 2 x 2048) and output_linear. Two norms a layer, the final norm, the tied
// embedding.
TEST(Granite4Hybrid, CountsByHandAndAgainstTheModelCard) {
  const ModelSpec m = load_model("ibm-granite/granite-4.0-h-350m");
  EXPECT_EQ(m.model_type, "granitemoehybrid");
  EXPECT_EQ(m.state_space.layers, 28);  // layer_types: attention at 10, 13, 17 and 27
  EXPECT_EQ(m.attention_layers(), 4);
  EXPECT_FALSE(m.is_moe());
  EXPECT_TRUE(m.fused_gate_up);
  EXPECT_TRUE(m.scaled_residuals && m.scaled_logits);
  EXPECT_EQ(m.rotary_tables, 0);  // position_embedding_type "nope": no rotary embedding at all
  const std::int64_t h = 768;
  const std::int64_t mamba = h * (2 * 1536 + 2 * 128 + 48) + 1792 * 5 + 3 * 48 + 1536 + 1536 * h;
  const std::int64_t attention = h * 768 + 2 * h * 256 + 768 * h;
  const std::int64_t mlp = h * 4096 + 2048 * h;
  const ParameterCounts c = count_parameters(m);
  EXPECT_EQ(c.total, 100'352LL * h + 28 * mamba + 4 * attention + 32 * (mlp + 2 * h) + h);
  EXPECT_NEAR(static_cast<double>(c.total) / published_parameters(m.name).total, 1.0, 0.01);
}

// Tiny and Small: every layer has 64 (72) experts, 6 (10) of them a token, and shared_mlp as the
// shared expert, added unscaled. Against the model cards' 7B / 1B and 32B / 9B.
TEST(Granite4Hybrid, TheMixturesOfExpertsCountAsTheirCardsSay) {
  const ModelSpec tiny = load_model("ibm-granite/granite-4.0-h-tiny");
  ASSERT_TRUE(tiny.is_moe());
  EXPECT_EQ(tiny.num_experts, 64);
  EXPECT_EQ(tiny.experts_per_token, 6);
  EXPECT_EQ(tiny.moe_intermediate_size, 512);
  EXPECT_EQ(tiny.shared_expert_intermediate_size, 1024);
  EXPECT_FALSE(tiny.shared_expert_scaled);
  EXPECT_TRUE(tiny.router_softmax_over_top_k);
  const ParameterCounts t = count_parameters(tiny);
  EXPECT_EQ(t.total, 6'939'037'248);
  EXPECT_EQ(t.activated, 1'465'470'528);
  const ParameterCounts s = count_parameters(load_model("granite4.0-h-small"));
  EXPECT_EQ(s.total, 32'207'337'984);
  EXPECT_EQ(s.activated, 8'803'121'664);
  // Within 1% of the cards' total (Tiny's "7B" is a round figure: 0.9% off).
  EXPECT_NEAR(static_cast<double>(s.total) / 32e9, 1.0, 0.01);
  EXPECT_NEAR(static_cast<double>(t.total) / 7e9, 1.0, 0.01);
}

TEST(Granite4Hybrid, LayerTypesAndHeadsAreReadOrRefused) {
  EXPECT_EQ(parse_model_config(granite4(4), "c").state_space.layers, 4);  // no list: every layer Mamba-2
  const ModelSpec listed =
      parse_model_config(granite4(4, R"(, "layer_types": ["mamba", "attention", "mamba", "attention"])"), "c");
  EXPECT_EQ(listed.state_space.layers, 2);
  EXPECT_EQ(listed.rope_free_layers, 2);
  // "auto" divides mamba_expand x hidden_size among the heads.
  EXPECT_EQ(parse_model_config(granite4(2, R"(, "mamba_d_head": "auto")"), "c").state_space.head_dim, 32);
  // A rotary embedding only when position_embedding_type says "rope".
  EXPECT_EQ(parse_model_config(granite4(2, R"(, "position_embedding_type": "rope")"), "c").rotary_tables, 1);
  for (const std::string& bad : {std::string(R"(, "layer_types": ["mamba", "sliding_attention"])"),
                                 std::string(R"(, "layer_types": ["mamba"])"),
                                 std::string(R"(, "mamba_d_head": 64)"),
                                 std::string(R"(, "mamba_n_groups": 5)")}) {
    EXPECT_THROW((void)parse_model_config(granite4(2, bad), "c"), InputError) << bad;
  }
}

// What a Mamba-2 layer keeps a token in transformers' PyTorch scan, LoRA on in_proj and out_proj
// with bf16 adapters and no dropout (so the branches read their modules' inputs as they are),
// bf16 compute, 1024 positions (four chunks of 256): by hand.
TEST(Granite4Hybrid, AMambaLayerKeepsTheScansFp32Products) {
  const ModelSpec m = parse_model_config(granite4(2), "c");
  TrainingSetup s;
  s.lora.dropout = 0;
  s.lora.adapter_dtype = DType::bf16;
  s.lora.targets = {"in_proj", "out_proj"};
  s.seq = 1024;
  const auto a = describe_step(m, s).tensors.layer_activations;
  const double c = 2, f = 4, I = 1536, H = 48, n = 128, Q = 256;
  EXPECT_EQ(kept(a, "in_proj output (z, x, B, C, dt; the convolution reads a view)"), c * (2 * I + 2 * n + H));
  EXPECT_DOUBLE_EQ(kept(a, "convolution output (SiLU input)"), c * 1792 * (1024 + 3) / 1024.0);
  EXPECT_EQ(kept(a, "x times dt, chunked (fp32)"), f * I);
  EXPECT_EQ(kept(a, "B and C repeated to the heads, chunked (fp32)"), 2 * f * H * n);
  EXPECT_EQ(kept(a, "segment decays L (fp32, a chunk's width a head)"), f * H * Q);
  EXPECT_EQ(kept(a, "G times L, M (fp32)"), f * H * Q);
  EXPECT_DOUBLE_EQ(kept(a, "chunk states and their running sums (fp32)"), 2 * f * I * n * 5 / 1024.0);
  EXPECT_EQ(kept(a, "gate SiLU output (fp32)"), f * I);
  EXPECT_EQ(kept(a, "gated norm output"), c * I);  // out_proj's input, kept by its LoRA branch
  EXPECT_EQ(kept(a, "attention input"), c * 768);  // in_proj's
  // No attention: no scores; D's and A_log's other factors only when they train.
  EXPECT_EQ(kept(a, "attention log-sum-exp"), -1);
  EXPECT_EQ(kept(a, "x padded (fp32, for D's gradient)"), -1);
  s.method = Method::full;
  EXPECT_EQ(kept(describe_step(m, s).tensors.layer_activations, "x padded (fp32, for D's gradient)"), f * I);
  // A sequence that is not a whole number of chunks pads the chunked tensors: 1000 positions in 4 chunks.
  s.seq = 1000;
  EXPECT_DOUBLE_EQ(kept(describe_step(m, s).tensors.layer_activations, "x times dt, chunked (fp32)"),
                   f * I * 1024 / 1000.0);
}

// The scan's largest product, C B^T over a chunk for every head and state entry (fp32), exists
// whole for a moment: twice in the backward. It grows with the tokens like the saved tensors, so
// a 350M model's peak is mostly the scan's.
TEST(Granite4Hybrid, TheScansProductsAreThePeaksTransient) {
  const ModelSpec m = load_model("granite4.0-h-350m");
  TrainingSetup s;
  s.seq = 1024;
  const Plan p = make_plan(m, s, find_gpu("h200"));
  const double product = 4.0 * 48 * 256 * 128 * 1024;  // bytes at 1024 tokens
  double transient = 0;
  for (const MemoryTerm& t : p.memory.breakdown)
    if (t.category == "transient") transient = static_cast<double>(t.bytes);
  EXPECT_GE(transient, 2 * product);
  EXPECT_LT(transient, 2 * product * 1.1);
  // The plan says which path it planned.
  bool warned = false;
  for (const std::string& w : p.warnings) warned = warned || w.starts_with("28 of granitemoehybrid's 32 layers are Mamba-2");
  EXPECT_TRUE(warned);
}

// The scan's broadcast products and sums are paced by their offset arithmetic on the CUDA cores
// (TimeProfile::broadcast_ops_per_element), not by the bandwidth: the same on an H100 and an H200
// (one die, the same fp32 peak), and proportional to the operations an element.
TEST(Granite4Hybrid, TheScansBroadcastKernelsArePacedByTheCudaCores) {
  const ModelSpec m = load_model("granite4.0-h-350m");
  TrainingSetup s;
  s.method = Method::full;
  s.seq = 1024;
  auto traffic = [&](const char* gpu, double ops) {
    TimeProfile prof = default_profile(find_gpu(gpu));
    prof.broadcast_ops_per_element = ops;
    for (const TimeTerm& t : estimate_time(m, s, find_gpu(gpu), prof, false).breakdown)
      if (t.name == "memory_traffic") return t.seconds;
    return 0.0;
  };
  // 28 Mamba-2 layers x 1024 tokens x (H Q n + 4 H Q + I Q + 2 I n) elements, 6 passes, 167
  // operations each at 66.9 TFLOP/s, besides the rest of the step's traffic.
  const double scan =
      28.0 * 1024 * (48.0 * 256 * 128 + 4.0 * 48 * 256 + 1536.0 * 256 + 2.0 * 1536 * 128) * 6 * 167 / 66.9e12;
  const double h100 = traffic("h100-sxm", 167), h200 = traffic("h200", 167);
  EXPECT_GT(h100, scan);
  EXPECT_LT(h100, 1.3 * scan);
  // Twice the operations an element, twice the scan's time (at half, an H200's bandwidth would bind).
  EXPECT_NEAR(traffic("h200", 2 * 167) - h200, scan, 0.01 * scan);
  // On the H200 the rest of the traffic goes faster, the scan not.
  EXPECT_LT(h200, h100);
  EXPECT_GT(h200, scan);
}

}  // namespace
}  // namespace trainfit::detail

namespace trainfit::detail {
namespace {

using testing::kept;

// Falcon-H1-0.5B: every layer runs attention (8 heads of 64, 2 key/value heads) and a Mamba-2 mixer
// (mamba_d_ssm 1536 in 24 heads of 64, state 128; no gated norm: mamba_rms_norm false) side by side,
// then a gated MLP (2048); untied embedding. By hand: 521,411,104.
TEST(FalconH1, CountsByHand) {
  const ModelSpec m = load_model("tiiuae/Falcon-H1-0.5B-Instruct");
  EXPECT_EQ(m.model_type, "falcon_h1");
  EXPECT_EQ(m.state_space.layers, 36);
  EXPECT_EQ(m.attention_layers(), 36);  // every layer attends, beside its scan
  EXPECT_EQ(m.attention_only_layers(), 0);
  EXPECT_FALSE(m.state_space.gated_norm);
  const std::int64_t h = 1024;
  const std::int64_t attention = h * 512 + 2 * h * 128 + 512 * h;
  const std::int64_t mamba = h * (1536 + 1792 + 24) + 1792 * 5 + 3 * 24 + 1536 * h;  // no norm weight
  const std::int64_t mlp = 3 * h * 2048;
  const ParameterCounts c = count_parameters(m);
  EXPECT_EQ(c.total, 2 * 32'784LL * h + 36 * (attention + mamba + mlp + 2 * h) + h);
  EXPECT_EQ(c.total, 521'411'104);
  // 7B and 34B (mamba_rms_norm: their gated norms are counted).
  EXPECT_EQ(count_parameters(load_model("falcon-h1-7b")).total, 7'585'654'880);
  EXPECT_TRUE(load_model("falcon-h1-34b").state_space.gated_norm);
}

// A Falcon-H1 layer keeps what its attention keeps and what its scan keeps: each reads its own
// scaled copy of the normalised input, and without mamba_rms_norm the scan's output is multiplied
// by silu(z) alone (the scan's fp32 output and the SiLU's output kept).
TEST(FalconH1, ALayerKeepsItsAttentionAndItsScan) {
  const ModelSpec m = load_model("falcon-h1-0.5b");
  TrainingSetup s;
  s.lora.dropout = 0;
  s.lora.adapter_dtype = DType::bf16;
  s.seq = 1024;
  const auto a = describe_step(m, s).tensors.layer_activations;
  const double c = 2, f = 4, I = 1536;
  EXPECT_GT(kept(a, "attention log-sum-exp"), 0);                 // SDPA's
  EXPECT_EQ(kept(a, "attention input"), c * 1024);                 // q, k and v read it
  EXPECT_EQ(kept(a, "mamba input (scaled copy)"), c * 1024);       // in_proj reads its own
  EXPECT_EQ(kept(a, "scan output (fp32)"), f * I * 1024 / 1024.0);  // 1024 = 8 chunks of 128
  EXPECT_EQ(kept(a, "gate SiLU output"), c * I);
  EXPECT_EQ(kept(a, "gated norm input (fp32 scan output)"), -1);
  // The 7B has the gated norm.
  const auto b = describe_step(load_model("falcon-h1-7b"), s).tensors.layer_activations;
  EXPECT_EQ(kept(b, "gate SiLU output (fp32)"), f * 3072);
}

// PEFT 0.21 refuses a LoRA adapter on falcon_h1's modules named out_proj (the Mamba mixer's), so its
// all-linear raises in get_peft_model (on the GPU machine: "Module 'out_proj' is incompatible with
// Mamba-based models"). The plan of all-linear is of the targets PEFT accepts, and says which they
// are; a target naming out_proj is refused. The runner's count with those targets on Falcon-H1-0.5B
// (data/bench/h200-families-2026-12-07, falconh1-0.5b-lora) is the plan's.
TEST(FalconH1, AllLinearLeavesOutWhatPeftRefuses) {
  const ModelSpec m = load_model("falcon-h1-0.5b");
  TrainingSetup s;
  const Plan all = make_plan(m, s, find_gpu("h200"));
  std::string said;
  for (const std::string& w : all.warnings)
    if (w.starts_with("all-linear on falcon_h1")) said = w;
  EXPECT_NE(said.find("--lora-targets q_proj,k_proj,v_proj,o_proj,mamba.in_proj,gate_proj,up_proj,down_proj"),
            std::string::npos)
      << said;
  TrainingSetup named = s;
  named.lora.targets = parse_lora_targets("q_proj,k_proj,v_proj,o_proj,mamba.in_proj,gate_proj,up_proj,down_proj");
  const Plan accepted = make_plan(m, named, find_gpu("h200"));
  EXPECT_EQ(all.memory.trainable_parameters, accepted.memory.trainable_parameters);
  EXPECT_EQ(accepted.memory.trainable_parameters,
            36 * 16 * ((1024 + 512) * 2 + (1024 + 128) * 2 + (1024 + 3352) + 3 * (1024 + 2048)));
  named.lora.targets = parse_lora_targets("q_proj,out_proj");
  EXPECT_THROW(make_plan(m, named, find_gpu("h200")), SettingError);
}

// Nemotron-H (transformers 5.17's NemotronHBlock): every block is one norm and one mixer, named
// by hybrid_override_pattern: M a Mamba-2 mixer (mamba_num_heads x mamba_head_dim wide, Zamba2's
// grouped gated norm), * attention without a rotary embedding, - an MLP (up_proj, relu2,
// down_proj). Seven blocks here: three Mamba-2, one attention, three MLP.
std::string nemotron_h(const std::string& blocks = R"("hybrid_override_pattern": "M-M*-M-")") {
  return R"({"model_type": "nemotron_h", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 64, "intermediate_size": 512, "vocab_size": 1000, "mamba_num_heads": 8, "mamba_head_dim": 32,
      "ssm_state_size": 16, "n_groups": 2, "conv_kernel": 4, "chunk_size": 64, "mlp_hidden_act": "relu2", )" +
         blocks + "}";
}

// By hand: the untied embedding and output layer (1000 x 256 each); a Mamba-2 block's in_proj
// (256 -> 256 + 320 + 8), its convolution over x, B and C (320 channels x 4, and a bias), dt_bias,
// A_log and D (8 each), the gated norm (256) and out_proj (256 -> 256); attention's q, k, v, o
// (4 heads of 64, 2 key/value heads); an MLP block's up and down (256 <-> 512); one norm a block and
// the final norm.
TEST(NemotronH, CountsByHand) {
  const ModelSpec m = parse_model_config(nemotron_h(), "config.json");
  EXPECT_EQ(m.num_layers, 7);  // the pattern's length, whatever num_hidden_layers says
  EXPECT_EQ(m.state_space.layers, 3);
  EXPECT_EQ(m.mlp_only_layers, 3);
  EXPECT_EQ(m.attention_layers(), 1);
  EXPECT_TRUE(m.mixer_only_layers);
  EXPECT_FALSE(m.gated_mlp);
  EXPECT_EQ(m.rotary_tables, 0);
  const std::int64_t mamba = 256 * (256 + 320 + 8) + 320 * 5 + 3 * 8 + 256 + 256 * 256;
  const std::int64_t attention = 256 * 256 + 2 * 256 * 128 + 256 * 256;
  const std::int64_t mlp = 2 * 256 * 512;
  EXPECT_EQ(count_parameters(m).total, 2 * 1000 * 256 + 3 * mamba + attention + 3 * mlp + 8 * 256);
  // The list NemotronHConfig keeps reads as the pattern does.
  const ModelSpec listed = parse_model_config(
      nemotron_h(R"("layers_block_type": ["linear_attention", "mlp", "linear_attention", "full_attention", "mlp",
                 "linear_attention", "mlp"])"),
      "config.json");
  EXPECT_EQ(count_parameters(listed).total, count_parameters(m).total);
}

// Each block keeps what its one sublayer keeps: an MLP block its ReLU's output (the square reads the
// same tensor) and, for down's weight or adapter, the square's output; no block keeps a gated MLP's
// tensors, nor a second norm.
TEST(NemotronH, ABlockKeepsItsOneSublayer) {
  const ModelSpec m = parse_model_config(nemotron_h(), "config.json");
  TrainingSetup s;
  s.seq = 1024;
  const auto a = describe_step(m, s).tensors.layer_activations;
  const double c = 2, L = 7;
  EXPECT_NEAR(kept(a, "ReLU output (the square's input)"), c * 512 * 3 / L, 1e-9);
  EXPECT_EQ(kept(a, "gate output (activation input)"), -1);
  EXPECT_EQ(kept(a, "up output"), -1);
  EXPECT_EQ(kept(a, "post-attention norm"), -1);
  EXPECT_GT(kept(a, "attention log-sum-exp"), 0);                // the attention block's SDPA
  EXPECT_GT(kept(a, "gated norm input (fp32 scan output)"), 0);  // the Mamba-2 blocks' scan
}

// What is refused by name: mixture-of-experts blocks (Nemotron 3), multi-token prediction, another
// MLP activation; and PEFT's refusal of out_proj, as for Falcon-H1.
TEST(NemotronH, WhatIsNotPlannedIsRefusedByName) {
  const auto refused = [](const std::string& text, const std::string& says) {
    try {
      (void)parse_model_config(text, "config.json");
      ADD_FAILURE() << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(nemotron_h(R"("hybrid_override_pattern": "ME*-")"), "mixture-of-experts blocks");
  refused(nemotron_h(R"("hybrid_override_pattern": "M-X-")"), "must hold M, *, - or E");
  refused(nemotron_h(R"("hybrid_override_pattern": "M-M*", "num_nextn_predict_layers": 1)"), "multi-token");
  std::string silu = nemotron_h();
  silu.replace(silu.find("relu2"), 5, "silu");
  refused(silu, "mlp_hidden_act");
  const ModelSpec m = parse_model_config(nemotron_h(), "config.json");
  TrainingSetup s;
  bool warned = false;
  for (const std::string& w : make_plan(m, s, find_gpu("h200")).warnings)
    warned = warned ||
             w.find("--lora-targets q_proj,k_proj,v_proj,o_proj,mixer.in_proj,up_proj,down_proj") != std::string::npos;
  EXPECT_TRUE(warned);
  s.lora.targets = parse_lora_targets("q_proj,out_proj");
  EXPECT_THROW(make_plan(m, s, find_gpu("h200")), SettingError);
}

}  // namespace
}  // namespace trainfit::detail
