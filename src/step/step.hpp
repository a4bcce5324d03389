#pragma once
// One training step, described once: the value every price of a setup reads (the memory model,
// the time model, the plan, the advisor's grid). Built by describe_step from a validated setup and
// a model; nothing downstream re-derives the layout, the compute setup, the pipeline's stages or
// the tensors (docs/architecture.md, "The step").
#include <optional>

#include "step/layout.hpp"
#include "step/step_shape.hpp"
#include "trainfit/model.hpp"
#include "trainfit/setup.hpp"

namespace trainfit::detail {

struct Step {
  TrainingSetup setup;  // as the user gave it (its batch sets `tensors.tokens`)
  // What the GPUs compute: under a mixed-precision layout the low-precision dtype on copies of the
  // fp32 storage (compute_setup); otherwise `setup` itself, not copied (a setup's strings and
  // lists make a copy a measurable share of describing a step).
  const TrainingSetup& compute() const { return compute_ ? *compute_ : setup; }
  std::optional<TrainingSetup> compute_;  // set only where it differs from `setup`
  Layout layout;      // how the GPUs share the step (layout_of)
  StepShape tensors;  // the tensors: per token where they scale with the micro-batch
  // With pipeline parallelism, the two stages either of which can be the busiest: the first (the
  // most micro-batches in flight, the extra layers) and the last (the output layer and the loss);
  // the stages between hold less than the first. Unset without a pipeline.
  std::optional<PipelineStage> first_stage, last_stage;
  // The tokens of one micro-batch (batch x seq; a paired objective trains
  // tensors.objective.sequences_per_example sequences per example on top).
  double tokens() const { return tensors.tokens; }
};

// The step of `setup` (validated by the caller: validate()) on `model`. Throws SettingError when the
// model cannot be laid out so (check_layout) and for a LoRA target the model does not have.
Step describe_step(const ModelSpec& model, const TrainingSetup& setup);

}  // namespace trainfit::detail
