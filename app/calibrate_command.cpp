// `trainfit calibrate FILE...`: fit a time profile to measured steps and write it.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::cli {
namespace {

struct CalibrateFlags {
  std::vector<std::string> files;
  std::string output;
  std::string name = "calibrated";
  std::vector<std::string> fit = {"host_seconds_per_op", "bandwidth_efficiency"};
};

}  // namespace

void add_calibrate_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<CalibrateFlags>();
  auto* cmd = app.add_subcommand("calibrate",
                                 "Fit a time profile (achievable fractions of the card's peaks, host time per operation) "
                                 "to measured steps; use it with `plan --profile`");
  cmd->add_option("files", flags->files, "measurement files (JSON lines, the format of data/reference/)")->required();
  cmd->add_option("--output,-o", flags->output, "write the profile (TOML) here");
  cmd->add_option("--name", flags->name, "profile name")->capture_default_str();
  cmd->add_option("--fit", flags->fit,
                  "parameters to fit (the rest keep their measured values): matmul_efficiency, attention_efficiency, "
                  "fp32_efficiency, bandwidth_efficiency, host_seconds_per_op, kernel_floor_seconds")
      ->delimiter(',')
      ->capture_default_str();
  cmd->callback([flags, &exit_code] {
    std::vector<TimedStep> steps;
    for (const auto& f : flags->files) {
      const auto rows = timed_steps(load_measurements(f));
      steps.insert(steps.end(), rows.begin(), rows.end());
    }
    const std::string sources = fmt::format("{}", fmt::join(flags->files, ", "));
    if (steps.empty())
      throw InputError(fmt::format("{}: no timed rows: no row has status \"ok\" and a measured step time "
                                   "(\"measured\": {{\"step_seconds_median\": ...}}); nothing to fit",
                                   sources));
    TimeProfile start = default_profile(steps.front().gpu);
    start.name = flags->name;
    const CalibrationResult r = calibrate(steps, start, flags->fit);
    TimeProfile p = r.profile;
    p.source = fmt::format("fitted to {} steps of {}", r.steps, sources);
    const std::string toml = profile_to_toml(p);
    // Every step of the write is checked: `-o /dev/full` or a full disk is a SystemError (exit 3),
    // not a success with nothing written.
    if (!flags->output.empty()) save_profile(p, flags->output);
    std::cout << toml
              << fmt::format("# on the fitted steps: median |error| {:.1f}%, max |error| {:.1f}%\n",
                             100.0 * r.median_abs_error, 100.0 * r.max_abs_error);
    exit_code = 0;
  });
}

}  // namespace trainfit::cli
