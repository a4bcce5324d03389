// `trainfit validate FILE`: the planner's prediction beside measured steps, with errors.
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "common/text.hpp"
#include "report/report_text.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::cli {
namespace {

struct ValidateFlags {
  std::string path;
  std::string format = "table";
  std::string profile;
  bool profile_host = false;
  bool published = false;
};

void print(const ComparisonSummary& summary, Format format, const std::string& source) {
  if (format == Format::json) {
    std::cout << comparison_to_json(summary).dump(2) << "\n";
    return;
  }
  if (format == Format::html) {
    std::cout << render_html_report("validate", fmt::format("trainfit validate: {}", source),
                                    comparison_to_json(summary));
    return;
  }
  // One row a measured step, in 100 columns: the setup in a few words, then memory and time, each
  // measured, predicted and the error. The bottleneck and the moment of the peak each row predicts
  // are in --format json and html; here they are counted below the table.
  std::vector<std::vector<std::string>> rows = {
      {"line", "model", "setup", "MiB meas", "MiB pred", "error", "s meas", "s pred", "error"}};
  std::map<std::string, int> bottlenecks;
  for (const auto& c : summary.rows) {
    const auto& s = c.measured.setup;
    const Measurement& m = c.measured.measured;
    const bool timed = m.step_seconds.has_value() && c.predicted_step_seconds > 0;
    std::string setup = fmt::format("{} {} {}x{}", to_string(s.method), s.amp ? "amp" : to_string(s.weights), s.seq, s.batch);
    if (s.method != Method::full) setup += fmt::format(" r{}", s.lora.rank);
    if (s.grad_ckpt) setup += " ckpt";
    if (s.gpus > 1) setup += fmt::format(" {}x{}", to_string(s.parallel), s.gpus);
    rows.push_back({std::to_string(c.measured.line), s.model, setup, fmt::format("{:.1f}", *m.peak_allocated_mib),
                    fmt::format("{:.1f}", to_mib(c.predicted_allocated)), fmt::format("{:+.1f}%", 100.0 * c.allocated_error),
                    timed ? fmt::format("{:.4f}", *m.step_seconds) : "-", fmt::format("{:.4f}", c.predicted_step_seconds),
                    timed ? fmt::format("{:+.0f}%", 100.0 * c.step_error) : "-"});
    ++bottlenecks[c.predicted_bottleneck];
  }
  std::cout << detail::aligned_table(rows, {false, true, true, false, false, false, false, false, false});
  std::vector<std::string> counts;
  for (const auto& [name, n] : bottlenecks) counts.push_back(fmt::format("{} {}", name, n));
  std::cout << detail::wrapped(fmt::format("Predicted bottlenecks (rows): {}", fmt::join(counts, ", ")), detail::kTextColumns,
                               "  ")
            << "\n";
  std::cout << fmt::format("\n{} rows: median |error| {:.1f}%, max |error| {:.1f}%\n", summary.rows.size(),
                           100.0 * summary.median_abs_error, 100.0 * summary.max_abs_error);
  if (summary.max_abs_reserved_error > 0)
    std::cout << fmt::format("peak reserved: median |error| {:.1f}%, max |error| {:.1f}%\n",
                             100.0 * summary.median_abs_reserved_error, 100.0 * summary.max_abs_reserved_error);
  if (summary.timed_rows > 0)
    std::cout << fmt::format("{} timed rows: step time median |error| {:.1f}%, max |error| {:.1f}%\n", summary.timed_rows,
                             100.0 * summary.median_abs_step_error, 100.0 * summary.max_abs_step_error);
  if (summary.rows_with_own_host > 0)
    std::cout << fmt::format("{} of them priced with their own host dispatch time (measured.host_probe; --profile-host "
                             "takes the profile's instead)\n",
                             summary.rows_with_own_host);
  for (const auto& note : summary.host_probe_notes)
    std::cout << fmt::format("host probe gave no figure: {}\n", detail::printable(note));
}

// `--published`: one row a run expressed in trainfit's settings (its id, published and predicted
// tokens/s a GPU and memory, the errors), the summary, then what the other runs use that no
// setting describes, the most runs first.
void print(const PublishedSummary& summary, Format format, const std::string& source) {
  if (format == Format::json) {
    std::cout << published_comparison_to_json(summary).dump(2) << "\n";
    return;
  }
  if (format == Format::html) throw InputError("validate --published prints a table or JSON (--format table|json)");
  const auto percent = [](const std::optional<double>& e) {
    return e ? fmt::format("{:+.0f}%", 100.0 * *e) : std::string("-");
  };
  std::vector<std::vector<std::string>> rows = {
      {"line", "run", "tok/s/GPU pub", "pred", "error", "GiB pub", "pred", "error", "verdict"}};
  for (const auto& c : summary.rows) {
    const PublishedRun& r = *c.run;
    const double gib = static_cast<double>(kGiB);
    rows.push_back(
        {std::to_string(r.line), r.id,
         r.tokens_per_second_per_gpu ? fmt::format("{:.0f}", *r.tokens_per_second_per_gpu) : "-",
         c.predicted_tokens_per_second_per_gpu > 0 ? fmt::format("{:.0f}", c.predicted_tokens_per_second_per_gpu) : "-",
         percent(c.tokens_error), r.memory_bytes ? fmt::format("{:.1f} {}", *r.memory_bytes / gib, r.memory_kind) : "-",
         r.memory_bytes ? fmt::format("{:.1f}", c.predicted_memory_bytes / gib) : "-", percent(c.memory_error),
         c.verdict});
  }
  std::cout << detail::aligned_table(rows, {false, true, false, false, false, false, false, false, true});
  std::cout << fmt::format("\n{} published runs in {}: {} expressed in trainfit's settings\n", summary.runs, source,
                           summary.rows.size());
  if (summary.throughput_rows > 0)
    std::cout << fmt::format("tokens/s a GPU, {} runs: median |error| {:.1f}%, max |error| {:.1f}%\n",
                             summary.throughput_rows, 100.0 * summary.median_abs_tokens_error,
                             100.0 * summary.max_abs_tokens_error);
  if (summary.memory_rows > 0)
    std::cout << fmt::format(
        "peak memory (of the kind each source logs), {} runs: median |error| {:.1f}%, max |error| "
        "{:.1f}%\n",
        summary.memory_rows, 100.0 * summary.median_abs_memory_error, 100.0 * summary.max_abs_memory_error);
  if (summary.planned_out_of_memory > 0)
    std::cout << fmt::format("{} runs that ran as published are planned as not fitting\n",
                             summary.planned_out_of_memory);
  if (!summary.blocked_by.empty()) {
    std::vector<std::string> parts;
    for (const auto& [what, n] : summary.blocked_by) parts.push_back(fmt::format("{} ({})", what, n));
    std::cout << detail::wrapped(
                     fmt::format("Not expressed, by what no setting describes (runs): {}", fmt::join(parts, ", ")),
                     detail::kTextColumns, "  ")
              << "\n";
  }
}

}  // namespace

void add_validate_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<ValidateFlags>();
  auto* cmd = app.add_subcommand(
      "validate", "Put the planner's prediction beside measured steps (JSON lines, the format of data/reference/)");
  cmd->add_option("file", flags->path, "measurements file")->required();
  cmd->add_option("--format", flags->format, "table | json | html")->capture_default_str();
  cmd->add_option("--profile", flags->profile, "time profile (TOML) for the step-time predictions");
  cmd->add_flag("--profile-host", flags->profile_host,
                "price every step with the profile's host_seconds_per_op, also rows that measured their own\n"
                "(bench --host-probe: measured.host_probe)");
  cmd->add_flag("--published", flags->published,
                "the file holds runs frameworks published (data/published/, docs/published.md): their tokens/s a GPU\n"
                "and memory beside the plan's");
  cmd->callback([flags, &exit_code] {
    const Format format = parse_report_format(flags->format);
    std::optional<TimeProfile> profile;
    if (!flags->profile.empty()) profile = load_profile(flags->profile);
    if (flags->published) {
      const std::vector<PublishedRun> runs = load_published_runs(flags->path);
      if (runs.empty()) throw InputError(fmt::format("{}: no published runs", flags->path));
      print(compare_with_published(runs, profile ? &*profile : nullptr), format, flags->path);
      exit_code = 0;
      return;
    }
    const ComparisonSummary summary = compare_with_measurements(load_measurements(flags->path), profile ? &*profile : nullptr,
                                                                {.row_host = !flags->profile_host});
    // Nothing compared is not a 0% error: an empty file, a file of failed runs or the wrong file.
    if (summary.rows.empty())
      throw InputError(fmt::format("{}: no rows to compare: no row has status \"ok\" and a measured peak "
                                   "(\"measured\": {{\"peak_allocated_mib\": ...}})",
                                   flags->path));
    print(summary, format, flags->path);
    exit_code = 0;
  });
}

}  // namespace trainfit::cli
