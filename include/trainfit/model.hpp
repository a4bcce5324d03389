#pragma once
// The shape of a decoder-only transformer, read from a Hugging Face config.json.
// Only shape matters to trainfit: memory and time depend on tensor sizes, not values.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <string_view>
#include <vector>

namespace trainfit {

// One linear (matrix) module of a decoder layer, as PEFT names it.
// What a linear module of a decoder layer is, whatever its family calls it. The memory and time
// models, LoRA targeting and `trainfit models` read the role; the name (module_name, from the
// one table of every family's names in model/families.cpp) is what PEFT and the breakdown see.
enum class ModuleRole {
  attention_query,      // q_proj
  attention_key,        // k_proj
  attention_value,      // v_proj
  attention_qkv,        // q, k and v fused (phi3's qkv_proj)
  attention_output,     // o_proj
  latent_query_down,    // multi-head latent attention's q_a_proj
  latent_query_up,      // ... q_b_proj
  latent_kv_down,       // ... kv_a_proj_with_mqa
  latent_kv_up,         // ... kv_b_proj
  mlp_gate,             // gate_proj
  mlp_up,               // up_proj
  mlp_gate_up,          // gate and up fused (phi3's gate_up_proj)
  mlp_down,             // down_proj
  router,               // the MoE router's weight (an nn.Linear or a bare parameter)
  expert_gate,          // the routed experts' gate, one 3-D parameter of every expert
  expert_up,
  expert_gate_up,       // gate and up fused (transformers 5's MoE families)
  expert_down,
  shared_expert_gate,   // the shared expert every token runs
  shared_expert_up,
  shared_expert_down,
  shared_expert_scale,  // the shared expert's sigmoid gate (qwen2_moe)
  // A Gated DeltaNet layer's token mixer (Qwen3-Next's linear_attn): one projection to q, k, v and
  // the output gate z, one to the write strength b and the decay a, and the output projection.
  linear_attention_qkvz,
  linear_attention_ba,
  linear_attention_output,
  // A Mamba-2 layer's token mixer (Granite 4.0-H's mamba): in_proj makes the gate z, the
  // convolution's input (x, B and C) and the step sizes dt; out_proj reads the gated norm's output.
  state_space_input,
  state_space_output,
  shared_expert_gate_up,  // the shared expert's gate and up fused (Granite 4.0's shared_mlp.input_linear)
};
inline constexpr std::size_t kModuleRoles = static_cast<std::size_t>(ModuleRole::shared_expert_gate_up) + 1;
std::string to_string(ModuleRole role);  // "attention_query", ...
// Which part of the layer a role belongs to, and which side of an MLP it is.
bool is_attention(ModuleRole role);        // attention's or a linear-attention layer's token mixer
bool is_mlp_input_side(ModuleRole role);   // gate, up, or the two fused: reads the MLP's input
bool is_mlp_output_side(ModuleRole role);  // down: reads the activation x up product
bool is_routed_expert(ModuleRole role);
bool is_shared_expert(ModuleRole role);    // the shared expert's MLP (not its scale)
bool is_router_like(ModuleRole role);      // router and shared_expert_scale: routing, not an MLP

struct LinearModule {
  ModuleRole role = ModuleRole::attention_query;
  std::string name;             // the family's name for the role (module_name): "q_proj", "experts.down_proj"...
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  std::int64_t count = 1;       // copies per layer (number of experts for expert weights)
  bool bias = false;
  // Rows of tokens that pass through one copy, as a fraction of the layer's tokens:
  // 1 for dense modules, experts_per_token / experts for a routed expert.
  double token_fraction = 1.0;
  // An nn.Linear module, which PEFT's "all-linear" wraps. Routed experts stored as fused 3-D
  // parameters (transformers 5) and routers that hold a bare weight (DeepSeek-V3) are not.
  bool nn_linear = true;
  // PEFT refuses an adapter on it (ModelFamily::lora_refuses_state_space_output): a target that
  // names it is an error, and the plan of all-linear leaves it out, as the targets PEFT accepts do.
  bool lora_refused = false;
  bool operator==(const LinearModule&) const = default;
};

// A linear module of a vision tower or its projector, as PEFT matches a target against it: its
// path under the tower's layer (or the tower) and how many copies the tower has.
struct TowerLinear {
  std::string name;  // "self_attn.q_proj", "mlp.fc1", "multi_modal_projector.linear_1"...
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  std::int64_t count = 1;
  bool bias = false;
  bool operator==(const TowerLinear&) const = default;
};

// What an image costs in the tower's layers (docs/model.md, "Images through the vision tower").
struct TowerLayers {
  std::int64_t hidden = 0;        // the tower's width
  std::int64_t intermediate = 0;  // its MLP's
  std::int64_t layers = 0;
  bool gated_mlp = false;  // gate, up and down (Pixtral, Qwen2.5-VL); fc1, GELU, fc2 otherwise
  bool rms_norm = false;   // transformers' RMSNorm (Pixtral, Qwen2.5-VL); nn.LayerNorm otherwise
  // The tower's positions (patches) per image token the text sequence holds: the merger's s^2,
  // Gemma 3's 4 x 4 pooling, Llama 4's pixel shuffle (a 336-pixel tile: 577 positions, 144 tokens).
  double positions_per_token = 1;
  // Tokens an image takes when the setup does not say (image_tokens); Gemma 3's are fixed.
  std::int64_t default_image_tokens = 256;
  bool fixed_image_tokens = false;
  // Layers that attend within windows of `window` positions, not the whole image (Qwen2.5-VL).
  std::int64_t windowed_layers = 0;
  std::int64_t window = 0;
  // q, k and v from one fused projection, q and k then rotated (the Qwen VL towers): v is a view
  // that keeps the whole projection's output alive beside the rotated copies.
  bool fused_qkv_rotary = false;
  // Attention runs one call a window and an image (the Qwen VL towers without flash attention split
  // q, k and v at cu_seqlens and loop), not one call a layer for the micro-batch's images together.
  bool attention_call_per_image = false;
  bool operator==(const TowerLayers&) const = default;
};

// The vision tower and projector a multimodal config builds beside its text model
// (docs/models.md, "Vision towers"). A text-only step leaves it idle: the tower is loaded and
// counted, and PEFT's all-linear wraps its nn.Linear modules (it leaves out only the output layer),
// but no image passes through it, so neither it nor its adapters get a gradient. A step with
// images (TrainingSetup::images) runs them through it.
struct VisionTower {
  // vision_config's model_type as transformers builds it: siglip_vision_model (Gemma 3), pixtral
  // (Mistral 3), qwen2_5_vl, qwen3_vl, llama4_vision_model; empty for a text model.
  std::string type;
  std::vector<TowerLinear> linears;       // tower and projector
  std::int64_t other_parameters = 0;      // the rest: patch convolution, position tables, norms, raw matrices
  std::int64_t projector_parameters = 0;  // of all of them, the projector's (or merger's)
  TowerLayers shape;
  std::int64_t parameters() const;        // sum(p.numel()) over tower and projector
  bool operator==(const VisionTower&) const = default;
};

// Linear attention by the gated delta rule (Qwen3-Next's Gated DeltaNet layers, docs/models.md): a
// recurrent state of key_head_dim x value_head_dim a value head in place of attention's scores.
// The keys' heads are repeated to the values' before the kernel.
struct LinearAttention {
  std::int64_t layers = 0;  // how many decoder layers mix tokens so; 0: none
  std::int64_t key_heads = 0;
  std::int64_t value_heads = 0;
  std::int64_t key_head_dim = 0;
  std::int64_t value_head_dim = 0;
  std::int64_t conv_kernel = 0;  // the depthwise causal convolution over q, k and v
  std::int64_t key_width() const { return key_heads * key_head_dim; }
  std::int64_t value_width() const { return value_heads * value_head_dim; }
  std::int64_t conv_width() const { return 2 * key_width() + value_width(); }
  bool operator==(const LinearAttention&) const = default;
};

// Mamba-2 layers (the state space duality, SSD; Granite 4.0-H's GraniteMoeHybridMambaLayer,
// Falcon-H1's FalconH1Mixer, docs/models.md): heads x head_dim channels, each head with a state of head_dim x state_size,
// written and read through B and C (state_size wide, shared by the heads of a group).
struct StateSpace {
  std::int64_t layers = 0;  // how many decoder layers mix tokens so; 0: none
  std::int64_t heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t state_size = 0;
  std::int64_t groups = 1;
  std::int64_t conv_kernel = 0;  // the depthwise causal convolution over x, B and C
  std::int64_t chunk_size = 0;   // the scan's chunks (the quadratic form within one)
  bool conv_bias = true;
  bool input_bias = false;   // in_proj's (mamba_proj_bias)
  bool output_bias = false;  // out_proj's (mamba_proj_bias; Falcon-H1: projectors_bias)
  // The scan's output through a gated RMSNorm (norm(y x silu(z)) in fp32), or multiplied by
  // silu(z) alone (Falcon-H1 with mamba_rms_norm false).
  bool gated_norm = true;
  // Falcon-H1: every layer runs attention and the Mamba-2 mixer side by side on the same
  // normalised input and adds their outputs (the model's layers all attend and all scan).
  bool parallel_attention = false;
  std::int64_t inner_width() const { return heads * head_dim; }
  std::int64_t conv_width() const { return inner_width() + 2 * groups * state_size; }
  // in_proj's output: the gate z, x, B, C and a step size dt a head.
  std::int64_t input_width() const { return inner_width() + conv_width() + heads; }
  bool operator==(const StateSpace&) const = default;
};

struct ModelSpec {
  std::string name;         // built-in name or the path it was read from
  // config.json "model_type": llama, qwen2, qwen3, mistral, gemma, gemma2, gemma3_text, olmo2, phi3, smollm3,
  // granite, mixtral, qwen2_moe, qwen3_moe, phimoe, deepseek_v2, deepseek_v3, gpt_oss, glm4_moe, llama4_text. A
  // multimodal config is read as its text model's family ("gemma3_text", "qwen2", "llama4_text"...), with
  // text_of_multimodal, multimodal_type and its vision tower saying so.
  std::string model_type;
  std::int64_t hidden_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;  // of a query and key head (multi-head latent attention: nope + rope part)
  std::int64_t intermediate_size = 0;
  std::int64_t vocab_size = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;      // bias on q/k/v (qwen2 has it, llama does not by default)
  bool attention_out_bias = false;  // bias on o_proj (llama's attention_bias covers o_proj too)
  bool mlp_bias = false;
  bool qk_norm = false;  // RMSNorm on q and k: qwen3, gemma3 over each head; olmo2 over the whole projection
  bool qk_norm_whole_projection = false;  // olmo2: q_norm is heads x head_dim wide, k_norm kv_heads x head_dim
  bool fused_qkv = false;           // phi3: one qkv_proj and one gate_up_proj
  std::int64_t norms_per_layer = 2;  // gemma2 and gemma3 have four
  // olmo2: the layer's two norms follow attention and the MLP (on their outputs), so attention and the
  // MLP read the residual stream itself.
  bool post_norms = false;
  bool layer_norm = false;    // phimoe: nn.LayerNorm (weight and bias) everywhere RMSNorm would be
  // gemma, gemma2, gemma3: the RMSNorm multiplies by (1 + weight) in fp32 and casts after, so the
  // weight's gradient keeps the fp32 normalised input (measured on the H200), not a compute-dtype one.
  bool norm_scale_in_fp32 = false;
  // phimoe with input_jitter_noise > 0: in training the MoE block and its router each multiply the
  // hidden states by fresh uniform noise, and autograd keeps each noise tensor (hidden-size wide).
  std::int64_t jitter_noise_tensors = 0;
  bool lm_head_bias = false;  // phimoe
  // Rotary cos/sin tables the model computes once a step: gemma3 has one for its sliding-window layers
  // and one for its full-attention layers (different bases).
  std::int64_t rotary_tables = 1;
  // Layers that apply no rotary embedding (SmolLM3's NoPE layers, 0 in its no_rope_layers): their
  // attention reads the projections as they are. The kernel keeps them instead of the rotated
  // copies, the same bytes; only the rotation's operations are missing.
  std::int64_t rope_free_layers = 0;
  // Granite's multipliers: the embedding output and each sublayer's output before its residual add
  // are multiplied by a constant, and the logits divided by logits_scaling. A product by a Python
  // float keeps nothing for its backward: one more elementwise pass over each, forward and backward.
  bool scaled_residuals = false;
  bool scaled_logits = false;
  bool text_of_multimodal = false;  // the text model of a multimodal config (gemma3, mistral3, qwen2_5_vl, ...)
  std::string multimodal_type;      // that config's model_type ("gemma3", "mistral3"), or empty
  VisionTower vision;               // its vision tower and projector
  // A model_type of no family trainfit reads, planned as Llama's decoder layer from the fields every
  // decoder config has (docs/models.md, "Other decoder families"); `unread_fields` are the config's
  // other fields that may change the layers, which the plan's warning names.
  bool generic_decoder = false;
  std::vector<std::string> unread_fields;
  std::string hidden_act = "silu";
  double final_logit_softcapping = 0.0;  // gemma2: tanh cap on the logits (extra logits-sized tensors)
  // gpt_oss: each attention head has a learned sink logit (one parameter a head and layer), which
  // the attention's softmax takes as one more column; the routed experts and the router have biases.
  bool attention_sinks = false;
  bool expert_bias = false;
  // gpt_oss's experts' activation: the gate clamped above at 7 and multiplied by sigmoid(1.702 x gate),
  // the up clamped to [-7, 7] and shifted by one, their product (GptOssExperts), in place of SiLU.
  bool clamped_glu = false;
  // Llama 4: its RoPE layers normalise q and k by their root mean square in fp32, without a weight
  // (Llama4TextL2Norm, use_qk_norm); how many layers do.
  std::int64_t qk_l2_norm_layers = 0;
  // Qwen3-Next's attention layers: q_proj makes the query and a gate as wide, and the attention's
  // output is multiplied by the gate's sigmoid before o_proj.
  bool attention_output_gate = false;
  // Qwen3-Next's Gated DeltaNet layers (layers of the model that are not attention layers).
  LinearAttention linear_attention;
  // Granite 4.0-H's Mamba-2 layers (the other layers attend); Falcon-H1's, every layer, beside attention.
  StateSpace state_space;
  // The dense MLP's gate and up are one nn.Linear (phi3's gate_up_proj, Granite 4.0's
  // shared_mlp.input_linear), whose output is split in two.
  bool fused_gate_up = false;
  // The dense MLP is gated (gate, up and down: SwiGLU and the like), or up and down with hidden_act
  // between them (Nemotron-H's relu2: up_proj, ReLU, square, down_proj).
  bool gated_mlp = true;
  // Nemotron-H's layers (its blocks) hold one sublayer each, behind one norm: its attention and
  // Mamba-2 layers mix tokens with no MLP, and `mlp_only_layers` of its layers are an MLP alone.
  bool mixer_only_layers = false;
  std::int64_t mlp_only_layers = 0;
  // Mixture of experts (0 when dense).
  std::int64_t num_experts = 0;
  std::int64_t experts_per_token = 0;
  std::int64_t moe_intermediate_size = 0;
  // The shared expert MLP every token runs beside the routed ones: qwen2_moe's (with a sigmoid gate), or
  // DeepSeek's n_shared_experts x moe_intermediate_size wide one.
  std::int64_t shared_expert_intermediate_size = 0;
  // The shared expert's output is scaled by sigmoid(shared_expert_gate(x)), an h -> 1 nn.Linear
  // (qwen2_moe, qwen3_next); DeepSeek's and Llama 4's are added as they are.
  bool shared_expert_scaled = false;
  std::int64_t dense_layers = 0;  // layers with a dense MLP instead of experts
  // Llama4TextMoe: every token is repeated for every expert and scaled by its router score (0 off
  // its top-k) before the experts run, so all experts run on all tokens (no gather, no dispatch).
  bool dense_expert_routing = false;
  // deepseek: the router casts the hidden states and its weight to fp32 and multiplies them itself
  // (F.linear), never calling a LoRA-wrapped module's forward.
  bool router_in_fp32 = false;
  // Granite 4.0: the router takes each token's top k logits first and softmaxes those k alone
  // (GraniteMoeHybridTopKRouter), so it keeps k weights and indices a token, not E probabilities.
  bool router_softmax_over_top_k = false;
  std::int64_t max_position_embeddings = 0;
  // Sliding-window attention: how many layers attend to the last `sliding_window` tokens only
  // (gemma2 every other layer, gemma3 five of six, mistral and mixtral all when the config sets a
  // window). 0: none.
  std::int64_t sliding_window = 0;
  std::int64_t sliding_layers = 0;
  // Whether a step of `seq` tokens runs its sliding layers with an explicit mask: transformers skips
  // the mask (SDPA's is_causal instead) while the sequence is shorter than the window.
  bool sliding_mask_at(std::int64_t seq) const { return sliding_layers > 0 && seq >= sliding_window; }
  // Multi-head latent attention (deepseek_v2, deepseek_v3): queries through a low-rank pair (q_a_proj,
  // q_a_layernorm, q_b_proj) or one q_proj when q_lora_rank is 0; keys and values expanded by kv_b_proj
  // from one compressed projection (kv_a_proj_with_mqa, kv_lora_rank wide plus the shared rotary key).
  std::int64_t q_lora_rank = 0;
  std::int64_t kv_lora_rank = 0;      // > 0: the model uses multi-head latent attention
  std::int64_t qk_rope_head_dim = 0;  // the rotary part of head_dim
  std::int64_t v_head_dim = 0;        // of a value head; head_dim for every other attention

  bool is_moe() const { return num_experts > 0; }
  // The expert rows one token's forward runs: its top-k, or every expert under dense routing.
  std::int64_t expert_rows_per_token() const { return dense_expert_routing ? num_experts : experts_per_token; }
  bool is_mla() const { return kv_lora_rank > 0; }
  // Layers of the plain kind: attention and an MLP (the rest mix tokens by linear attention or a
  // state space, or, in Falcon-H1, by both attention and a state space; Nemotron-H's attention
  // layers have no MLP, and its MLP-only layers no token mixer).
  std::int64_t attention_only_layers() const {
    return num_layers - linear_attention.layers - state_space.layers - mlp_only_layers;
  }
  // Layers that attend.
  std::int64_t attention_layers() const {
    return attention_only_layers() + (state_space.parallel_attention ? state_space.layers : 0);
  }
  // A value head's width, and the width of the rotary part of a query or key head.
  std::int64_t value_head_dim() const { return is_mla() ? v_head_dim : head_dim; }
  std::int64_t rotary_dim() const { return is_mla() ? qk_rope_head_dim : head_dim; }
};

struct ParameterCounts {
  std::int64_t embedding = 0;   // token embedding matrix
  std::int64_t lm_head = 0;     // 0 when tied to the embedding
  std::int64_t per_layer_linear = 0;  // all matrix weights (and their biases) of one average layer
  std::int64_t linear = 0;      // every decoder linear weight and bias, all layers
  std::int64_t norms = 0;       // every RMSNorm/LayerNorm weight, including the final one
  std::int64_t other = 0;       // routers, anything else
  std::int64_t vision = 0;      // a multimodal model's vision tower and projector
  std::int64_t total = 0;       // what sum(p.numel() for p in model.parameters()) prints
  // What one token's forward uses: the total less the routed experts it is not sent to (all of it for
  // a dense model). Publishers state this "activated" figure with or without the embedding table.
  std::int64_t activated = 0;
  bool operator==(const ParameterCounts&) const = default;
};

// Reads a config.json (a file, or a folder holding one) or a built-in name.
// Throws InputError naming the field when the config is malformed, nonsensical or of an unknown family.
ModelSpec load_model(std::string_view name_or_path);
// A built-in name only, never a file: what a network client may name (`trainfit serve`).
ModelSpec load_builtin_model(std::string_view name);
ModelSpec parse_model_config(std::string_view json_text, std::string_view source_name);

// The built-in model names ("qwen2.5-7b", ...) in catalogue order.
std::vector<std::string> builtin_model_names();

// What a built-in model's publisher states (its model card, or the Hub's count of its safetensors
// weights): the total parameters and, for a mixture of experts, those one token uses. Publishers
// count the active figure with or without the embedding table. 0 where nothing is recorded.
struct PublishedParameters {
  double total = 0;
  double active = 0;
};
PublishedParameters published_parameters(std::string_view builtin_name);

ParameterCounts count_parameters(const ModelSpec& model);

// The linear modules of one decoder layer (for a model with some dense and some MoE
// layers, of an MoE layer; dense_layers says how many layers use the dense MLP instead).
std::vector<LinearModule> layer_linear_modules(const ModelSpec& model);
// The linear modules of a dense layer of an MoE model (empty for dense models).
std::vector<LinearModule> dense_layer_linear_modules(const ModelSpec& model);
// The linear modules of a linear-attention layer (its token mixer and its MLP, of the MoE kind in
// an MoE model); empty for a model without such layers. layer_linear_modules is then an attention
// layer's, of which the model has attention_layers() less its dense layers.
std::vector<LinearModule> linear_attention_layer_linear_modules(const ModelSpec& model);
// The linear modules of a Mamba-2 layer (its token mixer and the model's MLP kind); empty without.
std::vector<LinearModule> state_space_layer_linear_modules(const ModelSpec& model);
// The linear modules of an MLP-only layer (Nemotron-H's `-` blocks); empty without.
std::vector<LinearModule> mlp_only_layer_linear_modules(const ModelSpec& model);
// The linear modules of every kind of layer the model has (an MoE model's dense-MLP layers only when
// it has some), each kind's in turn: what a LoRA target may name and what all-linear wraps.
std::vector<LinearModule> model_linear_modules(const ModelSpec& model);
// The name transformers gives a module of this role in this model's family (its path under the
// decoder layer, as PEFT matches it): the family's row of model/families.cpp, the one place these live.
std::string module_name(const ModelSpec& model, ModuleRole role);
// All of them, indexed by role.
const std::array<std::string, kModuleRoles>& module_names(const ModelSpec& model);

// A model family: how its config.json is read, what its modules are called and how transformers
// lays out its mixture of experts. The built-in families are rows of src/model/families.cpp.
struct ModelFamily {
  std::string model_type;  // config.json's model_type
  // The built-in family whose config fields and layer structure this one has (its reading code in
  // model_config.cpp); a built-in reads as itself.
  std::string reads_as;
  // The roles it names differently from its reads_as family (a built-in: from Llama's names).
  std::vector<std::pair<ModuleRole, std::string>> renamed;
  // Mixture of experts as transformers 5 builds it. Its experts are two 3-D parameters, gate and up
  // fused, which PEFT's all-linear does not take as nn.Linear (Mixtral, PhiMoE, DeepSeek).
  bool fused_experts = false;
  // Its router holds a bare weight, not an nn.Linear: all-linear does not wrap it (Mixtral, DeepSeek-V3).
  bool bare_router = false;
  // Its configs describe a mixture of experts (a decoder layer with routed experts).
  bool mixture_of_experts = false;
  // Its router is an nn.Linear whose forward returns a tuple: all-linear wraps it and PEFT's LoRA
  // forward fails there (PhiMoE).
  bool router_returns_tuple = false;
  // PEFT 0.21's all-linear leaves its fused experts (and its router) unwrapped, at any dropout:
  // gpt-oss's (GptOssExperts, biases beside the 3-D weights; all-linear wraps q/k/v/o only) and
  // Granite 4.0's (the inspect.json rows of the family runs).
  bool all_linear_skips_experts = false;
  // PEFT 0.21 refuses a LoRA adapter on a module named out_proj (or conv1d) in this model_type
  // (_check_lora_target_modules_mamba: falcon_h1, nemotron_h and the Mamba models): all-linear, which
  // would wrap the Mamba-2 mixer's out_proj, raises in get_peft_model (Falcon-H1 on the GPU machine).
  bool lora_refuses_state_space_output = false;
  // Liger-Kernel patches this family's model in place (its MODEL_TYPE_TO_APPLY_LIGER_FN at
  // Liger-Kernel ead96b61, which use_liger_kernel calls on the built model): the layers' RMSNorms,
  // the gated MLP's activation and the rotary embedding; and its per-head q/k norms as well.
  bool liger = false;
  bool liger_qk_norm = false;
  // Every role's name, resolved when the row is made (Llama's, then reads_as's, then renamed).
  std::array<std::string, kModuleRoles> names{};
};
// Every family, the built-ins first, in table order.
const std::vector<const ModelFamily*>& model_families();
// The family of config.json's model_type; nullptr when none is known.
const ModelFamily* find_model_family(std::string_view model_type);
// The model's own family (its model_type's row).
const ModelFamily& model_family(const ModelSpec& model);
// Whether PEFT 0.21's all-linear, under transformers 5, puts lora.ParamWrapper on this model's
// routed experts: a mixture of experts (transformers 5 stores every family's experts as 3-D
// parameters) whose router does not fail the wrap first (PhiMoE's and Llama 4's return tuples), and
// not gpt-oss's (ModelFamily::all_linear_skips_experts). ParamWrapper takes no LoRA dropout.
bool all_linear_wraps_fused_experts(const ModelSpec& model);
// The model_types whose configs describe such a mixture of experts (ModelFamily::mixture_of_experts,
// less the routers that fail the wrap and the experts all-linear skips), added families included.
std::vector<std::string> expert_wrapping_model_types();
// Adds a family that reads as a built-in and may name its modules otherwise (docs/architecture.md,
// "Add a model family"). It inherits its reads_as family's structure. Throws InputError when the
// model_type is taken or reads_as is not a built-in. Call it before planning starts: planning in
// other threads reads the table without a lock.
void add_model_family(const ModelFamily& family);

// Adds a built-in model from its config.json text (its family must be known): it is then listed by
// builtin_model_names() and loads by its name and its Hub ids. Throws InputError when the name is
// taken or the config does not read. The same caveat as add_model_family.
void add_builtin_model(std::string_view name, std::string_view config_json, const std::vector<std::string>& hf_ids = {});

}  // namespace trainfit
