#pragma once
// A training setup: everything a user says about one training run (the model and card they name,
// the method, dtypes, adapters, optimizer, sequence and batch, checkpointing, attention kernel,
// GPU count and layout, headroom policy, platform). Each member is one row of the settings table
// (trainfit/settings.hpp), which gives its flag, JSON key, allowed values and documentation; the
// defaults here are the table's defaults. `trainfit schema` prints the whole vocabulary.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace trainfit {

enum class Method { full, lora, qlora };
enum class DType { fp32, bf16, fp16, int8, nf4, fp4 };
// adamw is torch.optim.AdamW(fused=True); adamw_foreach the same optimizer without fused=True, its
// default on CUDA (transformers' optim="adamw_torch"), which steps with list operations that keep
// a copy of the second moments (docs/model.md, "Optimizer states").
enum class Optimizer { adamw, adamw_8bit, sgd, sgd_momentum, adafactor, adamw_foreach };
enum class Attention { sdpa, eager, flash };
// How several GPUs share the work of one step (data parallelism: each GPU runs its own micro-batch).
//   ddp:  PyTorch DistributedDataParallel: every GPU holds the whole model; gradients are
//         all-reduced in buckets (flat copies of the trainable gradients).
//   fsdp: FSDP2 fully_shard on each decoder layer and on the root: parameters, gradients and
//         optimizer states sharded across the GPUs, each layer gathered for its forward and again
//         for its backward.
//   fsdp_grad_op: FSDP2 with reshard_after_forward=False (FSDP1's SHARD_GRAD_OP): each layer stays
//         gathered from its forward to its backward, so the backward gathers nothing.
//   hsdp: FSDP2 on a 2-D mesh: sharded within a node, replicated across nodes.
//   zero1, zero2, zero3: DeepSpeed's ZeRO stages: optimizer states (1), plus gradients (2), plus
//         parameters (3) partitioned across the data-parallel GPUs; ZeroRedundancyOptimizer is
//         PyTorch's stage 1.
// Each value is a row of the data-parallel schemes' table (DataParallelScheme below), its index:
// add_data_parallel_scheme gives a scheme added at run time the next value.
enum class Parallel : std::uint8_t { ddp, fsdp, fsdp_grad_op, hsdp, zero1, zero2, zero3 };
// What a sharded layout keeps in host memory instead of on the GPU (DeepSpeed's offload_optimizer
// and offload_param, FSDP2's CPUOffloadPolicy, which moves both).
enum class Offload { none, optimizer, params, optimizer_params };
enum class OffloadDevice { cpu, nvme };

// The framework that runs a data-parallel scheme, which decides how its gradients travel.
enum class DataParallelFramework {
  // PyTorch's DistributedDataParallel: gradients copied into buckets and all-reduced once an
  // optimizer step (accumulating micro-batches run under no_sync).
  pytorch_ddp,
  // ZeroRedundancyOptimizer over DDP: the same all-reduce, then each GPU steps its share of the
  // parameters and broadcasts every parameter tensor it updated.
  zero_redundancy_optimizer,
  // DeepSpeed's ZeRO engine: each GPU keeps a flat partition in the optimizer's dtype (fp32 master
  // weights in bf16 mode), reduces gradients in buckets and all-gathers the updated parameters.
  deepspeed,
  // FSDP2's fully_shard: per-parameter shards gathered for each layer's passes, gradients
  // reduce-scattered every micro-batch, its MixedPrecisionPolicy.
  fsdp2,
};

// A data-parallel scheme: what the GPUs that hold the same parameters each keep a share of, how
// their gradients travel, and what can be offloaded. The built-in schemes are the rows of
// src/setup/data_parallel.cpp; every term of the memory and time models reads the row, never the
// scheme's name (docs/architecture.md, "Add a layout").
struct DataParallelScheme {
  std::string name;                  // the `parallel` value: "zero2"
  std::vector<std::string> aliases;  // other spellings accepted for it
  std::string title;                 // as reports name it: "ZeRO-2"
  DataParallelFramework framework = DataParallelFramework::pytorch_ddp;
  bool shards_parameters = false, shards_gradients = false, shards_optimizer = false;
  bool shards_within_node = false;  // HSDP: shards within a node, replicas across nodes all-reduce
  bool keeps_gathered = false;      // a layer stays gathered from its forward to its backward
  bool takes_qlora = false;         // QLoRA's 4-bit storage runs under it (measured)
  // The `offload` values it takes besides none, whether NVMe, and what a refusal says ({} is the
  // scheme's name).
  std::vector<Offload> offloads;
  bool offloads_to_nvme = false;
  std::string offload_refusal, nvme_refusal;
  // The offloads advise's search tries it with (none: advise does not try it).
  std::vector<Offload> advise_offloads;
};
// Every scheme in Parallel's order.
std::vector<const DataParallelScheme*> data_parallel_schemes();
const DataParallelScheme& data_parallel_scheme(Parallel p);
// Adds a scheme and returns its Parallel value: from then on it is a `parallel` value of flags,
// JSON, bench matrices, the schema and the API. Throws InputError when its name or an alias is taken.
// Call it before planning starts: planning in other threads reads the table without a lock.
Parallel add_data_parallel_scheme(const DataParallelScheme& scheme);
// What one optimizer step trains the policy for, as Hugging Face TRL's trainers compute it
// (docs/model.md, "Objectives"):
//   sft:    next-token cross-entropy over `batch` sequences (transformers' loss; no TRL involved).
//   dpo:    DPOTrainer: chosen and rejected concatenated into 2 x batch sequences, the sigmoid loss
//           against the reference's log-probabilities.
//   orpo:   ORPOTrainer: chosen and rejected, NLL on the chosen plus the odds-ratio term; no reference.
//   kto:    KTOTrainer: `batch` unpaired sequences plus as many mismatched ones for the KL term
//           (through the policy and the reference without gradients).
//   reward: RewardTrainer: a sequence classifier (a score head of hidden x 1 instead of the
//           vocabulary), -logsigmoid(chosen - rejected) over 2 x batch sequences.
//   ppo:    PPOTrainer's optimisation step: the policy and a value model trained together, a
//           frozen reward model (and reference) beside them; the rollout is not planned.
//   grpo:   GRPOTrainer's optimisation step over `batch` completions (logits of the completion
//           only); generation is not planned.
enum class Objective { sft, dpo, orpo, kto, reward, ppo, grpo };
// The library whose trainer runs the step (docs/model.md, "Trainers"):
//   transformers: transformers' Trainer, or a loop that does what it does (trainfit's runner);
//   trl:          TRL's trainer for the objective (SFTTrainer for sft). Its configs default
//                 gradient checkpointing on and bf16 autocast on, SFTTrainer's loss to the chunked
//                 one, and SFTTrainer computes the token entropy and accuracy of every step.
enum class Trainer { transformers, trl };
// How the SFT loss computes the output layer and the cross-entropy:
//   whole:   the logits of every position over the whole vocabulary, then the cross-entropy in
//            fp32 (transformers' ForCausalLMLoss; TRL's loss_type "nll");
//   chunked: TRL's loss_type "chunked_nll": the output layer and the cross-entropy over 256
//            label-kept positions at a time, each chunk checkpointed (recomputed in the backward);
//   fused:   Liger-Kernel's fused linear cross-entropy (what use_liger_kernel runs under SFT):
//            the output layer and the cross-entropy over a few rows at a time, their gradients
//            computed in the forward; no logits over the micro-batch, nothing recomputed.
enum class Loss { whole, chunked, fused };
// The kernels of the decoder layers' norms, activation and rotary embedding:
//   torch: the PyTorch operations transformers' modeling code writes;
//   liger: Liger-Kernel's Triton kernels as TRL and transformers' use_liger_kernel patch them in
//          (RMSNorm, SwiGLU/GeGLU, RoPE): fewer saved tensors, fewer operations.
enum class Kernels { torch, liger };
// What of a multimodal model (Gemma 3, Mistral 3, Qwen2.5-VL, ...) is built:
//   loaded:  the whole ...ForConditionalGeneration, vision tower and projector beside the text
//            model (what AutoModelForCausalLM and the trainers load); a text-only step leaves them idle;
//   dropped: the text model alone (its ...ForCausalLM on text_config).
// Nothing changes for a text model.
// A multimodal model's vision tower and projector: built and trainable (loaded), built and frozen
// (LLaMA-Factory's freeze_vision_tower and freeze_multi_modal_projector: no gradient, no adapter),
// or not built (the text model alone).
enum class VisionTowerUse { loaded, frozen, dropped };
// Where an objective's reference log-probabilities come from:
//   copy:        a frozen copy of the model, as its base is stored (TRL's default under full fine-tuning);
//   adapter_off: the policy itself with its LoRA adapters disabled: no weights of its own (TRL's
//                default under PEFT);
//   precomputed: computed before training (DPO/KTO's precompute_ref_log_probs): nothing at run time;
//   none:        no reference (GRPO with beta 0, TRL's default).
enum class Reference { copy, adapter_off, precomputed, none };
// Where GRPO's completions come from in a step:
//   none:     made elsewhere (a vLLM server, or trainfit's runner, which times the optimisation
//             step alone): the step is the optimisation;
//   generate: transformers' generate() on the training GPU, GRPOTrainer's default (use_vllm
//             false): the policy samples each generation batch's completions, and that time is
//             part of the step (docs/model.md, "Generation").
enum class Generation { none, generate };
// What the driver does with an allocation past the card: Linux fails it (CUDA out of memory); the
// Windows driver's system-memory fallback serves it from host RAM over the PCIe link (very slowly).
// (Not plain `linux`: GNU C++ modes define it as a macro.)
enum class Platform { on_linux, on_windows };

// A setting's value whatever its type (settings.hpp): unset or "none" (monostate), a switch, a
// whole number, a number, a name, a list of names.
using SettingValue = std::variant<std::monostate, bool, std::int64_t, double, std::string, std::vector<std::string>>;

struct LoraSetup {
  std::int64_t rank = 16;
  double alpha = 32;  // scales the adapters' output; no memory or time term depends on it
  double dropout = 0.05;
  // Module names as PEFT matches them; {"all-linear"} means every linear layer of the decoder.
  std::vector<std::string> targets = {"all-linear"};
  DType adapter_dtype = DType::fp32;  // PEFT's default autocast_adapter_dtype keeps adapters in fp32
};

struct QuantSetup {
  bool double_quant = true;           // bnb_4bit_use_double_quant
  DType compute_dtype = DType::bf16;  // bnb_4bit_compute_dtype
  // prepare_model_for_kbit_training casts the non-quantised parameters to fp32.
  bool kbit_prepare = false;
  // bitsandbytes' 4-bit block size. Not a setting: bitsandbytes fixes it at 64 for 4-bit weights.
  std::int64_t block_size = 64;
};

struct TrainingSetup {
  // What is trained and on which card, as the user names them. The planner works on the loaded
  // ModelSpec and the resolved GpuSpec; these say where they came from.
  std::string model;                     // built-in name or a path to a config.json (or its folder)
  std::string gpu;                       // catalogue card
  std::optional<std::int64_t> vram_bytes;  // a card known by its memory only
  std::string gpu_spec;                  // a GPU spec file (TOML)

  Method method = Method::lora;
  DType weights = DType::bf16;
  std::optional<DType> amp;           // autocast dtype over fp32 master weights
  LoraSetup lora;
  QuantSetup quant;
  Optimizer optimizer = Optimizer::adamw;
  std::int64_t seq = 512;
  std::int64_t batch = 1;
  std::int64_t grad_accum = 1;
  bool grad_ckpt = false;
  // TRL's packing (bfd) or padding_free: a micro-batch's batch x seq tokens flattened into one
  // sequence whose examples attend only within themselves (docs/model.md, "Packing").
  bool packing = false;
  // TRL's activation_offloading: every tensor autograd saves in the forward (1 KiB or more, not a
  // parameter) copied to pinned host memory and brought back in the backward (docs/model.md,
  // "Activation offloading").
  bool activation_offloading = false;
  Trainer trainer = Trainer::transformers;
  Loss loss = Loss::whole;  // sft only
  Kernels kernels = Kernels::torch;
  VisionTowerUse vision_tower = VisionTowerUse::loaded;
  // A multimodal model with its tower loaded: images in each sequence, each `image_tokens` of its
  // `seq` tokens (unset: the tower's own default, VisionTower::shape), run through the tower.
  std::int64_t images = 0;
  std::optional<std::int64_t> image_tokens;
  Attention attention = Attention::sdpa;
  Objective objective = Objective::sft;
  // The reference of dpo, kto, ppo and grpo. The default follows the method and the objective
  // (default_reference): this initialiser is the default method's (LoRA).
  Reference reference = Reference::adapter_off;
  std::int64_t generations = 8;       // GRPO: completions per prompt (TRL's num_generations)
  // PPO and GRPO: tokens of each sequence that are the completion (the rest is its prompt); by
  // default half of `seq` (this initialiser is half the default seq).
  std::int64_t completion_len = 256;
  // GRPO's generation (docs/model.md, "Generation"): how completions are made; the micro-batches
  // one generate() call serves (TRL's steps_per_generation: each call makes batch x this many
  // completions on a GPU), 0 following grad_accum as GRPOConfig's default does (generation_steps);
  // and the optimisation passes over each generation batch (num_iterations).
  Generation generation = Generation::none;
  std::int64_t steps_per_generation = 0;
  std::int64_t iterations = 1;
  std::int64_t gpus = 1;              // data-parallel degree; batch and seq are per GPU
  Parallel parallel = Parallel::ddp;  // with gpus > 1
  Offload offload = Offload::none;
  OffloadDevice offload_device = OffloadDevice::cpu;
  // FSDP's mixed-precision policy: the dtype layers are gathered and computed in, and the dtype
  // gradients are reduced in. Unset: the parameters' own dtype (no policy).
  std::optional<DType> fsdp_param_dtype;
  std::optional<DType> fsdp_reduce_dtype;
  // Model parallelism: tensor (with sequence parallelism), pipeline (1F1B over `microbatches`
  // micro-batches of `batch` sequences) and context (the sequence split across GPUs). `gpus` is
  // every GPU of the run; the data-parallel degree is gpus / (tp x pp x cp).
  std::int64_t tp = 1;
  std::int64_t pp = 1;
  std::int64_t microbatches = 1;
  std::int64_t cp = 1;
  std::int64_t nodes = 1;  // hosts the GPUs are spread over, gpus / nodes on each
  double headroom = 0.2;              // fraction of capacity to keep free
  Platform platform = Platform::on_linux;

  // Values of settings added to the table at run time (add_setting): no built-in term reads them.
  std::map<std::string, SettingValue, std::less<>> extensions;
};

// Names as users write them; the first spelling of each value is canonical. Throw InputError
// listing the valid names.
Method parse_method(std::string_view s);
DType parse_dtype(std::string_view s);
Optimizer parse_optimizer(std::string_view s);
Attention parse_attention(std::string_view s);
Parallel parse_parallel(std::string_view s);
Offload parse_offload(std::string_view s);
OffloadDevice parse_offload_device(std::string_view s);
Platform parse_platform(std::string_view s);
Objective parse_objective(std::string_view s);
Reference parse_reference(std::string_view s);
Trainer parse_trainer(std::string_view s);
Loss parse_loss(std::string_view s);
Kernels parse_kernels(std::string_view s);
VisionTowerUse parse_vision_tower(std::string_view s);
Generation parse_generation(std::string_view s);
std::vector<std::string> parse_lora_targets(std::string_view s);  // "all-linear" or "q,k,v,o" / "q_proj,v_proj"
// The short form users write: "all-linear", or "q,v" for {"q_proj", "v_proj"}.
std::string lora_targets_text(const std::vector<std::string>& targets);
// The shorthands for the usual projection modules: {"q", "q_proj"}, {"gate", "gate_proj"}...
const std::vector<std::pair<std::string, std::string>>& lora_target_shorthands();

std::string to_string(Method m);
std::string to_string(DType d);
std::string to_string(Optimizer o);
std::string to_string(Attention a);
std::string to_string(Parallel p);
std::string to_string(Offload o);
std::string to_string(OffloadDevice d);
std::string to_string(Platform p);
std::string to_string(Objective o);
std::string to_string(Reference r);
std::string to_string(Trainer t);
std::string to_string(Loss l);
std::string to_string(Kernels k);
std::string to_string(VisionTowerUse v);
std::string to_string(Generation g);

// The reference TRL uses when none is given: none for GRPO (beta 0 by default), a frozen copy
// under full fine-tuning, the adapter-disabled base under LoRA and QLoRA. The settings table's
// derived default; a change of method carries a default reference along (advise, plan's changes).
Reference default_reference(Objective objective, Method method);
// Whether the objective has a reference at all (dpo, kto, ppo, grpo).
bool has_reference_setting(Objective objective);
// GRPO: the micro-batches one generation serves, steps_per_generation or (0) grad_accum. The
// second form is the same rule for a caller pricing many accumulations of one setup.
std::int64_t generation_steps(const TrainingSetup& setup);
std::int64_t generation_steps(std::int64_t steps_per_generation, std::int64_t grad_accum);
// The sequences one example of a micro-batch trains the policy on: 2 for the paired objectives
// (dpo, orpo, reward: chosen and rejected), else 1.
std::int64_t trained_sequences_per_example(Objective objective);

double bytes_per_element(DType d);  // 0.5 for 4-bit types
// The most tokens one micro-batch (seq x batch) may hold: validate refuses more, which keeps every
// product of the settings' limits far from int64 overflow.
inline constexpr std::int64_t kMaxMicroBatchTokens = std::int64_t{1} << 24;
// Throws SettingError naming the setting when a value is out of its range or the setup is
// inconsistent (qlora with bf16 weights, rank 0, seq 0...).
void validate(const TrainingSetup& setup);

// The setup at another sequence length, its completion (ppo, grpo) keeping its share of the
// sequence (at least one token): what the advisor, the boundary and a suggestion vary.
TrainingSetup with_seq(TrainingSetup setup, std::int64_t seq);

// The layout's degrees: data-parallel GPUs (gpus / (tp x pp x cp)) and the GPUs one host holds.
std::int64_t data_parallel_degree(const TrainingSetup& setup);
bool offloads_optimizer(Offload o);
// AdamW, fused or foreach: two states of each trainable parameter's shape and dtype.
bool keeps_two_moments(Optimizer o);
bool offloads_params(Offload o);

}  // namespace trainfit
