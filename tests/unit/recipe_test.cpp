// Recipes read into settings (trainfit/recipe.hpp; docs/setup.md, "Recipes"): TRL CLI configs with
// TRL's and transformers' defaults, every key used, ignored or refused by name.
#include <gtest/gtest.h>

#include <map>

#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

std::map<std::string, std::string> settings_of(const Recipe& r) {
  std::map<std::string, std::string> m;
  for (const GivenSetting& g : r.settings) m[g.setting->key] = setting_text(*g.setting, g.value);
  return m;
}

std::string error_of(std::string_view text, std::optional<Objective> objective = {}) {
  try {
    parse_recipe(text, "recipe.yaml", objective);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Recipe, ATrlSftConfigTakesTrlsDefaultsForWhatItLeavesOut) {
  const Recipe r = parse_recipe(
      "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: trl-lib/Capybara\n"
      "learning_rate: 2.0e-5\n",
      "sft.yaml");
  EXPECT_EQ(r.kind, RecipeKind::trl);
  const auto s = settings_of(r);
  EXPECT_EQ(s.at("model"), "Qwen/Qwen2.5-0.5B");
  EXPECT_EQ(s.at("trainer"), "trl");
  EXPECT_EQ(s.at("method"), "full");
  EXPECT_EQ(s.at("weights"), "fp32");  // ModelConfig's dtype default
  EXPECT_EQ(s.at("amp"), "bf16");      // SFTConfig's bf16 default over fp32 weights
  EXPECT_EQ(s.at("batch"), "8");       // TrainingArguments' per_device_train_batch_size
  EXPECT_EQ(s.at("seq"), "1024");      // SFTConfig's max_length
  EXPECT_EQ(s.at("optimizer"), "adamw");
  EXPECT_EQ(r.ignored, (std::vector<std::string>{"dataset_name", "learning_rate"}));
  // Resolved, the trainer's own defaults follow: checkpointing on, the chunked loss.
  const TrainingSetup setup = resolve_setup(r.settings);
  EXPECT_TRUE(setup.grad_ckpt);
  EXPECT_EQ(setup.loss, Loss::chunked);
}

TEST(Recipe, PeftQuantisationAndTheTrainingArgumentsMapToSettings) {
  const Recipe r = parse_recipe(R"(
model_name_or_path: qwen2.5-7b
dtype: bfloat16
use_peft: true
load_in_4bit: true
use_bnb_nested_quant: true
lora_r: 32
lora_alpha: 64
lora_dropout: 0.0
lora_target_modules: [q_proj, k_proj, v_proj, o_proj]
per_device_train_batch_size: 2
gradient_accumulation_steps: 8
gradient_checkpointing: false
max_length: 4096
optim: paged_adamw_8bit
attn_implementation: flash_attention_2
loss_type: nll
)",
                                "qlora.yaml");
  const auto s = settings_of(r);
  EXPECT_EQ(s.at("method"), "qlora");
  EXPECT_EQ(s.at("weights"), "nf4");
  EXPECT_EQ(s.at("double_quant"), "true");
  EXPECT_EQ(s.at("rank"), "32");
  EXPECT_EQ(s.at("lora_targets"), "q,k,v,o");
  EXPECT_EQ(s.at("batch"), "2");
  EXPECT_EQ(s.at("grad_accum"), "8");
  EXPECT_EQ(s.at("grad_ckpt"), "false");
  EXPECT_EQ(s.at("seq"), "4096");
  EXPECT_EQ(s.at("optimizer"), "adamw-8bit");
  EXPECT_EQ(s.at("attn"), "flash");
  EXPECT_EQ(s.at("loss"), "whole");
  EXPECT_EQ(s.count("amp"), 0u);  // bf16 autocast over a 4-bit base computing in bf16: nothing to cast
  const TrainingSetup setup = resolve_setup(r.settings);
  EXPECT_FALSE(setup.grad_ckpt);
}

TEST(Recipe, JsonIsReadAsYamlAndTheObjectiveNamesTheTrainer) {
  const Recipe r =
      parse_recipe(R"({"model_name_or_path": "qwen2.5-0.5b", "dtype": "bfloat16", "use_peft": true, "beta": 0.04,
                                    "num_generations": 4, "max_completion_length": 256, "per_device_train_batch_size": 4})",
                   "grpo.json", Objective::grpo);
  const auto s = settings_of(r);
  EXPECT_EQ(s.at("objective"), "grpo");
  EXPECT_EQ(s.at("generations"), "4");
  EXPECT_EQ(s.at("completion_len"), "256");
  EXPECT_EQ(s.at("seq"), "512");                // no prompt bound in the recipe: as long as the completion
  EXPECT_EQ(s.at("reference"), "adapter-off");  // beta above 0 loads a reference
  EXPECT_EQ(r.notes.size(), 1u);
}

TEST(Recipe, GrpoGenerationKeys) {
  const std::string grpo = "model_name_or_path: qwen2.5-0.5b\nper_device_train_batch_size: 8\nnum_generations: 4\n";
  auto read = [](const std::string& text) { return settings_of(parse_recipe(text, "grpo.yaml", Objective::grpo)); };
  // generation_batch_size is one GPU's rows over the micro-batch's; num_iterations is iterations.
  const auto s = read(grpo + "generation_batch_size: 16\nnum_iterations: 2\n");
  EXPECT_EQ(s.at("steps_per_generation"), "2");
  EXPECT_EQ(s.at("iterations"), "2");
  EXPECT_EQ(s.count("generation"), 0u);  // generate, the trainer's default
  EXPECT_EQ(read(grpo + "steps_per_generation: 3\n").at("steps_per_generation"), "3");
  // A vLLM server makes the completions elsewhere: the training GPU's step is the optimisation.
  EXPECT_EQ(read(grpo + "use_vllm: true\nvllm_mode: server\nvllm_server_host: 10.0.0.1\n").at("generation"), "none");
  EXPECT_NE(error_of(grpo + "use_vllm: true\n", Objective::grpo).find("recipe.yaml: use_vllm: colocated vLLM"),
            std::string::npos);
  EXPECT_NE(error_of(grpo + "generation_batch_size: 12\n", Objective::grpo)
                .find("generation_batch_size: must be a multiple of per_device_train_batch_size (8)"),
            std::string::npos);
}

TEST(Recipe, RefusesWhatItDoesNotPlanNamingTheKey) {
  const std::string model = "model_name_or_path: qwen2.5-0.5b\n";
  // Options not planned yet: refused when on, accepted when off (what is planned).
  EXPECT_EQ(error_of(model + "completion_only_loss: true\n"),
            "recipe.yaml: completion_only_loss: a completion-only loss is not planned yet; plan without it (remove the "
            "key) for the step it replaces");
  EXPECT_EQ(error_of(model + "activation_offloading: true\n"), "");  // planned: activation_offloading
  EXPECT_EQ(error_of(model + "packing: false\nuse_liger_kernel: false\n"), "");
  EXPECT_EQ(error_of(model + "use_liger_kernel: true\n"), "");  // planned: kernels liger
  EXPECT_NE(error_of(model + "use_liger_kernel: true\nliger_kernel_config:\n  rope: false\n")
                .find("liger_kernel_config: a choice of Liger's kernels is not planned"),
            std::string::npos);
  // A key trainfit neither plans nor ignores (a typo, or a field of another version).
  EXPECT_NE(error_of(model + "per_device_train_batchsize: 4\n")
                .find("unknown key of a TRL recipe 'per_device_train_batchsize'"),
            std::string::npos);
  // Values: the recipe's key, not trainfit's setting, is named.
  EXPECT_EQ(error_of(model + "per_device_train_batch_size: 0\n"),
            "recipe.yaml: per_device_train_batch_size: must be between 1 and 65536 (got 0)");
  EXPECT_EQ(error_of(model + "per_device_train_batch_size: four\n"),
            "recipe.yaml: per_device_train_batch_size: expected a whole number, not 'four'");
  EXPECT_NE(error_of(model + "optim: lion_32bit\n").find("optim: optimizer 'lion_32bit' is not planned"),
            std::string::npos);
  EXPECT_NE(error_of(model + "loss_type: dft\n").find("loss_type: loss_type 'dft' is not planned"), std::string::npos);
  // The file as a whole.
  EXPECT_EQ(error_of("learning_rate: 1e-5\n"), "recipe.yaml: a TRL recipe names its model with model_name_or_path");
  EXPECT_EQ(error_of(model + "seed: 1\nseed: 2\n"), "recipe.yaml: key 'seed' is given twice");
  EXPECT_EQ(error_of("- a\n- b\n"), "recipe.yaml: a recipe is a mapping of keys to values");
  EXPECT_NE(error_of("model: [\n").find("recipe.yaml: not YAML (line"), std::string::npos);
}

// SFTTrainer flattens the micro-batch under padding_free and under packing with bfd or bfd_split
// (TRL f2cd577); wrapped packing keeps its rows, as the plan's rows run unpacked.
TEST(Recipe, TrlsPackingAndPaddingFreeFlattenTheMicroBatch) {
  const std::string model = "model_name_or_path: qwen2.5-0.5b\nattn_implementation: sdpa\n";
  const auto packing_of = [&](const std::string& keys) {
    const auto s = settings_of(parse_recipe(model + keys, "sft.yaml"));
    return s.contains("packing") ? s.at("packing") : std::string("(unset)");
  };
  EXPECT_EQ(packing_of("packing: true\n"), "true");
  EXPECT_EQ(packing_of("packing: true\npacking_strategy: bfd_split\n"), "true");
  EXPECT_EQ(packing_of("packing: true\npacking_strategy: wrapped\n"), "(unset)");
  // padding_free without packing: SFTTrainer refuses it while max_length is set (the default 1024),
  // as it did on the GPU machine; with max_length null the examples keep their length.
  EXPECT_EQ(error_of(model + "padding_free: true\n"),
            "recipe.yaml: padding_free: SFTTrainer refuses padding_free without packing while max_length is set (it "
            "would not truncate the examples): set max_length: null (and give their length with --seq) or packing: "
            "true");
  EXPECT_EQ(packing_of("padding_free: true\nmax_length: null\n"), "true");
  EXPECT_EQ(packing_of("padding_free: true\npacking: true\n"), "true");
  EXPECT_EQ(packing_of("packing: false\n"), "(unset)");
  EXPECT_EQ(error_of(model + "packing: true\npacking_strategy: greedy\n"),
            "recipe.yaml: packing_strategy: 'greedy' is not one of SFTConfig's strategies (bfd, bfd_split, wrapped)");
  EXPECT_EQ(error_of(model + "padding_free: true\n", Objective::dpo),
            "recipe.yaml: padding_free: packing is planned for SFT only");
  // Resolved, it is the setting the plan reads.
  EXPECT_TRUE(resolve_setup(parse_recipe(model + "packing: true\n", "sft.yaml").settings).packing);
}

TEST(Recipe, EveryKeyOfEachTableIsUsedIgnoredOrRefused) {
  // The docs list these tables; every key has one use, and no key is listed twice.
  for (const RecipeKind kind : {RecipeKind::trl, RecipeKind::llama_factory, RecipeKind::axolotl}) {
    std::map<std::string, int> seen;
    for (const RecipeKeyUse& k : recipe_keys(kind)) {
      EXPECT_TRUE(k.use == "setting" || k.use == "ignored" || k.use == "refused") << k.key;
      EXPECT_EQ(++seen[k.key], 1) << to_string(kind) << ": " << k.key;
    }
    EXPECT_GT(seen.size(), 50u) << to_string(kind);
  }
}

TEST(Recipe, ALlamaFactoryRecipeAsItsExamplesWriteIt) {
  // examples/train_lora/qwen3_lora_sft.yaml of LLaMA-Factory (ff6d4d12e), its model a built-in's.
  const Recipe r = parse_recipe(R"(### model
model_name_or_path: Qwen/Qwen2.5-7B
trust_remote_code: true
### method
stage: sft
do_train: true
finetuning_type: lora
lora_rank: 8
lora_target: all
### dataset
dataset: identity,alpaca_en_demo
template: qwen3_nothink
cutoff_len: 2048
max_samples: 1000
### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
learning_rate: 1.0e-4
bf16: true
resume_from_checkpoint: null
)",
                                "lf.yaml");
  EXPECT_EQ(r.kind, RecipeKind::llama_factory);
  const auto s = settings_of(r);
  EXPECT_EQ(s.at("trainer"), "transformers");
  EXPECT_EQ(s.at("method"), "lora");
  EXPECT_EQ(s.at("weights"), "bf16");
  EXPECT_EQ(s.at("rank"), "8");
  EXPECT_EQ(s.at("lora_dropout"), "0");  // LLaMA-Factory's default, not PEFT's
  EXPECT_EQ(s.at("lora_targets"), "all-linear");
  EXPECT_EQ(s.at("grad_ckpt"), "true");  // on unless disable_gradient_checkpointing
  EXPECT_EQ(s.at("seq"), "2048");
  EXPECT_EQ(s.at("batch"), "1");
  EXPECT_EQ(s.at("grad_accum"), "8");
  EXPECT_EQ(r.notes.size(), 1u);  // reentrant checkpointing planned as non-reentrant
  // Full fine-tuning: the trainable parameters are cast to fp32 under bf16 autocast; 4-bit: QLoRA.
  const auto full = settings_of(
      parse_recipe("model_name_or_path: qwen2.5-0.5b\nstage: sft\nfinetuning_type: full\nbf16: true\n", "f.yaml"));
  EXPECT_EQ(full.at("weights"), "fp32");
  EXPECT_EQ(full.at("amp"), "bf16");
  const auto q = settings_of(
      parse_recipe("model_name_or_path: qwen2.5-7b\nstage: dpo\nquantization_bit: 4\nbf16: true\n", "q.yaml"));
  EXPECT_EQ(q.at("method"), "qlora");
  EXPECT_EQ(q.at("weights"), "nf4");
  EXPECT_EQ(q.at("objective"), "dpo");
  EXPECT_NE(error_of("model_name_or_path: x\nstage: pt\n").find("stage 'pt' is not planned"), std::string::npos);
}

// LLaMA-Factory's packing (data/loader.py at ff6d4d12e): packing fills rows whose examples attend
// across them, planned as full rows; neat_packing keeps each example to itself, which under fa2 is
// a packed row through the varlen kernel and otherwise a 4D mask per row that is not planned.
TEST(Recipe, LlamaFactoryPackingAndNeatPacking) {
  const std::string base = "model_name_or_path: qwen2.5-0.5b\nstage: sft\nfinetuning_type: lora\ncutoff_len: 4096\n";
  const Recipe packed = parse_recipe(base + "packing: true\n", "lf.yaml");
  EXPECT_EQ(settings_of(packed).count("packing"), 0u);  // full rows, as unpacked rows run
  EXPECT_EQ(settings_of(packed).at("seq"), "4096");
  bool said = false;
  for (const std::string& n : packed.notes) said = said || n.starts_with("packing: rows of cutoff_len - 1 tokens");
  EXPECT_TRUE(said);
  const auto neat = settings_of(
      parse_recipe(base + "neat_packing: true\nflash_attn: fa2\nper_device_train_batch_size: 1\n", "lf.yaml"));
  EXPECT_EQ(neat.at("packing"), "true");
  EXPECT_EQ(neat.at("attn"), "flash");
  EXPECT_NE(error_of(base + "neat_packing: true\n").find("neat_packing: under sdpa or eager"), std::string::npos);
  EXPECT_NE(error_of(base + "neat_packing: true\nflash_attn: fa2\nper_device_train_batch_size: 2\n")
                .find("asserts per_device_train_batch_size 1"),
            std::string::npos);
  EXPECT_NE(error_of("model_name_or_path: qwen2.5-0.5b\nstage: dpo\nneat_packing: true\nflash_attn: fa2\n")
                .find("neat_packing: LLaMA-Factory sets neat_packing for SFT only"),
            std::string::npos);
}

// LLaMA-Factory freezes a multimodal model's vision tower and projector and keeps them out of the
// LoRA targets unless freeze_vision_tower (or freeze_multi_modal_projector) is false.
TEST(Recipe, LlamaFactoryFreezesTheVisionTowerByDefault) {
  const std::string base = "model_name_or_path: google/gemma-3-4b-it\nstage: sft\nfinetuning_type: lora\n";
  EXPECT_EQ(settings_of(parse_recipe(base, "lf.yaml")).at("vision_tower"), "frozen");
  EXPECT_EQ(settings_of(parse_recipe(base + "freeze_vision_tower: false\n", "lf.yaml")).at("vision_tower"), "loaded");
  // Planned: the tower's modules get no adapter (a LoRA on the text model alone).
  const ModelSpec m = load_model("gemma3-4b");
  TrainingSetup loaded;
  loaded.model = "gemma3-4b";
  TrainingSetup frozen = loaded;
  frozen.vision_tower = VisionTowerUse::frozen;
  const Plan with_adapters = make_plan(m, loaded, find_gpu("h200"));
  const Plan without = make_plan(m, frozen, find_gpu("h200"));
  EXPECT_LT(without.memory.peak_allocated_bytes, with_adapters.memory.peak_allocated_bytes);
}

TEST(Recipe, AnAxolotlRecipeAsItsExamplesWriteIt) {
  const Recipe r = parse_recipe(R"(base_model: mistralai/Mistral-7B-v0.1
load_in_8bit: false
load_in_4bit: true
datasets:
  - path: mhenrichsen/alpaca_2k_test
    type: alpaca
val_set_size: 0.1
output_dir: ./outputs/qlora-out
adapter: qlora
sequence_len: 4096
pad_to_sequence_len: true
lora_r: 32
lora_alpha: 16
lora_dropout: 0.05
lora_target_linear: true
gradient_accumulation_steps: 4
micro_batch_size: 2
num_epochs: 1
optimizer: adamw_bnb_8bit
lr_scheduler: cosine
learning_rate: 0.0002
bf16: auto
tf32: false
gradient_checkpointing: true
flash_attention: true
)",
                                "ax.yaml");
  EXPECT_EQ(r.kind, RecipeKind::axolotl);
  const auto s = settings_of(r);
  EXPECT_EQ(s.at("model"), "mistralai/Mistral-7B-v0.1");
  EXPECT_EQ(s.at("method"), "qlora");
  EXPECT_EQ(s.at("weights"), "nf4");
  EXPECT_EQ(s.at("lora_targets"), "all-linear");
  EXPECT_EQ(s.at("seq"), "4096");
  EXPECT_EQ(s.at("batch"), "2");
  EXPECT_EQ(s.at("optimizer"), "adamw-8bit");
  EXPECT_EQ(s.at("attn"), "flash");
  EXPECT_EQ(s.at("grad_ckpt"), "true");
  EXPECT_EQ(s.at("trainer"), "transformers");
  // sample_packing: under flash the micro-batch as one row (packing); under sdpa a block mask a row,
  // planned for one row only; without a named kernel, rows whose samples attend across them.
  const std::string packed =
      "base_model: qwen2.5-0.5b\nadapter: lora\nlora_r: 8\nlora_target_linear: true\nsample_packing: true\n";
  EXPECT_EQ(settings_of(parse_recipe(packed + "flash_attention: true\nmicro_batch_size: 4\n", "a.yaml")).at("packing"),
            "true");
  EXPECT_EQ(settings_of(parse_recipe(packed + "sdp_attention: true\n", "a.yaml")).at("packing"), "true");
  EXPECT_NE(error_of(packed + "sdp_attention: true\nmicro_batch_size: 2\n")
                .find("sample_packing: under sdpa axolotl masks each of micro_batch_size rows"),
            std::string::npos);
  const Recipe across = parse_recipe(packed, "a.yaml");
  EXPECT_EQ(settings_of(across).count("packing"), 0u);
  EXPECT_FALSE(across.notes.empty());
  EXPECT_NE(error_of("base_model: qwen2.5-0.5b\nmicro_batch_size: 1\n").find("adapter: full fine-tuning under axolotl"),
            std::string::npos);
}

}  // namespace
}  // namespace trainfit
