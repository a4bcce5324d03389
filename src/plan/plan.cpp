// Verdicts and the alternatives that make a setup fit.
#include "trainfit/plan.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "common/threshold_search.hpp"
#include "memory/memory_model.hpp"
#include "step/step_shape.hpp"
#include "time/time_model.hpp"
#include "trainfit/error.hpp"
#include "trainfit/settings.hpp"
#include "common/text.hpp"
#include "trainfit/units.hpp"

namespace trainfit {

std::string to_string(Verdict v) {
  switch (v) {
    case Verdict::fits:
      return "fits";
    case Verdict::tight:
      return "tight";
    case Verdict::spills:
      return "spills";
    case Verdict::oom:
      return "oom";
  }
  return "?";
}

Verdict judge(std::int64_t peak_allocated_bytes, std::int64_t device_used_bytes, std::int64_t capacity_bytes,
              double headroom, Platform platform) {
  if (capacity_bytes <= 0) throw InputError("the card's memory capacity must be positive");
  if (peak_allocated_bytes > capacity_bytes || device_used_bytes > capacity_bytes)
    return platform == Platform::on_windows ? Verdict::spills : Verdict::oom;
  const double free_fraction = 1.0 - static_cast<double>(peak_allocated_bytes) / static_cast<double>(capacity_bytes);
  return free_fraction < headroom ? Verdict::tight : Verdict::fits;
}

std::string to_string(RunState s) {
  switch (s) {
    case RunState::runs:
      return "runs";
    case RunState::under_pressure:
      return "runs under allocator pressure";
    case RunState::fails:
      return "fails";
  }
  return "?";
}

namespace {

// MemoryEstimate's figures for later_step_need_bytes (memory/memory_model.hpp).
std::int64_t later_need(const MemoryEstimate& m) {
  return detail::later_step_need_bytes(m.busiest_peak_allocated_bytes, m.later_logits_segment_bytes,
                                       m.cuda_context_bytes);
}

// The step on a Linux card of `capacity` bytes (docs/model.md, "The boundary"). The caching
// allocator, when a request does not fit what it may still reserve, frees every cached block it
// holds unused and asks the driver again (c10/cuda/CUDACachingAllocator.cpp: release_cached_blocks,
// then alloc_block); only when that fails is the request an error. So the step fails when the
// tensors alive at its peak and the CUDA context do not fit the card, not when the cache the plan
// expects (device use) does not: between the two it runs, with retries. Memory held in segments
// that also hold a live block (fragmentation: the cache that cannot be freed at the failing
// request) is not counted here: it moves the failing point down, which the boundary runs of
// python/boundary_jobs/ measure.
RunState run_state_of(const MemoryEstimate& m, std::int64_t capacity) {
  if (add_bytes(m.busiest_peak_allocated_bytes, m.cuda_context_bytes) > capacity) return RunState::fails;
  // The later steps' logits segment, when the first optimizer step strands the first one's.
  if (later_need(m) > capacity) return RunState::fails;
  if (m.busiest_device_used_bytes > capacity) return RunState::under_pressure;
  return RunState::runs;
}

// The memory and the time of a setup (estimate_memory, estimate_time) from one description of its
// step: describing it is most of what either costs.
struct Estimates {
  MemoryEstimate memory;
  Verdict verdict = Verdict::fits;
  TimeEstimate time;
};

Estimates estimate(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu, const TimeProfile& profile) {
  validate(setup);
  const detail::Step step = detail::describe_step(model, setup);
  Estimates e;
  e.memory = detail::estimate_memory(model, step, gpu);
  e.verdict = judge(e.memory.busiest_peak_allocated_bytes, std::max(e.memory.busiest_device_used_bytes, later_need(e.memory)),
                    gpu.memory_bytes, setup.headroom, setup.platform);
  // A card without rates gets no time (estimate_time says so without counting the work).
  if (detail::has_rates(gpu))
    e.time = estimate_time(detail::step_work(model, step), setup, gpu, profile, e.verdict == Verdict::spills);
  else
    e.time.predicted = false;
  return e;
}

// At most this many changes are combined into one alternative, and this many alternatives shown.
constexpr std::size_t kMaxChangesCombined = 3;
constexpr std::size_t kMaxSuggestions = 5;
constexpr std::size_t kMaxKeepingSuggestions = 3;  // of them, those that keep the method, listed first

// A change people make to fit a run: `apply` makes it to a setup (which may already carry other
// changes) and says whether it applies there and changes something.
struct Change {
  std::string what;     // the change as its flags ("--grad-ckpt")
  std::string why;      // what it does, shown when it is the only change
  std::string setting;  // the key of the setting it changes: two changes of one setting never combine
  std::function<bool(TrainingSetup&)> apply;
  // It trains the same thing (layout, precision, optimizer, checkpointing, batch cut): what a user
  // asks for first. Targets, method and sequence change what is trained.
  bool keeps_method = true;
};

// A change of method takes the reference the new method gets by default along, when the setup
// had the old one's default (a frozen copy under full fine-tuning becomes the adapter-off base
// under LoRA, as TRL does); a reference the user chose stays.
void carry_reference(TrainingSetup& s, Method to) {
  if (s.reference == default_reference(s.objective, s.method)) s.reference = default_reference(s.objective, to);
}

// Changes people make to fit a run, least intrusive first. Each keeps the model and the card;
// the ones that change what is trained (method, quantisation, sequence) come after the free ones.
std::vector<Change> changes_for(const ModelSpec& model, const TrainingSetup& base) {
  std::vector<Change> out;
  out.push_back(
      {"--grad-ckpt", "each layer recomputed in backward, about 1/3 more compute", "grad_ckpt", [](TrainingSetup& s) {
         if (s.grad_ckpt) return false;
         s.grad_ckpt = true;
         return true;
       }});
  if (base.batch > 1)
    out.push_back({fmt::format("--batch 1 --grad-accum {}", base.grad_accum * base.batch),
                   "micro-batch 1, the same tokens per optimizer step", "batch", [](TrainingSetup& s) {
                     if (s.batch == 1) return false;
                     s.grad_accum *= s.batch;
                     s.batch = 1;
                     return true;
                   }});
  // The query and value projections, named as the model's family names them.
  const std::vector<std::string> qv = {module_name(model, ModuleRole::attention_query),
                                       module_name(model, ModuleRole::attention_value)};
  out.push_back({"--lora-targets " + lora_targets_text(qv),
                 fmt::format("LoRA on {} and {} only: fewer adapters and saved inputs", qv[0], qv[1]),
                 "lora_targets", [qv](TrainingSetup& s) {
                   if (s.method == Method::full || s.lora.targets == qv) return false;
                   s.lora.targets = qv;
                   return true;
                 },
                 false});
  // On several GPUs, sharding with FSDP trains the same thing; it costs host work and collectives.
  out.push_back({"--parallel fsdp",
                 fmt::format("weights, gradients and optimizer states sharded over the {} GPUs", base.gpus), "parallel",
                 [](TrainingSetup& s) {
                   if (s.gpus < 2 || s.parallel != Parallel::ddp || s.method == Method::qlora) return false;
                   s.parallel = Parallel::fsdp;
                   return true;
                 }});
  // fp32 master weights under autocast: the weights, gradients and states in bf16 instead (pure
  // bf16 training, as torchtitan and many recipes run it): half of each.
  out.push_back({"--weights bf16 --amp none",
                 "pure bf16: weights, gradients and optimizer states in bf16, no fp32 master copy", "weights",
                 [](TrainingSetup& s) {
                   if (s.method != Method::full || s.weights != DType::fp32) return false;
                   s.weights = DType::bf16;
                   s.amp.reset();
                   return true;
                 }});
  out.push_back(
      {"--optimizer adamw-8bit", "8-bit AdamW, its states at 2 bytes a parameter", "optimizer", [](TrainingSetup& s) {
         if (s.method != Method::full || !keeps_two_moments(s.optimizer)) return false;
         s.optimizer = Optimizer::adamw_8bit;
         return true;
       }});
  out.push_back({"--method lora",
                 fmt::format("LoRA rank {} on a bf16 base instead of full fine-tuning", base.lora.rank), "method",
                 [](TrainingSetup& s) {
                   if (s.method != Method::full) return false;
                   carry_reference(s, Method::lora);
                   s.method = Method::lora;
                   s.weights = DType::bf16;
                   s.amp.reset();
                   return true;
                 },
                 false});
  out.push_back({"--method qlora", fmt::format("a 4-bit NF4 base, adapters rank {}", base.lora.rank), "method",
                 [](TrainingSetup& s) {
                   if (s.method == Method::qlora) return false;
                   carry_reference(s, Method::qlora);
                   s.method = Method::qlora;
                   s.weights = DType::nf4;
                   s.amp.reset();
                   return true;
                 },
                 false});
  if (base.seq > 256)
    out.push_back({fmt::format("--seq {}", base.seq / 2), "half the sequence length", "seq",
                   [seq = base.seq / 2](TrainingSetup& s) {
                     if (s.seq <= seq) return false;
                     s = with_seq(s, seq);
                     return true;
                   },
                   false});
  return out;
}

// One alternative, priced by estimate(), the function make_plan prices a plan with: planning the
// alternative's command gives these figures.
Suggestion evaluate(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu, const TimeProfile& profile,
                    std::string change) {
  const Estimates e = estimate(model, setup, gpu, profile);
  Suggestion s;
  s.change = std::move(change);
  s.setup = setup;
  s.args = setup_to_args(setup);
  s.peak_allocated_bytes = e.memory.peak_allocated_bytes;
  s.device_used_bytes = e.memory.device_used_bytes;
  s.verdict = e.verdict;
  if (e.time.predicted) s.step_seconds = e.time.step_seconds;
  return s;
}

// The smallest sets of changes that make the setup fit: every single change, then, only when none
// fits, every pair, then every triple. Each alternative is a whole setup (its changes, and nothing
// else, applied to the user's), so its figures are those of planning it on its own.
std::vector<Suggestion> alternatives(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu,
                                     const TimeProfile& profile) {
  const std::vector<Change> changes = changes_for(model, setup);
  // Each set is planned once: the method-keeping search's sets come again in the open one.
  std::map<std::vector<std::size_t>, std::optional<Suggestion>> planned;  // none: refused
  // The smallest sets of the changes `allowed` admits that fit (every single one, then, only when
  // none fits, every pair, then every triple), and the sets that did not, in the table's order
  // (least intrusive first).
  const auto search = [&](const std::function<bool(const Change&)>& allowed) {
    std::vector<Suggestion> fitting, closest;
    std::vector<std::size_t> pick;
    const std::function<void(std::size_t, std::size_t)> visit = [&](std::size_t from, std::size_t left) {
      if (left == 0) {
        TrainingSetup s = setup;
        std::vector<std::string> what;
        bool keeps = true;
        for (const std::size_t i : pick) {
          for (const std::size_t j : pick)
            if (j < i && changes[j].setting == changes[i].setting) return;  // one setting, one value
          if (!changes[i].apply(s)) return;  // does not apply, or another change already made it
          what.push_back(changes[i].what);
          keeps = keeps && changes[i].keeps_method;
        }
        auto [at, fresh] = planned.try_emplace(pick);
        if (fresh) {
          try {
            std::string change = what.size() == 1 ? fmt::format("{}: {}", what.front(), changes[pick.front()].why)
                                                  : fmt::format("{}", fmt::join(what, " + "));
            at->second = evaluate(model, s, gpu, profile, std::move(change));
            at->second->keeps_method = keeps;
          } catch (const InputError&) {
            // A combination that makes no sense for this setup is simply not offered.
          }
        }
        if (at->second) (at->second->verdict == Verdict::fits ? fitting : closest).push_back(*at->second);
        return;
      }
      for (std::size_t i = from; i < changes.size(); ++i) {
        if (!allowed(changes[i])) continue;
        pick.push_back(i);
        visit(i + 1, left - 1);
        pick.pop_back();
      }
    };
    for (std::size_t size = 1; size <= kMaxChangesCombined && fitting.empty(); ++size) visit(0, size);
    return std::make_pair(std::move(fitting), std::move(closest));
  };
  // The fixes that keep what is trained come first, even when one that changes the method fits
  // with fewer changes: FSDP with checkpointing before QLoRA, pure bf16 before LoRA.
  auto keeping = search([](const Change& c) { return c.keeps_method; }).first;
  auto [any, closest] = search([](const Change&) { return true; });
  std::vector<Suggestion> out;
  for (Suggestion& s : keeping)
    if (out.size() < kMaxKeepingSuggestions) out.push_back(std::move(s));
  for (Suggestion& s : any) {
    if (out.size() >= kMaxSuggestions) break;
    const bool shown = std::any_of(out.begin(), out.end(), [&](const Suggestion& o) { return o.args == s.args; });
    if (!shown) out.push_back(std::move(s));
  }
  if (out.empty()) {
    // Nothing fits: the sets that came nearest, by peak memory, show how far each gets.
    std::stable_sort(closest.begin(), closest.end(), [](const Suggestion& a, const Suggestion& b) {
      return a.peak_allocated_bytes < b.peak_allocated_bytes;
    });
    out = std::move(closest);
  }
  if (out.size() > kMaxSuggestions) out.resize(kMaxSuggestions);
  return out;
}

// The setup with `setting` at `value`: a sequence keeps the completion's share (ppo, grpo).
TrainingSetup with_value(const TrainingSetup& setup, std::string_view setting, std::int64_t value) {
  if (setting != "batch") return with_seq(setup, value);
  TrainingSetup s = setup;
  s.batch = value;
  return s;
}

// The largest v in [1, most] for which ok(v) holds, 0 when ok(1) does not: ok holds up to a point
// and not past it (memory grows with the batch and the sequence). Doubling, then halving the gap:
// some 2 log2(answer) evaluations.
std::int64_t largest_where(std::int64_t most, const std::function<bool(std::int64_t)>& ok) {
  if (most < 1 || !ok(1)) return 0;
  std::int64_t lo = 1, hi = 0;  // ok(lo); hi: the first known not ok, 0 while none is
  while (hi == 0) {
    const std::int64_t next = lo > most / 2 ? most : lo * 2;
    if (next == lo) return lo;  // ok up to the setting's largest value
    if (ok(next)) {
      lo = next;
    } else {
      hi = next;
    }
  }
  return detail::last_holding(lo, hi, ok);
}

Boundary find_boundary(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu,
                       const TimeProfile& profile, const std::string& setting) {
  if (setting != "batch" && setting != "seq")
    throw InputError(fmt::format("--largest: batch or seq (got {})", detail::quoted(setting)));
  Boundary b;
  b.setting = setting;
  b.searched_up_to = static_cast<std::int64_t>(*find_setting(setting)->maximum);
  std::map<std::int64_t, std::pair<RunState, Verdict>> seen;
  const auto at = [&](std::int64_t v) {
    if (const auto it = seen.find(v); it != seen.end()) return it->second;
    const Estimates e = estimate(model, with_value(setup, setting, v), gpu, profile);
    return seen[v] = {run_state_of(e.memory, gpu.memory_bytes), e.verdict};
  };
  b.largest_at_all = largest_where(b.searched_up_to, [&](std::int64_t v) { return at(v).first != RunState::fails; });
  b.largest_runs = largest_where(b.largest_at_all, [&](std::int64_t v) { return at(v).first == RunState::runs; });
  b.largest_fits = largest_where(b.largest_at_all, [&](std::int64_t v) { return at(v).second == Verdict::fits; });
  if (b.largest_at_all > 0) b.args = setup_to_args(with_value(setup, setting, b.largest_at_all));
  return b;
}

}  // namespace

GpuSpec resolve_card(const TrainingSetup& setup, std::string_view fallback) {
  const int given = (setup.gpu.empty() ? 0 : 1) + (setup.vram_bytes ? 1 : 0) + (setup.gpu_spec.empty() ? 0 : 1);
  if (given > 1) throw SettingError("gpu", "give one of `gpu`, `vram` and `gpu_spec`");
  if (!setup.gpu_spec.empty()) return load_gpu_spec_file(setup.gpu_spec);
  if (setup.vram_bytes) return gpu_with_vram(*setup.vram_bytes);
  if (!setup.gpu.empty()) return find_gpu(setup.gpu);
  if (!fallback.empty()) return find_gpu(fallback);
  throw SettingError("gpu", "name the card: `gpu` (see `trainfit gpus`), `vram` or `gpu_spec`");
}

std::vector<std::string> plan_warnings(const ModelSpec& model, const TrainingSetup& setup) {
  std::vector<std::string> warnings;
  if (model.max_position_embeddings > 0 && setup.seq > model.max_position_embeddings) {
    warnings.push_back(fmt::format(
        "the sequence ({} tokens) is longer than the model's max_position_embeddings ({}): positions past {} were "
        "not trained, and the model may degrade there; memory and time are planned for the {} tokens asked",
        setup.seq, model.max_position_embeddings, model.max_position_embeddings, setup.seq));
  }
  // A short name that the catalogue resolves to one card of a family with several (`a100` is the
  // 80 GB one): the others are named, so that the plan's card is not a surprise.
  if (!setup.gpu.empty()) {
    const GpuSpec& card = find_gpu(setup.gpu);
    std::string given;
    for (const char c : setup.gpu) given.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    std::vector<std::string> others;
    const std::string family = given + "-";
    for (const GpuSpec& g : gpu_catalog())
      if (g.id != card.id && g.id.starts_with(family)) others.push_back(g.id);
    if (card.id != given && !others.empty())
      warnings.push_back(fmt::format("--gpu {} is taken as {} ({}); name {} to plan {}", setup.gpu, card.id, card.name,
                                     fmt::join(others, " or "), others.size() == 1 ? "that one" : "one of those"));
  }
  if (setup.activation_offloading && setup.objective == Objective::sft && setup.loss == Loss::chunked) {
    warnings.push_back(
        "TRL's activation offloading with its chunked loss (loss_type chunked_nll, SFTConfig's default) ended in a "
        "CUDA device-side assert in both runs measured (TRL f2cd577 on an H100, Qwen2.5-1.5B full and LoRA); with "
        "loss_type nll they ran. Planned as asked");
  }
  if (model.attention_sinks && setup.attention == Attention::sdpa) {
    warnings.push_back(
        "gpt_oss's attention sinks have no SDPA path in transformers: planned with eager attention, which "
        "from_pretrained picks for it (--attn flash plans a flash kernel with sinks, such as the hub's "
        "vllm-flash-attn3)");
  }
  if (model.linear_attention.layers > 0) {
    warnings.push_back(fmt::format(
        "{} of {}'s {} layers are Gated DeltaNet (linear attention), planned as they run with "
        "flash-linear-attention installed and causal-conv1d not (PyTorch's convolution); without "
        "flash-linear-attention transformers runs its PyTorch fallback, which keeps several times more a token "
        "and is not planned",
        model.linear_attention.layers, model.model_type, model.num_layers));
  }
  if (model.state_space.layers > 0) {
    const std::string which =
        model.state_space.parallel_attention
            ? fmt::format("every one of {}'s {} layers runs a Mamba-2 mixer beside its attention", model.model_type,
                          model.num_layers)
            : fmt::format("{} of {}'s {} layers are Mamba-2", model.state_space.layers, model.model_type,
                          model.num_layers);
    warnings.push_back(fmt::format(
        "{}, planned as transformers runs them without the hub's mamba-ssm and causal-conv1d kernels (its PyTorch "
        "scan, which holds chunk x chunk fp32 products a head and token); with the `kernels` package and those "
        "kernels it keeps far less and runs faster, which is not planned",
        which));
  }
  if (model.generic_decoder) {
    warnings.push_back(fmt::format(
        "model_type {} is not a family trainfit reads: planned as Llama's decoder layers (q/k/v/o attention with "
        "a rotary embedding, a gated MLP, two RMSNorms a layer) from its usual fields{}",
        model.model_type,
        model.unread_fields.empty() ? std::string()
                                    : fmt::format("; fields not read, which may change the layers and so the plan: {}",
                                                  fmt::join(model.unread_fields, ", "))));
  }
  if (model.text_of_multimodal) {
    const std::string tower = fmt::format("{:.2f}B", static_cast<double>(count_parameters(model).vision) / 1e9);
    if (setup.vision_tower == VisionTowerUse::dropped)
      warnings.push_back(
          fmt::format("a multimodal {} config: planned is its text model alone (vision_tower dropped); "
                      "the whole model, as the trainers load it, holds {} more parameters",
                      model.multimodal_type, tower));
    else if (setup.images == 0 && setup.vision_tower == VisionTowerUse::frozen)
      warnings.push_back(fmt::format("a multimodal {} config: the step is text-only (images 0); its vision tower and "
                                     "projector ({} parameters) are loaded and frozen (no gradient, no adapter)",
                                     model.multimodal_type, tower));
    else if (setup.images == 0)
      warnings.push_back(fmt::format(
          "a multimodal {} config: the step is text-only (images 0); its vision tower and projector ({} "
          "parameters) are loaded and idle (no gradient, no optimizer state{})",
          model.multimodal_type, tower,
          setup.method != Method::full && detail::tower_adapter_width(model, setup) > 0
              ? "; the LoRA targets reach the tower's linear modules too, whose adapters are idle alike"
              : ""));
    else {
      const TowerLayers& t = model.vision.shape;
      const std::int64_t tokens = setup.image_tokens.value_or(t.default_image_tokens);
      const bool trains = detail::trains_tower_layers(model, setup);
      const bool projector = !trains && detail::tower_adapter_width(model, setup) > 0;
      warnings.push_back(fmt::format(
          "a multimodal {} config: {} image(s) of {} tokens a sequence run through its vision tower ({:.0f} "
          "positions each), which {}; the tower's terms are read from transformers, not yet measured",
          model.multimodal_type, setup.images, tokens, detail::tower_image_positions(model, setup),
          trains      ? (setup.method == Method::full ? "trains with the model" : "trains through its adapters")
          : projector ? "is frozen below its projector's adapters and keeps nothing for the backward"
                      : "is frozen (no adapter on it) and keeps nothing for the backward"));
    }
  }
  return warnings;
}

Plan make_plan(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu, const PlanOptions& options) {
  Plan plan;
  plan.model = model;
  plan.setup = setup;
  plan.gpu = gpu;
  plan.profile = options.profile ? *options.profile : default_profile(gpu);
  Estimates e = estimate(model, setup, gpu, plan.profile);
  plan.memory = std::move(e.memory);
  const double cap = static_cast<double>(gpu.memory_bytes);
  plan.headroom_fraction = 1.0 - static_cast<double>(plan.memory.busiest_peak_allocated_bytes) / cap;
  plan.verdict = e.verdict;
  const std::int64_t needs = std::max({plan.memory.busiest_peak_allocated_bytes, plan.memory.busiest_device_used_bytes,
                                       later_need(plan.memory)});
  // A figure held at the top is over by at least as much: its excess is held there too.
  plan.over_capacity_bytes = needs == kMostBytes ? kMostBytes : std::max<std::int64_t>(0, needs - gpu.memory_bytes);
  plan.time = std::move(e.time);
  plan.run_state = run_state_of(plan.memory, gpu.memory_bytes);
  if (!options.largest.empty()) plan.boundary = find_boundary(model, setup, gpu, plan.profile, options.largest);
  plan.warnings = plan_warnings(model, setup);
  // PEFT 0.21 under transformers 5: all-linear reaches the fused experts after all, through
  // lora.ParamWrapper, which refuses dropout (get_peft_model raised "lora.ParamWrapper does not work
  // with lora_dropout != 0" for DeepSeek-V2-Lite and Qwen3-30B-A3B on the GPU machine). With dropout 0
  // the plan counts the expert adapters and what they cost (adapts_fused_experts); otherwise say what
  // a user will meet, and what dropout 0 would add.
  const bool all_linear = setup.lora.targets.size() == 1 && setup.lora.targets.front() == "all-linear";
  if (setup.method != Method::full && all_linear && !model_family(model).all_linear_skips_experts &&
      plan.memory.untargeted_expert_adapter_parameters > 0)
    plan.warnings.push_back(
        setup.lora.dropout != 0.0
            ? fmt::format("PEFT 0.21 with transformers 5 wraps the fused experts too under all-linear "
                          "(lora.ParamWrapper), and with lora_dropout {} it refuses to build the model: set "
                          "--lora-dropout 0 (the experts then get {} adapter parameters, and every layer keeps a "
                          "merged copy of its expert weights until its backward: plan it so to see the cost) or "
                          "name the targets, e.g. --lora-targets q,k,v,o",
                          setup.lora.dropout, plan.memory.untargeted_expert_adapter_parameters)
            : fmt::format("PEFT 0.21 with transformers 5 wraps the fused experts too under all-linear "
                          "(lora.ParamWrapper): the experts get {} adapter parameters more, which this plan does "
                          "not count",
                          plan.memory.untargeted_expert_adapter_parameters));
  // Which modules all-linear wrapped, where PEFT wraps fused experts too: the plan is of that model.
  if (all_linear && detail::adapts_fused_experts(model, setup)) {
    // What the step wraps: the nn.Linear targets and ParamWrapper's parameters. The nn.Linear
    // modules that bear an MLP name the experts' parameters take (a dense layer's MLP, a shared
    // expert) are left unwrapped, as PEFT leaves them (the inspect rows of
    // data/bench/h100-families-2026-12-08/inspect.json).
    std::vector<std::string> linear, wrapper;
    detail::layer_linears(model, setup).for_each_kind([&](const std::vector<detail::LayerLinear>& mods, double) {
      for (const auto& [m, target, wrapped] : mods) {
        if (!target) continue;
        auto& list = wrapped ? wrapper : linear;
        if (std::find(list.begin(), list.end(), m.name) == list.end()) list.push_back(m.name);
      }
    });
    plan.warnings.push_back(fmt::format(
        "all-linear on {}: PEFT 0.21 wraps the nn.Linear modules ({}) and, through lora.ParamWrapper, the fused "
        "expert parameters ({}), whose adapters and merged weights are planned; ParamWrapper takes no dropout, so "
        "lora_dropout is 0 (the default for this model)",
        model.model_type, fmt::join(linear, ", "), fmt::join(wrapper, ", ")));
  }
  // Falcon-H1's all-linear would wrap its Mamba mixer's out_proj, which PEFT refuses: the plan is of
  // the targets PEFT accepts (targets_module leaves the module out), and says which to pass.
  if (setup.method != Method::full && all_linear) {
    std::vector<std::string> accepted, refused;
    for (const LinearModule& m : model_linear_modules(model)) {
      auto& list = m.lora_refused ? refused : accepted;
      if (m.nn_linear && std::find(list.begin(), list.end(), m.name) == list.end()) list.push_back(m.name);
    }
    if (!refused.empty())
      plan.warnings.push_back(fmt::format(
          "all-linear on {}: PEFT 0.21 refuses it, since it would wrap {}, on which its Mamba check allows no LoRA "
          "adapter (get_peft_model raises); planned with the targets it accepts: --lora-targets {} "
          "(target_modules in LoraConfig)",
          model.model_type, fmt::join(refused, ", "), fmt::join(accepted, ",")));
  }
  // PhiMoE's and Llama 4's routers are nn.Linear subclasses whose forward returns a tuple: all-linear
  // wraps them and PEFT's LoRA forward fails there ("'tuple' object has no attribute 'dtype'", on
  // the GPU machine for PhiMoE; read from Llama4Router's forward for Llama 4).
  if (setup.method != Method::full && all_linear && model_family(model).router_returns_tuple)
    plan.warnings.push_back(fmt::format(
        "PEFT 0.21's all-linear wraps the router of {} ({}, an nn.Linear whose forward returns a tuple) and "
        "its LoRA forward fails there; name the targets, e.g. --lora-targets q,k,v,o",
        model.model_type, module_name(model, ModuleRole::router)));
  // Offloaded states live in the host's memory: past what a server typically has per GPU, the
  // run needs a larger host (or NVMe), whatever the GPU's verdict says.
  const double gpus_per_host = static_cast<double>(std::max<std::int64_t>(1, setup.gpus / std::max<std::int64_t>(1, setup.nodes)));
  const double gib = static_cast<double>(kGiB);
  if (static_cast<double>(plan.memory.host_bytes) > kTypicalHostBytesPerGpu * gpus_per_host)
    plan.warnings.push_back(fmt::format(
        "the offloaded states need {:.0f} GiB of host memory on each host ({:.0f} GiB a GPU), more than the {:.0f} GiB "
        "a GPU that 8-GPU servers typically have: check the host's memory, or offload to NVMe",
        static_cast<double>(plan.memory.host_bytes) / gib,
        static_cast<double>(plan.memory.host_bytes) / gib / gpus_per_host, kTypicalHostBytesPerGpu / gib));
  if (options.suggest && plan.verdict != Verdict::fits) plan.suggestions = alternatives(model, setup, gpu, plan.profile);
  return plan;
}

}  // namespace trainfit
