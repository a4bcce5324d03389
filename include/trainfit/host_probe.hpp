#pragma once
// The host's dispatch time per operation, measured in the time model's own units (docs/model.md,
// "Host dispatch, measured"): `trainfit calibrate --host`, `trainfit bench --host-probe` and the
// probe for your own code.
//
// A training step of a tiny model (a real family's config, Qwen2 with hidden size 64) is
// host-bound: every kernel ends long before the host has dispatched the next, so the step's wall
// time is the host's dispatch work alone. The runner (python/trainfit_runner/host_probe.py) only
// builds and times such steps; trainfit counts their operations from the same description of the
// step that `plan` prices (step_work) and divides:
//
//   host_seconds_per_op = median step seconds / host_operations(step_work(tiny model, setup))
//
// which is what the time model multiplies operations by (host = operations x host_seconds_per_op).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/setup.hpp"
#include "trainfit/time.hpp"

namespace trainfit {

struct HostProbeOptions {
  // Decoder layers of the tiny model: Qwen2.5-0.5B's 24 by default, so that the probe's mix of
  // per-layer and per-step operations is that of the small models whose steps are host-bound.
  int layers = 24;
  int steps = 15;  // timed steps a setup, after the warm-up
  int warmup = 3;
  // "cuda"; "cpu" measures the CPU's own time per operation (operations run as they are
  // dispatched there): a test of the pipeline, not a GPU's dispatch cost.
  std::string device = "cuda";
  std::vector<Method> methods = {Method::full, Method::lora};
  bool busy_check = true;  // the runner measures the GPU's busy time (torch.profiler)
};

// The request the runner reads: {"schema", "model": the tiny model's config.json, "runs": [{"name",
// "config"}], "steps", "warmup", "device", "busy_check"}. Throws InputError on options out of range
// (layers 1-128, steps 3-1000, warmup 1-100, device cuda or cpu, at least one method, no qlora).
nlohmann::json host_probe_request(const HostProbeOptions& options = {});

// The operations the host dispatches in one step of `setup` that the time model prices at
// host_seconds_per_op: every micro-batch's, the once-a-step ones (DDP's bucket copies) and the
// optimizer step's (in forward-operation equivalents); DTensor's dispatch has its own rate. When the
// host sets the pace on one GPU, step seconds = host_operations x host_seconds_per_op.
double host_operations(const StepWork& work, const TrainingSetup& setup);

// A step that is not host-bound: the GPU was busy for more than this fraction of its wall time.
inline constexpr double kMaxHostProbeBusyFraction = 0.5;

struct HostProbeRun {
  std::string name;  // "full", "lora"
  TrainingSetup setup;
  double operations = 0;             // host_operations of the step, counted by trainfit
  double kernels = 0;                // kernels the time model counts for it
  std::vector<double> step_seconds;  // the timed steps, warm-up left out
  double median_seconds = 0;
  double seconds_per_op = 0;                // median_seconds / operations
  double low = 0, high = 0;                 // the quartiles of step seconds / operations
  double min = 0, max = 0;                  // the fastest and slowest step / operations
  std::optional<double> gpu_busy_seconds;   // a step's GPU busy time (union of its kernels), measured
  std::optional<double> gpu_busy_fraction;  // gpu_busy_seconds / median_seconds
  std::optional<double> gpu_kernels;        // kernels a step, as the profiler saw them
};

struct HostDispatch {
  // Over every run: sum of the medians / sum of the operations (each run weighted by its steps'
  // work); low and high the same from the runs' quartiles: the spread of the repeats.
  double seconds_per_op = 0;
  double low = 0, high = 0;
  std::vector<HostProbeRun> runs;
  std::string device;  // cuda or cpu
  std::string gpu;     // as torch names it ("NVIDIA H200")
  std::string cpu;     // /proc/cpuinfo's model name
  std::string torch, transformers, peft;
  std::string measured_at;   // UTC, ISO 8601
  int layers = 0;            // the tiny model's
  double probe_seconds = 0;  // the runner's wall time for the probe
  bool busy_checked = false;
  std::optional<double> max_busy_fraction;
};

// A probe that ran but gave no figure: the runner's error (no GPU, no torch), or steps that were
// not host-bound. A failure of the machine, not of the input (exit code 3).
class HostProbeFailed : public SystemError {
 public:
  using SystemError::SystemError;
};

struct HostProbeCheck {
  bool require_busy_check = true;  // refuse a GPU measurement whose busy time was not measured
};

// Reads the runner's record (host_probe.py's output: the request it ran, every step's seconds,
// the GPU's busy time) and divides each run's steps by the operations trainfit counts for it.
// Throws InputError naming the field on a malformed record, HostProbeFailed when the record says
// the probe failed, or a run was not host-bound (busy above kMaxHostProbeBusyFraction, or
// unmeasured with check.require_busy_check).
HostDispatch host_dispatch_from_probe(const nlohmann::json& record, const HostProbeCheck& check = {});

// `gpu`'s default profile with host_seconds_per_op replaced by the measured figure, its source
// saying what was measured, when, on which CPU, GPU and software.
TimeProfile host_profile(const HostDispatch& dispatch, const GpuSpec& gpu, const std::string& name);

// Lines that describe the measurement (each run: operations, median, quartiles, per operation,
// GPU busy; full against LoRA; against the default), for a terminal.
std::string describe_host_dispatch(const HostDispatch& dispatch, const TimeProfile& reference);

}  // namespace trainfit
