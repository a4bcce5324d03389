"""Images in the runner's sequences (the setup's `images` and `image_tokens`), as each family's
processor lays them out, so that a multimodal model's step runs them through its vision tower
(docs/model.md, "Images through the vision tower").

Each sequence holds `images` runs of the model's image placeholder, `image_tokens` long, after its
first token; the rest are random text ids below every special token (a random id equal to a
placeholder would make the model's placeholder count disagree with its image features). Pixel
values are random, in the model's dtype. Gemma 3 (SigLIP, every image resized to its image_size),
Qwen2.5-VL and Qwen3-VL (a square grid of patches, 14 and 16 pixels, spatial_merge_size a side
merged into a token) and Mistral 3 (Pixtral: a square image of patch_size x spatial_merge_size
pixels a token side, its image_sizes beside it) are fed; the other families are refused by name
until their processors' layouts are written here.
"""

FED = ("gemma3", "qwen2_5_vl", "qwen3_vl", "mistral3")
QWEN_VL = ("qwen2_5_vl", "qwen3_vl")  # the same layout: vision_start, then the image's tokens


class ImageError(Exception):
    """A setup with images the runner cannot feed."""


def image_tokens(cfg, model_type):
    """The tokens of one image: the setup's, or the tower's default (trainfit's TowerLayers)."""
    given = cfg.get("image_tokens")
    if given:
        return int(given)
    return 144 if model_type == "llama4" else 256


def check(cfg, config_json):
    """Refuses images the runner cannot feed: a text model, a dropped tower, a family not in FED,
    an objective other than sft, a Qwen2.5-VL image that is no square grid, or more image tokens
    than the sequence holds."""
    images = int(cfg.get("images") or 0)
    if images == 0:
        return
    model_type = (config_json or {}).get("model_type")
    if cfg.get("vision_tower", "loaded") == "dropped":
        raise ImageError("images: the vision tower is dropped (vision_tower dropped)")
    if cfg.get("objective", "sft") != "sft":
        raise ImageError("images: the runner feeds images to sft steps only, not %s" % cfg["objective"])
    if model_type not in FED:
        raise ImageError("images: the runner feeds images to %s models only, not %s" % (", ".join(FED), model_type))
    tokens = image_tokens(cfg, model_type)
    if model_type == "gemma3" and tokens != int(config_json.get("mm_tokens_per_image", 256)):
        raise ImageError("image_tokens: Gemma 3 pools every image to %d tokens" % config_json.get("mm_tokens_per_image", 256))
    if model_type in QWEN_VL + ("mistral3",) and round(tokens ** 0.5) ** 2 != tokens:
        raise ImageError("image_tokens: the runner lays a %s image out as a square grid; %d is no square"
                         % ("Qwen VL" if model_type in QWEN_VL else "Mistral 3", tokens))
    extra = 1 if model_type in QWEN_VL else 0  # the vision_start token before each image
    if 1 + images * (tokens + extra) > int(cfg["seq"]):
        raise ImageError("images: %d images of %d tokens do not fit a sequence of %d" % (images, tokens, cfg["seq"]))


def inputs(torch, model, cfg, ids, generator):
    """`ids` with each sequence's image placeholders written in, and the model's image inputs
    (pixel values and what the family needs beside them); {} for a text-only step."""
    images = int(cfg.get("images") or 0)
    config = model.config
    model_type = getattr(config, "model_type", "")
    extra = {}
    if model_type == "gemma3":
        # Gemma3ForConditionalGeneration refuses a training forward without token_type_ids
        # (1 at an image's tokens: their attention is bidirectional within the image).
        extra["token_type_ids"] = torch.zeros_like(ids)
    if images == 0:
        return extra
    B, S = ids.shape
    dtype = next(model.parameters()).dtype
    tokens = image_tokens(cfg, model_type)
    if model_type == "gemma3":
        placeholder = getattr(config, "image_token_id", None) or config.image_token_index
        ids.clamp_(max=placeholder - 1)
        starts = [1 + i * tokens for i in range(images)]
        for s in starts:
            ids[:, s:s + tokens] = placeholder
            extra["token_type_ids"][:, s:s + tokens] = 1
        side = config.vision_config.image_size
        extra["pixel_values"] = torch.randn(B * images, 3, side, side, generator=generator).to(ids.device, dtype)
    elif model_type in QWEN_VL:
        placeholder, start = config.image_token_id, config.vision_start_token_id
        ids.clamp_(max=min(placeholder, start) - 1)
        v = config.vision_config
        grid = v.spatial_merge_size * round(tokens ** 0.5)  # patches a side, merged s x s into tokens
        at = 1
        for _ in range(images):
            ids[:, at] = start
            ids[:, at + 1:at + 1 + tokens] = placeholder
            at += 1 + tokens
        patch = v.in_channels * v.temporal_patch_size * v.patch_size * v.patch_size
        extra["pixel_values"] = torch.randn(B * images * grid * grid, patch, generator=generator).to(ids.device, dtype)
        extra["image_grid_thw"] = torch.tensor([[1, grid, grid]] * (B * images), device=ids.device)
        if model_type == "qwen3_vl":
            # Qwen3-VL's multimodal RoPE reads each position's modality from mm_token_type_ids
            # (the processor's: 1 at an image's tokens), and refuses images without it.
            extra["mm_token_type_ids"] = (ids == placeholder).to(torch.int32)
    elif model_type == "mistral3":
        # Mistral3ForConditionalGeneration: the [IMG] placeholders (image_token_index, a low id, so
        # random ids equal to it are moved off it rather than clamped under it) take the projector's
        # merged features in order; the processor's [IMG_BREAK] and [IMG_END] tokens are text.
        placeholder = getattr(config, "image_token_id", None) or config.image_token_index
        ids[ids == placeholder] = placeholder + 1
        side = round(tokens ** 0.5) * config.spatial_merge_size * config.vision_config.patch_size
        for start in [1 + i * tokens for i in range(images)]:
            ids[:, start:start + tokens] = placeholder
        extra["pixel_values"] = torch.randn(B * images, 3, side, side, generator=generator).to(ids.device, dtype)
        extra["image_sizes"] = torch.tensor([[side, side]] * (B * images), device=ids.device)
    return extra
