// Names of the setup's enumerations, and the consistency of a whole setup.
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "trainfit/error.hpp"
#include "trainfit/settings.hpp"
#include "trainfit/setup.hpp"

#include "common/text.hpp"

namespace trainfit {
namespace {


// Looks a name up in a table of (spelling, value); the first spelling of each value is canonical,
// the others are aliases people also write.
template <typename E, std::size_t N>
E lookup(std::string_view what, std::string_view text, const std::array<std::pair<std::string_view, E>, N>& table) {
  const std::string key = detail::ascii_lower(text);
  for (const auto& [name, value] : table) {
    if (name == key) return value;
  }
  std::vector<std::string_view> names;  // the canonical spelling of each value
  std::vector<E> seen;
  for (const auto& [name, value] : table) {
    if (std::find(seen.begin(), seen.end(), value) != seen.end()) continue;
    seen.push_back(value);
    names.push_back(name);
  }
  throw InputError(fmt::format("unknown {} '{}'; expected one of: {}", what, text, fmt::join(names, ", ")));
}

template <typename E, std::size_t N>
std::string name_of(E value, const std::array<std::pair<std::string_view, E>, N>& table) {
  for (const auto& [name, v] : table) {
    if (v == value) return std::string(name);
  }
  return "?";
}

constexpr std::array<std::pair<std::string_view, Method>, 3> kMethods{{
    {"full", Method::full}, {"lora", Method::lora}, {"qlora", Method::qlora}}};
constexpr std::array<std::pair<std::string_view, DType>, 9> kDTypes{{
    {"fp32", DType::fp32}, {"bf16", DType::bf16}, {"fp16", DType::fp16}, {"int8", DType::int8},
    {"nf4", DType::nf4}, {"fp4", DType::fp4}, {"float32", DType::fp32}, {"bfloat16", DType::bf16},
    {"float16", DType::fp16}}};
constexpr std::array<std::pair<std::string_view, Optimizer>, 8> kOptimizers{{
    {"adamw", Optimizer::adamw}, {"adamw-8bit", Optimizer::adamw_8bit}, {"sgd", Optimizer::sgd},
    {"sgd-momentum", Optimizer::sgd_momentum}, {"adafactor", Optimizer::adafactor},
    {"adamw-foreach", Optimizer::adamw_foreach},
    {"adam", Optimizer::adamw}, {"paged-adamw-8bit", Optimizer::adamw_8bit}}};
constexpr std::array<std::pair<std::string_view, Attention>, 4> kAttention{{
    {"sdpa", Attention::sdpa}, {"eager", Attention::eager}, {"flash", Attention::flash},
    {"flash_attention_2", Attention::flash}}};
constexpr std::array<std::pair<std::string_view, Offload>, 6> kOffload{{
    {"none", Offload::none}, {"optimizer", Offload::optimizer}, {"params", Offload::params},
    {"optimizer,params", Offload::optimizer_params}, {"params,optimizer", Offload::optimizer_params},
    {"all", Offload::optimizer_params}}};
constexpr std::array<std::pair<std::string_view, OffloadDevice>, 2> kOffloadDevice{{
    {"cpu", OffloadDevice::cpu}, {"nvme", OffloadDevice::nvme}}};
constexpr std::array<std::pair<std::string_view, Platform>, 2> kPlatforms{{
    {"linux", Platform::on_linux}, {"windows", Platform::on_windows}}};
constexpr std::array<std::pair<std::string_view, Objective>, 9> kObjectives{{
    {"sft", Objective::sft}, {"dpo", Objective::dpo}, {"orpo", Objective::orpo}, {"kto", Objective::kto},
    {"reward", Objective::reward}, {"ppo", Objective::ppo}, {"grpo", Objective::grpo},
    {"causal-lm", Objective::sft}, {"reward-model", Objective::reward}}};
constexpr std::array<std::pair<std::string_view, Reference>, 6> kReferences{{
    {"copy", Reference::copy}, {"adapter-off", Reference::adapter_off}, {"precomputed", Reference::precomputed},
    {"none", Reference::none}, {"adapter_off", Reference::adapter_off}, {"precompute", Reference::precomputed}}};
constexpr std::array<std::pair<std::string_view, Trainer>, 4> kTrainers{{
    {"transformers", Trainer::transformers}, {"trl", Trainer::trl}, {"hf", Trainer::transformers},
    {"huggingface", Trainer::transformers}}};
// TRL's own names for its loss types are accepted as written in an SFTConfig.
constexpr std::array<std::pair<std::string_view, Loss>, 5> kLosses{{{"whole", Loss::whole},
                                                                    {"chunked", Loss::chunked},
                                                                    {"fused", Loss::fused},
                                                                    {"nll", Loss::whole},
                                                                    {"chunked_nll", Loss::chunked}}};
constexpr std::array<std::pair<std::string_view, Kernels>, 2> kKernels{
    {{"torch", Kernels::torch}, {"liger", Kernels::liger}}};
constexpr std::array<std::pair<std::string_view, VisionTowerUse>, 3> kVisionTowerUses{
    {{"loaded", VisionTowerUse::loaded}, {"frozen", VisionTowerUse::frozen}, {"dropped", VisionTowerUse::dropped}}};
constexpr std::array<std::pair<std::string_view, Generation>, 2> kGenerations{
    {{"none", Generation::none}, {"generate", Generation::generate}}};

// Short names people write for the usual projection modules.
constexpr std::array<std::pair<std::string_view, std::string_view>, 7> kTargetShorthands{{
    {"q", "q_proj"}, {"k", "k_proj"}, {"v", "v_proj"}, {"o", "o_proj"},
    {"gate", "gate_proj"}, {"up", "up_proj"}, {"down", "down_proj"}}};

}  // namespace

Method parse_method(std::string_view s) { return lookup("method", s, kMethods); }
DType parse_dtype(std::string_view s) { return lookup("dtype", s, kDTypes); }
Optimizer parse_optimizer(std::string_view s) { return lookup("optimizer", s, kOptimizers); }
Attention parse_attention(std::string_view s) { return lookup("attention kernel", s, kAttention); }
Offload parse_offload(std::string_view s) { return lookup("offload", s, kOffload); }
OffloadDevice parse_offload_device(std::string_view s) { return lookup("offload device", s, kOffloadDevice); }
Platform parse_platform(std::string_view s) { return lookup("platform", s, kPlatforms); }
Objective parse_objective(std::string_view s) { return lookup("objective", s, kObjectives); }
Reference parse_reference(std::string_view s) { return lookup("reference", s, kReferences); }
Trainer parse_trainer(std::string_view s) { return lookup("trainer", s, kTrainers); }
Loss parse_loss(std::string_view s) { return lookup("loss", s, kLosses); }
Kernels parse_kernels(std::string_view s) {
  return lookup("kernels", s, kKernels);
}
Generation parse_generation(std::string_view s) { return lookup("generation", s, kGenerations); }
VisionTowerUse parse_vision_tower(std::string_view s) { return lookup("vision tower", s, kVisionTowerUses); }

std::vector<std::string> parse_lora_targets(std::string_view s) {
  const std::string text = detail::ascii_lower(s);
  if (text == "all-linear" || text == "all_linear" || text == "all") return {"all-linear"};
  std::vector<std::string> targets;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    std::string item = text.substr(start, comma - start);
    item.erase(std::remove_if(item.begin(), item.end(), [](unsigned char c) { return std::isspace(c) != 0; }), item.end());
    if (item.empty()) throw InputError(fmt::format("empty module name in '{}'", s));
    for (const auto& [shorthand, full] : kTargetShorthands) {
      if (item == shorthand) item = std::string(full);
    }
    const bool valid = std::all_of(item.begin(), item.end(), [](unsigned char c) {
      return std::isalnum(c) != 0 || c == '_' || c == '.';
    });
    if (!valid) throw InputError(fmt::format("'{}' is not a module name", item));
    if (std::find(targets.begin(), targets.end(), item) == targets.end()) targets.push_back(item);
    start = comma + 1;
  }
  return targets;
}

const std::vector<std::pair<std::string, std::string>>& lora_target_shorthands() {
  static const std::vector<std::pair<std::string, std::string>> all = [] {
    std::vector<std::pair<std::string, std::string>> v;
    v.reserve(kTargetShorthands.size());
    for (const auto& [shorthand, full] : kTargetShorthands) v.emplace_back(shorthand, full);
    return v;
  }();
  return all;
}

std::string lora_targets_text(const std::vector<std::string>& targets) {
  std::vector<std::string_view> names;
  for (const auto& t : targets) {
    std::string_view name = t;
    for (const auto& [shorthand, full] : kTargetShorthands)
      if (t == full) name = shorthand;
    names.push_back(name);
  }
  return fmt::format("{}", fmt::join(names, ","));
}

std::string to_string(Method m) { return name_of(m, kMethods); }
std::string to_string(DType d) { return name_of(d, kDTypes); }
std::string to_string(Optimizer o) { return name_of(o, kOptimizers); }
std::string to_string(Attention a) { return name_of(a, kAttention); }
std::string to_string(Offload o) { return name_of(o, kOffload); }
std::string to_string(OffloadDevice d) { return name_of(d, kOffloadDevice); }
std::string to_string(Platform p) { return name_of(p, kPlatforms); }
std::string to_string(Objective o) { return name_of(o, kObjectives); }
std::string to_string(Reference r) { return name_of(r, kReferences); }
std::string to_string(Trainer t) { return name_of(t, kTrainers); }
std::string to_string(Loss l) { return name_of(l, kLosses); }
std::string to_string(Kernels k) {
  return name_of(k, kKernels);
}
std::string to_string(Generation g) { return name_of(g, kGenerations); }
std::string to_string(VisionTowerUse v) { return name_of(v, kVisionTowerUses); }

Reference default_reference(Objective objective, Method method) {
  // GRPOConfig.beta is 0 by default, and GRPOTrainer then loads no reference; the others follow
  // DPOTrainer: a frozen copy unless PEFT can disable its adapters.
  if (objective == Objective::grpo) return Reference::none;
  return method == Method::full ? Reference::copy : Reference::adapter_off;
}

bool has_reference_setting(Objective o) {
  return o == Objective::dpo || o == Objective::kto || o == Objective::ppo || o == Objective::grpo;
}

std::int64_t generation_steps(std::int64_t steps_per_generation, std::int64_t grad_accum) {
  return steps_per_generation > 0 ? steps_per_generation : grad_accum;
}
std::int64_t generation_steps(const TrainingSetup& s) {
  return generation_steps(s.steps_per_generation, s.grad_accum);
}

std::int64_t trained_sequences_per_example(Objective o) {
  return o == Objective::dpo || o == Objective::orpo || o == Objective::reward ? 2 : 1;
}

double bytes_per_element(DType d) {
  switch (d) {
    case DType::fp32: return 4;
    case DType::bf16:
    case DType::fp16: return 2;
    case DType::int8: return 1;
    case DType::nf4:
    case DType::fp4: return 0.5;
  }
  return 4;
}

namespace {

// What TRL's trainers refuse, and what the planner does not model, for the objectives.
void validate_objective(const TrainingSetup& s) {
  if (s.objective == Objective::sft) return;
  const std::string name = to_string(s.objective);
  if (has_reference_setting(s.objective)) {
    const bool adapters = s.method != Method::full;
    if (s.reference == Reference::adapter_off && !adapters)
      throw SettingError("reference", "adapter-off disables LoRA adapters, and full fine-tuning has none: use copy "
                                      "(a frozen copy of the model) or precomputed");
    if (s.reference == Reference::precomputed && (s.objective == Objective::ppo || s.objective == Objective::grpo))
      throw SettingError("reference", fmt::format("{} scores each step's fresh completions: its reference "
                                                  "log-probabilities cannot be computed before training (TRL has "
                                                  "precompute_ref_log_probs for dpo and kto only)",
                                                  name));
    if (s.reference == Reference::none && s.objective != Objective::grpo)
      throw SettingError("reference", fmt::format("{} needs the reference's log-probabilities (TRL's {}Trainer "
                                                  "always has a reference): use copy, adapter-off or precomputed",
                                                  name, s.objective == Objective::ppo ? "PPO" : s.objective == Objective::dpo ? "DPO" : "KTO"));
  }
  // TRL's PPOTrainer applies PEFT to the policy only: the value model trains every weight, which a
  // 4-bit or 8-bit base cannot.
  if (s.objective == Objective::ppo && s.method == Method::qlora)
    throw SettingError("objective", "ppo trains every weight of its value model (TRL applies PEFT to the policy "
                                    "only), and a quantised base cannot train: use method lora or full");
  // KTOTrainer: "Actual (not effective) batch size must be > 1": the KL term pairs each prompt
  // with another example's completion of the same micro-batch.
  if (s.objective == Objective::kto && s.batch < 2)
    throw SettingError("batch", "kto needs at least 2 sequences a micro-batch: its KL term pairs each prompt "
                                "with another example's completion (TRL refuses batch 1)");
  if (s.objective == Objective::grpo) {
    // GRPOTrainer: the generation batch (per-device batch x processes x steps_per_generation, which
    // defaults to gradient_accumulation_steps) must hold whole groups of num_generations.
    const std::int64_t generation_batch = s.batch * generation_steps(s) * data_parallel_degree(s);
    if (generation_batch % s.generations != 0)
      throw SettingError("generations", fmt::format("the generation batch (batch x steps_per_generation x "
                                                    "data-parallel GPUs = {}) must hold whole groups of {} "
                                                    "completions, as TRL requires: raise steps_per_generation (by "
                                                    "default grad_accum) or batch, or use fewer generations",
                                                    generation_batch, s.generations));
  }
  if ((s.objective == Objective::grpo || s.objective == Objective::ppo) && s.completion_len >= s.seq)
    throw SettingError("completion_len", fmt::format("the completion ({} tokens) must leave a prompt: at most seq - 1 "
                                                     "= {}",
                                                     s.completion_len, s.seq - 1));
  // The reference, value and reward models are planned whole on every GPU: DDP (and ZeRO-1/2,
  // which TRL leaves the frozen models out of) keep them so; sharded and model-parallel layouts
  // would split them, which is not modelled.
  if (s.gpus > 1) {
    const bool whole = !data_parallel_scheme(s.parallel).shards_parameters;
    if (!whole || s.tp > 1 || s.pp > 1 || s.cp > 1)
      throw SettingError("objective", fmt::format("{} is planned on one GPU or data-parallel ones (ddp, zero1, zero2); "
                                                  "{} is not modelled for it",
                                                  name, s.tp > 1 ? "tensor parallelism" : s.pp > 1 ? "a pipeline"
                                                                   : s.cp > 1 ? "context parallelism" : to_string(s.parallel)));
  }
}

}  // namespace

TrainingSetup with_seq(TrainingSetup setup, std::int64_t seq) {
  setup.completion_len = std::max<std::int64_t>(1, setup.completion_len * seq / setup.seq);
  setup.seq = seq;
  return setup;
}

void validate(const TrainingSetup& s) {
  // Each value inside its row's range and choices (settings.cpp): a setup built in code is held
  // to what a flag or a file would be.
  for (const Setting& row : settings()) check_setting_in_bounds(row, row.get(s));
  // Products of the limits must stay far from int64 overflow: a micro-batch's tokens are bounded.
  if (s.seq * s.batch > kMaxMicroBatchTokens)
    throw SettingError("batch", fmt::format("`seq` x `batch` must be at most {} tokens (got {})", kMaxMicroBatchTokens,
                                            s.seq * s.batch));
  const bool quantised = s.weights == DType::nf4 || s.weights == DType::fp4 || s.weights == DType::int8;
  if (s.method == Method::qlora && !quantised)
    throw SettingError("weights", fmt::format("`method` qlora needs `weights` nf4, fp4 or int8 (got {})", to_string(s.weights)));
  if (s.method != Method::qlora && quantised)
    throw SettingError("weights", fmt::format("{} is a quantised base: use `method` qlora", to_string(s.weights)));
  if (s.amp && s.method == Method::full && s.weights != DType::fp32)
    throw SettingError("amp", "autocasts over fp32 master weights: use `weights` fp32 with it");
  if (s.method != Method::full && s.lora.targets.empty()) throw SettingError("lora_targets", "names no module");
  // FSDP shards parameters; bitsandbytes' 4-bit storage needs its own FSDP path
  // (quant_storage), whose memory has not been measured.
  const bool several = s.gpus > 1;
  if (several && !data_parallel_scheme(s.parallel).takes_qlora && s.method == Method::qlora)
    throw SettingError("parallel", fmt::format("{} with `method` qlora is not modelled; plan QLoRA with `parallel` ddp",
                                               to_string(s.parallel)));
  validate_objective(s);
  // TRL's chunked loss under tensor parallelism gathers the output layer's weight (full_tensor) in
  // a way whose memory has not been measured.
  if (s.objective == Objective::sft && s.loss == Loss::chunked && several && s.tp > 1)
    throw SettingError("loss", "chunked with `tp` above 1 is not modelled; plan it with `loss` whole");
  // SFTTrainer refuses chunked_nll with use_liger_kernel (TRL f2cd577, sft_trainer.py).
  if (s.trainer == Trainer::trl && s.kernels == Kernels::liger && s.objective == Objective::sft &&
      s.loss == Loss::chunked)
    throw SettingError("loss",
                       "chunked with `kernels` liger: TRL's SFTTrainer refuses chunked_nll with "
                       "use_liger_kernel; plan `loss` fused (Liger's own loss) or whole");
  // The other trainers swap in Liger's own fused losses for their objectives (LigerFusedLinearDPOLoss,
  // ...), which are not planned; Liger's layer kernels and its SFT loss are.
  if (s.kernels == Kernels::liger && s.objective != Objective::sft)
    throw SettingError("kernels", fmt::format("liger with `objective` {} is not planned (TRL then runs Liger's fused "
                                              "{} loss); plan Liger's kernels with objective sft",
                                              to_string(s.objective), to_string(s.objective)));
  if (s.loss == Loss::fused && several && (s.tp > 1 || s.pp > 1))
    throw SettingError("loss", "fused with tensor or pipeline parallelism is not modelled");
  if (!several) return;
  // The GPUs must divide into the layout's groups.
  const std::int64_t model_parallel = s.tp * s.pp * s.cp;
  if (s.gpus % model_parallel != 0)
    throw SettingError("gpus", fmt::format("{} GPUs do not divide into tp x pp x cp = {} x {} x {} = {}", s.gpus, s.tp,
                                           s.pp, s.cp, model_parallel));
  if (s.gpus % s.nodes != 0)
    throw SettingError("nodes", fmt::format("{} GPUs do not spread evenly over {} nodes", s.gpus, s.nodes));
  if (s.pp > 1 && s.microbatches < s.pp)
    throw SettingError("microbatches", fmt::format("a pipeline of {} stages needs at least {} micro-batches to fill it (got {})",
                                                   s.pp, s.pp, s.microbatches));
  if (s.cp > 1 && s.seq % s.cp != 0)
    throw SettingError("cp", fmt::format("`seq` {} does not split into {} equal parts", s.seq, s.cp));
  // What each layout can offload (DeepSpeed: offload_optimizer from stage 1, offload_param and NVMe
  // only at stage 3; FSDP2's CPUOffloadPolicy moves parameters, gradients and the optimizer step
  // together).
  if (s.offload == Offload::none) {
    if (s.offload_device == OffloadDevice::nvme)
      throw SettingError("offload_device", "nvme needs `offload` optimizer, params or optimizer,params");
    return;
  }
  const DataParallelScheme& scheme = data_parallel_scheme(s.parallel);
  if (std::find(scheme.offloads.begin(), scheme.offloads.end(), s.offload) == scheme.offloads.end())
    throw SettingError("offload", fmt::format(fmt::runtime(scheme.offload_refusal), to_string(s.parallel)));
  if (s.offload_device == OffloadDevice::nvme && !scheme.offloads_to_nvme)
    throw SettingError("offload_device", scheme.nvme_refusal);
  if (s.pp > 1 || s.tp > 1)
    throw SettingError("offload", "offload with tensor or pipeline parallelism is not modelled");
}

std::int64_t data_parallel_degree(const TrainingSetup& s) {
  const std::int64_t model_parallel = s.tp * s.pp * s.cp;
  return model_parallel > 0 ? std::max<std::int64_t>(1, s.gpus / model_parallel) : 1;
}

bool offloads_optimizer(Offload o) { return o == Offload::optimizer || o == Offload::optimizer_params; }

bool keeps_two_moments(Optimizer o) { return o == Optimizer::adamw || o == Optimizer::adamw_foreach; }
bool offloads_params(Offload o) { return o == Offload::params || o == Offload::optimizer_params; }

}  // namespace trainfit
