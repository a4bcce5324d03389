// A group of setups that differ only in micro-batch, accumulation and checkpointing, priced by
// the memory and time models' own functions from what the group counted once.
#include "plan/setup_grid.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "trainfit/settings.hpp"

namespace trainfit::detail {
namespace {

// A whole-number setting's range as the settings table gives it (what validate holds it to).
struct Range {
  std::int64_t lowest = 1;
  std::int64_t highest = std::numeric_limits<std::int64_t>::max();
};

Range setting_range(std::string_view key) {
  Range r;
  const Setting* s = find_setting(key);
  if (s == nullptr) return r;
  // The table's bounds are whole numbers for whole-number settings; an exclusive bound is one in.
  if (s->minimum) r.lowest = static_cast<std::int64_t>(std::ceil(*s->minimum)) + (s->exclusive_minimum ? 1 : 0);
  if (s->maximum) r.highest = static_cast<std::int64_t>(std::floor(*s->maximum)) - (s->exclusive_maximum ? 1 : 0);
  return r;
}

}  // namespace

SetupGroup::SetupGroup(const ModelSpec& model, const TrainingSetup& base, const GpuSpec& gpu,
                       const TimeProfile& profile)
    : base_(base), gpu_(gpu), profile_(profile) {
  base_.batch = 1;
  base_.grad_accum = 1;
  // GRPO's generation batch must hold whole groups of completions: the group's own setup takes
  // one group per optimizer step (its points are validated when priced outside their ranges,
  // and advise offers only pairs that hold whole groups).
  if (base_.objective == Objective::grpo) base_.grad_accum = base_.generations;
  if (base_.objective == Objective::kto) base_.batch = 2;  // KTO's KL term needs two sequences
  check_every_point_ = base_.objective == Objective::grpo || base_.objective == Objective::kto;
  validate(base_);
  // describe_step reads neither the batch (but for `tokens`), nor the accumulation, nor
  // checkpointing, and neither do memory_bases and work_basis: one description serves the group.
  const Step step = describe_step(model, base_);
  memory_ = memory_bases(model, step, gpu);
  timed_ = has_rates(gpu);
  if (timed_) work_ = work_basis(model, step);

  // Whatever else validate checks holds for every point, since only these two change. The
  // batch's range is also capped by the micro-batch's tokens at this sequence length.
  const Range batch = setting_range("batch");
  const Range accum = setting_range("grad_accum");
  min_batch_ = batch.lowest;
  max_batch_ = std::min(batch.highest, kMaxMicroBatchTokens / base_.seq);
  min_grad_accum_ = accum.lowest;
  max_grad_accum_ = accum.highest;
}

double SetupGroup::host_bytes() const {
  double most = 0;
  for (const StepMemoryBases::Stage& stage : memory_.priced) most = std::max(most, stage.first_microbatch.host_bytes);
  return most;
}

void SetupGroup::validate_point(std::int64_t batch, std::int64_t grad_accum) const {
  // Outside the ranges above: validate names the setting and the limit, as estimate_memory would
  // (and were it to accept the point, at() would go on to price it).
  TrainingSetup s = base_;
  s.batch = batch;
  s.grad_accum = grad_accum;
  validate(s);
}

SetupGroup::Point SetupGroup::at(std::int64_t batch, std::int64_t grad_accum) const {
  return at(batch, grad_accum, base_.grad_ckpt);
}

SetupGroup::Point SetupGroup::at(std::int64_t batch, std::int64_t grad_accum, bool grad_ckpt) const {
  if (check_every_point_ || batch < min_batch_ || batch > max_batch_ || grad_accum < min_grad_accum_ ||
      grad_accum > max_grad_accum_)
    validate_point(batch, grad_accum);
  const double tokens = micro_batch_tokens(base_.seq, batch);
  const BusiestStepMemory busiest = busiest_step_memory(memory_, tokens, grad_accum, grad_ckpt);
  const StepMemory& memory = busiest.memory;
  Point p;
  p.peak_allocated_bytes = memory.peak_allocated_bytes;
  p.device_used_bytes = memory.device_used_bytes;
  p.busiest_peak_allocated_bytes = memory.busiest_peak_allocated_bytes;
  p.busiest_device_used_bytes = memory.busiest_device_used_bytes;
  // The busiest GPU over the run decides (MemoryEstimate::busiest_peak_allocated_bytes).
  // A later step's logits segment, when the first optimizer step strands the first one's, counts as device use.
  const std::int64_t later = later_step_need_bytes(p.busiest_peak_allocated_bytes, memory.later_logits_segment_bytes,
                                                   busiest.basis->cuda_context_bytes);
  p.verdict = judge(p.busiest_peak_allocated_bytes, std::max(p.busiest_device_used_bytes, later), gpu_.memory_bytes,
                    base_.headroom, base_.platform);
  if (timed_) {
    const StepWork work = step_work(work_, tokens, static_cast<double>(batch), grad_ckpt);
    const StepSeconds time =
        step_seconds(work, {base_.seq, batch, grad_accum, base_.gpus}, gpu_, profile_, p.verdict == Verdict::spills);
    p.step_seconds = time.step;
    p.tokens_per_second = time.tokens_per_second;
  }
  return p;
}

}  // namespace trainfit::detail
