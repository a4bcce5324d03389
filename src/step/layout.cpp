// The layout settings reduced to what the memory and time models need (step/layout.hpp).
#include "common/numeric.hpp"
#include "step/layout.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "trainfit/error.hpp"

namespace trainfit::detail {

Layout layout_of(const TrainingSetup& s) {
  Layout l;
  l.several = s.gpus > 1;
  if (!l.several) return l;
  l.parallel = s.parallel;
  l.tp = as_d(s.tp);
  l.pp = as_d(s.pp);
  l.cp = as_d(s.cp);
  l.microbatches = s.pp > 1 ? as_d(s.microbatches) : 1.0;
  l.dp = as_d(data_parallel_degree(s));
  l.gpus_per_node = as_d(s.gpus) / as_d(std::max<std::int64_t>(1, s.nodes));
  // The GPUs that hold the same parameters: the data-parallel ones and, with context
  // parallelism, those splitting the same sequences. HSDP shards within a node only.
  const DataParallelScheme& scheme = data_parallel_scheme(s.parallel);
  double group = l.dp * l.cp;
  if (scheme.shards_within_node) group = std::max(1.0, group / as_d(std::max<std::int64_t>(1, s.nodes)));
  if (scheme.shards_parameters) l.param_shards = group;
  if (scheme.shards_gradients) l.grad_shards = group;
  if (scheme.shards_optimizer) l.state_shards = group;
  l.gathers_units = scheme.shards_parameters && group > 1;
  l.keeps_gathered = scheme.keeps_gathered && l.gathers_units;
  using F = DataParallelFramework;
  l.ddp_buckets = (scheme.framework == F::pytorch_ddp || scheme.framework == F::zero_redundancy_optimizer) && group > 1;
  l.zero = scheme.framework == F::deepspeed;
  l.offload_states = offloads_optimizer(s.offload);
  l.offload_params = offloads_params(s.offload);
  const bool fsdp_family = scheme.framework == F::fsdp2;
  if (s.method == Method::full) {
    if (fsdp_family && s.fsdp_param_dtype && *s.fsdp_param_dtype != s.weights) l.compute_dtype = s.fsdp_param_dtype;
    if (l.zero && s.amp) l.compute_dtype = s.amp;
    l.fp32_master = l.zero && (s.amp || s.weights == DType::bf16 || s.weights == DType::fp16);
  }
  if (fsdp_family) l.reduce_dtype = s.fsdp_reduce_dtype ? s.fsdp_reduce_dtype : s.fsdp_param_dtype;
  return l;
}

TrainingSetup compute_setup(const TrainingSetup& setup, const Layout& layout) {
  if (!layout.compute_dtype) return setup;
  TrainingSetup c = setup;
  c.weights = *layout.compute_dtype;
  c.amp.reset();
  return c;
}

void check_layout(const ModelSpec& model, const TrainingSetup& s) {
  if (s.gpus <= 1) return;
  if (s.tp > 1) {
    if (model.num_heads % s.tp != 0)
      throw SettingError("tp", fmt::format("{} attention heads do not split over {} GPUs", model.num_heads, s.tp));
    if (model.num_kv_heads % s.tp != 0)
      throw SettingError("tp", fmt::format("{} key/value heads do not split over {} GPUs (tensor parallelism "
                                           "splits whole heads)",
                                           model.num_kv_heads, s.tp));
  }
  if (s.pp > model.num_layers)
    throw SettingError(
        "pp", fmt::format("{} pipeline stages for {} layers: each stage needs at least one", s.pp, model.num_layers));
}

PipelineStage first_stage(const ModelSpec& model, const Layout& l) {
  PipelineStage st;
  st.layers = std::ceil(as_d(model.num_layers) / l.pp);
  st.head = l.pp <= 1;
  st.in_flight = std::min(l.pp, l.microbatches);
  st.microbatches = l.microbatches;
  return st;
}

PipelineStage last_stage(const ModelSpec& model, const Layout& l) {
  PipelineStage st;
  st.index = static_cast<std::int64_t>(l.pp) - 1;
  // The first stages take the extra layers when they do not divide evenly.
  st.layers = std::floor(as_d(model.num_layers) / l.pp);
  st.embedding = l.pp <= 1;
  st.in_flight = 1;
  st.microbatches = l.microbatches;
  st.keeps_outputs = l.pp > 1;
  return st;
}

}  // namespace trainfit::detail
