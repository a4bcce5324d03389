// The one description of a training step (step/step.hpp).
#include "step/step.hpp"

namespace trainfit::detail {

Step describe_step(const ModelSpec& model, const TrainingSetup& setup) {
  Step step;
  step.setup = setup;
  step.layout = layout_of(setup);
  if (step.layout.compute_dtype) step.compute_ = compute_setup(setup, step.layout);
  // gpt-oss's attention sinks have no SDPA path in transformers (GptOssPreTrainedModel takes eager,
  // flex and the hub's flash kernels): loaded without an attn_implementation it runs eager, and so
  // is the plan (its warning says so).
  if (model.attention_sinks && setup.attention == Attention::sdpa) {
    TrainingSetup eager = step.compute();
    eager.attention = Attention::eager;
    step.compute_ = std::move(eager);
  }
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
