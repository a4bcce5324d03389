// The data-parallel schemes: one row each (trainfit/setup.hpp, DataParallelScheme). What each
// framework does is read from its source and measured on the H200 (plans/scale-out-*.toml,
// docs/model.md "Several GPUs"); the memory and time models read these rows, never a name.
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include "trainfit/error.hpp"
#include "trainfit/settings.hpp"
#include "trainfit/setup.hpp"

namespace trainfit {
namespace {

using F = DataParallelFramework;

// FSDP2's CPUOffloadPolicy moves the parameters, the gradients and the optimizer step together,
// and only to CPU memory.
DataParallelScheme fsdp2(std::string name, std::vector<std::string> aliases, std::string title) {
  DataParallelScheme d;
  d.name = std::move(name);
  d.aliases = std::move(aliases);
  d.title = std::move(title);
  d.framework = F::fsdp2;
  d.shards_parameters = d.shards_gradients = d.shards_optimizer = true;
  d.offloads = {Offload::optimizer_params};
  d.offload_refusal =
      "FSDP's CPUOffloadPolicy offloads parameters and the optimizer together: use `offload` "
      "optimizer,params with {}";
  d.nvme_refusal = "FSDP offloads to CPU memory only; NVMe offload is DeepSpeed's zero3";
  d.advise_offloads = {Offload::none};
  return d;
}

// DeepSpeed offloads the optimizer from stage 1, the parameters and NVMe only at stage 3.
DataParallelScheme below_stage_3(std::string name, std::vector<std::string> aliases, std::string title, F framework) {
  DataParallelScheme d;
  d.name = std::move(name);
  d.aliases = std::move(aliases);
  d.title = std::move(title);
  d.framework = framework;
  d.shards_optimizer = true;
  d.offloads = {Offload::optimizer};
  d.offload_refusal = "{} can offload the optimizer only; parameters need zero3";
  d.nvme_refusal = "DeepSpeed offloads to NVMe at stage 3 only: use zero3";
  d.advise_offloads = {Offload::none};
  return d;
}

std::deque<DataParallelScheme> built_in_schemes() {
  std::deque<DataParallelScheme> rows;
  DataParallelScheme ddp;
  ddp.name = "ddp";
  ddp.title = "DDP";
  ddp.framework = F::pytorch_ddp;
  ddp.takes_qlora = true;
  ddp.offload_refusal = "ddp keeps every state on each GPU: offload needs a sharded layout (zero1-3, fsdp)";
  ddp.advise_offloads = {Offload::none};
  rows.push_back(ddp);

  rows.push_back(fsdp2("fsdp", {"fsdp2", "full-shard"}, "FSDP"));
  // reshard_after_forward=False (FSDP1's SHARD_GRAD_OP): the backward gathers nothing.
  DataParallelScheme grad_op = fsdp2("fsdp-grad-op", {"shard-grad-op"}, "FSDP (grad-op)");
  grad_op.keeps_gathered = true;
  rows.push_back(grad_op);
  // A 2-D mesh: sharded within a node, replicated across nodes. advise does not try it: it plans
  // one node's worth of GPUs as fsdp does.
  DataParallelScheme hsdp = fsdp2("hsdp", {"hybrid-shard"}, "HSDP");
  hsdp.shards_within_node = true;
  hsdp.advise_offloads = {};
  rows.push_back(hsdp);

  // The runner's zero1 is PyTorch's ZeroRedundancyOptimizer over DDP.
  DataParallelScheme zero1 =
      below_stage_3("zero1", {"zero-redundancy-optimizer"}, "ZeRO-1", F::zero_redundancy_optimizer);
  zero1.takes_qlora = true;
  rows.push_back(zero1);
  DataParallelScheme zero2 = below_stage_3("zero2", {}, "ZeRO-2", F::deepspeed);
  zero2.shards_gradients = true;
  rows.push_back(zero2);

  DataParallelScheme zero3;
  zero3.name = "zero3";
  zero3.title = "ZeRO-3";
  zero3.framework = F::deepspeed;
  zero3.shards_parameters = zero3.shards_gradients = zero3.shards_optimizer = true;
  zero3.offloads = {Offload::optimizer, Offload::params, Offload::optimizer_params};
  zero3.offloads_to_nvme = true;
  zero3.advise_offloads = {Offload::none, Offload::optimizer, Offload::optimizer_params};
  rows.push_back(zero3);
  return rows;
}

// Rows live in a deque: adding one leaves references to the others valid.
std::deque<DataParallelScheme>& scheme_table() {
  static std::deque<DataParallelScheme> rows = built_in_schemes();
  return rows;
}

bool takes_name(const DataParallelScheme& d, std::string_view name) {
  return d.name == name || std::find(d.aliases.begin(), d.aliases.end(), name) != d.aliases.end();
}

}  // namespace

std::vector<const DataParallelScheme*> data_parallel_schemes() {
  std::vector<const DataParallelScheme*> out;
  for (const DataParallelScheme& d : scheme_table()) out.push_back(&d);
  return out;
}

const DataParallelScheme& data_parallel_scheme(Parallel p) {
  return scheme_table().at(static_cast<std::size_t>(p));
}

Parallel parse_parallel(std::string_view s) {
  std::string key(s);
  std::transform(key.begin(), key.end(), key.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const auto& rows = scheme_table();
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (takes_name(rows[i], key)) return static_cast<Parallel>(i);
  std::string names;
  for (const DataParallelScheme& d : rows) names += (names.empty() ? "" : ", ") + d.name;
  throw InputError(fmt::format("unknown data parallelism '{}'; expected one of: {}", s, names));
}

std::string to_string(Parallel p) {
  const auto i = static_cast<std::size_t>(p);
  return i < scheme_table().size() ? scheme_table()[i].name : "?";
}

Parallel add_data_parallel_scheme(const DataParallelScheme& scheme) {
  auto& rows = scheme_table();
  if (scheme.name.empty()) throw InputError("a data-parallel scheme needs a name");
  if (rows.size() > 255) throw InputError("at most 256 data-parallel schemes");
  for (const DataParallelScheme& d : rows) {
    if (takes_name(d, scheme.name))
      throw InputError(fmt::format("data-parallel scheme '{}' exists already", scheme.name));
    for (const std::string& alias : scheme.aliases)
      if (takes_name(d, alias)) throw InputError(fmt::format("data-parallel scheme '{}' exists already", alias));
  }
  rows.push_back(scheme);
  // The settings that apply under a scheme of its framework (FSDP2's mixed-precision dtypes) apply
  // under it too.
  const auto like = std::find_if(rows.begin(), rows.end(),
                                 [&](const DataParallelScheme& d) { return d.framework == scheme.framework; });
  detail::add_setting_choice("parallel", scheme.name, like->name);
  return static_cast<Parallel>(rows.size() - 1);
}

}  // namespace trainfit
