// The one description of a training step (step/step.hpp).
#include "step/step.hpp"

namespace trainfit::detail {

Step describe_step(const ModelSpec& model, const TrainingSetup& setup) {
  Step step;
  step.setup = setup;
  step.layout = layout_of(setup);
  if (step.layout.compute_dtype) step.compute_ = compute_setup(setup, step.layout);
  // The tensors first: a LoRA target the model lacks is named before a layout it cannot take.
  step.tensors = describe_tensors(model, step.compute(), step.layout);
  check_layout(model, setup);
  if (step.layout.pp > 1) {
    step.first_stage = first_stage(model, step.layout);
    step.last_stage = last_stage(model, step.layout);
  }
  return step;
}

}  // namespace trainfit::detail
