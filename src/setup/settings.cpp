// The settings table and what derives from it: checking a value, resolving defaults, labels and the
// arguments that reproduce a setup. JSON reading and writing and the schema are in setup_json.cpp.
#include "trainfit/settings.hpp"

#include "common/text.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/model.hpp"
#include "trainfit/units.hpp"

namespace trainfit {
namespace detail {

// The model_type of the config.json the setup's model names (a multimodal config's own, not its
// text model's), or "" when it does not load (the plan reports that itself). A built-in is looked
// up once a process (a default is asked for many times over a grid), a file read each time (it may
// change).
std::string config_model_type(const std::string& model) {
  if (model.empty()) return {};
  const auto read = [&]() -> std::string {
    try {
      const ModelSpec m = load_model(model);
      return m.text_of_multimodal ? m.multimodal_type : m.model_type;
    } catch (const InputError&) {
      return {};
    }
  };
  std::error_code ec;
  if (std::filesystem::exists(model, ec)) return read();
  static std::mutex mutex;
  static std::map<std::string, std::string, std::less<>> known;
  const std::lock_guard lock(mutex);
  if (auto it = known.find(model); it != known.end()) return it->second;
  return known.emplace(model, read()).first->second;
}

}  // namespace detail

namespace {

// ---- Building rows -------------------------------------------------------------------------------

// A row whose value is one member of TrainingSetup. `member` is a generic lambda
// ([](auto& s) -> auto& { return s.seq; }) so that it serves the const and the mutable setup.
template <typename T, typename Member>
void bind(Setting& row, Member member) {
  row.get = [member](const TrainingSetup& s) { return SettingValue(T(member(s))); };
  row.set = [member](TrainingSetup& s, const SettingValue& v) { member(s) = std::get<T>(v); };
}

// An optional integer: unset reads as no value (JSON null), and no value unsets it.
template <typename Member>
void bind_optional_integer(Setting& row, Member member) {
  row.get = [member](const TrainingSetup& s) {
    const std::optional<std::int64_t>& v = member(s);
    return v ? SettingValue(*v) : SettingValue();
  };
  row.set = [member](TrainingSetup& s, const SettingValue& v) {
    if (std::holds_alternative<std::int64_t>(v)) member(s) = std::get<std::int64_t>(v);
    else member(s).reset();
  };
}

// A choice between the names of an enumeration: `parse` accepts aliases, `name` gives the canonical one.
template <typename E, typename Member>
void bind_enum(Setting& row, Member member, E (*parse)(std::string_view), std::string (*name)(E)) {
  row.get = [member, name](const TrainingSetup& s) { return SettingValue(name(member(s))); };
  row.set = [member, parse](TrainingSetup& s, const SettingValue& v) { member(s) = parse(std::get<std::string>(v)); };
  row.canonical = [parse, name](std::string_view text) { return SettingValue(name(parse(text))); };
}

SettingCondition condition(std::string setting, std::vector<std::string> one_of, std::vector<std::string> none_of,
                           std::optional<double> at_least = std::nullopt) {
  SettingCondition c;
  c.setting = std::move(setting);
  c.one_of = std::move(one_of);
  c.none_of = std::move(none_of);
  c.at_least = at_least;
  return c;
}
// Functions, not globals: the table may be built during another file's static initialisation.
SettingCondition under_lora() { return condition("method", {}, {"full"}); }  // LoRA and QLoRA
SettingCondition under_qlora() { return condition("method", {"qlora"}, {}); }
SettingCondition several_gpus() { return condition("gpus", {}, {}, 2); }
// The data-parallel schemes FSDP2 runs, whose MixedPrecisionPolicy the fsdp_* dtypes set.
std::vector<std::string> fsdp2_schemes() {
  std::vector<std::string> names;
  for (const DataParallelScheme* d : data_parallel_schemes())
    if (d->framework == DataParallelFramework::fsdp2) names.push_back(d->name);
  return names;
}

// A nullable dtype choice held in a std::optional<DType>.
template <typename Member>
void bind_optional_dtype(Setting& row, Member member) {
  row.get = [member](const TrainingSetup& s) {
    const auto& v = member(s);
    return v ? SettingValue(to_string(*v)) : SettingValue();
  };
  row.set = [member](TrainingSetup& s, const SettingValue& v) {
    if (std::holds_alternative<std::string>(v)) member(s) = parse_dtype(std::get<std::string>(v));
    else member(s).reset();
  };
  row.canonical = [](std::string_view text) { return SettingValue(to_string(parse_dtype(text))); };
}

DerivedDefault value_when(SettingCondition when, SettingValue value) {
  DerivedDefault d;
  d.when = std::move(when);
  d.value = std::move(value);
  return d;
}
DerivedDefault first_of(std::vector<DerivedDefault::Case> cases) {
  DerivedDefault d;
  d.cases = std::move(cases);
  return d;
}
DerivedDefault times(std::string setting, double factor) {
  DerivedDefault d;
  d.times = std::move(setting);
  d.factor = factor;
  return d;
}

std::vector<Setting> builtin_table() {
  std::vector<Setting> t;
  std::string group;  // the rows that follow are shown together on the page
  auto row = [&t, &group](std::string key, std::string flag, SettingType type, std::string description) -> Setting& {
    Setting s;
    s.group = group;
    s.key = std::move(key);
    s.flag = std::move(flag);
    s.type = type;
    s.description = std::move(description);
    t.push_back(std::move(s));
    return t.back();
  };
  using enum SettingType;
  constexpr double kMaxTokens = 16777216;  // 2^24: products of sizes stay far from int64 overflow

  // What is trained, on which card.
  group = "model and card";
  {
    auto& r = row("model", "--model", text,
                  "built-in model name (see `trainfit models`), or a path to a config.json or a folder holding one");
    r.label = "{}";
    r.label_always = true;
    bind<std::string>(r, [](auto& s) -> auto& { return s.model; });
  }
  {
    auto& r = row("gpu", "--gpu", text, "catalogue GPU (see `trainfit gpus`)");
    r.in_matrix = false;
    bind<std::string>(r, [](auto& s) -> auto& { return s.gpu; });
  }
  {
    auto& r = row("vram", "--vram", bytes, "memory of a card not in the catalogue, e.g. 16GiB, 24GB, 16303MiB");
    r.in_matrix = false;
    // What a card's memory may be however it is given (include/trainfit/hardware.hpp says why).
    r.minimum = static_cast<double>(kMinCardMemoryBytes);
    r.maximum = static_cast<double>(kMaxCardMemoryBytes);
    bind_optional_integer(r, [](auto& s) -> auto& { return s.vram_bytes; });
  }
  {
    auto& r = row("gpu_spec", "--gpu-spec", text, "TOML file describing a GPU (docs/gpus.md)");
    r.in_matrix = false;
    bind<std::string>(r, [](auto& s) -> auto& { return s.gpu_spec; });
  }
  {
    auto& r = row("vision_tower", "--vision-tower", choice,
                  "a multimodal model (Gemma 3, Mistral 3, Qwen2.5-VL, Qwen3-VL, Llama 4): loaded builds the whole "
                  "model, as AutoModelForCausalLM and the trainers do (its vision tower and projector held, idle in "
                  "a text-only step); frozen builds it with the tower and projector frozen and no LoRA adapter on "
                  "them (LLaMA-Factory's freeze_vision_tower and freeze_multi_modal_projector); dropped builds its "
                  "text model alone. Nothing changes for a text model");
    r.choices = {"loaded", "frozen", "dropped"};
    r.label = "vision-{}";
    bind_enum(r, [](auto& s) -> auto& { return s.vision_tower; }, parse_vision_tower, to_string);
  }

  // How it is trained.
  group = "method";
  {
    auto& r = row("method", "--method", choice, "full fine-tuning, LoRA on a frozen base, or LoRA on a quantised base");
    r.choices = {"full", "lora", "qlora"};
    r.label = "{}";
    r.label_always = true;
    bind_enum(r, [](auto& s) -> auto& { return s.method; }, parse_method, to_string);
  }
  group = "precision";
  {
    auto& r = row("weights", "--weights", choice, "dtype the base weights are stored in");
    r.choices = {"fp32", "bf16", "fp16", "int8", "nf4", "fp4"};
    r.derived_default = value_when(under_qlora(), std::string("nf4"));
    r.default_rule = "nf4 with method qlora";
    r.label = "{}";
    bind_enum(r, [](auto& s) -> auto& { return s.weights; }, parse_dtype, to_string);
  }
  {
    auto& r = row("amp", "--amp", choice, "autocast dtype over fp32 master weights, for full fine-tuning with weights fp32");
    r.choices = {"bf16", "fp16"};
    r.nullable = true;
    r.label = "amp-{}";
    bind_optional_dtype(r, [](auto& s) -> auto& { return s.amp; });
  }
  group = "method";
  {
    auto& r = row("rank", "--rank", integer, "LoRA rank");
    r.minimum = 1;
    r.maximum = 65536;
    r.applies_when = under_lora();
    r.label = "r{}";
    r.label_always = true;
    bind<std::int64_t>(r, [](auto& s) -> auto& { return s.lora.rank; });
  }
  {
    auto& r = row("lora_alpha", "--lora-alpha", number, "LoRA alpha, which scales the adapters; no memory or time term depends on it");
    r.minimum = 0;
    r.exclusive_minimum = true;
    r.applies_when = under_lora();
    r.derived_default = times("rank", 2);
    r.default_rule = "2 x rank";
    r.label = "alpha{}";
    bind<double>(r, [](auto& s) -> auto& { return s.lora.alpha; });
  }
  {
    auto& r = row("lora_targets", "--lora-targets", list, "modules with adapters: all-linear, or q,k,v,o,gate,up,down or q_proj,v_proj...");
    r.applies_when = under_lora();
    r.label = "{}";
    bind<std::vector<std::string>>(r, [](auto& s) -> auto& { return s.lora.targets; });
    r.canonical = [](std::string_view text) { return SettingValue(parse_lora_targets(text)); };
  }
  {
    auto& r = row("lora_dropout", "--lora-dropout", number, "LoRA dropout probability");
    r.minimum = 0;
    r.maximum = 1;
    r.exclusive_maximum = true;
    r.applies_when = under_lora();
    // PEFT 0.21's all-linear (the default targets) puts lora.ParamWrapper on a transformers 5
    // mixture of experts' fused experts, and ParamWrapper refuses any dropout: 0.05 would plan a
    // model PEFT does not build. 0 on such a model whatever the targets, so that naming targets
    // changes the targets alone.
    DerivedDefault d;
    d.model_types = expert_wrapping_model_types;
    d.value = 0.0;
    r.derived_default = std::move(d);
    r.default_rule = "0.05; 0 on a mixture of experts (PEFT's lora.ParamWrapper, which all-linear puts on "
                     "transformers 5's fused experts, takes no dropout)";
    r.label = "dropout{}";
    bind<double>(r, [](auto& s) -> auto& { return s.lora.dropout; });
  }
  group = "precision";
  {
    auto& r = row("adapter_dtype", "--adapter-dtype", choice, "dtype of the LoRA weights; PEFT keeps them in fp32");
    r.choices = {"fp32", "bf16", "fp16"};
    r.applies_when = under_lora();
    r.label = "adapters-{}";
    bind_enum(r, [](auto& s) -> auto& { return s.lora.adapter_dtype; }, parse_dtype, to_string);
  }
  {
    auto& r = row("compute_dtype", "--compute-dtype", choice, "dtype QLoRA dequantises to and computes in: bnb_4bit_compute_dtype");
    r.choices = {"bf16", "fp16", "fp32"};
    r.applies_when = under_qlora();
    r.label = "compute-{}";
    bind_enum(r, [](auto& s) -> auto& { return s.quant.compute_dtype; }, parse_dtype, to_string);
  }
  {
    auto& r = row("double_quant", "--double-quant", boolean, "QLoRA double quantisation of the block constants: bnb_4bit_use_double_quant");
    r.applies_when = under_qlora();
    r.label = "dq";
    bind<bool>(r, [](auto& s) -> auto& { return s.quant.double_quant; });
  }
  {
    auto& r = row("kbit_prepare", "--kbit-prepare", boolean, "QLoRA after PEFT's prepare_model_for_kbit_training, which casts the unquantised weights to fp32");
    r.applies_when = under_qlora();
    r.label = "kbit-prepare";
    bind<bool>(r, [](auto& s) -> auto& { return s.quant.kbit_prepare; });
  }
  group = "step";
  {
    auto& r = row("trainer", "--trainer", choice,
                  "whose trainer runs the step: transformers' Trainer (or a loop like it), or TRL's trainer for the "
                  "objective, whose defaults then apply (gradient checkpointing on; SFT's chunked loss) and whose "
                  "SFTTrainer also computes the token entropy and accuracy every step");
    r.choices = {"transformers", "trl"};
    r.label = "{}";
    bind_enum(r, [](auto& s) -> auto& { return s.trainer; }, parse_trainer, to_string);
  }
  {
    auto& r = row("optimizer", "--optimizer", choice,
                  "optimizer; adamw is torch's fused AdamW, adamw-foreach torch's default AdamW (transformers' "
                  "adamw_torch), adamw-8bit bitsandbytes' 8-bit AdamW");
    r.choices = {"adamw", "adamw-8bit", "sgd", "sgd-momentum", "adafactor", "adamw-foreach"};
    r.label = "{}";
    bind_enum(r, [](auto& s) -> auto& { return s.optimizer; }, parse_optimizer, to_string);
  }
  {
    auto& r = row("attn", "--attn", choice, "attention kernel: sdpa is PyTorch's fused kernels, flash is flash-attention 2");
    r.choices = {"sdpa", "eager", "flash"};
    r.label = "{}";
    bind_enum(r, [](auto& s) -> auto& { return s.attention; }, parse_attention, to_string);
  }
  {
    auto& r = row("seq", "--seq", integer, "sequence length in tokens");
    r.minimum = 1;
    r.maximum = kMaxTokens;
    r.label = "s{}";
    r.label_always = true;
    bind<std::int64_t>(r, [](auto& s) -> auto& { return s.seq; });
  }
  {
    auto& r = row("batch", "--batch", integer, "micro-batch size: the sequences a GPU runs at once");
    r.minimum = 1;
    r.maximum = 65536;
    r.label = "b{}";
    r.label_always = true;
    bind<std::int64_t>(r, [](auto& s) -> auto& { return s.batch; });
  }
  {
    auto& r = row("images", "--images", integer,
                  "a multimodal model (vision tower loaded): images in each sequence, run through its vision tower; "
                  "their tokens are part of seq. 0: a text-only step");
    r.minimum = 0;
    r.maximum = 4096;
    r.applies_when = condition("vision_tower", {"loaded", "frozen"}, {});
    r.label = "img{}";
    bind<std::int64_t>(r, [](auto& s) -> auto& { return s.images; });
  }
  {
    auto& r = row("image_tokens", "--image-tokens", integer,
                  "tokens each image takes in the sequence, as its resolution makes them (Qwen2.5-VL and Pixtral: "
                  "(H/28)(W/28); Qwen3-VL: (H/32)(W/32); Llama 4: 144 a 336-pixel tile; Gemma 3: always 256)");
    r.minimum = 1;
    r.maximum = kMaxTokens;
    r.applies_when = condition("images", {}, {}, 1);
    r.default_rule = "the tower's: 256, Llama 4 144 (one tile)";
    r.label = "it{}";
    bind_optional_integer(r, [](auto& s) -> auto& { return s.image_tokens; });
  }
  {
    auto& r = row("grad_accum", "--grad-accum", integer, "gradient accumulation steps: micro-batches per optimizer step");
    r.minimum = 1;
    r.maximum = 1000000;
    r.label = "x{}";
    bind<std::int64_t>(r, [](auto& s) -> auto& { return s.grad_accum; });
  }
  {
    auto& r = row("grad_ckpt", "--grad-ckpt", boolean, "gradient checkpointing: recompute each layer in the backward");
    // Every TRL config (SFTConfig, DPOConfig, ... at TRL f2cd577) sets gradient_checkpointing=True.
    r.derived_default = value_when(condition("trainer", {"trl"}, {}), true);
    r.default_rule = "on with trainer trl, as TRL's configs set it";
    r.label = "ckpt";
    bind<bool>(r, [](auto& s) -> auto& { return s.grad_ckpt; });
  }
  // What the step trains for (docs/model.md, "Objectives").
  group = "objective";
  {
    auto& r = row("objective", "--objective", choice,
                  "training objective, as TRL's trainers compute it: sft (next-token loss), dpo, orpo, kto (preference "
                  "losses), reward (a reward model: sequence classifier), ppo (the optimisation step; the rollout "
                  "not planned), grpo (the optimisation step, and its generation with --generation generate)");
    r.choices = {"sft", "dpo", "orpo", "kto", "reward", "ppo", "grpo"};
    r.label = "{}";
    bind_enum(r, [](auto& s) -> auto& { return s.objective; }, parse_objective, to_string);
  }
  {
    auto& r = row("kernels", "--kernels", choice,
                  "the kernels of the layers' norms, activation and rotary embedding: torch (the PyTorch operations "
                  "transformers writes) or liger (Liger-Kernel's RMSNorm, SwiGLU/GeGLU and RoPE, as "
                  "use_liger_kernel patches them in; with it the SFT loss is Liger's fused one)");
    r.choices = {"torch", "liger"};
    r.label = "kernels-{}";
    bind_enum(r, [](auto& s) -> auto& { return s.kernels; }, parse_kernels, to_string);
  }
  {
    auto& r = row("loss", "--loss", choice,
                  "how the SFT loss runs the output layer: whole (every position's logits over the vocabulary, then "
                  "the fp32 cross-entropy; TRL's loss_type nll), chunked (TRL's chunked_nll: 256 positions at a "
                  "time, each chunk recomputed in the backward) or fused (Liger's fused linear cross-entropy: a few "
                  "rows at a time, their gradients made in the forward)");
    r.choices = {"whole", "chunked", "fused"};
    r.applies_when = condition("objective", {"sft"}, {});
    // SFTConfig's loss_type is "chunked_nll" unless it is set, and "nll" under use_liger_kernel,
    // where the patched forward runs Liger's fused loss (TRL f2cd577, sft_config.py).
    r.derived_default = first_of({{condition("kernels", {"liger"}, {}), std::string("fused")},
                                  {condition("trainer", {"trl"}, {}), std::string("chunked")}});
    r.default_rule = "fused with kernels liger; chunked with trainer trl (SFTConfig's loss_type chunked_nll); else whole";
    r.label = "loss-{}";
    bind_enum(r, [](auto& s) -> auto& { return s.loss; }, parse_loss, to_string);
  }
  {
    auto& r = row("packing", "--packing", boolean,
                  "TRL's packing (bfd) or padding_free: the micro-batch's batch rows of seq tokens, filled with whole "
                  "examples, run as one sequence of batch x seq tokens whose examples attend only within themselves "
                  "(flash: per example; sdpa and eager: over a block-diagonal mask of the whole)");
    r.applies_when = condition("objective", {"sft"}, {});
    r.label = "packed";
    bind<bool>(
        r, [](auto& s) -> auto& { return s.packing; });
  }
  {
    auto& r = row("activation_offloading", "--activation-offloading", boolean,
                  "TRL's activation_offloading: the tensors autograd saves in the forward go to pinned host memory "
                  "on a stream of their own and come back as the backward needs them (the output layer's input "
                  "stays; so does a tensor saved twice within five saves)");
    r.applies_when = condition("objective", {"sft", "dpo", "kto", "reward"}, {});
    r.label = "offloaded-activations";
    bind<bool>(
        r, [](auto& s) -> auto& { return s.activation_offloading; });
  }
  {
    auto& r = row("reference", "--reference", choice,
                  "where the reference log-probabilities come from: a frozen copy of the model, the base with its "
                  "adapters disabled (no weights of its own), precomputed before training, or none (grpo with beta 0)");
    r.choices = {"copy", "adapter-off", "precomputed", "none"};
    r.applies_when = condition("objective", {"dpo", "kto", "ppo", "grpo"}, {});
    // TRL's defaults: GRPO loads no reference (beta 0); the others a copy, or the adapter-off base
    // under PEFT.
    r.derived_default = first_of({{condition("objective", {"grpo"}, {}), std::string("none")},
                                  {condition("method", {"full"}, {}), std::string("copy")}});
    r.default_rule = "none with objective grpo; copy with method full; else adapter-off";
    r.label = "ref-{}";
    bind_enum(r, [](auto& s) -> auto& { return s.reference; }, parse_reference, to_string);
  }
  {
    auto& r = row("generations", "--generations", integer,
                  "GRPO: completions sampled per prompt (num_generations); batch x steps_per_generation x "
                  "data-parallel GPUs must hold whole groups of them");
    r.minimum = 2;
    r.maximum = 65536;
    r.applies_when = condition("objective", {"grpo"}, {});
    r.label = "g{}";
    bind<std::int64_t>(r, [](auto& s) -> auto& { return s.generations; });
  }
  {
    auto& r = row("completion_len", "--completion-len", integer,
                  "PPO and GRPO: tokens of each sequence that are the completion (the rest is the prompt)");
    r.minimum = 1;
    r.maximum = kMaxTokens;
    r.applies_when = condition("objective", {"ppo", "grpo"}, {});
    r.derived_default = times("seq", 0.5);
    r.default_rule = "seq / 2";
    r.label = "c{}";
    bind<std::int64_t>(r, [](auto& s) -> auto& { return s.completion_len; });
  }
  {
    auto& r = row("generation", "--generation", choice,
                  "GRPO: where the completions come from: generate (transformers' generate() on the training GPU, "
                  "GRPOTrainer's default; its time is part of the step) or none (made elsewhere, e.g. by a vLLM "
                  "server: the step is the optimisation alone)");
    r.choices = {"none", "generate"};
    r.applies_when = condition("objective", {"grpo"}, {});
    // GRPOTrainer generates with the policy unless use_vllm (TRL f2cd577, grpo_trainer.py); trainfit's
    // runner times the optimisation step alone.
    r.derived_default = value_when(condition("trainer", {"trl"}, {}), std::string("generate"));
    r.default_rule = "generate with trainer trl (GRPOTrainer without vLLM); else none";
    r.label = "gen-{}";
    bind_enum(
        r, [](auto& s) -> auto& { return s.generation; }, parse_generation, to_string);
  }
  {
    auto& r = row("steps_per_generation", "--steps-per-generation", integer,
                  "GRPO: micro-batches one generation serves (TRL's steps_per_generation, or its "
                  "generation_batch_size / (batch x data-parallel GPUs)); 0 follows grad_accum, as GRPOConfig does. "
                  "Each generate() call makes batch x this many completions on a GPU, and they must hold whole "
                  "groups of generations");
    r.minimum = 0;
    r.maximum = 65536;
    r.applies_when = condition("objective", {"grpo"}, {});
    r.label = "spg{}";
    bind<std::int64_t>(
        r, [](auto& s) -> auto& { return s.steps_per_generation; });
  }
  {
    auto& r = row("iterations", "--iterations", integer,
                  "GRPO: optimisation passes over each generation batch (TRL's num_iterations); above 1, or with "
                  "steps_per_generation above grad_accum, the policy's log-probabilities at generation time are "
                  "computed once more without gradients");
    r.minimum = 1;
    r.maximum = 1024;
    r.applies_when = condition("objective", {"grpo"}, {});
    r.label = "mu{}";
    bind<std::int64_t>(
        r, [](auto& s) -> auto& { return s.iterations; });
  }
  group = "layout";
  {
    auto& r = row("gpus", "--gpus", integer, "data-parallel GPUs, each running batch x seq; memory is per GPU");
    r.minimum = 1;
    r.maximum = 65536;
    r.label = "{}gpus";
    bind<std::int64_t>(r, [](auto& s) -> auto& { return s.gpus; });
  }
  {
    auto& r = row("parallel", "--parallel", choice,
                  "layout of the data-parallel GPUs: ddp keeps the whole model on each; fsdp (FSDP2) shards parameters, "
                  "gradients and optimizer states; fsdp-grad-op keeps layers gathered from forward to backward; hsdp "
                  "shards within a node and replicates across nodes; zero1/zero2/zero3 are DeepSpeed's stages");
    for (const DataParallelScheme* d : data_parallel_schemes()) r.choices.push_back(d->name);
    r.applies_when = several_gpus();
    r.label = "{}";
    r.label_always = true;
    bind_enum(r, [](auto& s) -> auto& { return s.parallel; }, parse_parallel, to_string);
  }
  {
    auto& r = row("offload", "--offload", choice,
                  "states kept in host memory: the optimizer (states and fp32 master weights, stepped on the CPU), "
                  "the parameters (zero3), or both (FSDP's CPUOffloadPolicy)");
    r.choices = {"none", "optimizer", "params", "optimizer,params"};
    r.applies_when = several_gpus();
    r.label = "offload-{}";
    bind_enum(r, [](auto& s) -> auto& { return s.offload; }, parse_offload, to_string);
  }
  {
    auto& r = row("offload_device", "--offload-device", choice, "where offloaded states live: CPU memory, or NVMe (zero3)");
    r.choices = {"cpu", "nvme"};
    r.applies_when = condition("offload", {}, {"none"});
    r.label = "{}";
    bind_enum(r, [](auto& s) -> auto& { return s.offload_device; }, parse_offload_device, to_string);
  }
  {
    auto& r = row("fsdp_param_dtype", "--fsdp-param-dtype", choice,
                  "FSDP mixed precision: the dtype layers are gathered and computed in (MixedPrecisionPolicy param_dtype); "
                  "none: the parameters' own");
    r.choices = {"bf16", "fp16", "fp32"};
    r.nullable = true;
    r.applies_when = condition("parallel", fsdp2_schemes(), {});
    r.label = "param-{}";
    bind_optional_dtype(r, [](auto& s) -> auto& { return s.fsdp_param_dtype; });
  }
  {
    auto& r = row("fsdp_reduce_dtype", "--fsdp-reduce-dtype", choice,
                  "FSDP mixed precision: the dtype gradients are reduce-scattered in (reduce_dtype); none: the compute dtype");
    r.choices = {"bf16", "fp16", "fp32"};
    r.nullable = true;
    r.applies_when = condition("parallel", fsdp2_schemes(), {});
    r.label = "reduce-{}";
    bind_optional_dtype(r, [](auto& s) -> auto& { return s.fsdp_reduce_dtype; });
  }
  {
    auto& r = row("tp", "--tp", integer, "tensor-parallel GPUs per layer, with sequence parallelism (Megatron-style)");
    r.minimum = 1;
    r.maximum = 1024;
    r.applies_when = several_gpus();
    r.label = "tp{}";
    bind<std::int64_t>(r, [](auto& s) -> auto& { return s.tp; });
  }
  {
    auto& r = row("pp", "--pp", integer, "pipeline stages, each a contiguous run of layers on its own GPUs (1F1B schedule)");
    r.minimum = 1;
    r.maximum = 1024;
    r.applies_when = several_gpus();
    r.label = "pp{}";
    bind<std::int64_t>(r, [](auto& s) -> auto& { return s.pp; });
  }
  {
    auto& r = row("microbatches", "--microbatches", integer,
                  "micro-batches of `batch` sequences one pipeline step runs (1F1B); at least `pp`");
    r.minimum = 1;
    r.maximum = 65536;
    r.applies_when = condition("pp", {}, {}, 2);
    r.derived_default = times("pp", 1);
    r.default_rule = "pp";
    r.label = "m{}";
    bind<std::int64_t>(r, [](auto& s) -> auto& { return s.microbatches; });
  }
  {
    auto& r = row("cp", "--cp", integer, "context-parallel GPUs: each holds 1/cp of every sequence (ring attention)");
    r.minimum = 1;
    r.maximum = 1024;
    r.applies_when = several_gpus();
    r.label = "cp{}";
    bind<std::int64_t>(r, [](auto& s) -> auto& { return s.cp; });
  }
  {
    auto& r = row("nodes", "--nodes", integer, "hosts the GPUs are spread over (gpus / nodes each); collectives between hosts cross the network");
    r.minimum = 1;
    r.maximum = 65536;
    r.applies_when = several_gpus();
    r.label = "{}nodes";
    bind<std::int64_t>(r, [](auto& s) -> auto& { return s.nodes; });
  }

  // How the answer is judged.
  group = "judging";
  {
    auto& r = row("headroom", "--headroom", number, "fraction of the card to keep free");
    r.minimum = 0;
    r.maximum = 1;
    r.exclusive_maximum = true;
    r.in_matrix = false;
    bind<double>(r, [](auto& s) -> auto& { return s.headroom; });
  }
  {
    auto& r = row("platform", "--platform", choice,
                  "what memory past the card does: linux fails with out of memory, windows spills into system memory");
    r.choices = {"linux", "windows"};
    r.in_matrix = false;
    bind_enum(r, [](auto& s) -> auto& { return s.platform; }, parse_platform, to_string);
  }
  return t;
}

// The table: built once; add_setting appends under the lock before anyone reads it concurrently
// (a program registers its settings at start-up).
std::vector<Setting>& table() {
  static std::vector<Setting> t = builtin_table();
  return t;
}
std::mutex& table_mutex() {
  static std::mutex m;
  return m;
}

// ---- Values --------------------------------------------------------------------------------------

std::string number_text(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::abs(v) < 1e15) return fmt::format("{}", static_cast<std::int64_t>(v));
  return fmt::format("{}", v);
}

std::string range_text(const Setting& s) {
  const auto lo = s.minimum, hi = s.maximum;
  if (s.type == SettingType::integer && lo && hi) return fmt::format("between {} and {}", number_text(*lo), number_text(*hi));
  // Sizes in the units people write them in: "between 1.0 GiB and 16.0 TiB", not byte counts.
  if (s.type == SettingType::bytes && lo && hi)
    return fmt::format("between {} and {}", format_bytes(static_cast<std::int64_t>(*lo)),
                       format_bytes(static_cast<std::int64_t>(*hi)));
  if (lo && hi)
    return fmt::format("in {}{}, {}{}", s.exclusive_minimum ? "(" : "[", number_text(*lo), number_text(*hi),
                       s.exclusive_maximum ? ")" : "]");
  if (lo) return fmt::format("{} {}", s.exclusive_minimum ? "greater than" : "at least", number_text(*lo));
  if (hi) return fmt::format("{} {}", s.exclusive_maximum ? "less than" : "at most", number_text(*hi));
  return "";
}

bool in_range(const Setting& s, double v) {
  const bool low = s.minimum && (s.exclusive_minimum ? !(v > *s.minimum) : !(v >= *s.minimum));
  const bool high = s.maximum && (s.exclusive_maximum ? !(v < *s.maximum) : !(v <= *s.maximum));
  return std::isfinite(v) && !low && !high;
}

void check_range(const Setting& s, double v, const std::string& shown) {
  if (!in_range(s, v)) throw SettingError(s.key, fmt::format("must be {} (got {})", range_text(s), shown));
}

std::string type_word(const SettingValue& v) {
  switch (v.index()) {
    case 0: return "null";
    case 1: return "true or false";
    case 2: return "a whole number";
    case 3: return "a number";
    case 4: return "a string";
    default: return "a list";
  }
}

[[noreturn]] void wrong_type(const Setting& s, const SettingValue& raw, std::string_view expected) {
  throw SettingError(s.key, fmt::format("expected {}, not {}", expected, type_word(raw)));
}

bool holds(const SettingCondition& c, const TrainingSetup& so_far) {
  const Setting* other = find_setting(c.setting);
  if (other == nullptr) return false;
  const SettingValue v = other->get(so_far);
  if (c.at_least) {
    double x = 0;
    if (const auto* i = std::get_if<std::int64_t>(&v)) x = static_cast<double>(*i);
    else if (const auto* d = std::get_if<double>(&v)) x = *d;
    else return false;
    if (!(x >= *c.at_least)) return false;
  }
  const std::string text = setting_text(*other, v);
  if (!c.one_of.empty() && std::find(c.one_of.begin(), c.one_of.end(), text) == c.one_of.end()) return false;
  if (std::find(c.none_of.begin(), c.none_of.end(), text) != c.none_of.end()) return false;
  return true;
}

std::string flag_name(const Setting& s) { return s.flag.size() > 2 ? s.flag.substr(2) : s.flag; }

}  // namespace

std::string to_string(SettingType t) {
  switch (t) {
    case SettingType::choice: return "choice";
    case SettingType::integer: return "integer";
    case SettingType::number: return "number";
    case SettingType::boolean: return "boolean";
    case SettingType::list: return "list";
    case SettingType::text: return "text";
    case SettingType::bytes: return "bytes";
  }
  return "?";
}

const std::vector<Setting>& settings() { return table(); }

const Setting* find_setting(std::string_view key) {
  for (const Setting& s : table())
    if (s.key == key) return &s;
  return nullptr;
}

const Setting* find_setting_by_flag(std::string_view flag) {
  for (const Setting& s : table()) {
    if (s.flag == flag) return &s;
    if (s.type == SettingType::boolean && flag == "--no-" + flag_name(s)) return &s;
  }
  return nullptr;
}

void add_setting(Setting row) {
  const std::lock_guard lock(table_mutex());
  if (row.key.empty() || row.flag.size() < 3 || row.flag.rfind("--", 0) != 0)
    throw InputError(fmt::format("a setting needs a key and a flag starting with -- (got '{}', '{}')", row.key, row.flag));
  if (row.key.rfind("x_", 0) == 0) throw InputError(fmt::format("setting '{}': keys starting with x_ belong to runners", row.key));
  for (const Setting& s : table())
    if (s.key == row.key || s.flag == row.flag)
      throw InputError(fmt::format("setting '{}' ({}) is already defined", row.key, row.flag));
  if (!row.get != !row.set) throw InputError(fmt::format("setting '{}': give both get and set, or neither", row.key));
  if (!row.get) {
    const std::string key = row.key;
    SettingValue fallback = row.extension_default;
    row.get = [key, fallback](const TrainingSetup& s) {
      const auto it = s.extensions.find(key);
      return it == s.extensions.end() ? fallback : it->second;
    };
    row.set = [key](TrainingSetup& s, const SettingValue& v) { s.extensions[key] = v; };
  }
  table().push_back(std::move(row));
}

namespace detail {
void add_setting_choice(std::string_view key, const std::string& choice, std::string_view like) {
  const std::lock_guard lock(table_mutex());
  Setting* found = nullptr;
  for (Setting& row : table())
    if (row.key == key) found = &row;
  if (found == nullptr) throw InputError(fmt::format("no setting '{}' to add the choice '{}' to", key, choice));
  if (std::find(found->choices.begin(), found->choices.end(), choice) == found->choices.end())
    found->choices.push_back(choice);
  // Wherever `like` makes a setting apply, so does the new choice.
  for (Setting& row : table()) {
    if (!row.applies_when || row.applies_when->setting != key) continue;
    auto& one_of = row.applies_when->one_of;
    const bool likes = std::find(one_of.begin(), one_of.end(), like) != one_of.end();
    if (likes && std::find(one_of.begin(), one_of.end(), choice) == one_of.end()) one_of.push_back(choice);
  }
}
}  // namespace detail

bool applies(const Setting& s, const TrainingSetup& setup) { return !s.applies_when || holds(*s.applies_when, setup); }

SettingValue default_value(const Setting& s, const TrainingSetup& so_far) {
  if (s.derived_default) {
    const DerivedDefault& d = *s.derived_default;
    if (d.model_types) {
      const std::vector<std::string> types = d.model_types();
      const std::string type = detail::config_model_type(so_far.model);
      return !type.empty() && std::find(types.begin(), types.end(), type) != types.end() ? d.value
                                                                                         : s.get(TrainingSetup{});
    }
    if (!d.times.empty()) {
      if (const Setting* other = find_setting(d.times)) {
        const SettingValue v = other->get(so_far);
        double x = 0;
        if (const auto* i = std::get_if<std::int64_t>(&v)) x = d.factor * static_cast<double>(*i);
        else if (const auto* f = std::get_if<double>(&v)) x = d.factor * *f;
        else return s.get(TrainingSetup{});
        // A whole-number setting's default is a whole number (microbatches = pp).
        if (s.type == SettingType::integer) return static_cast<std::int64_t>(std::llround(x));
        return x;
      }
    } else if (!d.cases.empty()) {
      for (const DerivedDefault::Case& c : d.cases)
        if (holds(c.when, so_far)) return c.value;
    } else if (!d.when || holds(*d.when, so_far)) {
      return d.value;
    }
  }
  return s.get(TrainingSetup{});
}

SettingValue check_setting_value(const Setting& s, const SettingValue& raw, std::string_view as_written) {
  using enum SettingType;
  // Range errors echo the value as the user wrote it when the caller has that text (a flag, a JSON
  // number): a converted value would show 9223372036854775808 as 9.223372036854776e+18.
  auto shown = [&](const std::string& converted) { return as_written.empty() ? converted : std::string(as_written); };
  switch (s.type) {
    case choice: {
      if (std::holds_alternative<std::monostate>(raw) && s.nullable) return raw;
      if (!std::holds_alternative<std::string>(raw)) wrong_type(s, raw, "a name");
      const std::string& text = std::get<std::string>(raw);
      if (s.nullable && text == "none") return std::monostate{};
      std::string name = text;
      if (s.canonical) {
        try {
          name = std::get<std::string>(s.canonical(text));
        } catch (const InputError&) {
          name.clear();
        }
      }
      if (std::find(s.choices.begin(), s.choices.end(), name) == s.choices.end())
        throw SettingError(s.key, fmt::format("unknown value {}; expected one of: {}{}", detail::quoted(text),
                                              fmt::join(s.choices, ", "), s.nullable ? ", none" : ""));
      return name;
    }
    case integer: {
      // A whole number past 64 bits reaches here as a double (JSON 9223372036854775808): it is
      // out of range, not of the wrong type.
      if (const auto* d = std::get_if<double>(&raw); d != nullptr && std::isfinite(*d) && *d == std::floor(*d))
        check_range(s, *d, shown(number_text(*d)));
      if (!std::holds_alternative<std::int64_t>(raw)) wrong_type(s, raw, "a whole number");
      const std::int64_t v = std::get<std::int64_t>(raw);
      check_range(s, static_cast<double>(v), shown(std::to_string(v)));
      return raw;
    }
    case number: {
      double v = 0;
      if (const auto* i = std::get_if<std::int64_t>(&raw)) v = static_cast<double>(*i);
      else if (const auto* d = std::get_if<double>(&raw)) v = *d;
      else wrong_type(s, raw, "a number");
      check_range(s, v, shown(number_text(v)));
      return v;
    }
    case boolean:
      if (!std::holds_alternative<bool>(raw)) wrong_type(s, raw, "true or false");
      return raw;
    case list: {
      std::string text;
      if (const auto* str = std::get_if<std::string>(&raw)) text = *str;
      else if (const auto* items = std::get_if<std::vector<std::string>>(&raw)) text = fmt::format("{}", fmt::join(*items, ","));
      else wrong_type(s, raw, "a list of names");
      if (!s.canonical) return detail::split_names(text);
      try {
        return s.canonical(text);
      } catch (const InputError& e) {
        throw SettingError(s.key, e.what());
      }
    }
    case text:
      if (std::holds_alternative<std::monostate>(raw)) return std::string();
      if (!std::holds_alternative<std::string>(raw)) wrong_type(s, raw, "a name");
      return raw;
    case bytes: {
      if (std::holds_alternative<std::monostate>(raw)) return raw;
      std::int64_t v = 0;
      std::string written;
      if (const auto* i = std::get_if<std::int64_t>(&raw)) {
        v = *i;
        written = shown(std::to_string(v));
      } else if (const auto* str = std::get_if<std::string>(&raw)) {
        try {
          v = parse_bytes(*str);
        } catch (const InputError& e) {
          throw SettingError(s.key, e.what());
        }
        written = *str;
      } else {
        wrong_type(s, raw, "a size such as 16GiB");
      }
      // `--vram 24` is 24 bytes: say so, since a unit is what was most likely meant.
      if (s.minimum && static_cast<double>(v) < *s.minimum && !written.empty() &&
          written.find_first_not_of("0123456789") == std::string::npos)
        written = fmt::format("{0}, that is {0} bytes; write {0}GiB or {0}GB", written);
      check_range(s, static_cast<double>(v), written);
      return v;
    }
  }
  return raw;
}

void check_setting_in_bounds(const Setting& s, const SettingValue& value) {
  if (const auto* i = std::get_if<std::int64_t>(&value)) {
    // The value's text only for the error: validate() runs this on every setting of every setup
    // an advisor prices.
    if (!in_range(s, static_cast<double>(*i))) check_range(s, static_cast<double>(*i), std::to_string(*i));
  } else if (const auto* d = std::get_if<double>(&value)) {
    if (!in_range(s, *d)) check_range(s, *d, number_text(*d));
  } else if (const auto* name = std::get_if<std::string>(&value); name != nullptr && s.type == SettingType::choice) {
    if (std::find(s.choices.begin(), s.choices.end(), *name) == s.choices.end())
      throw SettingError(s.key, fmt::format("{} is not one of: {}", detail::quoted(*name), fmt::join(s.choices, ", ")));
  }
}

SettingValue parse_setting_text(const Setting& s, std::string_view input) {
  using enum SettingType;
  const std::string t(input);
  switch (s.type) {
    case integer: {
      std::int64_t v = 0;
      const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
      if (ec == std::errc::result_out_of_range)
        throw SettingError(s.key, fmt::format("must be {} (got {})", range_text(s), t));
      if (ec != std::errc{} || end != t.data() + t.size() || t.empty())
        throw SettingError(s.key, fmt::format("{} is not a whole number", detail::quoted(t)));
      return check_setting_value(s, v, t);
    }
    case number: {
      char* end = nullptr;
      const double v = std::strtod(t.c_str(), &end);
      if (t.empty() || end != t.c_str() + t.size())
        throw SettingError(s.key, fmt::format("{} is not a number", detail::quoted(t)));
      return check_setting_value(s, v, t);
    }
    case boolean: {
      for (const char* yes : {"true", "1", "yes", "on"})
        if (t == yes) return true;
      for (const char* no : {"false", "0", "no", "off"})
        if (t == no) return false;
      throw SettingError(s.key, fmt::format("{} is not true or false", detail::quoted(t)));
    }
    default:
      return check_setting_value(s, t);
  }
}

std::string setting_text(const Setting& s, const SettingValue& value) {
  switch (value.index()) {
    case 0: return s.type == SettingType::choice ? "none" : "";
    case 1: return std::get<bool>(value) ? "true" : "false";
    case 2: return std::to_string(std::get<std::int64_t>(value));  // a size in bytes reads back as bytes
    case 3: return number_text(std::get<double>(value));
    case 4: return std::get<std::string>(value);
    default: {
      const auto& items = std::get<std::vector<std::string>>(value);
      return s.key == "lora_targets" ? lora_targets_text(items) : fmt::format("{}", fmt::join(items, ","));
    }
  }
}

TrainingSetup resolve_setup(const std::vector<GivenSetting>& given) {
  TrainingSetup setup;
  for (const Setting& row : settings()) {
    const auto it = std::find_if(given.begin(), given.end(), [&](const GivenSetting& g) { return g.setting == &row; });
    row.set(setup, it != given.end() ? it->value : default_value(row, setup));
  }
  validate(setup);
  return setup;
}

std::vector<std::string> ignored_settings(const std::vector<GivenSetting>& given, const TrainingSetup& setup) {
  std::vector<std::string> lines;
  for (const GivenSetting& g : given) {
    if (g.setting == nullptr || applies(*g.setting, setup)) continue;
    const SettingCondition& c = *g.setting->applies_when;
    const Setting* other = find_setting(c.setting);
    const std::string name = other != nullptr ? other->flag : c.setting;
    std::vector<std::string> parts;
    if (c.at_least) parts.push_back(fmt::format("{} is at least {}", name, number_text(*c.at_least)));
    if (!c.one_of.empty()) parts.push_back(fmt::format("{} is {}", name, fmt::join(c.one_of, " or ")));
    if (!c.none_of.empty()) parts.push_back(fmt::format("{} is not {}", name, fmt::join(c.none_of, " or ")));
    lines.push_back(fmt::format("{} is ignored: it applies only when {}", g.setting->flag, fmt::join(parts, " and ")));
  }
  return lines;
}

std::vector<std::string> setup_to_args(const TrainingSetup& setup) {
  std::vector<std::string> args;
  TrainingSetup defaults;  // the settings so far, for the defaults that depend on them
  for (const Setting& row : settings()) {
    const SettingValue v = row.get(setup);
    const SettingValue d = default_value(row, defaults);
    row.set(defaults, v);
    if (!applies(row, setup) || v == d) continue;
    if (row.type == SettingType::boolean) {
      args.push_back(std::get<bool>(v) ? row.flag : "--no-" + flag_name(row));
      continue;
    }
    args.push_back(row.flag);
    args.push_back(setting_text(row, v));
  }
  return args;
}

std::string setup_label(const TrainingSetup& setup) {
  std::vector<std::string> parts;
  TrainingSetup defaults;
  for (const Setting& row : settings()) {
    const SettingValue v = row.get(setup);
    const SettingValue d = default_value(row, defaults);
    row.set(defaults, v);
    if (row.label.empty() || !applies(row, setup)) continue;
    if (!row.label_always && v == d) continue;
    if (row.type == SettingType::boolean) {
      if (std::get<bool>(v)) parts.push_back(row.label);
      else parts.push_back("no-" + row.label);
      continue;
    }
    if (std::holds_alternative<std::monostate>(v)) continue;
    parts.push_back(fmt::format(fmt::runtime(row.label), setting_text(row, v)));
  }
  return fmt::format("{}", fmt::join(parts, " "));
}

}  // namespace trainfit
