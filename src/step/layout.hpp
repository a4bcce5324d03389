#pragma once
// How a run's GPUs share one step (the layout settings: parallel, offload, the FSDP
// mixed-precision policy, tp, pp, microbatches, cp, nodes), reduced to what the memory and time
// models need: the divisors of each kind of state, what is gathered, what lives on the host, and
// which pipeline stage is the busiest. docs/model.md, "Layouts on several GPUs", defines each term.
#include <cstdint>
#include <optional>

#include "trainfit/model.hpp"
#include "trainfit/setup.hpp"

namespace trainfit::detail {

struct Layout {
  bool several = false;  // more than one GPU
  Parallel parallel = Parallel::ddp;
  double dp = 1;  // data-parallel degree: gpus / (tp x pp x cp)
  double tp = 1, pp = 1, cp = 1;
  double microbatches = 1;  // with pp > 1
  double gpus_per_node = 1;
  // What each GPU stores of the parameters, gradients and optimizer states: 1 / these. FSDP and
  // ZeRO-3 shard all three over the data-parallel GPUs (HSDP over one node's), ZeRO-2 the last
  // two, ZeRO-1 the states; context parallelism joins the sharding group (its GPUs hold the same
  // parameters), as torchtitan and DeepSpeed-Ulysses do.
  double param_shards = 1, grad_shards = 1, state_shards = 1;
  bool gathers_units = false;   // parameters gathered layer by layer (FSDP family, ZeRO-3)
  bool keeps_gathered = false;  // gathered from a layer's forward to its backward (fsdp-grad-op)
  bool ddp_buckets = false;     // DDP's reducer buckets (ddp; zero1 = DDP + ZeroRedundancyOptimizer)
  bool zero = false;            // a DeepSpeed stage (zero2, zero3; zero1 is measured through PyTorch)
  bool offload_states = false;  // optimizer states (and master weights, fp32 gradient partition) on the host
  bool offload_params = false;  // parameter shards on the host
  // A low-precision compute copy over fp32 storage: FSDP's MixedPrecisionPolicy (param_dtype
  // under fp32 weights), or DeepSpeed's bf16/fp16 mode (weights fp32 with amp under zero2 or zero3).
  std::optional<DType> compute_dtype;
  std::optional<DType> reduce_dtype;  // FSDP: the dtype gradients are reduce-scattered in
  // DeepSpeed's mixed precision (zero2/zero3, full fine-tuning over a 16-bit module, or fp32
  // weights with amp): fp32 master weights, optimizer states and gradient partition, whatever the
  // module's dtype. DeepSpeed keeps them so in its bf16 and fp16 modes.
  bool fp32_master = false;
};

Layout layout_of(const TrainingSetup& setup);

// The setup the GPUs compute: under a mixed-precision layout the step runs in the compute dtype
// on low-precision copies (no autocast), whatever the storage dtype. Otherwise the setup itself.
// `layout` is layout_of(setup).
TrainingSetup compute_setup(const TrainingSetup& setup, const Layout& layout);

// Throws SettingError when the model cannot be laid out so: tensor parallelism wider than the
// attention heads or key/value heads (or not dividing them), more pipeline stages than layers.
void check_layout(const ModelSpec& model, const TrainingSetup& setup);

// One pipeline stage: its decoder layers, whether it holds the embedding or the output layer and
// loss, and how many micro-batches' activations 1F1B keeps alive on it (pp - stage, at most the
// micro-batches).
struct PipelineStage {
  std::int64_t index = 0;
  double layers = 0;
  bool embedding = true;
  bool head = true;
  // torch.distributed.pipelining's Schedule1F1B runs min(m, p - stage) forwards before the stage's
  // first backward, and then one backward for each forward: the saved tensors of that many
  // micro-batches are alive at the first backward, one fewer at each later one (their gradients
  // alive by then), and at the last ones fewer still.
  double in_flight = 1;
  double microbatches = 1;
  // The last stage's PipelineStage keeps every micro-batch's output (output_chunks, for the merged
  // output step() returns) until the step ends: each one logits-sized tensor in the output layer's
  // dtype, which an unsplit step frees once the loss has its fp32 copy.
  bool keeps_outputs = false;
};
// The first and the last stage: between them is the busiest (the first keeps the most
// activations, the last the output layer and the loss); the middle ones hold less than both.
PipelineStage first_stage(const ModelSpec& model, const Layout& layout);
PipelineStage last_stage(const ModelSpec& model, const Layout& layout);

}  // namespace trainfit::detail
