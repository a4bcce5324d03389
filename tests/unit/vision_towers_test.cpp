// The vision towers and projectors of the multimodal configs (model/vision_towers.cpp), the
// vision_tower setting and Llama 4's text model: counts against the checkpoints' published totals
// (docs/models.md, "Vision towers"), and what a text-only step holds for an idle tower.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "step/step.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

TEST(VisionTowers, QwenVlCountsMeetTheCheckpoints) {
  // Qwen2.5-VL's published config keeps its text fields at the top level: Qwen2's layers (q/k/v
  // biased) of Qwen2.5-7B, the same 7,615,616,512 parameters.
  const ModelSpec q25 = load_model("Qwen/Qwen2.5-VL-7B-Instruct");
  EXPECT_EQ(q25.model_type, "qwen2");
  EXPECT_EQ(q25.multimodal_type, "qwen2_5_vl");
  EXPECT_TRUE(q25.attention_bias);
  const ParameterCounts c25 = count_parameters(q25);
  EXPECT_EQ(c25.total - c25.vision, count_parameters(load_model("qwen2.5-7b")).total);
  // 32 blocks: a fused biased qkv, a biased proj, a biased gated MLP 3420 wide, two RMSNorms; an
  // unbiased 2 x 14 x 14 patch convolution; the merger's RMSNorm and two biased linears from
  // 4 x 1280 features to the text model's 3584.
  const std::int64_t block =
      (1280 * 3840 + 3840) + (1280 * 1280 + 1280) + 2 * (1280 * 3420 + 3420) + (3420 * 1280 + 1280) + 2 * 1280;
  EXPECT_EQ(c25.vision, 32 * block + 3 * 2 * 14 * 14 * 1280 + 1280 + (5120 * 5120 + 5120) + (5120 * 3584 + 3584));
  EXPECT_EQ(c25.total, 8'292'166'656);

  const ModelSpec q3 = load_model("qwen3-vl-8b");
  EXPECT_EQ(q3.model_type, "qwen3");
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_FALSE(q3.tie_word_embeddings);  // the top level's false, text_config silent
  EXPECT_EQ(count_parameters(q3).vision, 576'388'336);
  EXPECT_EQ(count_parameters(q3).total, 8'767'123'696);
}

TEST(VisionTowers, SiglipBuildsItsPoolingHeadUnlessTheConfigTurnsItOff) {
  // SiglipVisionTransformer builds the head whenever vision_use_head is absent; the published
  // Gemma 3 configs set it false.
  std::string config = R"({"model_type": "gemma3", "text_config": {"hidden_size": 256, "intermediate_size": 512,
      "num_hidden_layers": 2, "vocab_size": 1000}, "vision_config": {"hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 2, "num_attention_heads": 4, "image_size": 56, "patch_size": 14 HEAD}})";
  const auto with = [&](const std::string& head) {
    std::string c = config;
    c.replace(c.find("HEAD"), 4, head);
    return count_parameters(parse_model_config(c, "config.json")).vision;
  };
  const std::int64_t h = 64, i = 128;
  // A probe, the packed in-projection and its bias, out_proj, a LayerNorm and an MLP.
  EXPECT_EQ(with("") - with(R"(, "vision_use_head": false)"), h + 4 * h * h + 4 * h + 2 * h + 2 * h * i + i + h);
}

TEST(VisionTowers, ATextOnlyStepHoldsTheTowerButTrainsNothingOfIt) {
  const ModelSpec m = load_model("gemma3-4b");
  const ParameterCounts c = count_parameters(m);
  TrainingSetup loaded;
  loaded.model = "gemma3-4b";
  loaded.method = Method::full;
  TrainingSetup dropped = loaded;
  dropped.vision_tower = VisionTowerUse::dropped;
  const detail::Step a = detail::describe_step(m, loaded);
  const detail::Step b = detail::describe_step(m, dropped);
  // The tower's weights in bf16; no gradient and no optimizer state for them.
  EXPECT_DOUBLE_EQ(a.tensors.params.weights - b.tensors.params.weights, 2.0 * static_cast<double>(c.vision));
  EXPECT_DOUBLE_EQ(a.tensors.gradients, b.tensors.gradients);
  EXPECT_DOUBLE_EQ(a.tensors.optimizer_states, b.tensors.optimizer_states);
  EXPECT_DOUBLE_EQ(a.tensors.params.idle_trainable_params, static_cast<double>(c.vision));
  // What the plan reports: every parameter trainable, as transformers counts them.
  const Plan plan = make_plan(m, loaded, find_gpu("h200"));
  EXPECT_EQ(plan.memory.trainable_parameters, c.total);

  // LoRA: all-linear wraps the tower's and projector's nn.Linear modules too (PEFT leaves out only
  // the output layer): SigLIP's 27 x (four 1152 x 1152 and 1152 <-> 4304), Gemma 3's projector
  // being a raw matrix. Their adapters are fp32 parameters with no gradient.
  loaded.method = dropped.method = Method::lora;
  const detail::Step la = detail::describe_step(m, loaded);
  const detail::Step lb = detail::describe_step(m, dropped);
  const double tower_adapters = 16.0 * 27 * (4 * 2 * 1152 + 2 * (1152 + 4304));
  EXPECT_DOUBLE_EQ(la.tensors.params.idle_trainable_params, tower_adapters);
  EXPECT_DOUBLE_EQ(la.tensors.params.adapters - lb.tensors.params.adapters, 4.0 * tower_adapters);
  EXPECT_DOUBLE_EQ(la.tensors.gradients, lb.tensors.gradients);
  // Named targets reach the tower by the end of their paths, as PEFT matches them: q_proj and
  // v_proj name SigLIP's too.
  loaded.lora.targets = parse_lora_targets("q,v");
  EXPECT_DOUBLE_EQ(detail::describe_step(m, loaded).tensors.params.idle_trainable_params, 16.0 * 27 * 2 * (2 * 1152));
}

// Images run through the tower: Gemma 3's 896-pixel image is 4096 SigLIP positions pooled to 256
// tokens. With LoRA on every linear module the tower's adapters train, so autograd keeps each of
// its 27 layers' tensors for every position: the norms' inputs and statistics, the attention's
// input, q, k, v, output and o's input, the MLP's input, fc1's and GELU's outputs, and each of the
// six adapters' fp32 dropout output, mask and A output.
TEST(VisionTowers, ImagesRunThroughTheTowerAndItsAdaptersTrain) {
  const ModelSpec m = load_model("gemma3-4b");
  TrainingSetup s;
  s.model = "gemma3-4b";
  s.seq = 2048;
  const detail::Step text = detail::describe_step(m, s);
  s.images = 1;
  const detail::Step image = detail::describe_step(m, s);
  const double d = 1152, inter = 4304, c = 2, r = 16;
  // (The frozen base linears keep no input: autograd saves one for the weight's gradient alone.)
  const double per_position = 2 * (c * d + 8) + 4 * c * d + c * inter + 4 * (5 * d + 4 * r) + (5 * d + 4 * r) +
                              (5 * inter + 4 * r);
  const double positions_per_token = 4096.0 / 2048;
  EXPECT_DOUBLE_EQ(image.tensors.tower_saved_per_token, 27 * per_position * positions_per_token);
  // The tower's adapters are trainable now: r x (in + out) over its 27 x 6 wrapped modules.
  const double adapters = r * 27 * (4 * (d + d) + 2 * (d + inter));
  EXPECT_DOUBLE_EQ(image.tensors.params.trainable_params - text.tensors.params.trainable_params, adapters);
  EXPECT_DOUBLE_EQ(image.tensors.params.idle_trainable_params, 0.0);
  // Checkpointed, each tower layer keeps its input. The step's description does not depend on
  // checkpointing (an advisor prices both from one description); the memory model picks.
  EXPECT_DOUBLE_EQ(image.tensors.tower_checkpoint_per_token, 27 * c * d * positions_per_token);
  s.grad_ckpt = true;
  EXPECT_DOUBLE_EQ(detail::describe_step(m, s).tensors.tower_saved_per_token, image.tensors.tower_saved_per_token);
  // The tower's forward, input gradients and recompute cost time.
  EXPECT_GT(make_plan(m, s, find_gpu("h200")).time.step_seconds,
            make_plan(m, [&] { TrainingSetup t = s; t.images = 0; return t; }(), find_gpu("h200")).time.step_seconds);
  // LoRA on the text model's modules alone (gate/up/down are not the tower's fc1/fc2): the tower
  // is frozen, runs without autograd and keeps nothing.
  s.lora.targets = parse_lora_targets("gate_proj,up_proj,down_proj");
  const detail::Step frozen = detail::describe_step(m, s);
  EXPECT_EQ(frozen.tensors.tower_saved_per_token, 0.0);
  EXPECT_GT(frozen.tensors.tower_linear_flops_per_token, 0.0);
  EXPECT_FALSE(frozen.tensors.tower_trained);
  // Adapters on a projector alone (a target PEFT matches in the tower only) train, but nothing
  // below the projector needs a gradient: the tower's layers keep nothing.
  const ModelSpec mistral = load_model("mistral-small3.1");
  TrainingSetup p;
  p.model = "mistral-small3.1";
  p.seq = 1024;
  p.images = 1;
  p.lora.targets = parse_lora_targets("linear_1");
  const detail::Step projector = detail::describe_step(mistral, p);
  EXPECT_DOUBLE_EQ(projector.tensors.params.trainable_params, 16.0 * (1024 + 5120));
  EXPECT_EQ(projector.tensors.tower_saved_per_token, 0.0);
  EXPECT_FALSE(projector.tensors.tower_trained);
}

// Qwen2.5-VL's tower attends a window and an image at a time without flash attention (one
// attention call each after splitting q, k and v at cu_seqlens): the host dispatches those calls,
// three operations each (the kernel, the output's transpose and its copy), forward and, when the
// tower trains, backward. Counted from its windows (64 positions), not one call a layer.
TEST(VisionTowers, QwenVlTowersDispatchAnAttentionCallAWindowAndImage) {
  const ModelSpec m = load_model("qwen2.5-vl-7b");
  ASSERT_TRUE(m.vision.shape.attention_call_per_image);
  TrainingSetup s;
  s.model = "qwen2.5-vl-7b";
  s.seq = 1024;
  s.images = 1;  // 256 tokens, 1,024 positions: 16 windows
  ModelSpec one_call = m;
  one_call.vision.shape.attention_call_per_image = false;
  const double extra_ops = step_work(m, s).ops - step_work(one_call, s).ops;
  // 28 windowed layers x 16 windows + 4 full layers x 1 image, less the 32 calls a layer counts;
  // the adapters on the tower train it (all-linear): forward and backward.
  EXPECT_DOUBLE_EQ(extra_ops, 3.0 * (28 * 16 + 4 - 32) * 2.0);
  // Two sequences a micro-batch, two images each: four images' windows.
  s.batch = 2;
  s.images = 2;
  EXPECT_DOUBLE_EQ(step_work(m, s).ops - step_work(one_call, s).ops, 3.0 * (4 * (28 * 16 + 4) - 32) * 2.0);
}

TEST(VisionTowers, ImagesNeedATowerAndFitTheSequence) {
  TrainingSetup s;
  s.images = 1;
  EXPECT_THROW((void)detail::describe_step(load_model("qwen2.5-7b"), s), SettingError);  // a text model
  const ModelSpec gemma = load_model("gemma3-4b");
  s.image_tokens = 100;  // Gemma 3 pools every image to 256 tokens
  EXPECT_THROW((void)detail::describe_step(gemma, s), SettingError);
  s.image_tokens.reset();
  s.seq = 1000;
  s.images = 4;  // 1024 image tokens
  EXPECT_THROW((void)detail::describe_step(gemma, s), SettingError);
  s.images = 1;
  s.vision_tower = VisionTowerUse::dropped;
  EXPECT_THROW((void)detail::describe_step(gemma, s), SettingError);
  // Llama 4 by tiles: 144 tokens from a tile's 577 positions (576 patches and the class token).
  const ModelSpec scout = load_model("llama4-scout");
  EXPECT_EQ(scout.vision.shape.default_image_tokens, 144);
  EXPECT_DOUBLE_EQ(scout.vision.shape.positions_per_token, 577.0 / 144);
  const ModelSpec qwen = load_model("qwen2.5-vl-7b");
  EXPECT_EQ(qwen.vision.shape.windowed_layers, 28);  // all but fullatt_block_indexes' four
  EXPECT_EQ(qwen.vision.shape.window, 64);           // 112-pixel windows of 14-pixel patches
}

TEST(Llama4, ScoutCountsAsTheCheckpointAndItsCardSay) {
  const ModelSpec m = load_model("meta-llama/Llama-4-Scout-17B-16E-Instruct");
  EXPECT_EQ(m.model_type, "llama4_text");
  EXPECT_EQ(m.multimodal_type, "llama4");
  EXPECT_EQ(m.num_experts, 16);
  EXPECT_EQ(m.experts_per_token, 1);
  EXPECT_EQ(m.dense_layers, 0);  // interleave_moe_layer_step 1: every layer has experts
  EXPECT_EQ(m.shared_expert_intermediate_size, 8192);
  EXPECT_TRUE(m.dense_expert_routing);
  EXPECT_EQ(m.expert_rows_per_token(), 16);
  // Every fourth layer has no rotary embedding and attends to everything; the others are chunked
  // (8192 tokens) and L2-normalise q and k.
  EXPECT_EQ(m.rope_free_layers, 12);
  EXPECT_EQ(m.qk_l2_norm_layers, 36);
  EXPECT_EQ(m.sliding_layers, 36);
  EXPECT_EQ(m.sliding_window, 8192);
  const ParameterCounts c = count_parameters(m);
  EXPECT_EQ(c.total - c.vision, 107'769'861'120);  // Llama4ForCausalLM
  EXPECT_EQ(c.vision, 871'932'416);
  EXPECT_EQ(c.total, 108'641'793'536);     // the checkpoint's safetensors count
  EXPECT_EQ(c.activated, 17'172'894'720);  // one expert and the shared one a layer: the card's 17B
  EXPECT_EQ(model_family(m).names[static_cast<std::size_t>(ModuleRole::router)], "feed_forward.router");
}

// Maverick: Scout's layers and tower, 128 experts on the odd layers (interleave_moe_layer_step 2:
// transformers' moe_layers are 1, 3, ..., 47), the even layers dense with intermediate_size_mlp.
TEST(Llama4, MaverickAlternatesExpertAndDenseLayers) {
  const ModelSpec m = load_model("meta-llama/Llama-4-Maverick-17B-128E-Instruct");
  const std::int64_t h = 5120, v = 202'048;
  const std::int64_t attention = 2 * h * h + 2 * h * 1024 + 2 * h;  // q/k/v/o and two norms
  const std::int64_t moe = 128 * h + 128 * 3 * h * 8192 + 3 * h * 8192;
  const std::int64_t dense = 3 * h * 16384;
  const ParameterCounts c = count_parameters(m);
  EXPECT_EQ(c.vision, 871'932'416);  // Scout's tower and projector
  EXPECT_EQ(c.total, 2 * v * h + 48 * attention + 24 * moe + 24 * dense + h + c.vision);
  EXPECT_EQ(c.total, 401'583'781'376);
  EXPECT_NEAR(static_cast<double>(c.activated) / published_parameters(m.name).active, 1.0, 0.02);
}

TEST(Llama4, EveryTokenRunsThroughEveryExpert) {
  // Llama4TextMoe repeats each token for every expert: the experts' intermediates are E rows a
  // token, not k, with the repeated tokens and their scores kept for the score's gradient.
  const ModelSpec m = load_model("llama4-scout");
  TrainingSetup s;
  s.model = "llama4-scout";
  s.lora.targets = parse_lora_targets("q,k,v,o");
  s.vision_tower = VisionTowerUse::dropped;
  const detail::Step step = detail::describe_step(m, s);
  double experts = 0, repeated = 0;
  for (const auto& a : step.tensors.layer_activations) {
    const std::string_view what = a.what;
    if (std::string_view(a.prefix) == "expert " && what == "up output") experts = a.bytes;
    if (what == "tokens repeated for every expert (score product input)") repeated = a.bytes;
  }
  EXPECT_DOUBLE_EQ(experts, 2.0 * 8192 * 16);
  EXPECT_DOUBLE_EQ(repeated, 2.0 * 5120 * 16);
  // The router is an nn.Linear whose forward returns a tuple: all-linear would wrap it.
  s.lora.targets = {"all-linear"};
  const Plan p = make_plan(m, s, find_gpu("h200"));
  EXPECT_TRUE(std::any_of(p.warnings.begin(), p.warnings.end(), [](const std::string& w) {
    return w.find("the router of llama4_text (feed_forward.router") != std::string::npos;
  }));
}

}  // namespace
}  // namespace trainfit
