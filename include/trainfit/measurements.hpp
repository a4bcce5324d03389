#pragma once
// Measured training steps (one JSON object a line, the format of data/ and of `bench`), and the
// planner's prediction beside each.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainfit/setup.hpp"
#include "trainfit/time.hpp"

namespace trainfit {

struct MeasuredStep {
  int line = 0;                 // 1-based line in the source
  std::string model;            // as written in the row ("qwen2.5-0.5b")
  std::string gpu;              // catalogue name ("h200")
  TrainingSetup setup;
  std::string status;           // "ok", "oom", ...
  std::optional<double> peak_allocated_mib;
  std::optional<double> peak_reserved_mib;
  std::optional<double> device_used_mib;
  std::optional<double> step_seconds;  // steady-state median
};

// Throws InputError naming the line and field on malformed input.
std::vector<MeasuredStep> parse_measurements(std::string_view jsonl_text, std::string_view source_name);
std::vector<MeasuredStep> load_measurements(std::string_view path);

struct Comparison {
  MeasuredStep measured;
  std::int64_t predicted_allocated = 0;
  std::int64_t predicted_reserved = 0;
  std::int64_t predicted_device_used = 0;
  std::string predicted_peak_phase;
  double allocated_error = 0;  // predicted / measured - 1
  double predicted_step_seconds = 0;
  double step_error = 0;       // predicted / measured - 1 (0 when no time was measured)
  std::string predicted_bottleneck;
};

struct ComparisonSummary {
  std::vector<Comparison> rows;   // rows with status "ok" and a measured peak
  double median_abs_error = 0;    // of allocated_error
  double max_abs_error = 0;
  double median_abs_reserved_error = 0;  // of peak reserved, rows that measured it
  double max_abs_reserved_error = 0;
  std::size_t timed_rows = 0;     // rows with a measured step time
  double median_abs_step_error = 0;
  double max_abs_step_error = 0;
};

// Time predictions use `profile`, or each card's default profile when it is null.
ComparisonSummary compare_with_measurements(const std::vector<MeasuredStep>& steps,
                                            const TimeProfile* profile = nullptr);

// The measured steps with a step time, ready for calibrate().
std::vector<TimedStep> timed_steps(const std::vector<MeasuredStep>& steps);

}  // namespace trainfit
