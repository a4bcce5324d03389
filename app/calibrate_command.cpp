// `trainfit calibrate FILE...`: fit a time profile to measured steps and write it.
// `trainfit calibrate --host`: measure this machine's host dispatch time per operation on its GPU
// and write the card's default profile with it (docs/model.md, "Host dispatch, measured").
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "progress.hpp"
#include "common/text.hpp"
#include "trainfit/bench.hpp"
#include "trainfit/host_probe.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::cli {
namespace {

struct CalibrateFlags {
  std::vector<std::string> files;
  std::string output;
  std::string name;
  std::vector<std::string> fit = {"host_seconds_per_op", "bandwidth_efficiency"};
  // --host
  bool host = false;
  std::string gpu;
  std::string method = "both";
  std::string runner;
  std::string record;
  double timeout = 600;
  bool print_request = false;
  bool no_busy_check = false;
  HostProbeOptions probe;
};

void calibrate_from_files(const CalibrateFlags& flags) {
  std::vector<TimedStep> steps;
  for (const auto& f : flags.files) {
    const auto rows = timed_steps(load_measurements(f));
    steps.insert(steps.end(), rows.begin(), rows.end());
  }
  const std::string sources = fmt::format("{}", fmt::join(flags.files, ", "));
  if (steps.empty())
    throw InputError(
        fmt::format("{}: no timed rows: no row has status \"ok\" and a measured step time "
                    "(\"measured\": {{\"step_seconds_median\": ...}}); nothing to fit",
                    sources));
  TimeProfile start = default_profile(steps.front().gpu);
  start.name = flags.name.empty() ? "calibrated" : flags.name;
  const CalibrationResult r = calibrate(steps, start, flags.fit);
  TimeProfile p = r.profile;
  p.source = fmt::format("fitted to {} steps of {}", r.steps, sources);
  const std::string toml = profile_to_toml(p);
  // Every step of the write is checked: `-o /dev/full` or a full disk is a SystemError (exit 3),
  // not a success with nothing written.
  if (!flags.output.empty()) save_profile(p, flags.output);
  std::cout << toml
            << fmt::format("# on the fitted steps: median |error| {:.1f}%, max |error| {:.1f}%\n",
                           100.0 * r.median_abs_error, 100.0 * r.max_abs_error);
}

void calibrate_host(CalibrateFlags flags) {
  if (flags.method == "both")
    flags.probe.methods = {Method::full, Method::lora};
  else if (flags.method == "full")
    flags.probe.methods = {Method::full};
  else if (flags.method == "lora")
    flags.probe.methods = {Method::lora};
  else
    throw InputError(fmt::format("--method: '{}' is not full, lora or both", flags.method));
  flags.probe.busy_check = !flags.no_busy_check;
  const nlohmann::json request = host_probe_request(flags.probe);
  if (flags.print_request) {
    std::cout << request.dump(2) << "\n";
    return;
  }
  // The card is checked before anything runs.
  std::optional<GpuSpec> card;
  if (!flags.gpu.empty()) card = find_gpu(flags.gpu);
  if (!(flags.timeout > 0)) throw InputError("--timeout: must be above 0 seconds");
  const bench::RunnerCommand runner = bench::runner_command(flags.runner);
  std::cerr << fmt::format("trainfit calibrate --host: timing {} steps of a {}-layer Qwen2 ({}) on {} through `{}`\n",
                           flags.probe.steps + flags.probe.warmup, flags.probe.layers, flags.method,
                           flags.probe.device == "cpu" ? "the CPU" : "the GPU", runner.text);
  const nlohmann::json record = [&] {
    const Progress measuring("measuring this machine's host dispatch on its GPU");
    return bench::run_host_probe(runner, request, flags.timeout);
  }();
  if (!flags.record.empty()) detail::write_text_file(flags.record, record.dump(2) + "\n");
  const HostDispatch d = host_dispatch_from_probe(record, {.require_busy_check = !flags.no_busy_check});
  if (!card && !d.gpu.empty()) {
    // The card the runner ran on, when the catalogue knows it: its default profile is the base.
    try {
      card = find_gpu(d.gpu);
    } catch (const InputError&) {
      std::cerr << fmt::format(
          "trainfit calibrate --host: '{}' is not in the GPU catalogue (`trainfit gpus`); the "
          "profile takes the default rates; --gpu names the card\n",
          detail::printable(d.gpu));
    }
  }
  const GpuSpec gpu = card.value_or(GpuSpec{});
  const TimeProfile reference = default_profile(gpu);
  const TimeProfile p = host_profile(d, gpu, flags.name.empty() ? reference.name + "-host" : flags.name);
  if (d.device == "cpu")
    std::cerr << "trainfit calibrate --host: measured on the CPU (--device cpu): the CPU's own time per operation, "
                 "not the dispatch cost of a GPU; the profile says so\n";
  // The time model agrees the probe's steps are host-bound at the measured rate: the host's
  // dispatch takes longer than the GPU's work, in the step and in its optimizer step.
  if (d.device == "cuda" && card) {
    const ModelSpec model = parse_model_config(request["model"].dump(), "the host probe's model");
    for (const auto& r : d.runs) {
      const TimeEstimate t = estimate_time(model, r.setup, gpu, p, false);
      if (t.bottleneck != Bottleneck::launch_overhead)
        std::cerr << fmt::format(
            "trainfit calibrate --host: the time model prices the probe's {} step as {}-bound "
            "on {} at this rate ({:.4f} s of GPU work): its operations may be under-counted\n",
            r.name, to_string(t.bottleneck), gpu.id, t.gpu_seconds);
    }
  }
  if (!flags.output.empty()) save_profile(p, flags.output);
  std::cout << profile_to_toml(p) << describe_host_dispatch(d, reference);
}

}  // namespace

void add_calibrate_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<CalibrateFlags>();
  auto* cmd = app.add_subcommand(
      "calibrate",
      "Fit a time profile (achievable fractions of the card's peaks, host time per operation) to measured steps;\n"
      "or, with --host, measure this machine's host dispatch time per operation on its GPU. Use the profile with\n"
      "`plan --profile` (docs/model.md, \"The rates\" and \"Host dispatch, measured\")");
  cmd->add_option("files", flags->files, "measurement files (JSON lines, the format of data/reference/)");
  cmd->add_option("--output,-o,--out", flags->output, "write the profile (TOML) here");
  cmd->add_option("--name", flags->name,
                  "profile name (default: calibrated; with --host, the card's default profile's name and -host)");
  cmd->add_option("--fit", flags->fit,
                  "parameters to fit (the rest keep their measured values): matmul_efficiency, attention_efficiency, "
                  "fp32_efficiency, bandwidth_efficiency, host_seconds_per_op, kernel_floor_seconds")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_flag("--host", flags->host,
                "measure host_seconds_per_op on this machine: host-bound training steps of a tiny Qwen2 through the\n"
                "bench runner (python/trainfit_runner), timed, divided by the operations trainfit counts for them\n"
                "(a few seconds; needs a CUDA GPU, torch, transformers and peft)");
  cmd->add_option("--gpu", flags->gpu,
                  "with --host: the card whose default profile takes the figure (default: the one the runner ran on)");
  cmd->add_option("--method", flags->method, "with --host: the steps timed: full, lora or both")->capture_default_str();
  cmd->add_option("--layers", flags->probe.layers, "with --host: the tiny model's decoder layers")
      ->capture_default_str();
  cmd->add_option("--steps", flags->probe.steps, "with --host: timed steps of each setup, after the warm-up")
      ->capture_default_str();
  cmd->add_option("--warmup", flags->probe.warmup, "with --host: warm-up steps of each setup")->capture_default_str();
  cmd->add_option("--device", flags->probe.device,
                  "with --host: cuda, or cpu to test the pipeline without a GPU (the CPU's own time per operation,\n"
                  "not a GPU's dispatch cost: the profile says so)")
      ->capture_default_str();
  cmd->add_option("--runner", flags->runner,
                  "with --host: runner command; gets --host-probe REQUEST --out PATH (default: $TRAINFIT_RUNNER, else\n"
                  "python3 -m trainfit_runner, as bench)");
  cmd->add_option("--timeout", flags->timeout, "with --host: seconds the probe may take")->capture_default_str();
  cmd->add_option("--record", flags->record,
                  "with --host: also write the runner's record (every step's time) here (JSON)");
  cmd->add_flag("--print-request", flags->print_request,
                "with --host: print the probe's request (the tiny model, the setups) and run nothing");
  cmd->add_flag("--no-busy-check", flags->no_busy_check,
                "with --host: do not measure the GPU's busy time (torch.profiler); the figure is then unchecked");
  cmd->callback([flags, cmd, &exit_code] {
    if (flags->host) {
      if (!flags->files.empty())
        throw InputError("calibrate: --host measures this machine; it takes no measurement files");
      calibrate_host(*flags);
    } else {
      if (flags->files.empty())
        throw InputError("calibrate: give measurement files to fit, or --host to measure this machine's host dispatch");
      for (const char* opt : {"--gpu", "--method", "--layers", "--steps", "--warmup", "--device", "--runner",
                              "--timeout", "--record", "--print-request", "--no-busy-check"})
        if (cmd->count(opt) > 0) throw InputError(fmt::format("calibrate: {} goes with --host", opt));
      calibrate_from_files(*flags);
    }
    exit_code = 0;
  });
}

}  // namespace trainfit::cli
