#pragma once
// STUB until helper-q's evaluator lands: prices each point with estimate_memory/estimate_time.
#include <cstdint>

#include "trainfit/hardware.hpp"
#include "trainfit/memory.hpp"
#include "trainfit/model.hpp"
#include "trainfit/plan.hpp"
#include "trainfit/setup.hpp"
#include "trainfit/time.hpp"

namespace trainfit::detail {

class SetupGroup {
 public:
  SetupGroup(const ModelSpec& model, const TrainingSetup& base, const GpuSpec& gpu, const TimeProfile& profile)
      : model_(model), base_(base), gpu_(gpu), profile_(profile) {
    base_.batch = 1;
    base_.grad_accum = 1;
    validate(base_);
  }
  struct Point {
    std::int64_t peak_allocated_bytes = 0;
    std::int64_t device_used_bytes = 0;
    Verdict verdict = Verdict::fits;
    double step_seconds = 0;
    double tokens_per_second = 0;
  };
  Point at(std::int64_t batch, std::int64_t grad_accum) const {
    TrainingSetup s = base_;
    s.batch = batch;
    s.grad_accum = grad_accum;
    const MemoryEstimate m = estimate_memory(model_, s, gpu_);
    Point p;
    p.peak_allocated_bytes = m.peak_allocated_bytes;
    p.device_used_bytes = m.device_used_bytes;
    p.verdict = judge(m.peak_allocated_bytes, m.device_used_bytes, gpu_.memory_bytes, s.headroom, s.platform);
    const TimeEstimate t = estimate_time(model_, s, gpu_, profile_, p.verdict == Verdict::spills);
    if (t.predicted) {
      p.step_seconds = t.step_seconds;
      p.tokens_per_second = t.tokens_per_second;
    }
    return p;
  }

 private:
  const ModelSpec& model_;
  TrainingSetup base_;
  const GpuSpec& gpu_;
  const TimeProfile& profile_;
};

}  // namespace trainfit::detail
