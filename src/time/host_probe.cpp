// The host's dispatch time per operation from timed host-bound steps (include/trainfit/host_probe.hpp):
// the request the runner runs, and the division of its step times by trainfit's own operation counts.
#include "trainfit/host_probe.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/statistics.hpp"
#include "trainfit/model.hpp"
#include "trainfit/settings.hpp"

namespace trainfit {
namespace {

using nlohmann::json;

constexpr const char* kRequestSchema = "trainfit.host_probe_request/1";
constexpr const char* kRecordSchema = "trainfit.host_probe/1";
// The probe's sequence: a few tokens, so that no kernel of the step is more than a few microseconds.
constexpr std::int64_t kProbeSeq = 16;

// Qwen2.5-0.5B's config.json (data/models/qwen2.5-0.5b.json) shrunk: hidden size 64, four query
// heads of 16 and two key/value heads, an MLP of 128, a vocabulary of 1,024. The family's modules,
// and so the operations each layer dispatches, are those of the real model; every kernel is tiny.
json tiny_model(int layers) {
  return {{"architectures", {"Qwen2ForCausalLM"}},
          {"model_type", "qwen2"},
          {"hidden_act", "silu"},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"num_hidden_layers", layers},
          {"max_window_layers", layers},
          {"max_position_embeddings", 32768},
          {"rms_norm_eps", 1e-06},
          {"rope_theta", 1000000.0},
          {"sliding_window", 32768},
          {"use_sliding_window", false},
          {"tie_word_embeddings", true},
          {"attention_dropout", 0.0},
          {"initializer_range", 0.02},
          {"vocab_size", 1024},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"torch_dtype", "bfloat16"},
          {"use_cache", false}};
}

std::string method_name(Method m) {
  return to_string(m);
}

TrainingSetup probe_setup(Method method) {
  TrainingSetup s;
  s.model = "host-probe-qwen2";  // a label: the runner builds the request's model
  s.method = method;
  s.seq = kProbeSeq;
  s.batch = 1;
  return s;
}

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  throw InputError(fmt::format("host probe record: field \"{}\" {}", field, what));
}

const json& member(const json& o, const char* key, const std::string& where) {
  if (!o.is_object() || !o.contains(key)) bad(where + key, "is missing");
  return o[key];
}

std::string text_or_empty(const json& o, const char* key) {
  if (!o.is_object() || !o.contains(key) || !o[key].is_string()) return {};
  return o[key].get<std::string>();
}

std::optional<double> number_or_none(const json& o, const char* key, const std::string& where) {
  if (!o.contains(key) || o[key].is_null()) return std::nullopt;
  if (!o[key].is_number()) bad(where + key, "must be a number");
  const double v = o[key].get<double>();
  if (!std::isfinite(v) || v < 0) bad(where + key, "must be a non-negative number");
  return v;
}

// Linear interpolation between the order statistics (numpy's default).
double quantile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double at = p * static_cast<double>(v.size() - 1);
  const auto i = static_cast<std::size_t>(std::floor(at));
  const std::size_t j = std::min(i + 1, v.size() - 1);
  return v[i] + (at - static_cast<double>(i)) * (v[j] - v[i]);
}

std::string us(double seconds) {
  return fmt::format("{:.1f} us", seconds * 1e6);
}

}  // namespace

nlohmann::json host_probe_request(const HostProbeOptions& o) {
  if (o.layers < 1 || o.layers > 128) throw InputError(fmt::format("--layers: {} is outside 1-128", o.layers));
  if (o.steps < 3 || o.steps > 1000) throw InputError(fmt::format("--steps: {} is outside 3-1000", o.steps));
  if (o.warmup < 1 || o.warmup > 100) throw InputError(fmt::format("--warmup: {} is outside 1-100", o.warmup));
  if (o.device != "cuda" && o.device != "cpu")
    throw InputError(fmt::format("--device: '{}' is not cuda or cpu", o.device));
  if (o.methods.empty()) throw InputError("--method: no method to measure");
  json runs = json::array();
  for (const Method m : o.methods) {
    if (m == Method::qlora) throw InputError("--method: the host probe runs full and lora steps (not qlora)");
    runs.push_back({{"name", method_name(m)}, {"config", setup_to_json(probe_setup(m))}});
  }
  return {{"schema", kRequestSchema},
          {"model", tiny_model(o.layers)},
          {"runs", runs},
          {"steps", o.steps},
          {"warmup", o.warmup},
          {"device", o.device},
          {"busy_check", o.busy_check}};
}

double host_operations(const StepWork& w, const TrainingSetup& setup) {
  // The time model's host term over host_seconds_per_op: each micro-batch's operations, through
  // every pipeline micro-batch, the once-a-step ones (DDP's bucket copies) once, and the optimizer
  // step's. DTensor's dispatch (w.dtensor_ops) has its own rate and is not counted.
  return w.ops * static_cast<double>(setup.grad_accum) * std::max(1.0, w.layout.pipeline_microbatches) + w.step_ops +
         w.optimizer_ops;
}

HostDispatch host_dispatch_from_probe(const nlohmann::json& record, const HostProbeCheck& check) {
  if (!record.is_object()) throw InputError("host probe record: not a JSON object");
  const std::string status = text_or_empty(record, "status");
  if (status != "ok") {
    const std::string error = text_or_empty(record, "error");
    throw HostProbeFailed(
        fmt::format("the host probe failed: {}",
                    error.empty() ? "status " + (status.empty() ? std::string("missing") : status) : error));
  }
  if (text_or_empty(record, "schema") != kRecordSchema) bad("schema", fmt::format("must be \"{}\"", kRecordSchema));
  const json& request = member(record, "request", "");
  const json& model_json = member(request, "model", "request.");
  if (!model_json.is_object()) bad("request.model", "must be an object (a config.json)");
  ModelSpec model;
  try {
    model = parse_model_config(model_json.dump(), "the host probe's model");
  } catch (const InputError& e) {
    bad("request.model", e.what());
  }
  const json& wanted = member(request, "runs", "request.");
  const json& runs = member(record, "runs", "");
  if (!wanted.is_array() || !runs.is_array() || runs.size() != wanted.size() || runs.empty())
    bad("runs", "must list one result for each of request.runs");

  HostDispatch d;
  d.device = text_or_empty(record, "device");
  d.gpu = text_or_empty(record, "gpu");
  d.cpu = text_or_empty(record, "cpu");
  d.torch = text_or_empty(record, "torch");
  d.transformers = text_or_empty(record, "transformers");
  d.peft = text_or_empty(record, "peft");
  d.measured_at = text_or_empty(record, "measured_at");
  d.layers = static_cast<int>(model.num_layers);
  d.probe_seconds = number_or_none(record, "seconds", "").value_or(0);
  if (d.device != "cuda" && d.device != "cpu") bad("device", "must be \"cuda\" or \"cpu\"");
  d.busy_checked = d.device == "cuda";

  double sum_median = 0, sum_low = 0, sum_high = 0, sum_ops = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::string where = fmt::format("runs[{}].", i);
    const json& r = runs[i];
    const json& w = wanted[i];
    HostProbeRun run;
    run.name = text_or_empty(r, "name");
    if (run.name.empty() || run.name != text_or_empty(w, "name"))
      bad(where + "name", fmt::format("must be request.runs[{}]'s", i));
    try {
      run.setup = setup_from_json(member(w, "config", fmt::format("request.runs[{}].", i)));
    } catch (const InputError& e) {
      bad(fmt::format("request.runs[{}].config", i), e.what());
    }
    const StepWork work = step_work(model, run.setup);
    run.operations = host_operations(work, run.setup);
    run.kernels = work.kernels * static_cast<double>(run.setup.grad_accum) * work.layout.pipeline_microbatches;
    const json& steps = member(r, "step_seconds", where);
    const double warmup = number_or_none(r, "warmup", where).value_or(0);
    if (!steps.is_array()) bad(where + "step_seconds", "must be an array of seconds");
    for (std::size_t k = 0; k < steps.size(); ++k) {
      if (!steps[k].is_number() || !std::isfinite(steps[k].get<double>()) || steps[k].get<double>() <= 0)
        bad(fmt::format("{}step_seconds[{}]", where, k), "must be a positive number of seconds");
      if (static_cast<double>(k) >= warmup) run.step_seconds.push_back(steps[k].get<double>());
    }
    if (run.step_seconds.size() < 3)
      bad(where + "step_seconds",
          fmt::format("has {} steps after the warm-up: at least 3 are needed", run.step_seconds.size()));
    run.median_seconds = *detail::median(run.step_seconds);
    run.seconds_per_op = run.median_seconds / run.operations;
    run.low = quantile(run.step_seconds, 0.25) / run.operations;
    run.high = quantile(run.step_seconds, 0.75) / run.operations;
    run.min = *std::min_element(run.step_seconds.begin(), run.step_seconds.end()) / run.operations;
    run.max = *std::max_element(run.step_seconds.begin(), run.step_seconds.end()) / run.operations;
    run.gpu_busy_seconds = number_or_none(r, "gpu_busy_seconds", where);
    run.gpu_kernels = number_or_none(r, "gpu_kernels", where);
    if (run.gpu_busy_seconds) {
      run.gpu_busy_fraction = *run.gpu_busy_seconds / run.median_seconds;
      d.max_busy_fraction = std::max(d.max_busy_fraction.value_or(0), *run.gpu_busy_fraction);
    }
    if (d.device == "cuda") {
      if (run.gpu_busy_fraction && *run.gpu_busy_fraction > kMaxHostProbeBusyFraction)
        throw HostProbeFailed(fmt::format(
            "the host probe's {} step is not host-bound: the GPU was busy {:.0f}% of its {:.4f} s (more than {:.0f}%), "
            "so its time is not the host's dispatch alone; is another job using this GPU?",
            run.name, 100.0 * *run.gpu_busy_fraction, run.median_seconds, 100.0 * kMaxHostProbeBusyFraction));
      if (!run.gpu_busy_fraction) {
        d.busy_checked = false;
        if (check.require_busy_check) {
          const std::string why = text_or_empty(r, "busy_error");
          throw HostProbeFailed(fmt::format(
              "the host probe could not check that its {} step is host-bound (the GPU's busy time was not measured{}); "
              "--no-busy-check takes the figure unchecked",
              run.name, why.empty() ? "" : ": " + why));
        }
      }
    }
    sum_median += run.median_seconds;
    sum_low += run.low * run.operations;
    sum_high += run.high * run.operations;
    sum_ops += run.operations;
    d.runs.push_back(std::move(run));
  }
  d.seconds_per_op = sum_median / sum_ops;
  d.low = sum_low / sum_ops;
  d.high = sum_high / sum_ops;
  return d;
}

TimeProfile host_profile(const HostDispatch& d, const GpuSpec& gpu, const std::string& name) {
  TimeProfile p = default_profile(gpu);
  const std::string rest = p.source;
  p.name = name;
  p.host_seconds_per_op = d.seconds_per_op;
  std::vector<std::string> runs;
  for (const auto& r : d.runs) runs.push_back(r.name);
  const std::string software = fmt::format("torch {}{}{}", d.torch.empty() ? "?" : d.torch,
                                           d.transformers.empty() ? "" : ", transformers " + d.transformers,
                                           d.peft.empty() ? "" : ", peft " + d.peft);
  p.source = fmt::format(
      "host_seconds_per_op measured by `trainfit calibrate --host` at {} on {}{}, {}: {} per operation (quartiles "
      "{}-{}) over host-bound steps ({}) of a {}-layer Qwen2 of hidden size 64, {} timed steps each{}; the other "
      "rates: {}",
      d.measured_at.empty() ? "an unknown time" : d.measured_at, d.cpu.empty() ? "an unknown CPU" : d.cpu,
      d.device == "cpu" ? " (on the CPU, no GPU: the CPU's own time per operation, not a GPU's dispatch cost)"
                        : ", " + (d.gpu.empty() ? std::string("a GPU") : d.gpu),
      software, us(d.seconds_per_op), us(d.low), us(d.high), fmt::format("{}", fmt::join(runs, ", ")), d.layers,
      d.runs.empty() ? 0 : d.runs.front().step_seconds.size(),
      d.max_busy_fraction  ? fmt::format(", GPU busy at most {:.0f}% of a step", 100.0 * *d.max_busy_fraction)
      : d.device == "cuda" ? ", GPU busy time not checked"
                           : "",
      rest);
  return p;
}

std::string describe_host_dispatch(const HostDispatch& d, const TimeProfile& reference) {
  std::string s = fmt::format("# host dispatch: {} per operation (quartiles {}-{}), on {}, {}{}\n",
                              us(d.seconds_per_op), us(d.low), us(d.high), d.cpu.empty() ? "an unknown CPU" : d.cpu,
                              d.device == "cpu" ? "the CPU (no GPU)" : d.gpu, fmt::format(", torch {}", d.torch));
  for (const auto& r : d.runs) {
    std::string busy = "GPU busy not measured";
    if (r.gpu_busy_fraction) busy = fmt::format("GPU busy {:.0f}%", 100.0 * *r.gpu_busy_fraction);
    if (d.device == "cpu") busy = "on the CPU";
    const std::string kernels =
        r.gpu_kernels
            ? fmt::format(", {:.0f} GPU activities a step (the time model counts {:.0f} kernels outside the optimizer)",
                          *r.gpu_kernels, r.kernels)
            : "";
    s += fmt::format(
        "#   {:<5} {:>8.1f} operations counted, median {:.4f} s of {} steps ({:.4f}-{:.4f} s): {} per operation "
        "(quartiles {}-{}), {}{}\n",
        r.name, r.operations, r.median_seconds, r.step_seconds.size(), r.low * r.operations, r.high * r.operations,
        us(r.seconds_per_op), us(r.low), us(r.high), busy, kernels);
  }
  // Full fine-tuning against LoRA: the operations LoRA adds (its branches, the adapters' optimizer
  // work, less the base's) priced by the difference of the two steps.
  const HostProbeRun* full = nullptr;
  const HostProbeRun* lora = nullptr;
  for (const auto& r : d.runs) {
    if (r.setup.method == Method::full) full = &r;
    if (r.setup.method == Method::lora) lora = &r;
  }
  if (full && lora && lora->operations > full->operations) {
    const double extra = (lora->median_seconds - full->median_seconds) / (lora->operations - full->operations);
    s += fmt::format(
        "#   full and lora differ by {:+.0f}%: the {:.1f} operations LoRA adds take {} each against the full step's "
        "{}\n",
        100.0 * (lora->seconds_per_op / full->seconds_per_op - 1.0), lora->operations - full->operations, us(extra),
        us(full->seconds_per_op));
  }
  s += fmt::format("# against the profile '{}': {} per operation, {:+.0f}%\n", reference.name,
                   us(reference.host_seconds_per_op), 100.0 * (d.seconds_per_op / reference.host_seconds_per_op - 1.0));
  return s;
}

}  // namespace trainfit
