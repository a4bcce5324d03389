// The layout settings reduced to what the memory and time models need (step/layout.hpp).
#include "step/layout.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "trainfit/error.hpp"

namespace trainfit::detail {
namespace {
double as_d(std::int64_t v) {
  return static_cast<double>(v);
}
}  // namespace

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
  double group = l.dp * l.cp;
  if (s.parallel == Parallel::hsdp) group = std::max(1.0, group / as_d(std::max<std::int64_t>(1, s.nodes)));
  if (shards_parameters(s.parallel)) l.param_shards = group;
  if (shards_gradients(s.parallel)) l.grad_shards = group;
  if (shards_optimizer(s.parallel)) l.state_shards = group;
  l.gathers_units = shards_parameters(s.parallel) && group > 1;
  l.keeps_gathered = s.parallel == Parallel::fsdp_grad_op && l.gathers_units;
  l.ddp_buckets = (s.parallel == Parallel::ddp || s.parallel == Parallel::zero1) && group > 1;
  l.zero = s.parallel == Parallel::zero2 || s.parallel == Parallel::zero3;
  l.offload_states = offloads_optimizer(s.offload);
  l.offload_params = offloads_params(s.offload);
  const bool fsdp_family =
      s.parallel == Parallel::fsdp || s.parallel == Parallel::fsdp_grad_op || s.parallel == Parallel::hsdp;
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
