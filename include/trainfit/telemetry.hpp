#pragma once
// Live telemetry of a running training job and the diagnosis of what holds it back (`trainfit watch`).
//
// NVML (the NVIDIA driver's management library) is loaded at run time with dlopen, so trainfit builds
// and runs everywhere; a machine without it gets TelemetryUnavailable. Every metric the driver refuses
// is an empty optional: unknown, never zero. docs/watch.md defines every number and every rule.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "trainfit/bottleneck.hpp"
#include "trainfit/error.hpp"

// Its own namespace: "Verdict" means another thing to the planner (whether a step fits).
namespace trainfit::telemetry {

// Watch names the planner's bottlenecks, and the states of a running job beside them, from the one
// vocabulary (trainfit/bottleneck.hpp); it prints each as watch_verdict(b): "compute-bound",
// "host-bound", "memory-growing".
using trainfit::Bottleneck;

// No NVML library, no driver or no GPU: the machine, not the input, so a SystemError (the CLI shows
// the message and exits with 3).
class TelemetryUnavailable : public SystemError {
 public:
  using SystemError::SystemError;
};

struct ProcessMemory {
  std::uint32_t pid = 0;
  std::optional<std::int64_t> used_bytes;  // empty where the driver cannot tell (NVML_VALUE_NOT_AVAILABLE)
};

// One reading of one GPU.
struct GpuReading {
  int index = 0;
  std::optional<std::int64_t> memory_total_bytes, memory_used_bytes, memory_free_bytes;
  std::optional<double> gpu_util_percent, memory_util_percent;     // share of time a kernel / a memory access ran
  std::optional<double> pcie_rx_bytes_per_s, pcie_tx_bytes_per_s;  // rx: host to GPU
  std::optional<double> nvlink_rx_bytes_per_s, nvlink_tx_bytes_per_s;
  std::optional<double> sm_clock_mhz, memory_clock_mhz;
  std::optional<double> power_watts, power_limit_watts;
  std::optional<double> temperature_c;
  std::optional<std::uint64_t> throttle_reasons;        // bits of `throttle::` below
  std::optional<std::vector<ProcessMemory>> processes;  // compute processes; empty optional: list refused
};

struct Sample {
  double time = 0;  // seconds since the Unix epoch (wall clock, so that a probe's events line up)
  std::vector<GpuReading> gpus;
};

// What does not change while a job runs.
struct GpuInfo {
  int index = 0;
  std::string name;
  std::optional<std::int64_t> memory_total_bytes;
  std::optional<double> sm_clock_max_mhz, memory_clock_max_mhz;
  std::optional<double> power_default_limit_watts;  // the board's limit before anyone lowered it
};

// nvmlClocksEventReason* bits (nvml.h; "ThrottleReason" before driver 535).
namespace throttle {
inline constexpr std::uint64_t kGpuIdle = 0x1;
inline constexpr std::uint64_t kApplicationsClocks = 0x2;
inline constexpr std::uint64_t kSwPowerCap = 0x4;
inline constexpr std::uint64_t kHwSlowdown = 0x8;
inline constexpr std::uint64_t kSyncBoost = 0x10;
inline constexpr std::uint64_t kSwThermal = 0x20;
inline constexpr std::uint64_t kHwThermal = 0x40;
inline constexpr std::uint64_t kHwPowerBrake = 0x80;
inline constexpr std::uint64_t kDisplayClock = 0x100;
// Reasons that mean heat or an electrical emergency, not the normal power envelope.
inline constexpr std::uint64_t kThermalOrHardware = kHwSlowdown | kSwThermal | kHwThermal | kHwPowerBrake;
}  // namespace throttle
std::string describe_throttle(std::uint64_t bits);  // "sw-power-cap+hw-thermal", "none"

// The metrics of a reading grouped by how often they are worth asking the driver for (docs/watch.md,
// "Cost", has each call's measured CPU cost). A driver query costs most when it is the device's first
// in a while: the driver asks the GPU's firmware again instead of answering from its recent copy.
namespace read_set {
inline constexpr unsigned kActivity = 1U;  // utilisation and power: the cheap calls, every tick
inline constexpr unsigned kMemory = 2U;    // memory total/used/free: ~70 us of CPU after 100 ms without one
inline constexpr unsigned kState = 4U;     // SM and memory clocks, throttle reasons, temperature, power limit
inline constexpr unsigned kCounters = 8U;  // PCIe byte counters (~0.5-0.8 ms) and the process list
inline constexpr unsigned kLinks = 16U;    // NVLink byte counters: ~2.8 ms of CPU a call on an NVLink host
inline constexpr unsigned kAll = kActivity | kMemory | kState | kCounters | kLinks;
}  // namespace read_set
// Copies into `reading` the metrics of the sets it was not read with, from `previous`: a sample
// between two reads of a set shows the last value read.
void carry_unread(unsigned sets_read, const GpuReading& previous, GpuReading& reading);

// An initialised NVML. Thread-safe for reads (NVML is).
class Nvml {
 public:
  // Loads `library` (empty: $TRAINFIT_NVML_LIBRARY when set, which only the tests do, else
  // libnvidia-ml.so.1), initialises it and lists the GPUs. Throws TelemetryUnavailable with the reason.
  static std::unique_ptr<Nvml> open(const std::string& library = {});
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  const std::vector<GpuInfo>& gpus() const;
  std::string driver_version() const;  // "" when refused
  // Reads the `sets` (read_set:: bits below) of GPU `position` (an index into gpus()); the metrics of
  // the other sets stay empty. Link rates are averages since the previous read of the counters.
  GpuReading read(std::size_t position, unsigned sets = read_set::kAll);

  struct Impl;

 private:
  explicit Nvml(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct SamplerCost {
  double cpu_seconds = 0;   // run time of the sampling thread (CLOCK_THREAD_CPUTIME_ID)
  double wall_seconds = 0;  // since start()
  std::int64_t samples = 0;
  double core_fraction() const { return wall_seconds > 0 ? cpu_seconds / wall_seconds : 0; }
};

// How often the sampler reads each read_set beyond kActivity (read every tick). Each period is as
// long as what the metric shows allows: device memory is what the processes' caching allocators
// hold, which grows in large steps and stays; clocks, temperature and throttle reasons are judged
// over windows of seconds; the link counters are cumulative, so a read every few seconds gives the
// exact mean rate over those seconds; the process list only changes when a process starts or ends.
// NVLink's counters cost the driver ~2.8 ms of CPU a read on the two-H200 host (one link or all
// eighteen alike; docs/watch.md, "Cost"): every 5 s they alone would take 0.45% of a core on eight
// GPUs, so they are read every 20 s, a mean over the last 20 s. The verdicts that need the link
// (communication-bound) decide on power and utilisation first, which are read every tick.
struct ReadPeriods {
  std::chrono::duration<double> memory = std::chrono::seconds(1);
  std::chrono::duration<double> state = std::chrono::seconds(1);
  std::chrono::duration<double> counters = std::chrono::seconds(5);
  std::chrono::duration<double> links = std::chrono::seconds(20);
};

// Reads every GPU on its own thread every `interval` (each set at its period, carried forward in
// between), and keeps the samples until take().
class Sampler {
 public:
  explicit Sampler(Nvml& nvml, std::chrono::duration<double> interval = std::chrono::milliseconds(100),
                   ReadPeriods periods = {});
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;
  void start();
  void stop();                 // joins the thread; idempotent
  std::vector<Sample> take();  // samples since the last take, oldest first
  SamplerCost cost() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// What a training-side probe reports, one JSON object a line (docs/watch.md): step times and
// allocator statistics. Every field is optional.
struct StepEvent {
  double time = 0;
  std::optional<std::int64_t> step;
  std::optional<double> step_seconds;         // wall time of the step
  std::optional<double> data_seconds;         // of which waiting for the next batch
  std::optional<std::int64_t> alloc_retries;  // cumulative torch.cuda.memory_stats()["num_alloc_retries"]
  std::optional<std::int64_t> ooms;           // cumulative num_ooms
  std::optional<std::int64_t> allocated_bytes, reserved_bytes;  // at the end of the step
  std::optional<std::int64_t> limit_bytes;                      // the allocator's cap (set_per_process_memory_fraction)
  // Which rank wrote it and the GPU (NVML index) it trains on: each GPU's verdict uses its own steps.
  std::optional<int> rank, device;
};

// The steps of GPU `gpu`: those whose device is that GPU or not given (a single-GPU probe).
std::vector<StepEvent> steps_of_gpu(std::span<const StepEvent> steps, int gpu);

// The job's processes as /proc shows them at one moment (once a second): what tells a GPU left idle
// by a busy Python thread (host/launch overhead) from one left idle by a slow data pipeline.
// Figures are shares of one core over the interval since the previous reading.
enum class HostRole {
  training,  // holds memory on a GPU (NVML's process list), or the job itself when none does
  worker,    // a descendant of a training process: a DataLoader worker, a compile worker
  other      // a launcher (torchrun) or anything else in the job's tree
};
std::string_view to_string(HostRole r);  // "training", "worker", "other"
struct HostProcess {
  std::uint32_t pid = 0, parent = 0;
  HostRole role = HostRole::other;
  std::vector<int> gpus;           // NVML indexes it holds memory on (empty: not seen on any)
  double cpu_cores = 0;            // all its threads
  double main_thread_cores = 0;    // the thread whose id is the process id (Python's main thread)
  double busiest_other_cores = 0;  // its busiest other thread (PyTorch runs backward on its autograd thread)
  char main_thread_state = '?';    // /proc's state letter: R running, S sleeping, D in I/O...
};
struct HostSample {
  double time = 0;  // seconds since the Unix epoch, as samples
  std::vector<HostProcess> processes;
};

// Reads the CPU time of a process tree's threads from /proc between calls (the first call sets the
// baseline and returns shares of 0). Not thread-safe; one reader per watch.
class HostCpuReader {
 public:
  HostCpuReader();
  ~HostCpuReader();
  HostCpuReader(const HostCpuReader&) = delete;
  HostCpuReader& operator=(const HostCpuReader&) = delete;
  // `tree`: the job's processes (process_tree), root first. `gpu_of`: pid -> the GPUs NVML lists it
  // on. Processes that vanished are left out.
  HostSample read(double time, std::span<const std::uint32_t> tree,
                  const std::vector<std::pair<std::uint32_t, int>>& gpu_of);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// A phase marker a job writes ({"phase": "steady", "expect": "compute"}): recordings only.
struct PhaseMarker {
  double time = 0;
  std::string phase, expect, label;
};

struct Verdict {
  Bottleneck kind = Bottleneck::idle;
  std::string evidence;  // the numbers behind it
  std::string advice;    // what to try
};

// Numbers over a window of one GPU; empty where no sample in the window had them.
struct WindowStats {
  int samples = 0;
  double seconds = 0;
  std::optional<double> util_mean, util_min, util_max, memory_util_mean;
  int util_bursts = 0;                                              // rises of utilisation through 50%
  std::optional<double> memory_fraction_mean, memory_fraction_max;  // 1 - free/total
  std::optional<std::int64_t> memory_used_max;
  std::optional<double> memory_growth_bytes;  // rise of used memory across the window, when steady
  std::optional<double> pcie_rx_mean, pcie_tx_mean, nvlink_rx_mean, nvlink_tx_mean;
  std::optional<double> sm_clock_mean, sm_clock_fraction;  // of the maximum SM clock
  std::optional<double> power_mean, power_limit, power_fraction;
  std::optional<double> temperature_max;
  double power_cap_share = 0, thermal_share = 0;  // of samples with that throttle reason
  // From the probe's steps inside the window.
  int steps = 0;
  std::optional<double> step_seconds_median, data_share;  // data wait over step time
  std::optional<double> step_slowdown;                    // median step time over that of the run's earlier steps
  std::optional<std::int64_t> alloc_retries, ooms;        // increase inside the window
  std::optional<std::int64_t> recent_alloc_retries, recent_ooms;  // over the last 30 s up to the window's end
  std::optional<double> reserved_fraction_of_limit;
  // From /proc (HostSample) inside the window: the means over its readings, for this GPU's training
  // processes (the busiest of them) and their workers; empty without readings.
  int host_samples = 0;
  std::optional<double> host_main_cores, host_driving_cores;  // main thread; main + busiest other thread
  std::optional<double> host_process_cores;                   // all threads of the training process
  int host_workers = 0;                                       // processes under the training process
  std::optional<double> host_workers_cores;                   // their sum
};

struct Diagnosis {
  int gpu = 0;
  double begin = 0, end = 0;
  WindowStats stats;
  std::vector<Verdict> verdicts;  // the bottleneck first, then warnings; never empty
  const Verdict& primary() const { return verdicts.front(); }
};

// The verdicts for GPU `gpu.index` over the samples of a window (oldest first) and the probe's steps
// (in time order too: they are found by bisection).
// `host`: the job's /proc readings (in time order; those inside the window count), empty without.
Diagnosis diagnose(std::span<const Sample> window, std::span<const StepEvent> steps, const GpuInfo& gpu,
                   std::span<const HostSample> host = {});
// The GPUs of one job over the same window, judged together. A GPU named compute-bound that draws
// under half its power limit while at least two of the job's GPUs are busy is waiting in NCCL's
// collectives: communication-bound. When one rank waits for its data far longer than the others
// (which then wait for it inside the collectives), each diagnosis gets the `straggler` warning
// naming that GPU (needs the probe's data waits on at least two GPUs).
void judge_ranks(std::span<Diagnosis> same_window);

// Consecutive windows with the same primary verdict, merged: the "verdicts over time" of a run.
struct VerdictSpan {
  int gpu = 0;
  double begin = 0, end = 0;
  int windows = 0;
  Verdict verdict;  // the last window's, with its numbers
};
std::vector<VerdictSpan> verdict_timeline(std::span<const Diagnosis> diagnoses);
// The same, one diagnosis at a time: what it holds grows with the changes of verdict, not with the
// windows, so that a watch of days or a long replay keeps only its spans.
// A warning (memory-growing, little headroom) over consecutive windows of one GPU.
struct WarningSpan {
  int gpu = 0;
  Bottleneck kind = Bottleneck::memory_growth;
  double begin = 0, end = 0;
  int windows = 0;
  double growth_rate_sum = 0, growth_rate_max = 0;  // bytes/s of each window's growth (memory-growing)
  Verdict verdict;                                  // the last window's
  double growth_rate_mean() const { return windows > 0 ? growth_rate_sum / windows : 0; }
};
class VerdictTimeline {
 public:
  // `windows` identical windows in a row (a replay's hops that saw the same samples) count as one add.
  void add(const Diagnosis& d, int windows = 1);
  const std::vector<VerdictSpan>& spans() const { return spans_; }
  const std::vector<WarningSpan>& warnings() const { return warnings_; }

 private:
  std::vector<VerdictSpan> spans_;
  std::vector<std::pair<int, std::size_t>> last_;  // GPU -> its latest span in spans_
  std::vector<WarningSpan> warnings_;
  // (GPU, kind) -> its latest warning span and the GPU's add count when it was last extended
  struct OpenWarning {
    int gpu;
    Bottleneck kind;
    std::size_t span;
    std::int64_t at;
  };
  std::vector<OpenWarning> open_;
  std::vector<std::pair<int, std::int64_t>> adds_;  // GPU -> diagnoses added
};

// The process and its descendants (from /proc), so that a launcher's workers count as the job.
std::vector<std::uint32_t> process_tree(std::uint32_t root);

// JSON lines of `trainfit watch --jsonl` (schema "trainfit.watch/1"): a header, then samples,
// probe events and verdicts, each an object with "type".
nlohmann::json header_to_json(std::span<const GpuInfo> gpus, std::string_view driver, std::string_view command);
nlohmann::json sample_to_json(const Sample& s);
nlohmann::json diagnosis_to_json(const Diagnosis& d);
nlohmann::json host_to_json(const HostSample& h);
struct Recording {
  std::vector<GpuInfo> gpus;
  std::vector<Sample> samples;
  std::vector<StepEvent> steps;
  std::vector<PhaseMarker> phases;
  std::vector<HostSample> host;  // the job's /proc readings (lines of type "host")
  std::vector<int> job_gpus;     // the GPUs the watch judged the job's (its summary); empty: every GPU
};
// A probe's event line longer than this is no event (they are a few hundred bytes): watch drops it
// rather than keep a partial line growing (a wrong --events, such as a device, never ends one).
inline constexpr std::size_t kMaxEventLineBytes = std::size_t{64} * 1024;
// Probe events file line: a step, a phase marker, or nothing useful (nothing added). Throws
// InputError (or a JSON error) on a malformed line, also one nested deeper than an event can be.
void parse_event_line(std::string_view line, std::vector<StepEvent>& steps, std::vector<PhaseMarker>& phases);

// What a recording may hold (docs/watch.md, "Limits"). Past them parse_recording and load_recording
// stop with an InputError that names the line and the limit, instead of reading until memory runs
// out: a wrong file (a dataset, a device) or a crafted one cannot take more than about
// max_held_bytes (twice that while its vectors grow).
struct RecordingLimits {
  std::size_t max_line_bytes = 1 << 20;       // 1 MiB: a sample of 64 GPUs with their processes is < 100 KiB
  std::uint64_t max_file_bytes = 1ULL << 30;  // 1 GiB read by load_recording
  std::size_t max_gpus = 64;                  // in the header and in each sample (NVML hosts have a few dozen)
  std::size_t max_held_bytes = 512ULL << 20;  // samples, events and GPUs once read (their in-memory size)
};
// Throws InputError naming the line on malformed input or past `limits`.
Recording parse_recording(std::string_view jsonl, std::string_view source_name, const RecordingLimits& limits = {});
// Reads the file line by line (a device or a pipe is read up to the limits, never whole).
Recording load_recording(const std::string& path, const RecordingLimits& limits = {});
// A recording replayed through the diagnoser: for each GPU, windows of `window_seconds` ending every
// `hop_seconds` (what the live view does), oldest first.
std::vector<Diagnosis> diagnose_recording(const Recording& r, double window_seconds = 5, double hop_seconds = 1);
// The same windows without keeping them: one call for each distinct window with the diagnosis of
// every GPU of the recording, `windows` being how many consecutive hops saw those same samples (and
// so made that same diagnosis). A sparse recording then costs a diagnosis per distinct window, not
// one per GPU per second of its span.
void for_each_recording_window(const Recording& r, double window_seconds, double hop_seconds,
                               const std::function<void(std::span<const Diagnosis> per_gpu, int windows)>& f);

// How well a recording's steady phases (its "steady" markers with "expect") are named: each window
// of each of the job's GPUs inside a phase counts; right when the verdict is the expected one (for
// a warning such as memory-growing, when the window carries it).
struct PhaseScore {
  std::string label;
  Bottleneck expected = Bottleneck::unknown;
  double begin = 0, end = 0;
  int windows = 0, right = 0;
  std::map<std::string, int> wrong;  // verdict -> windows
};
std::vector<PhaseScore> score_recording(const Recording& r, double window_seconds = 5);

// The Prometheus text exposition format (version 0.0.4) of the latest sample and verdicts.
std::string render_prometheus(std::span<const GpuInfo> gpus, const Sample& latest, std::span<const Diagnosis> verdicts);

// "127.0.0.1:9400", ":9400", "9400", "0.0.0.0:9400", "[::1]:9400"; the host defaults to loopback.
struct Endpoint {
  std::string host = "127.0.0.1";
  int port = 9400;
};
Endpoint parse_endpoint(std::string_view text);

// Serves GET /metrics on its own thread with the text last published.
class MetricsServer {
 public:
  // Port 0: any free port. Throws InputError if it cannot bind. Each connection serves one request
  // and is closed after 10 s whatever the client does; Range headers are ignored (docs/watch.md).
  explicit MetricsServer(const Endpoint& where);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  int port() const;
  const std::string& host() const;
  void publish(std::string text);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The planner's prediction for the watched job (`watch --plan` with the setup's flags), which the
// watch sets its measurements beside.
struct PlanReference {
  std::string setup;                   // what was planned ("qwen2.5-0.5b lora on h200, 1 x 128 tokens")
  double step_seconds = 0;             // the predicted steady-state step (0: no time prediction)
  std::int64_t device_used_bytes = 0;  // the predicted NVML memory of the device
  std::string bottleneck;              // the planner's bottleneck
};
// The measured step (median) and memory (highest NVML used) beside the prediction, and the gap
// named: "step 0.081 s measured vs 0.040 s planned (2.0x: ...)". Empty without anything to compare.
std::string beside_plan_text(std::optional<double> step_seconds, std::optional<std::int64_t> memory_used_bytes,
                             const PlanReference& plan);

// `trainfit watch` itself: a job (or a process, or every GPU) sampled, a verdict every second.
struct WatchOptions {
  double interval_seconds = 0.1;      // between samples
  double window_seconds = 5;          // of samples behind each verdict
  double duration_seconds = 0;        // then stop; 0: until a signal, or until the job ends
  int pid = 0;                        // watch the GPUs where this process or a descendant holds memory
  std::vector<std::string> command;   // the job to start and watch (empty: none)
  std::string events_path;            // a probe's events file to follow; empty with a job: one in a temporary folder
  std::string jsonl_path;             // record the samples, probe events, verdicts and summary here (JSON lines)
  std::string prometheus;             // serve /metrics at this address (parse_endpoint)
  std::string nvml_library;           // Nvml::open's argument
  std::optional<PlanReference> plan;  // --plan: set the measurements beside this prediction
};

// Where a watch's text goes. The library renders it; the caller shows it. Any of them may be empty.
struct WatchOutput {
  // A line (ending in a newline) per GPU for each verdict, or, with a job (whose own output shares
  // the terminal), each time a GPU's verdict changes. Not called while there is a live view.
  std::function<void(const std::string&)> verdict_line;
  // Text for a terminal, with ANSI codes: first a clear screen, then every second a view of every
  // GPU drawn over the last one.
  std::function<void(const std::string&)> live_view;
  // A line for the user about the input, such as malformed probe events (once).
  std::function<void(const std::string&)> warning;
};

// Added to a signal number in WatchSession::run's `last_signal` when the job received that signal
// as well: a terminal sends Ctrl-C to its whole foreground process group, which holds watch and the
// job, so passing it on would deliver it twice (a Python job would be interrupted in its cleanup).
inline constexpr int kSignalReachedJob = 1 << 16;

struct WatchResult {
  // The job's exit code (128 + the signal that killed it); empty without a job, or when the watch
  // ended (--duration) while the job still runs.
  std::optional<int> exit_code;
  std::string summary;  // how long it ran (and how the job ended), the verdicts over time, the cost
};

class WatchSession {
 public:
  // Checks the options (InputError), opens NVML (TelemetryUnavailable), the /metrics endpoint and the
  // JSON lines file, and writes its header. Starts nothing: a job is started by run().
  explicit WatchSession(WatchOptions options);
  ~WatchSession();
  WatchSession(const WatchSession&) = delete;
  WatchSession& operator=(const WatchSession&) = delete;

  // Starts the job, samples and judges until the watch ends, records the summary in the JSON lines
  // and returns it. Runs once. `last_signal` is the last SIGINT, SIGTERM or SIGHUP the caller's
  // handlers saw (0: none), with kSignalReachedJob added when the job received it too: any ends a
  // watch without a job; with a job, the watch ends when the job does, and a signal without that
  // mark is passed on to the job (once for each signal). A command that cannot be executed is an
  // InputError. A recording that cannot be written is a SystemError: without a job at once; with
  // one, sampling and recording stop, the job is left to run, and the error comes when it has ended
  // (or at --duration, or at a signal without a job).
  WatchResult run(const WatchOutput& output, const std::atomic<int>& last_signal);

  // "http://127.0.0.1:9400/metrics" once the endpoint listens (with the port a port of 0 got); ""
  // without --prometheus.
  std::string metrics_url() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// `trainfit watch --replay`: a recording's sample and step counts, then its verdicts over time
// (windows of `window_seconds`, one a second). Throws InputError for a window outside [1, 600] s.
std::string render_replay(const Recording& recording, std::string_view source, double window_seconds);
// The same replay as data for an HTML report (render_html_report "watch"): per GPU its utilisation
// and memory over time (at most kReplaySeriesPoints a GPU, evenly thinned), the probe's step times,
// and the verdict spans render_replay prints. Times in seconds since the first sample.
inline constexpr std::size_t kReplaySeriesPoints = 2000;
nlohmann::json replay_to_json(const Recording& recording, std::string_view source, double window_seconds);

// The verdict window, live or replayed: 1 to 600 seconds (NaN and infinities refused). Throws InputError.
void check_window(double window_seconds);

}  // namespace trainfit::telemetry

namespace trainfit {
// The NVML reader is shared with `trainfit bench`; these names clash with nothing of the planner's.
using telemetry::GpuInfo;
using telemetry::GpuReading;
using telemetry::Nvml;
using telemetry::ProcessMemory;
using telemetry::TelemetryUnavailable;
}  // namespace trainfit
