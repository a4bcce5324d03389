// `trainfit validate FILE`: the planner's prediction beside measured steps, with errors.
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::cli {
namespace {

struct ValidateFlags {
  std::string path;
  std::string format = "table";
};

void print(const ComparisonSummary& summary, Format format) {
  if (format == Format::json) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& c : summary.rows)
      rows.push_back({{"line", c.measured.line},
                      {"model", c.measured.model},
                      {"measured_peak_allocated_mib", *c.measured.peak_allocated_mib},
                      {"predicted_peak_allocated_mib", to_mib(c.predicted_allocated)},
                      {"error", c.allocated_error},
                      {"predicted_peak", c.predicted_peak_phase}});
    std::cout << nlohmann::json{{"rows", rows},
                                {"median_abs_error", summary.median_abs_error},
                                {"max_abs_error", summary.max_abs_error}}
                     .dump(2)
              << "\n";
    return;
  }
  std::cout << fmt::format("{:>5}  {:<14}{:<7}{:<6}{:>6}{:>6}{:>5}{:>6}  {:>11}{:>11}{:>8}  {}\n", "line", "model", "method",
                           "wts", "seq", "batch", "rank", "ckpt", "measured", "predicted", "error", "predicted peak");
  for (const auto& c : summary.rows) {
    const auto& s = c.measured.setup;
    std::cout << fmt::format("{:>5}  {:<14}{:<7}{:<6}{:>6}{:>6}{:>5}{:>6}  {:>11.1f}{:>11.1f}{:>+7.1f}%  {}\n",
                             c.measured.line, c.measured.model, to_string(s.method),
                             s.amp ? "amp" : to_string(s.weights), s.seq, s.batch,
                             s.method == Method::full ? 0 : s.lora.rank, s.grad_ckpt ? "on" : "off",
                             *c.measured.peak_allocated_mib, to_mib(c.predicted_allocated), 100.0 * c.allocated_error,
                             c.predicted_peak_phase);
  }
  std::cout << fmt::format("\n{} rows: median |error| {:.1f}%, max |error| {:.1f}%\n", summary.rows.size(),
                           100.0 * summary.median_abs_error, 100.0 * summary.max_abs_error);
}

}  // namespace

void add_validate_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<ValidateFlags>();
  auto* cmd = app.add_subcommand(
      "validate", "Put the planner's prediction beside measured steps (JSON lines, the format of data/reference/)");
  cmd->add_option("file", flags->path, "measurements file")->required();
  cmd->add_option("--format", flags->format, "table | json")->capture_default_str();
  cmd->callback([flags, &exit_code] {
    const Format format = parse_format(flags->format);
    print(compare_with_measurements(load_measurements(flags->path)), format);
    exit_code = 0;
  });
}

}  // namespace trainfit::cli
