#pragma once
// `trainfit bench`: pre-registered experiments on the real GPU (docs/bench.md).
//
// An experiment plan (TOML) names its hypotheses and pass criteria before anything runs, and a
// matrix of training setups. The orchestrator runs every config in its own process through a
// runner (python/trainfit_runner, or any program speaking the same protocol), appends each
// finished row to results.jsonl at once, resumes where it stopped, and judges: a verdict per row
// (fits / tight / spilled / oom / error) with the planner's prediction beside the measurement,
// and each criterion passed or failed with the rows that decided it.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainfit/measurements.hpp"
#include "trainfit/settings.hpp"

namespace trainfit::bench {

// ---- The criteria language ---------------------------------------------------------------------
// Numbers (with an optional byte unit: 16GiB is 16384, in MiB like every memory field), strings,
// true/false/null, field names, + - * /, == != < <= > >=, and/or/not, parentheses, and the
// aggregates count(c), any(c), all(c), max(e[, c]), min(e[, c]), sum(e[, c]), mean(e[, c]) over
// the rows where c holds. A field that was not measured is null; a comparison with null is false.

using Value = std::variant<std::monostate, bool, double, std::string>;  // monostate = null
using Fields = std::map<std::string, Value, std::less<>>;
std::string to_string(const Value& v);

struct Evaluation {
  Value value;
  std::vector<std::size_t> rows;  // the rows an aggregate picked (argmax, the matching rows...)
};

class Expression {
 public:
  // Throws InputError "column N: ..." for a syntax error; known_field (when given) rejects
  // unknown identifiers with the list of valid ones.
  static Expression parse(std::string_view text, const std::function<bool(std::string_view)>& known_field = {});
  // One row's fields (row-level expressions) and/or all rows (aggregates). Throws InputError on a
  // type error ("cannot compare a string with a number").
  Evaluation evaluate(const Fields* row, const std::vector<Fields>* rows = nullptr) const;
  bool has_aggregates() const;
  bool uses_row_fields() const;  // a field outside any aggregate
  const std::string& text() const { return text_; }
  struct Node;

 private:
  std::shared_ptr<const Node> root_;
  std::string text_;
};

// ---- Experiment plans ---------------------------------------------------------------------------

struct Criterion {
  std::string name;
  std::string text;                  // the hypothesis in words
  std::optional<Expression> where;   // the rows it is about (all when absent)
  Expression expect;                 // every such row must satisfy it, or (aggregates only) once over them
  int line = 0;
};

struct Axis {
  std::string field;                 // a setting's key (settings.hpp), "device", or a runner field x_...
  std::vector<SettingValue> values;  // checked against the setting; one value for a fixed setting
};

struct ExperimentPlan {
  std::string source;       // path or label, for messages
  std::string text;         // the file as written (kept in results.json: what was pre-registered)
  std::string name;
  std::string description;
  std::vector<std::string> hypotheses;
  std::vector<Criterion> criteria;
  std::vector<Axis> axes;   // canonical field order; the last varies fastest
  std::vector<Expression> exclude;
  int steps = 4;            // optimizer steps per config; the first `warmup` are not timed
  int warmup = 1;
  double timeout_seconds = 900;
  std::string gpu;          // catalogue card for predictions; empty: the card the runner reports
  std::optional<std::int64_t> vram_bytes;  // emulated card
  // "oom": the runner caps the allocator at the emulated size (Linux: an allocation past the card
  // fails). "spill": no cap; a peak past the card is judged spilled (a Windows driver's fallback
  // into system memory, as in the seed).
  std::string overflow = "oom";
  double headroom = 0.2;
  double slowdown = 5.0;    // step time per unit of work this many times a smaller config's: spilled
  std::string runner;       // runner command; empty: the caller's default
};

// Throws InputError naming the file, line and field.
ExperimentPlan parse_experiment_plan(std::string_view toml_text, std::string_view source);
ExperimentPlan load_experiment_plan(std::string_view path);

// One config of the matrix: a whole training setup, and how the runner runs it.
struct BenchConfig {
  std::size_t index = 0;    // 0-based position in the matrix
  TrainingSetup setup;      // the matrix's settings, every other one at its default; setup.gpu: the card
  std::string device = "cuda";             // where the runner runs the steps: cuda, or cpu (tests of the runner)
  std::optional<std::int64_t> vram_bytes;  // the emulated card's memory (the plan's run.vram)
  std::string overflow = "oom";            // the plan's run.overflow, with an emulated card
  int steps = 4;
  int warmup = 1;
  std::vector<std::pair<std::string, SettingValue>> runner_fields;  // x_...: passed to the runner as written
  std::string key;          // the resume key: the canonical JSON of the config
  std::string label;        // "qwen2.5-7b qlora r16 q,v s512 b1 ckpt"
};

// The config as the runner receives it (the file --config-file names) and a row stores it: the matrix settings that
// apply (settings.hpp), the card, the run's fields, the runner's fields.
nlohmann::json config_to_json(const BenchConfig& config);
// A config read back from a row. Throws InputError naming the field.
BenchConfig config_from_json(const nlohmann::json& config);

// The Cartesian product of the axes, less the excluded configs. Each config is resolved and
// validated as the planner reads it (unknown model, bad method...): InputError naming the config.
std::vector<BenchConfig> expand_matrix(const ExperimentPlan& plan);

// ---- Rows ---------------------------------------------------------------------------------------

// What NVML saw of the config's GPUs while it ran.
struct ConfigTelemetry {
  int samples = 0;
  std::optional<double> device_used_max_mib;  // whole MiB, as nvidia-smi prints it
  std::optional<double> gpu_util_mean;
  std::optional<double> gpu_util_max;
};

// How the orchestrator ran a config (a row's "bench" object).
struct RunRecord {
  std::string plan;
  std::string key;
  std::size_t index = 0;
  std::string label;
  std::string started;      // UTC
  double wall_seconds = 0;
  std::string exit;         // "code 0", "signal 9", "timeout", "not run"
  std::string log;          // the runner's output file, in runs/
  std::optional<std::vector<int>> devices;  // with --devices: the GPUs it ran on
};

// The planner's prediction for a config, beside its measurement.
struct Prediction {
  std::int64_t total_parameters = 0;
  double work_flops = 0;     // matrix and attention FLOPs of a step
  std::string card;          // the card predicted for ("NVIDIA H200 SXM 141GB as a 16303 MiB card")
  std::optional<double> peak_allocated_mib, peak_reserved_mib, device_used_mib;
  std::string peak_phase;
  std::string verdict;
  std::optional<double> step_seconds, step_seconds_in_memory;
  std::string bottleneck;
  std::optional<double> error;       // predicted / measured peak allocated - 1
  std::optional<double> step_error;  // predicted / measured step time - 1
  // The row's own host dispatch time per operation (measured.host_probe, `--host-probe`), when the
  // step time was priced with it instead of the profile's.
  std::optional<double> host_seconds_per_op;
};

// One line of results.jsonl.
struct BenchRow {
  BenchConfig config;
  Measurement measured;
  // What the runner wrote in "measured" and "stack", as it wrote them (per-step figures, per-rank
  // peaks, a traceback, the versions of its stack): kept whole in the row; `measured` is read from it.
  nlohmann::json reported = nlohmann::json::object();
  nlohmann::json stack = nlohmann::json::object();
  std::string output_tail;   // the end of the runner's output, when it did not end well
  RunRecord run;
  std::optional<ConfigTelemetry> telemetry;
  std::optional<Prediction> predicted;
  std::optional<double> capacity_mib;  // the card the row is judged against
  std::string verdict;                 // fits, tight, spilled, oom, error
  std::vector<std::string> verdict_reasons;
};

nlohmann::json row_to_json(const BenchRow& row);
// A row read back from results.jsonl. Throws InputError naming the field.
BenchRow row_from_json(const nlohmann::json& row);

// ---- Running ----------------------------------------------------------------------------------

// Samples the GPUs of one running config (NVML); summary() becomes the row's telemetry.
class ConfigSampler {
 public:
  virtual ~ConfigSampler() = default;
  virtual void tick() = 0;
  virtual ConfigTelemetry summary() = 0;
};

struct Progress {
  enum class Event { skipped, started, finished } event = Event::started;
  std::size_t position = 0;  // 1-based, in plan order
  std::size_t total = 0;
  const BenchConfig* config = nullptr;
  const BenchRow* row = nullptr;        // finished / skipped
  double elapsed_seconds = 0;           // since this invocation started
  std::optional<double> eta_seconds;    // from the configs run so far, over the parallel slots
  const std::vector<int>* devices = nullptr;  // with RunOptions::devices: the config's GPUs (empty when it got none)
  std::size_t running = 0;                    // configs running after this event (a started one included)
};

struct RunOptions {
  std::string results_dir;
  std::vector<std::string> runner;                           // argv; --config-file PATH --out PATH are appended
  std::vector<std::pair<std::string, std::string>> env;      // added to each runner's environment
  bool retry_failed = false;      // rerun rows whose status is crashed / timeout / error
  double kill_grace_seconds = 5;  // SIGTERM, then SIGKILL of the process group after this
  std::function<void(const Progress&)> on_progress;
  // A line for the user before the run: a line of results.jsonl that is not a row (moved to
  // results.set-aside.jsonl) or a row this trainfit cannot use, with its number and why.
  std::function<void(const std::string&)> on_warning;
  // The GPUs to run on (NVML indices: PCI bus order). Empty: one config at a time, and its runner
  // sees every GPU. Otherwise as many configs run at once as these devices allow, each on
  // `config.gpus` of them, started in plan order (a config waits for enough free devices, and the
  // ones after it wait behind it); its runner gets CUDA_VISIBLE_DEVICES=<its devices> and
  // CUDA_DEVICE_ORDER=PCI_BUS_ID. A config needing more devices than listed gets an error row.
  std::vector<int> devices;
  // Optional: one sampler per running config, for its devices (empty: every GPU).
  std::function<std::unique_ptr<ConfigSampler>(const std::vector<int>& devices)> make_sampler;
};

// Splits a command line on spaces, with '...' and "..." quoting.
std::vector<std::string> split_command(std::string_view command);

// The folder the default runner (python3 -m trainfit_runner) is imported from: what goes first on
// its PYTHONPATH. $TRAINFIT_PYTHON_DIR when set, as given; else share/trainfit/python beside the
// running program (<prefix>/bin/trainfit -> <prefix>/share/trainfit/python, where an install puts
// the package; the build links the source's python/ folder to the same place beside the built
// binary) when it holds trainfit_runner/__init__.py; else none: the runner must be importable as
// it is (installed with pip, or on the caller's PYTHONPATH).
std::optional<std::filesystem::path> runner_python_dir();
// The same lookup for a given program path and $TRAINFIT_PYTHON_DIR value (null or empty: unset).
std::optional<std::filesystem::path> runner_python_dir(const std::filesystem::path& program, const char* override_dir);

// The runner command `bench` and `calibrate --host` start: `given` (--runner), else the plan's, else
// $TRAINFIT_RUNNER, else `python3 -m trainfit_runner`; its environment puts the runner package
// (runner_python_dir) first on PYTHONPATH and makes Python unbuffered. Throws InputError on an
// empty command.
struct RunnerCommand {
  std::string text;                                          // as given, for messages
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;      // added to the runner's environment
};
RunnerCommand runner_command(std::string_view given, std::string_view plan_runner = {});

// `trainfit calibrate --host`: runs `RUNNER --host-probe REQUEST --out RECORD` in a scratch folder
// (with this binary's setup schema, as bench's runners get it) and returns the record the runner
// wrote (python/trainfit_runner/host_probe.py; host_dispatch_from_probe reads it). Throws
// SystemError when the runner cannot be executed, runs past `timeout_seconds` (its process group
// is killed) or ends without a record (with the end of its output), InputError when the record is
// not a JSON object.
nlohmann::json run_host_probe(const RunnerCommand& runner, const nlohmann::json& request, double timeout_seconds);

// `--devices`: "0,1", "3", or "all". `available`: the NVML indices when NVML answers (an index
// not among them is an error; "all" means them); null: the indices are taken as given, and "all"
// is an error. Throws InputError on a malformed list or a duplicate.
std::vector<int> parse_devices(std::string_view text, const std::vector<int>* available);

// Runs every config not already in results_dir/results.jsonl and returns all rows of this plan
// (earlier and new), in matrix order; results.jsonl gets each row as its config finishes. Throws
// InputError when the directory can't be used or another bench holds it.
std::vector<BenchRow> run_configs(const ExperimentPlan& plan, const std::vector<BenchConfig>& configs,
                                  const RunOptions& options);
// The rows results_dir/results.jsonl already holds for these configs, in matrix order, running
// nothing (`--judge-only`: judge on another machine, or again after the planner changed).
// While another `trainfit bench` runs there (it holds .lock), the file is read as it is being
// appended to: only whole lines (ending in a newline) are rows, and run_in_progress says so.
struct FinishedRows {
  std::vector<BenchRow> rows;
  bool run_in_progress = false;
  std::vector<std::string> warnings;  // each line of results.jsonl that was not read, with its number and why
};
FinishedRows finished_rows(const std::vector<BenchConfig>& configs, const std::string& results_dir);
// Writes results_dir/results.json atomically (a temporary file renamed over it).
void write_results_json(const std::string& results_dir, const nlohmann::json& doc);

// ---- Judging ----------------------------------------------------------------------------------

struct CriterionResult {
  std::string name;
  std::string text;
  std::string expression;
  std::string outcome;               // "pass", "fail", "error"
  std::string detail;                // "2 of 2 rows hold", the value compared, the error
  std::vector<std::size_t> deciding; // row positions that decided it
};

struct BenchReport {
  std::vector<BenchRow> rows;        // with final verdicts and predictions
  std::vector<CriterionResult> criteria;
  nlohmann::json environment;
  double median_abs_error = 0;       // peak allocated, rows with both
  double max_abs_error = 0;
  std::size_t compared = 0;
};

// The planner's prediction for a config (row.predicted) and the verdict of one finished row on its
// own; judge_results adds the comparison with neighbours (abnormal slowdowns).
void annotate_row(const ExperimentPlan& plan, BenchRow& row);
BenchReport judge_results(const ExperimentPlan& plan, std::vector<BenchRow> rows);
// The fields a criterion can name (the matrix settings, the run's fields, what was measured,
// judged and predicted), and a row's values for them.
bool is_row_field(std::string_view name);
Fields row_fields(const BenchRow& row);

nlohmann::json report_to_json(const ExperimentPlan& plan, const BenchReport& report);  // results.json
std::string render_report(const ExperimentPlan& plan, const BenchReport& report);      // the closing text
std::string render_matrix(const ExperimentPlan& plan, const std::vector<BenchConfig>& configs);  // --dry-run

}  // namespace trainfit::bench
