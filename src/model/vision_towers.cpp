// The vision towers and projectors of multimodal configs, laid out as transformers 5 builds them
// (modeling_siglip.py, modeling_pixtral.py with mistral3's projector, modeling_qwen2_5_vl.py,
// modeling_qwen3_vl.py, modeling_llama4.py), so that their parameters add up to sum(p.numel()):
// every published count of docs/models.md's "Vision towers" table is met exactly. Each field takes
// its vision config class's default when the config leaves it out, as transformers does.
#include "model/vision_towers.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace trainfit::detail {
namespace {

using namespace config_bounds;

std::int64_t layer_norm(std::int64_t width) {
  return 2 * width;  // weight and bias
}

struct TowerBuilder {
  VisionTower tower;
  std::int64_t layers = 1;
  // A linear module in every one of the tower's layers.
  void per_layer(std::string name, std::int64_t in, std::int64_t out, bool bias) {
    tower.linears.push_back({std::move(name), in, out, layers, bias});
  }
  void once(std::string name, std::int64_t in, std::int64_t out, bool bias) {
    tower.linears.push_back({std::move(name), in, out, 1, bias});
  }
  // The projector's modules: counted again in projector_parameters.
  void projector(std::string name, std::int64_t in, std::int64_t out, bool bias) {
    once(std::move(name), in, out, bias);
    tower.projector_parameters += in * out + (bias ? out : 0);
  }
};

// SiglipVisionModel (Gemma 3's tower) and Gemma3MultiModalProjector.
VisionTower siglip(const ConfigReader& top, const ConfigReader& v, std::int64_t text_hidden) {
  const std::int64_t h = v.optional_int("hidden_size", 768, 1, kMaxHidden);
  const std::int64_t inter = v.optional_int("intermediate_size", 3072, 1, kMaxIntermediate);
  const std::int64_t patch = v.optional_int("patch_size", 16, 1, kMaxHeadDim);
  const std::int64_t image = v.optional_int("image_size", 224, 1, kMaxPositions / kMaxHeadDim);
  const std::int64_t channels = v.optional_int("num_channels", 3, 1, 64);
  TowerBuilder b;
  b.tower.type = "siglip_vision_model";
  b.layers = v.optional_int("num_hidden_layers", 12, 1, kMaxLayers);
  for (const char* name : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"})
    b.per_layer(name, h, h, true);
  b.per_layer("mlp.fc1", h, inter, true);
  b.per_layer("mlp.fc2", inter, h, true);
  const std::int64_t patches = (image / patch) * (image / patch);
  // Every image is resized to image_size and its patches average-pooled to mm_tokens_per_image.
  const std::int64_t tokens = top.optional_int("mm_tokens_per_image", 256, 1, patches);
  b.tower.shape = {.hidden = h,
                   .intermediate = inter,
                   .layers = b.layers,
                   .positions_per_token = static_cast<double>(patches) / static_cast<double>(tokens),
                   .default_image_tokens = tokens,
                   .fixed_image_tokens = true};
  // A biased patch convolution, a learned position per patch (no class token), two LayerNorms a
  // layer and one after the encoder.
  std::int64_t other = channels * patch * patch * h + h + patches * h + b.layers * 2 * layer_norm(h) + layer_norm(h);
  // SiglipVisionTransformer builds its attention-pooling head unless the config sets vision_use_head
  // false (the published Gemma 3 configs do): a probe, nn.MultiheadAttention (its packed in_proj a
  // raw parameter, its out_proj an nn.Linear), a LayerNorm and an MLP.
  if (v.optional_bool("vision_use_head", true)) {
    other += h + 3 * h * h + 3 * h + layer_norm(h);
    b.once("head.attention.out_proj", h, h, true);
    b.once("head.mlp.fc1", h, inter, true);
    b.once("head.mlp.fc2", inter, h, true);
  }
  // The projector is a raw matrix (mm_input_projection_weight, no nn.Linear) and an RMSNorm.
  const std::int64_t projector = h * text_hidden + h;
  b.tower.other_parameters = other + projector;
  b.tower.projector_parameters = projector;
  return b.tower;
}

// PixtralVisionModel (Mistral Small 3.1's tower) and Mistral3MultiModalProjector.
VisionTower pixtral(const ConfigReader& top, const ConfigReader& v, std::int64_t text_hidden) {
  const std::int64_t h = v.optional_int("hidden_size", 1024, 1, kMaxHidden);
  const std::int64_t inter = v.optional_int("intermediate_size", 4096, 1, kMaxIntermediate);
  const std::int64_t patch = v.optional_int("patch_size", 16, 1, kMaxHeadDim);
  const std::int64_t channels = v.optional_int("num_channels", 3, 1, 64);
  TowerBuilder b;
  b.tower.type = "pixtral";
  b.layers = v.optional_int("num_hidden_layers", 24, 1, kMaxLayers);
  for (const char* name : {"attention.q_proj", "attention.k_proj", "attention.v_proj", "attention.o_proj"})
    b.per_layer(name, h, h, false);
  b.per_layer("feed_forward.gate_proj", h, inter, false);
  b.per_layer("feed_forward.up_proj", h, inter, false);
  b.per_layer("feed_forward.down_proj", inter, h, false);
  // An unbiased patch convolution, ln_pre and two RMSNorms a layer; the 2-D rotary table is a buffer.
  b.tower.other_parameters = channels * patch * patch * h + h + b.layers * 2 * h;
  // The projector: an RMSNorm, the patch merger (spatial_merge_size^2 patches into one) and two
  // linears from the vision features (one per vision_feature_layer) to the text model's width.
  const std::int64_t merge = top.optional_int("spatial_merge_size", 2, 1, 64);
  // The images of a batch are one sequence with a block mask: each attends within itself.
  b.tower.shape = {.hidden = h,
                   .intermediate = inter,
                   .layers = b.layers,
                   .gated_mlp = true,
                   .rms_norm = true,
                   .positions_per_token = static_cast<double>(merge * merge)};
  const bool bias = top.optional_bool("multimodal_projector_bias", false);
  std::int64_t feature_layers = 1;
  if (const json* f = top.find("vision_feature_layer"); f != nullptr && f->is_array())
    feature_layers = std::max<std::int64_t>(1, static_cast<std::int64_t>(f->size()));
  b.tower.other_parameters += h;
  b.tower.projector_parameters += h;
  b.projector("multi_modal_projector.patch_merger.merging_layer", h * merge * merge, h, false);
  b.projector("multi_modal_projector.linear_1", h * feature_layers, text_hidden, bias);
  b.projector("multi_modal_projector.linear_2", text_hidden, text_hidden, bias);
  return b.tower;
}

// The fields the Qwen VL vision configs share: the tower's width, MLP width, patch (spatial and
// temporal), the patches merged into one text token (merge x merge), the width it hands the text
// model, the input channels and the blocks.
struct QwenVision {
  std::int64_t h, inter, patch, temporal, merge, out, channels, depth;
};

// Each field as the config gives it, or the config class's default `d`.
QwenVision read_qwen_vision(const ConfigReader& v, const QwenVision& d) {
  return {v.optional_int("hidden_size", d.h, 1, kMaxHidden),
          v.optional_int("intermediate_size", d.inter, 1, kMaxIntermediate),
          v.optional_int("patch_size", d.patch, 1, kMaxHeadDim),
          v.optional_int("temporal_patch_size", d.temporal, 1, 64),
          v.optional_int("spatial_merge_size", d.merge, 1, 64),
          v.optional_int("out_hidden_size", d.out, 1, kMaxHidden),
          // Qwen2.5-VL's published configs spell it in_chans, which its config class does not read.
          v.optional_int("in_channels", d.channels, 1, 64),
          v.optional_int("depth", d.depth, 1, kMaxLayers)};
}

// Qwen2_5_VisionTransformerPretrainedModel: its blocks and the merger (the projector).
VisionTower qwen2_5_vl(const ConfigReader& v) {
  // Qwen2_5_VLVisionConfig's defaults (hidden_size 3584 is not the 7B's 1280: read it from the file).
  const auto [h, inter, patch, temporal, merge, out, channels, depth] =
      read_qwen_vision(v, {3584, 3420, 14, 2, 2, 3584, 3, 32});
  TowerBuilder b;
  b.tower.type = "qwen2_5_vl";
  b.layers = depth;
  // Blocks outside fullatt_block_indexes attend within windows of window_size pixels.
  std::int64_t full_blocks = 4;  // Qwen2_5_VLVisionConfig's [7, 15, 23, 31]
  if (const json* f = v.find("fullatt_block_indexes"); f != nullptr && f->is_array())
    full_blocks = static_cast<std::int64_t>(f->size());
  const std::int64_t window_side = v.optional_int("window_size", 112, 1, kMaxPositions) / patch;
  b.tower.shape = {.hidden = h,
                   .intermediate = inter,
                   .layers = depth,
                   .gated_mlp = true,
                   .rms_norm = true,
                   .positions_per_token = static_cast<double>(merge * merge),
                   .windowed_layers = std::max<std::int64_t>(0, depth - full_blocks),
                   .window = window_side * window_side,
                   .fused_qkv_rotary = true,
                   .attention_call_per_image = true};
  b.per_layer("attn.qkv", h, 3 * h, true);
  b.per_layer("attn.proj", h, h, true);
  b.per_layer("mlp.gate_proj", h, inter, true);
  b.per_layer("mlp.up_proj", h, inter, true);
  b.per_layer("mlp.down_proj", inter, h, true);
  // An unbiased 3-D patch convolution and two RMSNorms a block; the rotary table is a buffer.
  b.tower.other_parameters = channels * temporal * patch * patch * h + b.layers * 2 * h;
  // The merger: an RMSNorm, then an MLP from merge^2 patches to the text model's width.
  const std::int64_t merged = h * merge * merge;
  b.tower.other_parameters += h;
  b.tower.projector_parameters += h;
  b.projector("merger.mlp.0", merged, merged, true);
  b.projector("merger.mlp.2", merged, out, true);
  return b.tower;
}

// Qwen3VLVisionModel: its blocks, the merger and the deepstack mergers (their outputs are added to
// the first text layers' hidden states at the image's positions).
VisionTower qwen3_vl(const ConfigReader& v) {
  // Qwen3VLVisionConfig's defaults.
  const auto [h, inter, patch, temporal, merge, out, channels, depth] =
      read_qwen_vision(v, {1152, 4304, 16, 2, 2, 3584, 3, 27});
  const std::int64_t positions = v.optional_int("num_position_embeddings", 2304, 1, kMaxVocab);
  std::int64_t deepstack = 3;  // Qwen3VLVisionConfig's deepstack_visual_indexes [8, 16, 24]
  if (const json* d = v.find("deepstack_visual_indexes"); d != nullptr && d->is_array())
    deepstack = static_cast<std::int64_t>(d->size());
  TowerBuilder b;
  b.tower.type = "qwen3_vl";
  b.layers = depth;
  b.tower.shape = {.hidden = h,
                   .intermediate = inter,
                   .layers = depth,
                   .positions_per_token = static_cast<double>(merge * merge),
                   .fused_qkv_rotary = true,
                   .attention_call_per_image = true};
  b.per_layer("attn.qkv", h, 3 * h, true);
  b.per_layer("attn.proj", h, h, true);
  b.per_layer("mlp.linear_fc1", h, inter, true);
  b.per_layer("mlp.linear_fc2", inter, h, true);
  // A biased 3-D patch convolution, a learned position table and two LayerNorms a block.
  b.tower.other_parameters = channels * temporal * patch * patch * h + h + positions * h + b.layers * 2 * layer_norm(h);
  // The merger normalises before merging (LayerNorm over h), each deepstack merger after (over the
  // merged width); both are an MLP from merge^2 patches to the text model's width.
  const std::int64_t merged = h * merge * merge;
  const std::int64_t norms = layer_norm(h) + deepstack * layer_norm(merged);
  b.tower.other_parameters += norms;
  b.tower.projector_parameters += norms;
  b.projector("merger.linear_fc1", merged, merged, true);
  b.projector("merger.linear_fc2", merged, out, true);
  for (std::int64_t i = 0; i < deepstack; ++i) {
    b.projector("deepstack_merger_list.linear_fc1", merged, merged, true);
    b.projector("deepstack_merger_list.linear_fc2", merged, out, true);
  }
  return b.tower;
}

// Llama4VisionModel (its pixel-shuffle adapter included) and Llama4MultiModalProjector. Every
// shape is required: Llama4VisionConfig's defaults are not Scout's or Maverick's.
VisionTower llama4(const ConfigReader& v, std::int64_t text_hidden) {
  const std::int64_t h = v.require_int("hidden_size", 1, kMaxHidden);
  const std::int64_t inter = v.require_int("intermediate_size", 1, kMaxIntermediate);
  const std::int64_t patch = v.require_int("patch_size", 1, kMaxHeadDim);
  const std::int64_t image = v.require_int("image_size", 1, kMaxPositions / kMaxHeadDim);
  const std::int64_t channels = v.optional_int("num_channels", 3, 1, 64);
  const std::int64_t adapter_out = v.require_int("projector_output_dim", 1, kMaxHidden);
  const std::int64_t adapter_in = v.require_int("projector_input_dim", 1, kMaxHidden);
  const std::int64_t vision_out = v.require_int("vision_output_dim", 1, kMaxHidden);
  TowerBuilder b;
  b.tower.type = "llama4_vision_model";
  b.layers = v.require_int("num_hidden_layers", 1, kMaxLayers);
  // The patch embedding is an unfold and an unbiased nn.Linear.
  b.once("patch_embedding.linear", channels * patch * patch, h, false);
  for (const char* name : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"})
    b.per_layer(name, h, h, true);
  b.per_layer("mlp.fc1", h, inter, true);
  b.per_layer("mlp.fc2", inter, h, true);
  // Llama4VisionMLP2 takes the pixel-shuffled features at vision_config.intermediate_size wide.
  b.once("vision_adapter.mlp.fc1", inter, adapter_in, false);
  b.once("vision_adapter.mlp.fc2", adapter_out, adapter_out, false);
  const std::int64_t patches = (image / patch) * (image / patch);
  // A tile of image_size pixels: its patches and a class token through the encoder, pixel-shuffled
  // (pixel_shuffle_ratio 0.5 halves each side) into patches x ratio^2 tokens.
  const double ratio = v.optional_nonnegative_number("pixel_shuffle_ratio", 0.5);
  const auto tile_tokens = static_cast<std::int64_t>(static_cast<double>(patches) * ratio * ratio);
  if (ratio > 1.0 || tile_tokens < 1)
    v.fail("field \"pixel_shuffle_ratio\" must leave a tile at least one token and at most its patches (got " +
           std::to_string(ratio) + ")");
  b.tower.shape = {.hidden = h,
                   .intermediate = inter,
                   .layers = b.layers,
                   .positions_per_token = static_cast<double>(patches + 1) / static_cast<double>(tile_tokens),
                   .default_image_tokens = tile_tokens};
  // A class embedding, a learned position per patch and for the class token, LayerNorms before and
  // after the encoder and two a layer.
  b.tower.other_parameters = h + (patches + 1) * h + 2 * layer_norm(h) + b.layers * 2 * layer_norm(h);
  b.projector("multi_modal_projector.linear_1", vision_out, text_hidden, false);
  return b.tower;
}

}  // namespace

VisionTower read_vision_tower(const ConfigReader& top, std::string_view wrapper, std::int64_t text_hidden) {
  static const json kEmpty = json::object();
  const json* config = top.find("vision_config");
  if (config != nullptr && !config->is_object())
    top.fail("field \"vision_config\" must be an object (got " + describe(*config) + ")");
  // An absent vision_config builds the vision config class's defaults, as transformers does.
  const ConfigReader v(config != nullptr ? *config : kEmpty, top.source(), "vision_config.");
  if (wrapper == "gemma3") return siglip(top, v, text_hidden);
  if (wrapper == "mistral3") return pixtral(top, v, text_hidden);
  if (wrapper == "qwen2_5_vl") return qwen2_5_vl(v);
  if (wrapper == "qwen3_vl") return qwen3_vl(v);
  if (wrapper == "llama4") return llama4(v, text_hidden);
  return {};
}

}  // namespace trainfit::detail

namespace trainfit {

std::int64_t VisionTower::parameters() const {
  std::int64_t total = other_parameters;
  for (const TowerLinear& m : linears)
    total += m.count * (m.in_features * m.out_features + (m.bias ? m.out_features : 0));
  return total;
}

}  // namespace trainfit
