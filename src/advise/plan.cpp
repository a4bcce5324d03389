// Verdicts and the alternatives that make a setup fit.
#include "trainfit/plan.hpp"

#include <algorithm>
#include <utility>

#include "memory/memory_model.hpp"
#include "memory/step_shape.hpp"
#include "time/time_model.hpp"
#include "trainfit/error.hpp"

namespace trainfit {

std::string to_string(Verdict v) {
  switch (v) {
    case Verdict::fits: return "fits";
    case Verdict::tight: return "tight";
    case Verdict::spills: return "spills";
    case Verdict::oom: return "oom";
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

namespace {

// The memory and the time of a setup (estimate_memory, estimate_time) from one description of its
// step: describing it is most of what either costs.
struct Estimates {
  MemoryEstimate memory;
  Verdict verdict = Verdict::fits;
  TimeEstimate time;
};

Estimates estimate(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu, const TimeProfile& profile) {
  validate(setup);
  const detail::StepShape st = detail::describe_step(model, setup);
  Estimates e;
  e.memory = detail::estimate_memory(model, setup, gpu, st);
  e.verdict = judge(e.memory.peak_allocated_bytes, e.memory.device_used_bytes, gpu.memory_bytes, setup.headroom,
                    setup.platform);
  // A card without rates gets no time (estimate_time says so without counting the work).
  if (detail::has_rates(gpu))
    e.time = estimate_time(detail::step_work(model, setup, st), setup, gpu, profile, e.verdict == Verdict::spills);
  else
    e.time.predicted = false;
  return e;
}

Suggestion evaluate(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu, const PlanOptions& options,
                    std::string change) {
  const Estimates e = estimate(model, setup, gpu, options.profile ? *options.profile : default_profile(gpu));
  Suggestion s;
  s.change = std::move(change);
  s.setup = setup;
  s.peak_allocated_bytes = e.memory.peak_allocated_bytes;
  s.device_used_bytes = e.memory.device_used_bytes;
  s.verdict = e.verdict;
  if (e.time.predicted) s.step_seconds = e.time.step_seconds;
  return s;
}

// Changes people make to fit a run, least intrusive first. Each keeps the model and the card;
// the ones that change what is trained (method, quantisation) come after the free ones.
std::vector<Suggestion> alternatives(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu,
                                     const PlanOptions& options) {
  std::vector<Suggestion> out;
  auto consider = [&](const TrainingSetup& s, std::string change) {
    try {
      out.push_back(evaluate(model, s, gpu, options, std::move(change)));
    } catch (const InputError&) {
      // A change that makes no sense for this setup is simply not offered.
    }
  };
  TrainingSetup s = setup;
  if (!setup.grad_ckpt) {
    s.grad_ckpt = true;
    consider(s, "enable gradient checkpointing (--grad-ckpt): recomputes each layer in backward, about 1/3 more compute");
  }
  if (setup.batch > 1) {
    TrainingSetup b = s;
    b.batch = 1;
    b.grad_accum = setup.grad_accum * setup.batch;
    consider(b, "micro-batch 1 with --grad-accum " + std::to_string(b.grad_accum) + " (same tokens per optimizer step)");
  }
  if (setup.method != Method::full && setup.lora.targets != std::vector<std::string>{"q_proj", "v_proj"}) {
    TrainingSetup t = s;
    t.lora.targets = {"q_proj", "v_proj"};
    consider(t, "LoRA on q_proj,v_proj only (--lora-targets q,v): fewer adapters and saved inputs");
  }
  // On several GPUs, sharding with FSDP trains the same thing; it costs host work and collectives.
  if (setup.gpus > 1 && setup.parallel == Parallel::ddp && setup.method != Method::qlora) {
    TrainingSetup f = s;
    f.parallel = Parallel::fsdp;
    consider(f, "shard with FSDP (--parallel fsdp): weights, gradients and optimizer states split over the " +
                    std::to_string(setup.gpus) + " GPUs, gathered layer by layer");
  }
  if (setup.method == Method::full && setup.optimizer == Optimizer::adamw) {
    TrainingSetup o = s;
    o.optimizer = Optimizer::adamw_8bit;
    consider(o, "8-bit AdamW (--optimizer adamw-8bit): optimizer states at 2 bytes a parameter");
  }
  if (setup.method == Method::full) {
    TrainingSetup l = s;
    l.method = Method::lora;
    l.weights = DType::bf16;
    l.amp.reset();
    consider(l, "LoRA rank " + std::to_string(l.lora.rank) + " on a bf16 base instead of full fine-tuning");
  }
  if (setup.method != Method::qlora) {
    TrainingSetup q = s;
    q.method = Method::qlora;
    q.weights = DType::nf4;
    q.amp.reset();
    consider(q, "QLoRA: 4-bit NF4 base (--method qlora), adapters rank " + std::to_string(q.lora.rank));
  }
  if (setup.seq > 256) {
    TrainingSetup q = s;
    q.seq = setup.seq / 2;
    consider(q, "halve the sequence length (--seq " + std::to_string(q.seq) + ")");
  }
  // Keep the ones that fit first, in the order above, then the rest (they show how far each gets).
  std::stable_partition(out.begin(), out.end(), [](const Suggestion& a) { return a.verdict == Verdict::fits; });
  return out;
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

Plan make_plan(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu, const PlanOptions& options) {
  Plan plan;
  plan.model = model;
  plan.setup = setup;
  plan.gpu = gpu;
  plan.profile = options.profile ? *options.profile : default_profile(gpu);
  Estimates e = estimate(model, setup, gpu, plan.profile);
  plan.memory = std::move(e.memory);
  const double cap = static_cast<double>(gpu.memory_bytes);
  plan.headroom_fraction = 1.0 - static_cast<double>(plan.memory.peak_allocated_bytes) / cap;
  plan.verdict = e.verdict;
  plan.over_capacity_bytes =
      std::max<std::int64_t>(0, std::max(plan.memory.peak_allocated_bytes, plan.memory.device_used_bytes) - gpu.memory_bytes);
  plan.time = std::move(e.time);
  if (options.suggest && plan.verdict != Verdict::fits) plan.suggestions = alternatives(model, setup, gpu, options);
  return plan;
}

}  // namespace trainfit
