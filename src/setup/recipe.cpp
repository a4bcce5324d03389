// Recipes read into settings (trainfit/recipe.hpp). A TRL CLI config is one flat mapping of
// TrainingArguments', the trainer config's and TRL's ModelConfig's fields; the table below says what
// each key does to the plan, and the defaults after it are TRL's and transformers' for what a
// recipe leaves out (read at TRL commit f2cd577, transformers 5.17: docs/setup.md, "Recipes").
#include "trainfit/recipe.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <span>
#include <sstream>

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
  std::optional<std::int64_t> generation_batch_size;  // GRPO's, over every process
  bool use_vllm = false;
  std::string vllm_mode = "colocate";  // GRPOConfig's default
  // SFTConfig's packing, its strategy (default bfd) and padding_free: together they say whether
  // the micro-batch is flattened (SFTTrainer: padding_free, or packing with bfd or bfd_split).
  bool packing = false, padding_free = false;
  std::string packing_strategy = "bfd";
  // LLaMA-Factory's and axolotl's fields that combine into settings.
  std::string method = "lora";  // LLaMA-Factory's finetuning_type (default lora); axolotl's adapter ("" for none)
  std::optional<std::int64_t> quantization_bit;
  bool pure_bf16 = false;
  bool double_quant = true;
  bool target_linear = false;  // axolotl's lora_target_linear
  bool reentrant_checkpointing = false;
  bool neat_packing = false;    // LLaMA-Factory's packing without cross-attention
  bool sample_packing = false;  // axolotl's multipack
  bool max_length_null = false;  // TRL's max_length: null (no truncation)
  void set(std::string setting, SettingValue v, std::string_view from) {
    values[std::move(setting)] = {std::move(v), std::string(from)};
  }
  bool has(std::string_view setting) const { return values.count(setting) > 0; }
  // A setting already set, as its type (has() first where it may be unset).
  template <class T>
  const T& get(const std::string& setting) const {
    return std::get<T>(values.at(setting).first);
  }
};

[[noreturn]] void refuse(std::string_view key, std::string reason) {
  throw SettingError(std::string(key), std::move(reason));
}

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
      {"adamw_torch_fused", "adamw"},
      {"adamw_torch", "adamw-foreach"},
      {"adamw_hf", "adamw-foreach"},
      {"adamw_8bit", "adamw-8bit"},
      {"adamw_bnb_8bit", "adamw-8bit"},
      {"paged_adamw_8bit", "adamw-8bit"},
      {"adafactor", "adafactor"},
      {"sgd", "sgd"},
      // bitsandbytes' 32-bit (paged) AdamW keeps two fp32 states a parameter, as torch's does; the
      // paging moves them to host memory only under pressure.
      {"paged_adamw_32bit", "adamw"},
      {"adamw_bnb_32bit", "adamw"}};
  for (const auto& [name, setting] : kOptim)
    if (s == name) return std::string(setting);
  std::vector<std::string_view> names;
  for (const auto& [name, setting] : kOptim) names.push_back(name);
  refuse(key,
         fmt::format("optimizer {} is not planned; planned: {}", detail::quoted(n.Scalar()), fmt::join(names, ", ")));
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
         if (is_null(n))
           d.max_length_null = true;
         else
           d.set("seq", int_of(key, n), key);
       }},
      {"max_seq_length", "setting", "seq (SFTConfig's older name of max_length)",
       [](auto key, const auto& n, Draft& d) {
         if (is_null(n))
           d.max_length_null = true;
         else
           d.set("seq", int_of(key, n), key);
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
      {"use_liger_kernel", "setting", "kernels liger (and SFT's loss Liger's fused one, whatever loss_type nll says)",
       [](auto key, const auto& n, Draft& d) {
         if (bool_of(key, n)) d.set("kernels", std::string("liger"), key);
       }},
      {"liger_kernel_config", "refused", "which of Liger's kernels to patch in",
       [](auto key, const auto& n, Draft&) {
         if (!is_null(n)) refuse(key, "a choice of Liger's kernels is not planned: every default kernel is");
       }},
      {"packing", "setting", "packing (with packing_strategy bfd or bfd_split, SFTTrainer flattens the micro-batch)",
       [](auto key, const auto& n, Draft& d) { d.packing = !is_null(n) && bool_of(key, n); }},
      {"packing_strategy", "setting", "packing: bfd and bfd_split flatten the micro-batch; wrapped keeps its rows",
       [](auto key, const auto& n, Draft& d) {
         if (is_null(n)) return;
         d.packing_strategy = detail::ascii_lower(scalar_of(key, n));
         if (d.packing_strategy != "bfd" && d.packing_strategy != "bfd_split" && d.packing_strategy != "wrapped")
           refuse(key, fmt::format("{} is not one of SFTConfig's strategies (bfd, bfd_split, wrapped)",
                                   detail::quoted(d.packing_strategy)));
       }},
      {"padding_free", "setting", "packing (the micro-batch flattened into one sequence)",
       [](auto key, const auto& n, Draft& d) { d.padding_free = !is_null(n) && bool_of(key, n); }},
      {"activation_offloading", "setting", "activation_offloading",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n)) d.set("activation_offloading", bool_of(key, n), key);
       }},
      {"completion_only_loss", "refused", "a loss on the completion only (fewer positions in the chunked loss)",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "a completion-only loss"); }},
      {"assistant_only_loss", "refused", "a loss on the assistant's turns only",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "an assistant-only loss"); }},
      {"use_transformers_continuous_batching", "refused", "GRPO's generation with continuous batching",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "generation with transformers' continuous batching"); }},
      {"use_transformers_paged", "refused", "GRPO's generation with continuous batching (the older name)",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "generation with transformers' continuous batching"); }},
      {"torch_compile", "refused", "torch.compile",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "torch.compile"); }},
      {"reward_funcs", "setting", "GRPO's reward functions over the text: their own host time is not planned (a note)",
       [](auto, const auto& n, Draft& d) {
         if (!is_null(n)) d.notes.push_back("the reward functions' own time (reward_funcs) is not planned");
       }},
      {"reward_model_name_or_path", "refused", "a reward model beside the GRPO policy",
       [](auto key, const auto& n, Draft&) {
         if (!is_null(n)) refuse(key, "a reward model beside the GRPO policy is not planned yet");
       }},
      {"use_vllm", "setting", "generation none with vllm_mode server; colocated vLLM is refused",
       [](auto key, const auto& n, Draft& d) { d.use_vllm = bool_of(key, n); }},
      {"vllm_mode", "setting", "with use_vllm: server (generation none) or colocate (refused)",
       [](auto key, const auto& n, Draft& d) { d.vllm_mode = detail::ascii_lower(scalar_of(key, n)); }},
      {"generation_batch_size", "setting", "steps_per_generation = generation_batch_size / batch (GRPO, one GPU)",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n)) d.generation_batch_size = int_of(key, n);
       }},
      {"steps_per_generation", "setting", "steps_per_generation (GRPO; default gradient_accumulation_steps)",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n) && d.objective == Objective::grpo) d.set("steps_per_generation", int_of(key, n), key);
       }},
      {"num_iterations", "setting", "iterations (GRPO; default 1)",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n) && d.objective == Objective::grpo) d.set("iterations", int_of(key, n), key);
       }},
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
         if (!is_null(n))
           refuse(key,
                  "a recipe's DeepSpeed config is not read yet; plan it with --gpus and --parallel zero1|zero2|zero3");
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
// A list of names, packed (not one a line).
// clang-format off
constexpr std::string_view kTrlIgnoredKeys[] = {
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
    "chat_template_path", "truncation_mode", "shuffle_dataset", "neftune_noise_alpha",
    "ignore_bias_buffers", "use_logits_to_keep", "label_smoothing", "rpo_alpha", "ld_alpha", "loss_weights",
    "reference_free", "sync_ref_model", "ref_model_mixup_alpha", "ref_model_sync_steps", "temperature", "top_p",
    "top_k", "min_p", "repetition_penalty", "reward_weights", "scale_rewards", "epsilon", "epsilon_high",
    "log_completions", "vllm_server_host", "vllm_server_port", "vllm_server_base_url", "vllm_server_timeout",
    "vllm_group_port", "vllm_gpu_memory_utilization", "vllm_tensor_parallel_size", "vllm_model_impl",
    "vllm_enable_sleep_mode", "vllm_importance_sampling_correction", "num_generations_eval", "desirable_weight", "undesirable_weight", "center_rewards_coefficient",
    "disable_dropout", "model_init_kwargs", "ref_model_init_kwargs", "ddp_find_unused_parameters", "ddp_timeout",
    "include_num_input_tokens_seen", "average_tokens_across_devices", "bf16_full_eval", "fp16_full_eval",
    "prediction_loss_only", "resume_from_checkpoint", "ignore_data_skip", "use_cpu", "local_rank",
};
// clang-format on

// axolotl and LLaMA-Factory are told apart by keys only they write.
RecipeKind kind_of(const YAML::Node& root) {
  for (const char* key : {"base_model", "micro_batch_size", "sequence_len", "sample_packing", "adapter"})
    if (root[key]) return RecipeKind::axolotl;
  for (const char* key : {"stage", "finetuning_type", "cutoff_len", "lora_rank", "quantization_bit"})
    if (root[key]) return RecipeKind::llama_factory;
  return RecipeKind::trl;
}

// The settings a TRL recipe gives, with TRL's and transformers' defaults where it is silent.
// Each key of a recipe through its format's rules: used, ignored, or refused.
void read_keys(const YAML::Node& root, const std::vector<KeyRule>& rules, std::span<const std::string_view> ignored,
               std::string_view format, Draft& d, Recipe& out) {
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : std::string();
    const auto rule = std::find_if(rules.begin(), rules.end(), [&](const KeyRule& r) { return r.key == key; });
    if (rule != rules.end()) {
      rule->apply(key, it->second, d);
    } else if (std::find(ignored.begin(), ignored.end(), key) != ignored.end()) {
      out.ignored.push_back(key);
    } else {
      throw InputError(
          fmt::format("{}: unknown key of {} recipe {}; trainfit neither plans nor ignores it "
                      "(docs/setup.md, \"Recipes\", lists the keys)",
                      out.source, format, detail::quoted(key)));
    }
  }
}

void read_trl(const YAML::Node& root, Draft& d, Recipe& out) {
  read_keys(root, trl_rules(), kTrlIgnoredKeys, "a TRL", d, out);
  if (!d.has("model"))
    throw InputError(fmt::format("{}: a TRL recipe names its model with model_name_or_path", out.source));
  d.set("trainer", std::string("trl"), "trl");
  d.set("objective", to_string(d.objective), "trl");
  // Method: PEFT's LoRA, on a quantised base when ModelConfig asks for one.
  if (d.load_in_4bit || d.load_in_8bit) {
    if (!d.use_peft) refuse("load_in_4bit", "a quantised base trains only with use_peft: true (TRL's ModelConfig)");
    d.set("method", std::string("qlora"), d.load_in_4bit ? "load_in_4bit" : "load_in_8bit");
    d.set("weights", d.load_in_8bit ? std::string("int8") : d.quant_type,
          d.load_in_4bit ? "load_in_4bit" : "load_in_8bit");
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
  // use_liger_kernel: SFTTrainer's loss_type defaults to nll, and the patched forward then runs
  // Liger's fused loss in place of transformers' (skip_logits); chunked_nll it refuses.
  if (d.has("kernels") && d.get<std::string>("kernels") == "liger" &&
      d.objective == Objective::sft) {
    if (d.has("loss") && parse_loss(d.get<std::string>("loss")) == Loss::chunked)
      refuse("loss_type", "chunked_nll with use_liger_kernel: TRL's SFTTrainer refuses the two together");
    d.set("loss", std::string("fused"), "use_liger_kernel");
  }
  if (d.objective == Objective::grpo) {
    if (!d.has("completion_len")) d.set("completion_len", std::int64_t{512}, "max_completion_length");
    const std::int64_t completion = d.get<std::int64_t>("completion_len");
    if (d.max_prompt_length) {
      d.set("seq", *d.max_prompt_length + completion, "max_prompt_length");
    } else if (!d.has("seq")) {
      d.set("seq", 2 * completion, "max_completion_length");
      d.notes.push_back("the recipe does not bound the prompt: planned as long as the completion (--seq overrides)");
    }
    // GRPOConfig's beta is 0: no reference model; above 0 the method's reference.
    if (d.beta && *d.beta > 0) d.set("reference", std::string(d.use_peft ? "adapter-off" : "copy"), "beta");
    // Generation: generate() on the training GPU unless vLLM makes the completions. A vLLM server
    // runs elsewhere, so the step is the optimisation alone; colocated vLLM shares the GPU.
    if (d.use_vllm) {
      if (d.vllm_mode != "server")
        refuse("use_vllm",
               "colocated vLLM (vllm_mode colocate, GRPOConfig's default) is not planned yet; "
               "vllm_mode server plans the training GPU's step without the generation");
      d.set("generation", std::string("none"), "use_vllm");
    }
    // generation_batch_size is global: one GPU's share is per_device_train_batch_size x
    // steps_per_generation (GRPOConfig.__post_init__).
    if (d.generation_batch_size) {
      if (d.has("steps_per_generation"))
        refuse("generation_batch_size", "generation_batch_size and steps_per_generation cannot both be set (TRL)");
      const std::int64_t batch = d.get<std::int64_t>("batch");
      if (*d.generation_batch_size % batch != 0)
        refuse("generation_batch_size", fmt::format("must be a multiple of per_device_train_batch_size ({})", batch));
      d.set("steps_per_generation", *d.generation_batch_size / batch, "generation_batch_size");
      d.notes.push_back("generation_batch_size is read for one GPU; with several, give --steps-per-generation");
    }
  } else if (!d.has("seq")) {
    d.set("seq", std::int64_t{1024}, "max_length");
    if (d.max_length_null)
      d.notes.push_back(
          "max_length: null keeps each example's own length: planned at seq 1024; give theirs with --seq");
  }
  // Mixed precision: TRL's configs set bf16 unless fp16 is. Over fp32 weights that is autocast
  // (amp); over 16-bit weights autocast changes only what runs in fp32 inside the trainer's own
  // code, which --trainer trl plans (the chunked loss's GEMM).
  const bool fp16 = d.fp16.value_or(false);
  const bool bf16 = d.bf16.value_or(!fp16);
  if (bf16 && fp16) refuse("fp16", "bf16 and fp16 cannot both be true");
  const std::string weights = d.get<std::string>("weights");
  const bool fp32_weights = weights == "fp32" || weights == "float32";
  if (fp32_weights && (bf16 || fp16)) {
    if (d.use_peft)
      // The memory model's autocast is full fine-tuning's (amp): LoRA's frozen fp32 base under
      // autocast (cast anew at every matmul, never cached) has not been measured.
      d.notes.push_back(
          fmt::format("LoRA over float32 weights under {} autocast is planned without the autocast "
                      "(activations in fp32): an upper bound; set dtype: bfloat16 to plan a bf16 base",
                      bf16 ? "bf16" : "fp16"));
    else
      d.set("amp", std::string(bf16 ? "bf16" : "fp16"), bf16 ? "bf16" : "fp16");
  }
  if (!fp32_weights && !bf16 && !fp16 && d.objective == Objective::sft)
    refuse("bf16", "false over 16-bit weights is not planned: TRL's chunked loss would then run its GEMMs in fp32");
  // SFTTrainer flattens the micro-batch under padding_free, and under packing with bfd or bfd_split
  // (TRL f2cd577, sft_trainer.py); wrapped packing keeps rows of max_length whose examples attend
  // across their boundaries, which is how the plan's rows already run.
  // SFTTrainer's own check (sft_trainer.py at f2cd577): padding-free rows are not truncated, so it
  // refuses them while max_length is set, unless packing cuts the examples into bins.
  if (d.padding_free && !d.packing && !d.max_length_null && d.objective == Objective::sft)
    refuse("padding_free",
           "SFTTrainer refuses padding_free without packing while max_length is set (it would not truncate the "
           "examples): set max_length: null (and give their length with --seq) or packing: true");
  if (d.padding_free || (d.packing && d.packing_strategy != "wrapped")) {
    if (d.objective != Objective::sft)
      refuse(d.padding_free ? "padding_free" : "packing", "packing is planned for SFT only");
    d.set("packing", true, d.padding_free ? "padding_free" : "packing");
  }
}

// ---- LLaMA-Factory (`llamafactory-cli train recipe.yaml`; its hparams at commit ff6d4d12e) ----------

std::string lf_attention(std::string_view key, const YAML::Node& n) {
  const std::string s = detail::ascii_lower(scalar_of(key, n));
  if (s == "auto" || s == "sdpa") return "sdpa";  // auto takes SDPA where torch has it
  if (s == "fa2" || s == "fa3") return "flash";
  if (s == "disabled" || s == "eager") return "eager";
  refuse(key, fmt::format("flash_attn {} is not planned; planned: auto, sdpa, fa2, fa3, disabled", detail::quoted(s)));
}

// LLaMA-Factory's freeze_vision_tower and freeze_multi_modal_projector: either false trains the
// tower and projector as one (vision_tower loaded); both default to frozen (read_llama_factory).
void unfreeze_tower_when_false(std::string_view key, const YAML::Node& n, Draft& d) {
  if (!bool_of(key, n)) d.set("vision_tower", std::string("loaded"), key);
}

const std::vector<KeyRule>& llama_factory_rules() {
  static const std::vector<KeyRule> rules{
      {"model_name_or_path", "setting", "model",
       [](auto key, const auto& n, Draft& d) { d.set("model", scalar_of(key, n), key); }},
      {"stage", "setting", "objective: sft, dpo, kto, rm (reward), ppo",
       [](auto key, const auto& n, Draft& d) {
         const std::string s = detail::ascii_lower(scalar_of(key, n));
         if (s == "sft")
           d.objective = Objective::sft;
         else if (s == "dpo")
           d.objective = Objective::dpo;
         else if (s == "kto")
           d.objective = Objective::kto;
         else if (s == "rm")
           d.objective = Objective::reward;
         else if (s == "ppo")
           d.objective = Objective::ppo;
         else
           refuse(key, fmt::format("stage {} is not planned; planned: sft, dpo, kto, rm, ppo", detail::quoted(s)));
       }},
      {"finetuning_type", "setting", "method: full or lora (qlora with quantization_bit)",
       [](auto key, const auto& n, Draft& d) {
         d.method = detail::ascii_lower(scalar_of(key, n));
         if (d.method != "full" && d.method != "lora")
           refuse(key, fmt::format("finetuning_type {} is not planned; planned: full, lora", detail::quoted(d.method)));
       }},
      {"quantization_bit", "setting", "method qlora: 4 (nf4 or fp4) or 8 (int8), bitsandbytes",
       [](auto key, const auto& n, Draft& d) {
         if (is_null(n)) return;
         d.quantization_bit = int_of(key, n);
         if (*d.quantization_bit != 4 && *d.quantization_bit != 8)
           refuse(key, "only 4 and 8 bits (bitsandbytes) are planned");
       }},
      {"quantization_method", "setting", "bnb only",
       [](auto key, const auto& n, Draft&) {
         if (detail::ascii_lower(scalar_of(key, n)) != "bnb")
           refuse(key, "only bitsandbytes (bnb) quantisation is planned");
       }},
      {"quantization_type", "setting", "weights nf4 or fp4",
       [](auto key, const auto& n, Draft& d) {
         d.quant_type = detail::ascii_lower(scalar_of(key, n));
         if (d.quant_type != "nf4" && d.quant_type != "fp4") refuse(key, "expected nf4 or fp4");
       }},
      {"double_quantization", "setting", "double_quant (default true)",
       [](auto key, const auto& n, Draft& d) { d.double_quant = bool_of(key, n); }},
      {"lora_rank", "setting", "rank (default 8)",
       [](auto key, const auto& n, Draft& d) { d.set("rank", int_of(key, n), key); }},
      {"lora_alpha", "setting", "lora_alpha (default 2 x rank)",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n)) d.set("lora_alpha", number_of(key, n), key);
       }},
      {"lora_dropout", "setting", "lora_dropout (default 0)",
       [](auto key, const auto& n, Draft& d) { d.set("lora_dropout", number_of(key, n), key); }},
      {"lora_target", "setting", "lora_targets: all is all-linear (the default), else module names",
       [](auto key, const auto& n, Draft& d) {
         std::string t = list_text_of(key, n);
         if (detail::ascii_lower(t) == "all") t = "all-linear";
         d.set("lora_targets", t, key);
       }},
      {"cutoff_len", "setting", "seq (default 2048)",
       [](auto key, const auto& n, Draft& d) { d.set("seq", int_of(key, n), key); }},
      {"per_device_train_batch_size", "setting", "batch (TrainingArguments' default 8)",
       [](auto key, const auto& n, Draft& d) { d.set("batch", int_of(key, n), key); }},
      {"gradient_accumulation_steps", "setting", "grad_accum",
       [](auto key, const auto& n, Draft& d) { d.set("grad_accum", int_of(key, n), key); }},
      {"disable_gradient_checkpointing", "setting", "grad_ckpt off (checkpointing is on by default)",
       [](auto key, const auto& n, Draft& d) { d.set("grad_ckpt", !bool_of(key, n), key); }},
      {"use_reentrant_gc", "setting", "reentrant checkpointing (default true), planned as non-reentrant",
       [](auto key, const auto& n, Draft& d) { d.reentrant_checkpointing = bool_of(key, n); }},
      {"flash_attn", "setting", "attn: auto and sdpa are sdpa, fa2 and fa3 flash, disabled eager",
       [](auto key, const auto& n, Draft& d) { d.set("attn", lf_attention(key, n), key); }},
      {"optim", "setting", "optimizer (transformers' default adamw_torch_fused)",
       [](auto key, const auto& n, Draft& d) { d.set("optimizer", optimizer_setting(key, n), key); }},
      {"bf16", "setting", "the compute dtype bf16: trainable parameters in fp32 under autocast",
       [](auto key, const auto& n, Draft& d) { d.bf16 = bool_of(key, n); }},
      {"fp16", "setting", "the compute dtype fp16",
       [](auto key, const auto& n, Draft& d) { d.fp16 = bool_of(key, n); }},
      {"pure_bf16", "setting", "trainable parameters kept in bf16 (no fp32 copy)",
       [](auto key, const auto& n, Draft& d) { d.pure_bf16 = bool_of(key, n); }},
      {"freeze_vision_tower", "setting",
       "vision_tower frozen (the default, with freeze_multi_modal_projector); false: loaded (trained)",
       unfreeze_tower_when_false},
      {"freeze_multi_modal_projector", "setting", "read with freeze_vision_tower (the tower and projector as one)",
       unfreeze_tower_when_false},
      {"enable_liger_kernel", "setting", "kernels liger (SFT's loss then Liger's fused one)",
       [](auto key, const auto& n, Draft& d) {
         if (bool_of(key, n)) d.set("kernels", std::string("liger"), key);
       }},
      {"use_unsloth", "refused", "Unsloth", [](auto key, const auto& n, Draft&) { off_only(key, n, "Unsloth"); }},
      {"use_unsloth_gc", "refused", "Unsloth's checkpointing",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "Unsloth's checkpointing"); }},
      // data/loader.py and processor/supervised.py at ff6d4d12e: packing fills rows of cutoff_len - 1
      // tokens with whole examples that attend across their boundaries, which is how full rows run.
      {"packing", "setting", "rows of cutoff_len filled with examples attending across them: planned as full rows",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n) && bool_of(key, n))
           d.notes.push_back(
               "packing: rows of cutoff_len - 1 tokens filled with whole examples that attend across "
               "their boundaries, planned as full rows of cutoff_len");
       }},
      {"neat_packing", "setting", "packing (examples attend within themselves; flash_attn fa2 and batch 1 only)",
       [](auto key, const auto& n, Draft& d) { d.neat_packing = !is_null(n) && bool_of(key, n); }},
      {"use_dora", "refused", "DoRA", [](auto key, const auto& n, Draft&) { off_only(key, n, "DoRA (use_dora)"); }},
      {"pissa_init", "refused", "PiSSA",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "PiSSA initialisation"); }},
      {"upcast_layernorm", "refused", "fp32 norm weights",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "fp32 norm weights (upcast_layernorm)"); }},
      {"upcast_lmhead_output", "refused", "fp32 output-layer output",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "an fp32 output layer output"); }},
      {"use_galore", "refused", "GaLore", [](auto key, const auto& n, Draft&) { off_only(key, n, "GaLore"); }},
      {"use_badam", "refused", "BAdam", [](auto key, const auto& n, Draft&) { off_only(key, n, "BAdam"); }},
      {"use_apollo", "refused", "APOLLO", [](auto key, const auto& n, Draft&) { off_only(key, n, "APOLLO"); }},
      {"shift_attn", "refused", "shifted sparse attention",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "S^2-Attn"); }},
      {"deepspeed", "refused", "DeepSpeed: plan it with --gpus and --parallel",
       [](auto key, const auto& n, Draft&) {
         if (!is_null(n))
           refuse(key,
                  "a recipe's DeepSpeed config is not read yet; plan it with --gpus and --parallel zero1|zero2|zero3");
       }},
  };
  return rules;
}

// A list of names, packed (not one a line).
// clang-format off
constexpr std::string_view kLlamaFactoryIgnoredKeys[] = {
    "trust_remote_code", "do_train", "do_eval", "dataset", "eval_dataset", "dataset_dir", "template", "max_samples",
    "preprocessing_num_workers", "dataloader_num_workers", "overwrite_cache", "tokenized_path", "streaming",
    "buffer_size", "mix_strategy", "val_size", "output_dir", "logging_steps", "save_steps", "save_strategy",
    "save_total_limit", "plot_loss", "overwrite_output_dir", "save_only_model", "report_to", "run_name",
    "learning_rate", "num_train_epochs", "max_steps", "lr_scheduler_type", "warmup_ratio", "warmup_steps",
    "weight_decay", "max_grad_norm", "seed", "ddp_timeout", "resume_from_checkpoint", "per_device_eval_batch_size",
    "eval_strategy", "eval_steps", "pref_beta", "pref_loss", "pref_ftx", "simpo_gamma", "dpo_label_smoothing",
    "kto_chosen_weight", "kto_rejected_weight", "adapter_name_or_path", "default_system", "enable_thinking",
    "image_max_pixels", "video_max_pixels", "media_dir",
    "rope_scaling", "hub_model_id", "push_to_hub", "logging_dir", "train_on_prompt", "mask_history",
    "additional_target", "export_dir", "export_size", "export_device", "export_legacy_format", "cache_dir",
};
// clang-format on

void read_llama_factory(const YAML::Node& root, Draft& d, Recipe& out) {
  d.reentrant_checkpointing = true;  // ModelArguments.use_reentrant_gc
  read_keys(root, llama_factory_rules(), kLlamaFactoryIgnoredKeys, "a LLaMA-Factory", d, out);
  if (!d.has("model"))
    throw InputError(fmt::format("{}: a LLaMA-Factory recipe names its model with model_name_or_path", out.source));
  // LLaMA-Factory trains through transformers' Trainer (its CustomSeq2SeqTrainer): the whole loss.
  d.set("trainer", std::string("transformers"), "stage");
  d.set("objective", to_string(d.objective), "stage");
  const bool fp16 = d.fp16.value_or(false), bf16 = d.bf16.value_or(false) || d.pure_bf16;
  const std::string compute = bf16 ? "bf16" : fp16 ? "fp16" : "fp32";
  if (d.quantization_bit) {
    if (d.method != "lora") refuse("quantization_bit", "a quantised base trains only with finetuning_type lora");
    d.set("method", std::string("qlora"), "quantization_bit");
    d.set("weights", *d.quantization_bit == 8 ? std::string("int8") : d.quant_type, "quantization_bit");
    d.set("double_quant", d.double_quant, "double_quantization");
    if (compute != "fp32") d.set("compute_dtype", compute, bf16 ? "bf16" : "fp16");
  } else if (d.method == "full") {
    d.set("method", std::string("full"), "finetuning_type");
    // The model loads in the compute dtype, then its trainable parameters are cast to fp32 unless
    // pure_bf16 (model/adapter.py, cast_trainable_params_to_fp32): fp32 weights under autocast.
    if (d.pure_bf16 || compute == "fp32") {
      d.set("weights", d.pure_bf16 ? std::string("bf16") : std::string("fp32"), "pure_bf16");
    } else {
      d.set("weights", std::string("fp32"), "bf16");
      d.set("amp", compute, bf16 ? "bf16" : "fp16");
    }
  } else {
    d.set("method", std::string("lora"), "finetuning_type");
    d.set("weights", compute, bf16 ? "bf16" : fp16 ? "fp16" : "finetuning_type");
    // The adapters are cast to fp32 unless pure_bf16.
    if (d.pure_bf16) d.set("adapter_dtype", std::string("bf16"), "pure_bf16");
  }
  if (d.method != "full") {
    if (!d.has("rank")) d.set("rank", std::int64_t{8}, "lora_rank");
    if (!d.has("lora_dropout")) d.set("lora_dropout", 0.0, "lora_dropout");
    if (!d.has("lora_targets")) d.set("lora_targets", std::string("all-linear"), "lora_target");
  } else {
    for (const char* lora_key : {"rank", "lora_alpha", "lora_dropout", "lora_targets"}) d.values.erase(lora_key);
  }
  if (!d.has("grad_ckpt")) d.set("grad_ckpt", true, "disable_gradient_checkpointing");
  if (!d.has("seq")) d.set("seq", std::int64_t{2048}, "cutoff_len");
  if (!d.has("batch")) d.set("batch", std::int64_t{8}, "per_device_train_batch_size");
  if (d.neat_packing) {
    // SFTDataCollatorWith4DAttentionMask (data/collator.py at ff6d4d12e): under flash_attention_2 a
    // row of packed examples with position_ids restarting at each and no mask, which transformers
    // runs through the varlen kernel (packing under flash); otherwise a 4D block-diagonal mask per
    // row in the compute dtype (prepare_4d_attention_mask), which has no term yet.
    if (d.objective != Objective::sft) refuse("neat_packing", "LLaMA-Factory sets neat_packing for SFT only");
    const bool flash = d.has("attn") && d.get<std::string>("attn") == "flash";
    if (!flash)
      refuse("neat_packing",
             "under sdpa or eager (flash_attn auto, sdpa, disabled) LLaMA-Factory masks each row with a 4D "
             "block-diagonal mask in the compute dtype, which is not planned yet; plan it with flash_attn fa2");
    if (d.get<std::int64_t>("batch") != 1)
      refuse("neat_packing",
             "LLaMA-Factory's collator asserts per_device_train_batch_size 1 for neat packing under fa2");
    d.set("packing", true, "neat_packing");
  }
  if (!d.has("optimizer")) d.set("optimizer", std::string("adamw"), "optim");
  // A multimodal model's tower and projector are frozen and out of the LoRA targets by default
  // (freeze_vision_tower, freeze_multi_modal_projector); nothing changes for a text model.
  if (!d.has("vision_tower")) d.set("vision_tower", std::string("frozen"), "freeze_vision_tower");
  if (d.has("grad_ckpt") && d.get<bool>("grad_ckpt") && d.reentrant_checkpointing)
    d.notes.push_back(
        "use_reentrant_gc (on by default) is planned as non-reentrant checkpointing: the same tensors "
        "are kept; the hooks' host time is counted");
}

// ---- axolotl (`axolotl train recipe.yaml`; its schemas at commit 067b021c8) ------------------------

const std::vector<KeyRule>& axolotl_rules() {
  static const std::vector<KeyRule> rules{
      {"base_model", "setting", "model",
       [](auto key, const auto& n, Draft& d) { d.set("model", scalar_of(key, n), key); }},
      {"adapter", "setting", "method: lora or qlora; none is full fine-tuning",
       [](auto key, const auto& n, Draft& d) {
         d.method = is_null(n) ? std::string() : detail::ascii_lower(scalar_of(key, n));
         if (!d.method.empty() && d.method != "lora" && d.method != "qlora")
           refuse(key, fmt::format("adapter {} is not planned; planned: lora, qlora", detail::quoted(d.method)));
       }},
      {"rl", "setting", "objective: dpo, kto, orpo, grpo",
       [](auto key, const auto& n, Draft& d) {
         if (is_null(n)) return;
         const std::string s = detail::ascii_lower(scalar_of(key, n));
         if (s == "dpo")
           d.objective = Objective::dpo;
         else if (s == "kto")
           d.objective = Objective::kto;
         else if (s == "orpo")
           d.objective = Objective::orpo;
         else if (s == "grpo")
           d.objective = Objective::grpo;
         else
           refuse(key, fmt::format("rl {} is not planned; planned: dpo, kto, orpo, grpo", detail::quoted(s)));
       }},
      {"reward_model", "setting", "objective reward",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n) && bool_of(key, n)) d.objective = Objective::reward;
       }},
      {"load_in_4bit", "setting", "weights nf4 (with adapter qlora)",
       [](auto key, const auto& n, Draft& d) { d.load_in_4bit = !is_null(n) && bool_of(key, n); }},
      {"load_in_8bit", "setting", "weights int8",
       [](auto key, const auto& n, Draft& d) { d.load_in_8bit = !is_null(n) && bool_of(key, n); }},
      {"lora_r", "setting", "rank", [](auto key, const auto& n, Draft& d) { d.set("rank", int_of(key, n), key); }},
      {"lora_alpha", "setting", "lora_alpha",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n)) d.set("lora_alpha", number_of(key, n), key);
       }},
      {"lora_dropout", "setting", "lora_dropout (default 0)",
       [](auto key, const auto& n, Draft& d) { d.set("lora_dropout", number_of(key, n), key); }},
      {"lora_target_modules", "setting", "lora_targets",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n)) d.set("lora_targets", list_text_of(key, n), key);
       }},
      {"lora_target_linear", "setting", "lora_targets all-linear",
       [](auto key, const auto& n, Draft& d) { d.target_linear = !is_null(n) && bool_of(key, n); }},
      {"sequence_len", "setting", "seq (default 512)",
       [](auto key, const auto& n, Draft& d) { d.set("seq", int_of(key, n), key); }},
      {"micro_batch_size", "setting", "batch (default 1)",
       [](auto key, const auto& n, Draft& d) { d.set("batch", int_of(key, n), key); }},
      {"gradient_accumulation_steps", "setting", "grad_accum",
       [](auto key, const auto& n, Draft& d) { d.set("grad_accum", int_of(key, n), key); }},
      {"gradient_checkpointing", "setting", "grad_ckpt (default off); offload is refused",
       [](auto key, const auto& n, Draft& d) {
         if (is_null(n)) return;
         const std::string s = detail::ascii_lower(scalar_of(key, n));
         if (s == "offload" || s == "offload_disk") refuse(key, "activation offloading is not planned yet");
         d.set("grad_ckpt", bool_of(key, n), key);
       }},
      {"gradient_checkpointing_kwargs", "setting", "use_reentrant: planned as non-reentrant",
       [](auto key, const auto& n, Draft& d) {
         if (n.IsMap() && n["use_reentrant"] && !is_null(n["use_reentrant"]))
           d.reentrant_checkpointing = bool_of(key, n["use_reentrant"]);
       }},
      {"bf16", "setting", "the model's dtype bf16 (auto: bf16 where the card has it)",
       [](auto key, const auto& n, Draft& d) {
         if (is_null(n)) return;
         d.bf16 = detail::ascii_lower(scalar_of(key, n)) == "auto" || bool_of(key, n);
       }},
      {"fp16", "setting", "the model's dtype fp16",
       [](auto key, const auto& n, Draft& d) { d.fp16 = !is_null(n) && bool_of(key, n); }},
      {"tf32", "ignored", "TF32 for fp32 matmuls: planned GEMMs are bf16",
       [](auto key, const auto& n, Draft&) {
         if (!is_null(n) && detail::ascii_lower(scalar_of(key, n)) != "auto") (void)bool_of(key, n);
       }},
      {"attn_implementation", "setting", "attn",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n)) d.set("attn", attention_setting(key, n), key);
       }},
      {"flash_attention", "setting", "attn flash",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n) && bool_of(key, n)) d.set("attn", std::string("flash"), key);
       }},
      {"sdp_attention", "setting", "attn sdpa",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n) && bool_of(key, n)) d.set("attn", std::string("sdpa"), key);
       }},
      {"eager_attention", "setting", "attn eager",
       [](auto key, const auto& n, Draft& d) {
         if (!is_null(n) && bool_of(key, n)) d.set("attn", std::string("eager"), key);
       }},
      {"optimizer", "setting", "optimizer (default adamw_torch_fused)",
       [](auto key, const auto& n, Draft& d) { d.set("optimizer", optimizer_setting(key, n), key); }},
      {"sample_packing", "setting",
       "packing (flash: the micro-batch as one row; sdpa and eager: micro_batch_size 1 only)",
       [](auto key, const auto& n, Draft& d) { d.sample_packing = !is_null(n) && bool_of(key, n); }},
      {"xformers_attention", "refused", "xformers attention",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "xformers attention"); }},
      {"flex_attention", "refused", "flex attention",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "flex attention"); }},
      {"activation_offloading", "refused", "activation offloading",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "activation offloading"); }},
      {"torch_compile", "refused", "torch.compile",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "torch.compile"); }},
      {"peft_use_dora", "refused", "DoRA",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "DoRA (peft_use_dora)"); }},
      {"cut_cross_entropy", "refused", "Cut Cross Entropy",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "Cut Cross Entropy"); }},
      {"liger_fused_linear_cross_entropy", "refused", "Liger's fused linear cross-entropy",
       [](auto key, const auto& n, Draft&) { off_only(key, n, "Liger's kernels"); }},
      {"plugins", "refused", "plugins (Liger, Cut Cross Entropy, ...)",
       [](auto key, const auto& n, Draft&) {
         if (!is_null(n) && !(n.IsSequence() && n.size() == 0)) refuse(key, "axolotl's plugins are not planned yet");
       }},
      {"lora_modules_to_save", "refused", "modules trained whole beside the adapters",
       [](auto key, const auto& n, Draft&) {
         if (!is_null(n) && !(n.IsSequence() && n.size() == 0))
           refuse(key, "modules trained whole beside LoRA are not planned yet");
       }},
      {"deepspeed", "refused", "DeepSpeed: plan it with --gpus and --parallel",
       [](auto key, const auto& n, Draft&) {
         if (!is_null(n))
           refuse(key,
                  "a recipe's DeepSpeed config is not read yet; plan it with --gpus and --parallel zero1|zero2|zero3");
       }},
      {"fsdp", "refused", "FSDP: plan it with --gpus and --parallel fsdp",
       [](auto key, const auto& n, Draft&) {
         if (!is_null(n) && !(n.IsSequence() && n.size() == 0))
           refuse(key, "a recipe's FSDP is not read yet; plan it with --gpus and --parallel fsdp");
       }},
      {"fsdp_config", "refused", "FSDP: plan it with --gpus and --parallel fsdp",
       [](auto key, const auto& n, Draft&) {
         if (!is_null(n) && !(n.IsMap() && n.size() == 0))
           refuse(key, "a recipe's FSDP is not read yet; plan it with --gpus and --parallel fsdp");
       }},
  };
  return rules;
}

// A list of names, packed (not one a line).
// clang-format off
constexpr std::string_view kAxolotlIgnoredKeys[] = {
    "base_model_config", "model_type", "tokenizer_type", "tokenizer_config", "tokenizer_use_fast", "trust_remote_code",
    "is_llama_derived_model", "is_mistral_derived_model", "is_qwen_derived_model", "strict", "datasets",
    "test_datasets", "dataset_prepared_path", "dataset_processes", "shuffle_merged_datasets", "val_set_size",
    "chat_template", "default_system_message", "special_tokens", "tokens", "train_on_inputs", "group_by_length",
    "pad_to_sequence_len", "eval_sample_packing", "output_dir", "hub_model_id", "wandb_project", "wandb_entity",
    "wandb_watch", "wandb_name", "wandb_log_model", "mlflow_tracking_uri", "use_tensorboard", "num_epochs",
    "max_steps", "learning_rate", "lr_scheduler", "lr_scheduler_kwargs", "warmup_steps", "warmup_ratio",
    "cosine_min_lr_ratio", "weight_decay", "max_grad_norm", "adam_beta1", "adam_beta2", "adam_epsilon",
    "logging_steps", "evals_per_epoch", "eval_steps", "eval_strategy", "saves_per_epoch", "save_steps",
    "save_strategy", "save_total_limit", "save_safetensors", "save_first_step", "early_stopping_patience",
    "resume_from_checkpoint", "auto_resume_from_checkpoints", "local_rank", "debug", "seed", "eval_table_size",
    "eval_max_new_tokens", "loss_watchdog_threshold", "loss_watchdog_patience", "load_best_model_at_end",
    "lora_fan_in_fan_out", "lora_model_dir", "gptq", "embeddings_skip_upcast", "xformers", "s2_attention",
    "include_tokens_per_second", "dataloader_num_workers", "dataloader_pin_memory", "dataloader_prefetch_factor",
    "remove_unused_columns", "skip_prepare_dataset", "sequence_len_overflow_handling", "excess_length_strategy",
    "beta", "rl_beta", "dpo_beta", "trl", "bfloat16", "float16",
};
// clang-format on

void read_axolotl(const YAML::Node& root, Draft& d, Recipe& out) {
  d.method.clear();  // no adapter: full fine-tuning
  read_keys(root, axolotl_rules(), kAxolotlIgnoredKeys, "an axolotl", d, out);
  if (!d.has("model"))
    throw InputError(fmt::format("{}: an axolotl recipe names its model with base_model", out.source));
  // axolotl trains through its AxolotlTrainer, transformers' Trainer: the whole loss.
  d.set("trainer", std::string("transformers"), "rl");
  d.set("objective", to_string(d.objective), "rl");
  if (d.method.empty())
    refuse("adapter",
           "full fine-tuning under axolotl keeps the embedding and output layer in fp32 "
           "(_configure_embedding_dtypes), which is not planned yet; plan it with trainfit's flags");
  // bf16 "auto" (the default) is bf16 on a card that has it: the model loads in its torch_dtype.
  const bool fp16 = d.fp16.value_or(false), bf16 = !fp16 && d.bf16.value_or(true);
  const std::string compute = bf16 ? "bf16" : fp16 ? "fp16" : "fp32";
  if (d.load_in_4bit || d.load_in_8bit) {
    d.set("method", std::string("qlora"), "adapter");
    // axolotl's BitsAndBytesConfig: NF4, double quantisation, the torch dtype to compute in; after
    // prepare_model_for_kbit_training it casts the norms and embeddings back to the torch dtype.
    d.set("weights", std::string(d.load_in_8bit ? "int8" : "nf4"), d.load_in_8bit ? "load_in_8bit" : "load_in_4bit");
    d.set("double_quant", true, "load_in_4bit");
    if (compute != "fp32") d.set("compute_dtype", compute, "bf16");
  } else {
    if (d.method == "qlora") refuse("adapter", "qlora needs load_in_4bit: true");
    d.set("method", std::string("lora"), "adapter");
    d.set("weights", compute, "bf16");
  }
  if (!d.has("rank")) refuse("lora_r", "an adapter needs lora_r");
  if (d.target_linear) d.set("lora_targets", std::string("all-linear"), "lora_target_linear");
  if (!d.has("lora_targets")) refuse("lora_target_modules", "name the adapted modules (or lora_target_linear: true)");
  if (!d.has("lora_dropout")) d.set("lora_dropout", 0.0, "lora_dropout");
  if (!d.has("seq")) d.set("seq", std::int64_t{512}, "sequence_len");
  if (!d.has("batch")) d.set("batch", std::int64_t{1}, "micro_batch_size");
  if (d.sample_packing) {
    // axolotl at 067b021c8 (core/builders/causal.py, core/trainers/base.py): a flash kernel packs
    // micro_batch_size x sequence_len tokens into one row (multipack_real_batches off); sdpa and
    // eager keep micro_batch_size rows of sequence_len, each masked block-diagonally from its
    // position_ids (the attention mask dropped). Without a named kernel the samples attend across.
    const std::string attn = d.has("attn") ? d.get<std::string>("attn") : "";
    if (attn.empty()) {
      d.notes.push_back(
          "sample_packing without an attention kernel: rows of sequence_len whose samples attend "
          "across their boundaries, planned as full rows");
    } else if (attn == "flash" || d.get<std::int64_t>("batch") == 1) {
      d.set("packing", true, "sample_packing");
    } else {
      refuse("sample_packing",
             fmt::format("under {} axolotl masks each of micro_batch_size rows block-diagonally (a mask a row), "
                         "which is not planned yet; plan it with flash_attention or micro_batch_size 1",
                         attn));
    }
  }
  if (!d.has("optimizer")) d.set("optimizer", std::string("adamw"), "optimizer");
  if (d.has("grad_ckpt") && d.get<bool>("grad_ckpt") && d.reentrant_checkpointing)
    d.notes.push_back(
        "use_reentrant: true is planned as non-reentrant checkpointing: the same tensors are kept; the "
        "hooks' host time is counted");
}

}  // namespace

std::string to_string(RecipeKind k) {
  switch (k) {
    case RecipeKind::trl:
      return "trl";
    case RecipeKind::axolotl:
      return "axolotl";
    case RecipeKind::llama_factory:
      return "llama-factory";
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
  Draft d;
  d.objective = objective.value_or(Objective::sft);
  // An error about a value names the file and the recipe's own key, not trainfit's setting.
  std::string_view key;
  try {
    switch (out.kind) {
      case RecipeKind::trl:
        read_trl(root, d, out);
        break;
      case RecipeKind::axolotl:
        read_axolotl(root, d, out);
        break;
      case RecipeKind::llama_factory:
        read_llama_factory(root, d, out);
        break;
    }
    // Each value checked against its setting's row, in the table's order (a command line's).
    for (const Setting& s : settings()) {
      const auto it = d.values.find(s.key);
      if (it == d.values.end()) continue;
      key = it->second.second;
      SettingValue v = it->second.first;
      if ((s.type == SettingType::list || s.type == SettingType::choice) && std::holds_alternative<std::string>(v))
        v = parse_setting_text(s, std::get<std::string>(v));
      out.settings.emplace_back(&s, check_setting_value(s, v));
    }
  } catch (const SettingError& e) {
    throw InputError(fmt::format("{}: {}: {}", source, key.empty() ? e.setting() : std::string(key), e.reason()));
  } catch (const InputError& e) {
    if (key.empty()) throw;
    throw InputError(fmt::format("{}: {}: {}", source, key, e.what()));
  }
  out.notes = std::move(d.notes);
  return out;
}

Recipe load_recipe(const std::string& path, std::optional<Objective> objective) {
  return parse_recipe(detail::read_text_file(path, "recipe", kMaxRecipeBytes), path, objective);
}

std::vector<std::string> recipe_warnings(const Recipe& recipe) {
  std::vector<std::string> lines = recipe.notes;
  if (!recipe.ignored.empty())
    lines.push_back(
        fmt::format("recipe keys that change neither memory nor time, ignored: {}", fmt::join(recipe.ignored, ", ")));
  return lines;
}

std::vector<RecipeKeyUse> recipe_keys(RecipeKind kind) {
  const std::vector<KeyRule>& rules = kind == RecipeKind::trl       ? trl_rules()
                                      : kind == RecipeKind::axolotl ? axolotl_rules()
                                                                    : llama_factory_rules();
  using Keys = std::span<const std::string_view>;
  const Keys ignored = kind == RecipeKind::trl       ? Keys(kTrlIgnoredKeys)
                       : kind == RecipeKind::axolotl ? Keys(kAxolotlIgnoredKeys)
                                                     : Keys(kLlamaFactoryIgnoredKeys);
  std::vector<RecipeKeyUse> out;
  for (const KeyRule& r : rules) out.push_back({std::string(r.key), std::string(r.use), std::string(r.what)});
  for (std::string_view k : ignored) out.push_back({std::string(k), "ignored", "changes neither memory nor time"});
  return out;
}

}  // namespace trainfit
