#pragma once
// Measured training steps (one JSON object a line, the format of data/ and of `bench`), and the
// planner's prediction beside each.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trainfit/setup.hpp"
#include "trainfit/time.hpp"

namespace trainfit {

// What a real training step measured (a bench runner, the probe, a data file's "measured" object).
// Memory in MiB as the runner rounds it; absent when not measured.
struct Measurement {
  std::string status = "ok";  // ok, oom, error, crashed, timeout
  std::string error;          // what went wrong, when status is not ok
  std::optional<double> peak_allocated_mib;  // torch.cuda.max_memory_allocated(), busiest step after warm-up
  std::optional<double> peak_reserved_mib;   // torch.cuda.max_memory_reserved()
  std::optional<double> device_used_mib;     // NVML used memory of the device
  std::optional<double> weights_loaded_mib;  // memory_allocated() after the model was built
  std::optional<double> step_seconds;        // steady-state median wall time of an optimizer step
  std::optional<double> tokens_per_second;
  std::optional<double> alloc_retries;       // the caching allocator's cudaMalloc retries (memory pressure)
  std::optional<double> ooms;                // out-of-memory errors the allocator raised
  std::optional<double> oom_at_step;         // the step that ran out of memory
  // This host's dispatch time per operation, measured with the row on its GPU ("host_probe": the
  // record of `bench --host-probe` or of the probe's host_probe option, divided by trainfit's own
  // operation counts: include/trainfit/host_probe.hpp); `validate` prices the row's step with it.
  std::optional<double> host_seconds_per_op;
  std::string host_probe_note;  // why the row's host probe gave no figure (failed, not host-bound, malformed, CPU)
};

// Reads a "measured" object. Throws InputError naming the field when one has the wrong type (a
// status that is not a string, a peak that is not a non-negative number).
Measurement measurement_from_json(const nlohmann::json& measured);

struct MeasuredStep {
  std::string source;    // the file (or name) it was read from: errors about the row name it
  int line = 0;          // 1-based line in the source
  TrainingSetup setup;   // setup.model and setup.gpu: as the row names them
  Measurement measured;
  bool has_measurement = false;  // the row had a "measured" object
};

// What a measurements file may hold (docs/model.md, "Measurement files"). A row is a few KB; a line past
// the cap is refused by number before it is held whole (a 100 MB line parsed as JSON took 600 MB).
// The file is read line by line and its rows kept parsed (about 1 KB each), so the caps bound the
// memory to about 100 MB whatever the file, and a device or a dataset named by mistake (/dev/zero,
// a file of empty lines) stops at a cap instead of running out of memory or reading forever.
inline constexpr std::size_t kMaxMeasurementLineBytes = std::size_t{1} << 20;  // 1 MiB
inline constexpr std::size_t kMaxMeasurementFileBytes = std::size_t{64} << 20;  // 64 MiB
inline constexpr std::size_t kMaxMeasurementRows = 100000;

// Throws InputError naming the line and field on malformed input, and past the caps above.
std::vector<MeasuredStep> parse_measurements(std::string_view jsonl_text, std::string_view source_name);
std::vector<MeasuredStep> load_measurements(std::string_view path);

struct Comparison {
  MeasuredStep measured;
  double host_seconds_per_op = 0;  // what the step was priced with: the row's own, or the profile's
  bool host_from_row = false;      // the row's own (measured.host_probe)
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
  std::size_t rows_with_own_host = 0;  // timed with their own host figure (compare options)
  std::vector<std::string> host_probe_notes;  // "line N: why", rows whose host probe gave no figure
};

struct CompareOptions {
  // Price each row's step with its own host figure (Measurement::host_seconds_per_op) when it has
  // one, instead of the profile's host_seconds_per_op.
  bool row_host = true;
};

// Time predictions use `profile`, or each card's default profile when it is null. An InputError
// about a row (an unknown model or card, a setup the model refuses) names its source and line.
ComparisonSummary compare_with_measurements(const std::vector<MeasuredStep>& steps,
                                            const TimeProfile* profile = nullptr, const CompareOptions& options = {});

// The measured steps with a step time, ready for calibrate(); errors name the row as above.
std::vector<TimedStep> timed_steps(const std::vector<MeasuredStep>& steps);

// ---- Runs the frameworks published (docs/published.md) -----------------------------------------

// One training run a framework published (torchtitan's benchmark tables, torchtune's README,
// NVIDIA's NeMo performance summary...), transcribed as its source states it, and the setup that
// expresses it in trainfit's settings, or what trainfit has no setting for. Figures the source
// does not give are absent; none is derived from another.
struct PublishedRun {
  std::string source;  // the file it was read from, and its line: errors name them
  int line = 0;
  std::string id;
  std::string framework;                   // torchtitan, torchtune, nemo, megatron-lm, deepspeed...
  std::string url;                         // where the figures are printed (a GitHub file at a commit, a page)
  std::string model;                       // as published
  std::string gpu;                         // as published
  std::int64_t gpus = 0;                   // 0: not stated
  std::optional<TrainingSetup> setup;      // the run in trainfit's settings (gpu, model...)
  std::vector<std::string> not_expressed;  // what it uses that no setting describes, when setup is absent
  std::optional<double> tokens_per_second_per_gpu;
  std::optional<double> memory_bytes;  // the memory figure, per GPU, in bytes
  // What the memory figure is, read from the framework's own logging code: "reserved"
  // (torch.cuda.max_memory_reserved), "active" (the allocator's active bytes' peak), "allocated",
  // or "" when the source does not say (then it is not compared).
  std::string memory_kind;
};

// Reads a JSONL file of published runs (data/published/). Throws InputError naming the line and the
// field on malformed input, and past the caps of measurement files.
std::vector<PublishedRun> parse_published_runs(std::string_view jsonl_text, std::string_view source_name);
std::vector<PublishedRun> load_published_runs(std::string_view path);

struct PublishedComparison {
  const PublishedRun* run = nullptr;
  double predicted_tokens_per_second_per_gpu = 0;  // 0: the card's throughput is unknown
  std::optional<double> tokens_error;              // predicted / published - 1
  double predicted_memory_bytes = 0;               // of the run's memory_kind (reserved or allocated)
  std::optional<double> memory_error;              // predicted / published - 1
  std::string verdict;                             // the plan's, on the run's card: fits, tight, oom...
  std::string time_profile_card;                   // the card whose measured rates priced the step
};

struct PublishedSummary {
  std::vector<PublishedComparison> rows;  // the expressible runs, in file order
  std::size_t runs = 0;                   // every run read
  // Runs not expressed, by what they use that no setting describes (a run counts under each).
  std::vector<std::pair<std::string, std::size_t>> blocked_by;
  std::size_t throughput_rows = 0;
  double median_abs_tokens_error = 0;
  double max_abs_tokens_error = 0;
  std::size_t memory_rows = 0;
  double median_abs_memory_error = 0;
  double max_abs_memory_error = 0;
  std::size_t planned_out_of_memory = 0;  // expressible runs that ran as published but plan as not fitting
};

// Each expressible run planned on its own card (its default time profile, or `profile`); an
// InputError about a run (an unknown model or card, a setup the model refuses) names its line.
PublishedSummary compare_with_published(const std::vector<PublishedRun>& runs, const TimeProfile* profile = nullptr);

}  // namespace trainfit
