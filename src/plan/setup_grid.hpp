#pragma once
// Pricing many setups that share most of their settings (`trainfit advise` searches grids of
// them): the memory and time models' work that does not depend on the micro-batch, the gradient
// accumulation or checkpointing is done once per group, and each (batch, accumulation) is priced
// by the same functions estimate_memory and estimate_time run (memory/memory_model.hpp,
// time/time_model.hpp), from what the group kept: the same numbers, with no allocation.
#include <cstdint>
#include <optional>

#include "memory/memory_model.hpp"
#include "time/time_model.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/model.hpp"
#include "trainfit/plan.hpp"
#include "trainfit/setup.hpp"
#include "trainfit/time.hpp"

namespace trainfit::detail {

// Everything about one group of setups that differ only in micro-batch and gradient accumulation
// (and gradient checkpointing, through the three-argument at()): computed once, then any
// (batch, accum) is priced in well under a microsecond.
class SetupGroup {
 public:
  // `base`'s batch and grad_accum are ignored. Throws InputError/SettingError as estimate_memory
  // would for an invalid setup (validate on base with batch=1, grad_accum=1; an unknown LoRA
  // target). The group keeps copies of what it needs: model, base, gpu and profile may go.
  SetupGroup(const ModelSpec& model, const TrainingSetup& base, const GpuSpec& gpu, const TimeProfile& profile);

  struct Point {
    std::int64_t peak_allocated_bytes = 0;  // == estimate_memory(...).peak_allocated_bytes
    std::int64_t device_used_bytes = 0;     // == estimate_memory(...).device_used_bytes
    // The busiest GPU's, which the verdict is judged on (MemoryEstimate's).
    std::int64_t busiest_peak_allocated_bytes = 0;
    std::int64_t busiest_device_used_bytes = 0;
    Verdict verdict = Verdict::fits;        // == judge(...) with base.headroom and base.platform
    double step_seconds = 0;                // == estimate_time(..., spills = verdict == spills).step_seconds (0 if not predicted)
    double tokens_per_second = 0;
  };

  // The setup `base` with this batch and grad_accum (and base.grad_ckpt). A batch or an
  // accumulation that validate() refuses throws its SettingError, as estimate_memory would.
  Point at(std::int64_t batch, std::int64_t grad_accum) const;
  // The same with gradient checkpointing on or off: nothing the group keeps depends on it.
  Point at(std::int64_t batch, std::int64_t grad_accum, bool grad_ckpt) const;
  // Host memory one host needs for offloaded states (MemoryEstimate::host_bytes): the same at
  // every point of the group.
  double host_bytes() const;

 private:
  // validate() on base with this batch and accumulation: throws what estimate_memory would.
  void validate_point(std::int64_t batch, std::int64_t grad_accum) const;

  TrainingSetup base_;  // batch 1, grad_accum 1 (grpo: one group a step); validate_point's setup
  GpuSpec gpu_;
  TimeProfile profile_;
  // What estimate_memory prices from (with a pipeline, its first and last stages): the same
  // busiest_step_memory decides for both.
  StepMemoryBases memory_;
  WorkBasis work_;
  bool timed_ = false;  // the card has the rates the time model needs (has_rates)
  // The batches and accumulations validate() accepts with base's other settings: inside them,
  // at() validates nothing more.
  std::int64_t min_batch_ = 1, max_batch_ = 0;
  std::int64_t min_grad_accum_ = 1, max_grad_accum_ = 0;
  // Whether validate() has rules on the micro-batch and accumulation beyond their ranges (kto's
  // batch of 2, grpo's whole groups): every point is then validated.
  bool check_every_point_ = false;
};

}  // namespace trainfit::detail
