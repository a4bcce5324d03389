// `trainfit trace FILE|DIR [--snapshot SNAPSHOT] [--plan <setup flags>]`: where the time (and
// the memory) of real steps went, from PyTorch's profiler files (docs/trace.md).
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "commands.hpp"
#include "progress.hpp"
#include "setup_flags.hpp"
#include "trainfit/trace.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::cli {
namespace {

struct TraceFlags {
  std::string path, snapshot, format = "table", profile;
  bool plan = false;
  std::size_t top = 10;
};

}  // namespace

void add_trace_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<TraceFlags>();
  auto* cmd = app.add_subcommand(
      "trace",
      "Where the time and memory of real steps went, from PyTorch profiler traces (.json, .json.gz, or a "
      "folder of per-rank files) and memory snapshots (docs/trace.md).");
  cmd->add_option("trace", flags->path,
                  "a Kineto trace file or a folder of them (one per rank; a process's profiling cycles, one file each, "
                  "read as one)");
  cmd->add_option("--snapshot", flags->snapshot,
                  "a memory snapshot: the pickle torch.cuda.memory._dump_snapshot writes (plain or gzipped; read without Python, nothing in it run), or its JSON rendering; at an out-of-memory error it says why");
  cmd->add_flag("--plan", flags->plan,
                "put the trace's measured terms beside the planner's prediction for the setup the other flags give");
  cmd->add_option("--format", flags->format, "table | json | markdown | html (one self-contained page: the steps as timelines, the kernels, the snapshot)")->capture_default_str();
  cmd->add_option("--top", flags->top, "kernels and allocation stacks to list")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--profile", flags->profile, "time profile for --plan (from `trainfit calibrate`)");
  auto setup_flags = std::make_shared<SetupFlags>(*cmd);
  cmd->footer(
      "Without a trace, --snapshot alone reads the snapshot. The setup flags are plan's (trainfit plan --help); "
      "they matter with --plan only.");
  cmd->callback([flags, setup_flags, &exit_code] {
    if (flags->path.empty() && flags->snapshot.empty())
      throw InputError("trace: give a trace file or folder, or --snapshot FILE");
    const Format format = parse_report_format(flags->format);
    std::optional<trace::SnapshotReport> snapshot;
    if (!flags->snapshot.empty()) {
      const Progress reading("reading the snapshot " + flags->snapshot);
      snapshot = trace::analyse_snapshot(flags->snapshot, flags->top);
    }
    std::optional<Plan> plan;
    if (flags->plan) {
      if (!setup_flags->was_given("model"))
        throw InputError("trace --plan: give the setup the trace ran, at least --model and the card (--gpu)");
      PlanOptions options;
      options.suggest = false;
      if (!flags->profile.empty()) options.profile = load_profile(flags->profile);
      const TrainingSetup setup = resolve_setup(setup_flags->given());
      plan = make_plan(load_model(setup.model), setup, resolve_card(setup), options);
    }
    if (flags->path.empty()) {
      std::optional<trace::PlanComparison> comparison;
      if (plan) comparison = trace::compare_with_plan(trace::RankTrace{}, &*snapshot, *plan);
      std::cout << trace::render_snapshot(*snapshot, comparison ? &*comparison : nullptr, format);
      exit_code = 0;
      return;
    }
    trace::TraceOptions options;
    options.top_kernels = flags->top;
    const trace::TraceReport report = [&] {
      const Progress reading("reading the trace " + flags->path);
      return trace::analyse_trace(flags->path, options);
    }();
    std::optional<trace::PlanComparison> comparison;
    if (plan) {
      // Beside the plan: the straggler's rank when there is one (the step time is its), else the first.
      const std::size_t rank = report.straggler >= 0 ? static_cast<std::size_t>(report.straggler) : 0;
      comparison = trace::compare_with_plan(report.ranks[rank], snapshot ? &*snapshot : nullptr, *plan);
    }
    std::cout << trace::render_trace(report, snapshot ? &*snapshot : nullptr, comparison ? &*comparison : nullptr,
                                     format);
    exit_code = 0;
  });
}

}  // namespace trainfit::cli
