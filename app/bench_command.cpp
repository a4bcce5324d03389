// `trainfit bench PLAN.toml`: run a pre-registered experiment on this machine's GPU(s) and judge it.
// Progress goes to stderr as each config starts and ends; the judged criteria and the
// predicted-vs-measured table to stdout at the end (docs/bench.md).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "common/text.hpp"
#include "trainfit/bench.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/host_probe.hpp"
#include "trainfit/report.hpp"
#include "trainfit/telemetry.hpp"

namespace trainfit::cli {
namespace {

struct BenchFlags {
  std::string plan;
  std::string results;
  std::string runner;
  std::string format = "table";
  std::string gpu;
  bool dry_run = false;
  bool retry_failed = false;
  bool no_telemetry = false;
  bool judge_only = false;
  bool host_probe = false;
  std::optional<std::string> devices;
};

std::string clock(double s) {
  const long t = std::lround(s);
  return t >= 3600 ? fmt::format("{}h{:02}m", t / 3600, t / 60 % 60) : fmt::format("{}m{:02}s", t / 60, t % 60);
}

// Device memory and utilisation of one config's GPUs while it runs (all GPUs when it was given
// none), from NVML (the watch command's reader).
class NvmlSampler : public bench::ConfigSampler {
 public:
  NvmlSampler(Nvml& nvml, const std::vector<int>& devices) : nvml_(nvml) {
    for (std::size_t i = 0; i < nvml_.gpus().size(); ++i)
      if (devices.empty() || std::find(devices.begin(), devices.end(), nvml_.gpus()[i].index) != devices.end())
        positions_.push_back(i);
  }
  void tick() override {
    for (const std::size_t i : positions_) {
      const GpuReading r = nvml_.read(i, telemetry::read_set::kActivity | telemetry::read_set::kMemory);
      if (r.memory_used_bytes) used_max_ = std::max(used_max_.value_or(0), *r.memory_used_bytes);
      if (r.gpu_util_percent) {
        util_sum_ += *r.gpu_util_percent;
        util_max_ = std::max(util_max_, *r.gpu_util_percent);
        ++util_n_;
      }
    }
    ++ticks_;
  }
  bench::ConfigTelemetry summary() override {
    bench::ConfigTelemetry t;
    t.samples = ticks_;
    // Whole MiB, as nvidia-smi prints it.
    if (used_max_) t.device_used_max_mib = std::floor(static_cast<double>(*used_max_) / 1048576.0);
    if (util_n_ > 0) {
      t.gpu_util_mean = util_sum_ / util_n_;
      t.gpu_util_max = util_max_;
    }
    return t;
  }

 private:
  Nvml& nvml_;
  std::vector<std::size_t> positions_;  // into nvml_.gpus()
  std::optional<std::int64_t> used_max_;
  double util_sum_ = 0, util_max_ = 0;
  int util_n_ = 0, ticks_ = 0;
};

std::string on_gpus(const std::vector<int>& devices) {
  return fmt::format(" on GPU{} {}", devices.size() == 1 ? "" : "s", fmt::join(devices, ","));
}

// A progress line is one line on a terminal: what a runner wrote (its status and error) and the
// plan's x_ values in the label are printed with their control characters escaped.
void print_progress(const bench::Progress& p) {
  using detail::printable;
  const std::string at = fmt::format("[{}/{}]", p.position, p.total);
  const std::string eta = p.eta_seconds ? ", eta " + clock(*p.eta_seconds) : "";
  const std::string label = printable(p.config->label);
  // With --devices, configs end out of order: the end names its config and GPUs too.
  const std::string where = p.devices == nullptr ? ""
                            : p.devices->empty() ? " " + label
                                                 : " " + label + on_gpus(*p.devices);
  if (p.event == bench::Progress::Event::started) {
    std::cerr << fmt::format("{} {}{}  (elapsed {}{}{})\n", at, label,
                             p.devices != nullptr ? on_gpus(*p.devices) : "", clock(p.elapsed_seconds), eta,
                             p.devices != nullptr ? fmt::format(", {} running", p.running) : "");
    return;
  }
  const bench::BenchRow& r = *p.row;
  const Measurement& m = r.measured;
  std::string what = fmt::format("{} {}", printable(m.status), r.verdict.empty() ? "?" : r.verdict);
  if (m.peak_allocated_mib) what += fmt::format(", peak {:.1f} MiB", *m.peak_allocated_mib);
  if (r.predicted && r.predicted->peak_allocated_mib) what += fmt::format(" (predicted {:.1f})", *r.predicted->peak_allocated_mib);
  if (m.step_seconds) what += fmt::format(", {:.3f} s/step", *m.step_seconds);
  if (p.event == bench::Progress::Event::skipped) {
    std::cerr << fmt::format("{} {}  already done: {}\n", at, label, what);
    return;
  }
  if (m.status != "ok" && !m.error.empty()) what += ": " + printable(m.error.substr(0, 160));
  std::cerr << fmt::format("{}{}   -> {}  ({:.1f} s; elapsed {}{})\n", at, where, what, r.run.wall_seconds,
                           clock(p.elapsed_seconds), eta);
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<BenchFlags>();
  auto* cmd = app.add_subcommand("bench",
                                 "Run a pre-registered experiment plan (TOML) as real training steps, one process per config,\n"
                                 "and judge it: verdict per config, prediction beside measurement, the criteria (docs/bench.md)");
  cmd->add_option("plan", flags->plan, "experiment plan file (plans/seed-16gb.toml)")->required();
  cmd->add_option("--results", flags->results, "results directory (default results/<plan name>); rerun to resume");
  cmd->add_option("--runner", flags->runner,
                  "runner command; gets --config-file PATH --out PATH (default: $TRAINFIT_RUNNER, else python3 -m trainfit_runner)");
  cmd->add_option("--format", flags->format, "table | json (results.json on stdout) | html (a report)")->capture_default_str();
  cmd->add_option("--gpu", flags->gpu, "the card the predictions are for (default: the plan's run.gpu, else the one the runner reports)");
  cmd->add_flag("--dry-run", flags->dry_run, "list the configs with their predictions; run nothing");
  cmd->add_flag("--retry-failed", flags->retry_failed, "run again the configs that crashed, timed out or failed");
  cmd->add_flag("--no-telemetry", flags->no_telemetry, "do not sample the GPU through NVML");
  cmd->add_flag("--judge-only", flags->judge_only,
                "run nothing: judge the rows --results already holds (measured elsewhere, or before a planner\n"
                "change) and write results.json");
  cmd->add_flag("--host-probe", flags->host_probe,
                "each config's runner, after its steps, also times the host probe (what `trainfit calibrate --host`\n"
                "measures: about 10 s a config) and its row carries this host's dispatch cost, which `validate`\n"
                "prices that row's step with (docs/model.md, \"Host dispatch, measured\")");
  cmd->add_option("--devices", flags->devices,
                  "run configs concurrently on these GPUs (NVML indices, PCI bus order: 0,1 or all), each on its\n"
                  "`gpus` of them, started in plan order; the runner gets CUDA_VISIBLE_DEVICES and\n"
                  "CUDA_DEVICE_ORDER=PCI_BUS_ID. Concurrent configs share the host's CPU and PCIe, so the step\n"
                  "times of host-bound configs can move. Default: one config at a time, every GPU visible");
  cmd->callback([flags, &exit_code] {
    if (flags->format != "table" && flags->format != "json" && flags->format != "html")
      throw InputError(fmt::format("unknown --format '{}'; expected table, json or html", flags->format));
    bench::ExperimentPlan plan = bench::load_experiment_plan(flags->plan);
    if (!flags->gpu.empty()) plan.gpu = find_gpu(flags->gpu).id;
    const std::vector<bench::BenchConfig> configs = bench::expand_matrix(plan);
    // The list's form is checked before anything runs, even for --dry-run ("all" needs NVML).
    if (flags->devices && *flags->devices != "all") bench::parse_devices(*flags->devices, nullptr);
    if (flags->dry_run) {
      std::cout << bench::render_matrix(plan, configs);
      exit_code = 0;
      return;
    }
    bench::RunOptions o;
    o.results_dir = !flags->results.empty() ? flags->results : "results/" + plan.name;
    // `write`: results.json, unless a run in progress owns it (it writes its own when it ends).
    auto judge_and_report = [&](const std::vector<bench::BenchRow>& rows, bool write) {
      const bench::BenchReport report = bench::judge_results(plan, rows);
      const nlohmann::json doc = bench::report_to_json(plan, report);
      if (write) bench::write_results_json(o.results_dir, doc);
      if (flags->format == "json") std::cout << doc.dump(2) << "\n";
      else if (flags->format == "html")
        std::cout << render_html_report("bench", fmt::format("trainfit bench: {}", plan.name), doc);
      else
        std::cout << bench::render_report(plan, report)
                  << (write ? fmt::format("\nresults: {}/results.json\n", o.results_dir) : std::string());
      exit_code = 0;
    };
    if (flags->judge_only) {
      // Judging while another bench runs on the directory is allowed (a look at a long run): the
      // rows it has finished, read whole, judged as a snapshot.
      const bench::FinishedRows done = bench::finished_rows(configs, o.results_dir);
      for (const std::string& w : done.warnings) std::cerr << "trainfit bench: warning: " << w << "\n";
      if (done.run_in_progress)
        std::cerr << fmt::format(
            "{}: a `trainfit bench` is running in {}: judging the {} of {} configs it has finished so far; running "
            "nothing, and results.json is left to that run\n",
            plan.name, o.results_dir, done.rows.size(), configs.size());
      else
        std::cerr << fmt::format("{}: judging the {} of {} configs {}/results.jsonl holds; running nothing\n", plan.name,
                                 done.rows.size(), configs.size(), o.results_dir);
      judge_and_report(done.rows, !done.run_in_progress);
      return;
    }
    const bench::RunnerCommand runner = bench::runner_command(flags->runner, plan.runner);
    o.runner = runner.argv;
    o.env = runner.env;
    if (flags->host_probe) {
      // The request beside the results; each runner finds it through $TRAINFIT_HOST_PROBE.
      const std::filesystem::path request = std::filesystem::absolute(o.results_dir) / "host-probe-request.json";
      std::error_code ec;
      std::filesystem::create_directories(request.parent_path(), ec);
      detail::write_text_file(request.string(), host_probe_request().dump(2) + "\n");
      o.env.emplace_back("TRAINFIT_HOST_PROBE", request.string());
    }
    o.retry_failed = flags->retry_failed;
    o.on_progress = print_progress;
    o.on_warning = [](const std::string& w) { std::cerr << "trainfit bench: warning: " << w << "\n"; };
    std::unique_ptr<Nvml> nvml;
    if (!flags->no_telemetry || flags->devices) {  // --devices: NVML, when there, says which GPUs exist
      try {
        nvml = Nvml::open();
      } catch (const TelemetryUnavailable& e) {
        if (!flags->no_telemetry)
          std::cerr << fmt::format("trainfit bench: no NVML telemetry ({}); the runner's own readings only\n",
                                   e.what());
      }
    }
    if (flags->devices) {
      std::vector<int> available;
      if (nvml)
        for (const auto& g : nvml->gpus()) available.push_back(g.index);
      o.devices = bench::parse_devices(*flags->devices, nvml ? &available : nullptr);
    }
    if (nvml && !flags->no_telemetry)
      o.make_sampler = [&nvml](const std::vector<int>& devices) {
        return std::make_unique<NvmlSampler>(*nvml, devices);
      };
    std::cerr << fmt::format(
        "{}: {} configs, results in {}/results.jsonl, runner: {}{}\n", plan.name, configs.size(), o.results_dir, runner.text,
        o.devices.empty() ? ""
                          : fmt::format("; on GPUs {}, up to {} configs at once", fmt::join(o.devices, ","), o.devices.size()));
    judge_and_report(bench::run_configs(plan, configs, o), true);
  });
}

}  // namespace trainfit::cli
