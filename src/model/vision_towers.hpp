#pragma once
// The vision towers and projectors of the multimodal configs trainfit reads (vision_towers.cpp).
#include <cstdint>
#include <string_view>

#include "model/config_reader.hpp"
#include "trainfit/model.hpp"

namespace trainfit::detail {

// The tower and projector of a multimodal config of model_type `wrapper` (gemma3, mistral3,
// qwen2_5_vl, qwen3_vl, llama4): `top` is the whole config (vision_config and the projector's
// fields), `text_hidden` the text model's hidden size, which the projector maps into.
VisionTower read_vision_tower(const ConfigReader& top, std::string_view wrapper, std::int64_t text_hidden);

}  // namespace trainfit::detail
