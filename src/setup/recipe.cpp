// Recipes read into settings (trainfit/recipe.hpp). A TRL CLI config is one flat mapping of
// TrainingArguments', the trainer config's and TRL's ModelConfig's fields; the table below says what
// each key does to the plan, and the defaults after it are TRL's and transformers' for what a
// recipe leaves out (read at TRL commit f2cd577, transformers 5.17: docs/setup.md, "Recipes").
#include "trainfit/recipe.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "common/text.hpp"
#include "trainfit/error.hpp"

namespace trainfit {
namespace {

// A recipe is a few kilobytes; anything past this is not one (a dataset named by mistake).
constexpr std::size_t kMaxRecipeBytes = std::size_t{1} << 20;

// What a recipe has set so far: settings by their JSON keys, each with the recipe key that set it
// (an error about the value names that key).
struct Draft {
  std::map<std::string, std::pair<SettingValue, std::string>, std::less<>> values;
  std::vector<std::string> notes;
  Objective objective = Objective::sft;
  // ModelConfig's and the trainer config's fields that combine into settings.
  bool use_peft = false, load_in_4bit = false, load_in_8bit = false;
  std::string quant_type = "nf4";
  std::optional<bool> bf16, fp16;
  std::optional<double> beta;
  std::optional<std::int64_t> max_prompt_length;
  void set(std::string setting, SettingValue v, std::string_view from) {
    values[std::move(setting)] = {std::move(v), std::string(from)};
  }
  bool has(std::string_view setting) const { return values.count(setting) > 0; }
};

[[noreturn]] void refuse(std::string_view key, std::string reason) { throw SettingError(std::string(key), std::move(reason)); }

std::string scalar_of(std::string_view key, const YAML::Node& n) {
  if (!n.IsScalar()) refuse(key, "expected a single value, not a list or a mapping");
  return n.Scalar();
}
bool is_null(const YAML::Node& n) {
  if (n.IsNull()) return true;
  if (!n.IsScalar()) return false;
  const std::string s = detail::ascii_lower(n.Scalar());
  return s == "null" || s == "none" || s == "~";
}
bool bool_of(std::string_view key, const YAML::Node& n) {
  const std::string s = detail::ascii_lower(scalar_of(key, n));
  if (s == "true" || s == "yes" || s == "on" || s == "1") return true;
  if (s == "false" || s == "no" || s == "off" || s == "0") return false;
  refuse(key, fmt::format("expected true or false, not {}", detail::quoted(n.Scalar())));
}
std::int64_t int_of(std::string_view key, const YAML::Node& n) {
  const std::string s = scalar_of(key, n);
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size())
    refuse(key, fmt::format("expected a whole number, not {}", detail::quoted(s)));
  return v;
}
double number_of(std::string_view key, const YAML::Node& n) {
  const std::string s = scalar_of(key, n);
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size())
    refuse(key, fmt::format("expected a number, not {}", detail::quoted(s)));
  return v;
}
// A list as YAML writes it, or one string ("all-linear", "q_proj,v_proj").
std::string list_text_of(std::string_view key, const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  if (!n.IsSequence()) refuse(key, "expected a list of module names");
  std::vector<std::string> items;
  for (const YAML::Node& item : n) items.push_back(scalar_of(key, item));
  if (items.empty()) refuse(key, "names no module");
  return fmt::format("{}", fmt::join(items, ","));
}
// A flag that trainfit plans off: refused when on, naming what is not planned.
void off_only(std::string_view key, const YAML::Node& n, std::string_view what) {
  if (!is_null(n) && bool_of(key, n))
    refuse(key, fmt::format("{} is not planned yet; plan without it (remove the key) for the step it replaces", what));
}

std::string dtype_setting(std::string_view key, const YAML::Node& n, Draft& d) {
  const std::string s = detail::ascii_lower(scalar_of(key, n));
  if (s == "auto") {
    d.notes.push_back(fmt::format("{}: auto is read as bf16, the dtype the usual checkpoints are stored in", key));
    return "bf16";
  }
  for (const char* ok : {"float32", "fp32", "bfloat16", "bf16", "float16", "fp16"})
    if (s == ok) return s;
  refuse(key, fmt::format("expected float32, bfloat16, float16 or auto, not {}", detail::quoted(n.Scalar())));
}

// transformers' TrainingArguments.optim names, as the optimizers trainfit plans (docs/setup.md).
std::string optimizer_setting(std::string_view key, const YAML::Node& n) {
  const std::string s = detail::ascii_lower(scalar_of(key, n));
  static const std::vector<std::pair<std::string_view, std::string_view>> kOptim{
      {"adamw_torch_fused", "adamw"},       {"adamw_torch", "adamw-foreach"},   {"adamw_hf", "adamw-foreach"},
      {"adamw_8bit", "adamw-8bit"},         {"adamw_bnb_8bit", "adamw-8bit"},   {"paged_adamw_8bit", "adamw-8bit"},
      {"adafactor", "adafactor"},           {"sgd", "sgd"}};
  for (const auto& [name, setting] : kOptim)
    if (s == name) return std::string(setting);
  std::vector<std::string_view> names;
  for (const auto& [name, setting] : kOptim) names.push_back(name);
  refuse(key, fmt::format("optimizer {} is not planned; planned: {}", detail::quoted(n.Scalar()), fmt::join(names, ", ")));
}

std::string attention_setting(std::string_view key, const YAML::Node& n) {
  const std::string s = detail::ascii_lower(scalar_of(key, n));
  if (s == "sdpa" || s == "eager") return s;
  if (s == "flash_attention_2" || s == "flash_attention_3") return "flash";
  refuse(key, fmt::format("attention {} is not planned; planned: sdpa, eager, flash_attention_2, flash_attention_3",
                          detail::quoted(n.Scalar())));
}

using Apply = void (*)(std::string_view key, const YAML::Node& n, Draft& d);
struct KeyRule {
  std::string_view key;
  std::string_view use;   // "setting", "ignored", "refused" (when switched on)
  std::string_view what;  // the setting, or why
  Apply apply = nullptr;  // null: ignored
};

// TRL's keys that change the step: ModelConfig's, TrainingArguments' and the trainer configs'.
const std::vector<KeyRule>& trl_rules() {
  static const std::vector<KeyRule> rules{
      {"model_name_or_path", "setting", "model (a built-in name, its Hub id or a folder holding config.json)",
       [](auto key, const auto& n, Draft& d) { d.set("model", scalar_of(key, n), key); }},
      {"dtype", "setting", "weights (ModelConfig's default float32; auto read as bf16)",
       [](auto key, const auto& n, Draft& d) { d.set("weights", dtype_setting(key, n, d), key); }},
      {"torch_dtype", "setting", "weights (the older name of dtype)",
       [](auto key, const auto& n, Draft& d) { d.set("weights", dtype_setting(key, n, d), key); }},
      {"attn_implementation", "setting", "attn",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n)) d.set("attn", attention_setting(key, n), key);
       }},
      {"use_peft", "setting", "method lora (qlora with load_in_4bit or load_in_8bit)",
       [](auto key, const auto& n, Draft& d) { d.use_peft = bool_of(key, n); }},
      {"load_in_4bit", "setting", "method qlora, weights nf4 (or fp4: bnb_4bit_quant_type)",
       [](auto key, const auto& n, Draft& d) { d.load_in_4bit = bool_of(key, n); }},
      {"load_in_8bit", "setting", "method qlora, weights int8",
       [](auto key, const auto& n, Draft& d) { d.load_in_8bit = bool_of(key, n); }},
      {"bnb_4bit_quant_type", "setting", "weights nf4 or fp4",
       [](auto key, const auto& n, Draft& d) {
         d.quant_type = detail::ascii_lower(scalar_of(key, n));
         if (d.quant_type != "nf4" && d.quant_type != "fp4") refuse(key, "expected nf4 or fp4");
       }},
      {"use_bnb_nested_quant", "setting", "double_quant",
       [](auto key, const auto& n, Draft& d) { d.set("double_quant", bool_of(key, n), key); }},
      {"lora_r", "setting", "rank", [](auto key, const auto& n, Draft& d) { d.set("rank", int_of(key, n), key); }},
      {"lora_alpha", "setting", "lora_alpha",
       [](auto key, const auto& n, Draft& d) { d.set("lora_alpha", number_of(key, n), key); }},
      {"lora_dropout", "setting", "lora_dropout",
       [](auto key, const auto& n, Draft& d) { d.set("lora_dropout", number_of(key, n), key); }},
      {"lora_target_modules", "setting", "lora_targets (PEFT's default for the model when absent: q_proj, v_proj)",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n)) d.set("lora_targets", list_text_of(key, n), key);
       }},
      {"per_device_train_batch_size", "setting", "batch (TrainingArguments' default 8)",
       [](auto key, const auto& n, Draft& d) { d.set("batch", int_of(key, n), key); }},
      {"gradient_accumulation_steps", "setting", "grad_accum",
       [](auto key, const auto& n, Draft& d) { d.set("grad_accum", int_of(key, n), key); }},
      {"gradient_checkpointing", "setting", "grad_ckpt (TRL's default true)",
       [](auto key, const auto& n, Draft& d) { d.set("grad_ckpt", bool_of(key, n), key); }},
      {"gradient_checkpointing_kwargs", "setting", "non-reentrant checkpointing only (use_reentrant false)",
       [](auto key, const auto& n, Draft&) {
         if (n.IsMap() && n["use_reentrant"] && !is_null(n["use_reentrant"]) && bool_of(key, n["use_reentrant"]))
           refuse(key, "use_reentrant true is not planned; trainfit plans non-reentrant checkpointing");
       }},
      {"max_length", "setting", "seq (the trainer config's default 1024)",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n)) d.set("seq", int_of(key, n), key);
       }},
      {"max_seq_length", "setting", "seq (SFTConfig's older name of max_length)",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n)) d.set("seq", int_of(key, n), key);
       }},
      {"max_prompt_length", "setting", "seq, with max_completion_length (GRPO)",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n)) d.max_prompt_length = int_of(key, n);
       }},
      {"max_completion_length", "setting", "completion_len (GRPO; default 512)",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n) && d.objective == Objective::grpo) d.set("completion_len", int_of(key, n), key);
       }},
      {"num_generations", "setting", "generations (GRPO; default 8)",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n) && d.objective == Objective::grpo) d.set("generations", int_of(key, n), key);
       }},
      {"beta", "setting", "GRPO: reference none at 0 (the default), else the method's",
       [](auto key, const auto& n, Draft& d) { d.beta = number_of(key, n); }},
      {"precompute_ref_log_probs", "setting", "reference precomputed (DPO, KTO)",
       [](auto key, const auto& n, Draft& d) {
         if (bool_of(key, n)) d.set("reference", std::string("precomputed"), key);
       }},
      {"optim", "setting", "optimizer (transformers' default adamw_torch_fused)",
       [](auto key, const auto& n, Draft& d) { d.set("optimizer", optimizer_setting(key, n), key); }},
      {"bf16", "setting", "autocast in bf16 (TRL's default true): amp over fp32 weights",
       [](auto key, const auto& n, Draft& d) { d.bf16 = bool_of(key, n); }},
      {"fp16", "setting", "autocast in fp16: amp over fp32 weights",
       [](auto key, const auto& n, Draft& d) { d.fp16 = bool_of(key, n); }},
      {"loss_type", "setting", "loss (SFT: nll or chunked_nll); DPO's and KTO's loss types change neither",
       [](auto key, const auto& n, Draft& d) {
         if (d.objective != Objective::sft || is_null(n)) return;
         const std::string s = detail::ascii_lower(scalar_of(key, n));
         if (s != "nll" && s != "chunked_nll")
           refuse(key, fmt::format("loss_type {} is not planned; planned: nll, chunked_nll", detail::quoted(s)));
         d.set("loss", s, key);
       }},
      {"tf32", "refused", "TF32 matmuls: fp32 GEMMs' speed is planned without it",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "TF32"); }},
      {"use_liger_kernel", "refused", "Liger's kernels",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "Liger's kernels (use_liger_kernel)"); }},
      {"packing", "refused", "packing",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "packing"); }},
      {"padding_free", "refused", "padding-free batches",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "padding-free batching"); }},
      {"activation_offloading", "refused", "activation offloading",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "activation offloading"); }},
      {"completion_only_loss", "refused", "a loss on the completion only (fewer positions in the chunked loss)",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "a completion-only loss"); }},
      {"assistant_only_loss", "refused", "a loss on the assistant's turns only",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "an assistant-only loss"); }},
      {"torch_compile", "refused", "torch.compile",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "torch.compile"); }},
      {"use_vllm", "refused", "generation with vLLM",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "generation with vLLM"); }},
      {"use_dora", "refused", "DoRA adapters",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "DoRA (use_dora)"); }},
      {"lora_modules_to_save", "refused", "modules trained whole beside the adapters",
       [](auto key, const auto& n, Draft&) {
         if (!is_null(n)) refuse(key, "modules trained whole beside LoRA are not planned yet");
       }},
      {"lora_target_parameters", "refused", "adapters on parameters (experts)",
       [](auto key, const auto& n, Draft&) {
         if (!is_null(n)) refuse(key, "adapters on named parameters are not planned yet");
       }},
      {"fsdp", "refused", "FSDP through the Trainer: plan it with --gpus and --parallel",
       [](auto key, const auto& n, Draft&) {
         if (!is_null(n) && !(n.IsScalar() && n.Scalar().empty()) && !(n.IsSequence() && n.size() == 0))
           refuse(key, "a recipe's FSDP is not read yet; plan the layout with --gpus and --parallel fsdp");
       }},
      {"deepspeed", "refused", "DeepSpeed through the Trainer: plan it with --gpus and --parallel",
       [](auto key, const auto& n, Draft&) {
         if (!is_null(n)) refuse(key, "a recipe's DeepSpeed config is not read yet; plan it with --gpus and --parallel zero1|zero2|zero3");
       }},
      {"bnb_4bit_quant_storage", "refused", "a 4-bit storage dtype (FSDP with QLoRA)",
       [](auto key, const auto& n, Draft&) {
         if (!is_null(n)) refuse(key, "a 4-bit storage dtype is not planned");
       }},
  };
  return rules;
}

// Keys that change neither memory nor time: what to learn, log, save and evaluate, the data's
// source, the run's identity. The evaluation batch does not change the training step.
constexpr std::string_view kIgnoredKeys[] = {
    "env", "output_dir", "overwrite_output_dir", "run_name", "report_to", "logging_dir", "logging_steps",
    "logging_strategy", "logging_first_step", "logging_nan_inf_filter", "log_level", "log_level_replica",
    "disable_tqdm", "save_strategy", "save_steps", "save_total_limit", "save_only_model", "save_safetensors",
    "load_best_model_at_end", "metric_for_best_model", "greater_is_better", "eval_strategy", "eval_steps",
    "evaluation_strategy", "per_device_eval_batch_size", "eval_accumulation_steps", "eval_packing", "do_train",
    "do_eval", "do_predict", "push_to_hub", "hub_model_id", "hub_strategy", "hub_token", "hub_private_repo",
    "learning_rate", "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_ratio", "warmup_steps",
    "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "num_train_epochs",
    "max_steps", "seed", "data_seed", "full_determinism", "dataset_name", "dataset_config", "dataset_train_split",
    "dataset_test_split", "dataset_streaming", "dataset_text_field", "dataset_num_proc", "dataset_kwargs",
    "datasets", "streaming", "test_split_size", "dataloader_num_workers", "dataloader_pin_memory",
    "dataloader_drop_last", "dataloader_persistent_workers", "dataloader_prefetch_factor", "remove_unused_columns",
    "label_names", "model_revision", "trust_remote_code", "lora_task_type", "use_rslora", "eos_token", "pad_token",
    "chat_template_path", "truncation_mode", "packing_strategy", "shuffle_dataset", "neftune_noise_alpha",
    "ignore_bias_buffers", "use_logits_to_keep", "label_smoothing", "rpo_alpha", "ld_alpha", "loss_weights",
    "reference_free", "sync_ref_model", "ref_model_mixup_alpha", "ref_model_sync_steps", "temperature", "top_p",
    "top_k", "min_p", "repetition_penalty", "reward_weights", "scale_rewards", "epsilon", "epsilon_high",
    "num_iterations", "log_completions", "desirable_weight", "undesirable_weight", "center_rewards_coefficient",
    "disable_dropout", "model_init_kwargs", "ref_model_init_kwargs", "ddp_find_unused_parameters", "ddp_timeout",
    "include_num_input_tokens_seen", "average_tokens_across_devices", "bf16_full_eval", "fp16_full_eval",
    "prediction_loss_only", "resume_from_checkpoint", "ignore_data_skip", "use_cpu", "local_rank",
};

bool ignored_key(std::string_view key) {
  return std::find(std::begin(kIgnoredKeys), std::end(kIgnoredKeys), key) != std::end(kIgnoredKeys);
}

// axolotl and LLaMA-Factory are told apart by keys only they write.
RecipeKind kind_of(const YAML::Node& root) {
  for (const char* key : {"base_model", "micro_batch_size", "sequence_len", "sample_packing", "adapter"})
    if (root[key]) return RecipeKind::axolotl;
  for (const char* key : {"stage", "finetuning_type", "cutoff_len", "lora_rank", "quantization_bit"})
    if (root[key]) return RecipeKind::llama_factory;
  return RecipeKind::trl;
}

// The settings a TRL recipe gives, with TRL's and transformers' defaults where it is silent.
void read_trl(const YAML::Node& root, Draft& d, Recipe& out) {
  const std::vector<KeyRule>& rules = trl_rules();
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : std::string();
    const auto rule = std::find_if(rules.begin(), rules.end(), [&](const KeyRule& r) { return r.key == key; });
    if (rule != rules.end()) {
      rule->apply(key, it->second, d);
    } else if (ignored_key(key)) {
      out.ignored.push_back(key);
    } else {
      throw InputError(fmt::format("{}: unknown key of a TRL recipe {}; trainfit neither plans nor ignores it "
                                   "(docs/setup.md, \"Recipes\", lists the keys)",
                                   out.source, detail::quoted(key)));
    }
  }
  if (!d.has("model")) throw InputError(fmt::format("{}: a TRL recipe names its model with model_name_or_path", out.source));
  d.set("trainer", std::string("trl"), "trl");
  d.set("objective", to_string(d.objective), "trl");
  // Method: PEFT's LoRA, on a quantised base when ModelConfig asks for one.
  if (d.load_in_4bit || d.load_in_8bit) {
    if (!d.use_peft) refuse("load_in_4bit", "a quantised base trains only with use_peft: true (TRL's ModelConfig)");
    d.set("method", std::string("qlora"), d.load_in_4bit ? "load_in_4bit" : "load_in_8bit");
    d.set("weights", d.load_in_8bit ? std::string("int8") : d.quant_type, d.load_in_4bit ? "load_in_4bit" : "load_in_8bit");
  } else {
    d.set("method", std::string(d.use_peft ? "lora" : "full"), "use_peft");
    // ModelConfig loads the model in float32 unless dtype says otherwise.
    if (!d.has("weights")) d.set("weights", std::string("fp32"), "dtype");
  }
  if (d.use_peft && !d.has("lora_targets")) d.set("lora_targets", std::string("q_proj,v_proj"), "lora_target_modules");
  if (!d.use_peft)
    for (const char* lora_key : {"rank", "lora_alpha", "lora_dropout", "lora_targets"}) d.values.erase(lora_key);
  // TrainingArguments' and the configs' defaults.
  if (!d.has("batch")) d.set("batch", std::int64_t{8}, "per_device_train_batch_size");
  if (!d.has("optimizer")) d.set("optimizer", std::string("adamw"), "optim");
  if (d.objective == Objective::grpo) {
    if (!d.has("completion_len")) d.set("completion_len", std::int64_t{512}, "max_completion_length");
    const std::int64_t completion = std::get<std::int64_t>(d.values.at("completion_len").first);
    if (d.max_prompt_length) {
      d.set("seq", *d.max_prompt_length + completion, "max_prompt_length");
    } else if (!d.has("seq")) {
      d.set("seq", 2 * completion, "max_completion_length");
      d.notes.push_back("the recipe does not bound the prompt: planned as long as the completion (--seq overrides)");
    }
    // GRPOConfig's beta is 0: no reference model; above 0 the method's reference.
    if (d.beta && *d.beta > 0) d.set("reference", std::string(d.use_peft ? "adapter-off" : "copy"), "beta");
  } else if (!d.has("seq")) {
    d.set("seq", std::int64_t{1024}, "max_length");
  }
  // Mixed precision: TRL's configs set bf16 unless fp16 is. Over fp32 weights that is autocast
  // (amp); over 16-bit weights autocast changes only what runs in fp32 inside the trainer's own
  // code, which --trainer trl plans (the chunked loss's GEMM).
  const bool fp16 = d.fp16.value_or(false);
  const bool bf16 = d.bf16.value_or(!fp16);
  if (bf16 && fp16) refuse("fp16", "bf16 and fp16 cannot both be true");
  const std::string weights = std::get<std::string>(d.values.at("weights").first);
  const bool fp32_weights = weights == "fp32" || weights == "float32";
  if (fp32_weights && (bf16 || fp16)) {
    if (d.use_peft)
      // The memory model's autocast is full fine-tuning's (amp): LoRA's frozen fp32 base under
      // autocast (cast anew at every matmul, never cached) has not been measured.
      d.notes.push_back(fmt::format("LoRA over float32 weights under {} autocast is planned without the autocast "
                                    "(activations in fp32): an upper bound; set dtype: bfloat16 to plan a bf16 base",
                                    bf16 ? "bf16" : "fp16"));
    else
      d.set("amp", std::string(bf16 ? "bf16" : "fp16"), bf16 ? "bf16" : "fp16");
  }
  if (!fp32_weights && !bf16 && !fp16 && d.objective == Objective::sft)
    refuse("bf16", "false over 16-bit weights is not planned: TRL's chunked loss would then run its GEMMs in fp32");
}

}  // namespace

std::string to_string(RecipeKind k) {
  switch (k) {
    case RecipeKind::trl: return "trl";
    case RecipeKind::axolotl: return "axolotl";
    case RecipeKind::llama_factory: return "llama-factory";
  }
  return "?";
}

Recipe parse_recipe(std::string_view text, std::string_view source, std::optional<Objective> objective) {
  Recipe out;
  out.source = std::string(source);
  if (text.size() > kMaxRecipeBytes)
    throw InputError(fmt::format("{}: {} bytes is not a recipe (at most {})", source, text.size(), kMaxRecipeBytes));
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    throw InputError(fmt::format("{}: not YAML (line {}: {})", source, e.mark.line + 1, e.msg));
  }
  if (!root.IsMap()) throw InputError(fmt::format("{}: a recipe is a mapping of keys to values", source));
  std::set<std::string, std::less<>> seen;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (!it->first.IsScalar()) throw InputError(fmt::format("{}: a recipe's keys are names", source));
    if (!seen.insert(it->first.Scalar()).second)
      throw InputError(fmt::format("{}: key {} is given twice", source, detail::quoted(it->first.Scalar())));
  }
  out.kind = kind_of(root);
  if (out.kind != RecipeKind::trl)
    throw InputError(fmt::format("{}: this looks like an {} recipe, which trainfit does not read yet; a TRL recipe "
                                 "(`trl sft --config`) is read",
                                 source, out.kind == RecipeKind::axolotl ? "axolotl" : "LLaMA-Factory"));
  Draft d;
  d.objective = objective.value_or(Objective::sft);
  // An error about a value names the file and the recipe's own key, not trainfit's setting.
  std::string_view key;
  try {
    read_trl(root, d, out);
    // Each value checked against its setting's row.
    for (auto& [setting_key, entry] : d.values) {
      const Setting* s = find_setting(setting_key);
      if (s == nullptr) continue;
      key = entry.second;
      SettingValue v = entry.first;
      if ((s->type == SettingType::list || s->type == SettingType::choice) && std::holds_alternative<std::string>(v))
        v = parse_setting_text(*s, std::get<std::string>(v));
      out.settings.emplace_back(s, check_setting_value(*s, v));
    }
  } catch (const SettingError& e) {
    throw InputError(fmt::format("{}: {}: {}", source, key.empty() ? e.setting() : std::string(key), e.reason()));
  } catch (const InputError& e) {
    if (key.empty()) throw;
    throw InputError(fmt::format("{}: {}: {}", source, key, e.what()));
  }
  out.notes = std::move(d.notes);
  // In the table's order, as a command line's are.
  std::sort(out.settings.begin(), out.settings.end(), [](const GivenSetting& a, const GivenSetting& b) {
    const auto& t = settings();
    const auto index = [&](const Setting* s) { return std::find_if(t.begin(), t.end(), [&](const Setting& r) { return &r == s; }) - t.begin(); };
    return index(a.setting) < index(b.setting);
  });
  return out;
}

Recipe load_recipe(const std::string& path, std::optional<Objective> objective) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot read the recipe", path));
  std::string text(kMaxRecipeBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return parse_recipe(text, path, objective);
}

std::vector<RecipeKeyUse> trl_recipe_keys() {
  std::vector<RecipeKeyUse> out;
  for (const KeyRule& r : trl_rules()) out.push_back({std::string(r.key), std::string(r.use), std::string(r.what)});
  for (std::string_view k : kIgnoredKeys) out.push_back({std::string(k), "ignored", "changes neither memory nor time"});
  return out;
}

}  // namespace trainfit
