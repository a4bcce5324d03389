// The engine of `trainfit watch`: the job, the sampler, the probe's events, the verdict every second,
// the JSON lines and the summary. The caller shows the text (WatchOutput) and turns its signals into
// `last_signal`.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "common/statistics.hpp"
#include "common/subprocess.hpp"
#include "common/text.hpp"
#include "telemetry/watch_text.hpp"
#include "trainfit/telemetry.hpp"
#include "trainfit/units.hpp"

namespace trainfit::telemetry {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

// A tick reads at most this much of the events file: a device such as /dev/zero never runs dry. A
// probe writes a few hundred bytes a step, so 1 MiB a tick (10 MiB/s) is thousands of ranks' steps.
constexpr std::size_t kMaxEventBytesPerTick = 1 << 20;
// The probe's steps kept for the diagnoser: two minutes of them (see run()), and never more than
// this many (about 14 MB): a probe writing thousands of steps a second, or steps stamped in the
// future, which the two-minute trim never reaches, cannot grow memory without bound.
constexpr std::size_t kMaxLiveSteps = 100000;

// Follows a file that a probe appends JSON lines to; keeps a partial last line for the next read.
// Bounded: at most kMaxEventBytesPerTick a read, and a line longer than kMaxEventLineBytes is
// dropped (and counted) instead of being kept growing.
class EventTail {
 public:
  explicit EventTail(std::string path) : path_(std::move(path)) {}
  ~EventTail() {
    if (fd_ >= 0) ::close(fd_);
  }
  EventTail(const EventTail&) = delete;
  EventTail& operator=(const EventTail&) = delete;

  // New complete lines since the last call.
  std::vector<std::string> read() {
    std::vector<std::string> lines;
    if (path_.empty()) return lines;
    if (fd_ < 0) {
      // Non-blocking: a FIFO given as --events must not hold watch until some writer opens it.
      fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd_ < 0) return lines;  // not there yet: the job may create it later
    }
    std::array<char, 65536> buf{};
    for (std::size_t total = 0; total < kMaxEventBytesPerTick;) {
      const ssize_t n = ::read(fd_, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the end for now (the job keeps writing), an empty pipe, or an error
      total += static_cast<std::size_t>(n);
      take(std::string_view(buf.data(), static_cast<std::size_t>(n)), lines);
    }
    return lines;
  }

  std::int64_t dropped() const { return dropped_; }

 private:
  void take(std::string_view data, std::vector<std::string>& lines) {
    for (;;) {
      const std::size_t nl = data.find('\n');
      const std::string_view piece = data.substr(0, nl);
      if (skipping_) {
        // the rest of a line already dropped
      } else if (partial_.size() + piece.size() > kMaxEventLineBytes) {
        ++dropped_;
        partial_.clear();
        partial_.shrink_to_fit();
        skipping_ = true;
      } else {
        partial_.append(piece);
      }
      if (nl == std::string_view::npos) return;
      if (!skipping_) lines.push_back(std::move(partial_));
      partial_.clear();
      skipping_ = false;
      data.remove_prefix(nl + 1);
    }
  }

  std::string path_;
  int fd_ = -1;
  std::string partial_;
  bool skipping_ = false;  // inside a line too long to keep, until its newline
  std::int64_t dropped_ = 0;
};

// The --jsonl recording, written through its file descriptor so that every failed write, flush and
// close is seen: a full disk must not pass for a recording.
class JsonlFile {
 public:
  JsonlFile() = default;
  ~JsonlFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  JsonlFile(const JsonlFile&) = delete;
  JsonlFile& operator=(const JsonlFile&) = delete;

  void open(const std::string& path) {
    path_ = path;
    // Non-blocking to open: a FIFO nobody reads would hold watch here for ever (ENXIO instead).
    // Writes block as usual afterwards.
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd_ < 0)
      throw InputError(fmt::format("cannot write '{}': {}", trainfit::detail::printable(path), std::strerror(errno)));
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  }
  explicit operator bool() const { return fd_ >= 0; }

  // Kept until the next flush. Invalid UTF-8 (a GPU name from a driver) is replaced, not thrown on.
  void add(const nlohmann::json& line) {
    buffer_ += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    buffer_ += '\n';
  }
  // Writes what was added. SystemError when the file refuses it (no space, an I/O error, too large).
  void flush() {
    std::size_t done = 0;
    while (done < buffer_.size()) {
      const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(n < 0 ? errno : EIO);
      done += static_cast<std::size_t>(n);
    }
    buffer_.clear();
  }
  void close() {
    flush();
    const int fd = fd_;
    fd_ = -1;
    // After close, EINTR leaves the descriptor closed on Linux: nothing to retry.
    if (::close(fd) != 0 && errno != EINTR) fail(errno);
  }

 private:
  [[noreturn]] void fail(int err) {
    buffer_.clear();
    throw SystemError(fmt::format("cannot write '{}': {}", trainfit::detail::printable(path_), std::strerror(err)));
  }

  std::string path_;
  int fd_ = -1;
  std::string buffer_;
};

// Whether two paths name one file: the same inode when both exist (hard links, symbolic links),
// else the same absolute, normalised path.
bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {};
  struct stat sb {};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  std::error_code ea, eb;
  const auto ca = std::filesystem::weakly_canonical(a, ea), cb = std::filesystem::weakly_canonical(b, eb);
  return !ea && !eb && ca == cb;
}

struct Job {
  pid_t pid = 0;
  std::optional<int> exit_code;
  // Starts `argv` with TRAINFIT_WATCH_EVENTS pointing at `events`, in watch's own process group so
  // that Ctrl-C at the terminal reaches it too.
  void start(const std::vector<std::string>& argv, const std::string& events) {
    trainfit::detail::SubprocessOptions options;
    options.argv = argv;
    options.set_env = {{"TRAINFIT_WATCH_EVENTS", events}};
    const trainfit::detail::Subprocess child = trainfit::detail::start_subprocess(options);
    if (child.exec_error != 0) {
      int status = 0;
      while (waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
      }
      throw InputError(fmt::format("cannot start '{}': {}", argv[0], std::strerror(child.exec_error)));
    }
    pid = child.pid;
  }
  bool poll() {
    if (exit_code) return true;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) != pid) return false;
    exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return true;
  }
};

// The job's events file lives here, removed however the watch ends.
struct TempDir {
  std::filesystem::path path;
  TempDir() = default;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

// The GPUs CUDA_VISIBLE_DEVICES names, when it lists NVML indexes (CUDA numbers GPUs fastest first
// unless CUDA_DEVICE_ORDER=PCI_BUS_ID, NVML in bus order: a hint, which NVML's process list
// overrides). Empty when unset or when it names GPUs by UUID or MIG instance.
std::set<int> visible_devices(std::string_view value, std::size_t gpu_count) {
  std::set<int> out;
  while (!value.empty()) {
    const auto comma = value.find(',');
    const std::string_view item = value.substr(0, comma);
    int index = -1;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), index);
    if (ec != std::errc() || ptr != item.data() + item.size() || index < 0) return {};
    // CUDA stops at the first index that is out of range.
    if (static_cast<std::size_t>(index) >= gpu_count) break;
    out.insert(index);
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return out;
}

// CUDA_VISIBLE_DEVICES of process `pid` (its environment at exec time, /proc/PID/environ).
std::optional<std::string> environment_of(std::uint32_t pid, std::string_view name) {
  std::ifstream in(fmt::format("/proc/{}/environ", pid), std::ios::binary);
  std::string entry;
  while (std::getline(in, entry, '\0'))
    if (entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 && entry[name.size()] == '=')
      return entry.substr(name.size() + 1);
  return std::nullopt;
}

nlohmann::json summary_to_json(std::span<const VerdictSpan> timeline, std::span<const WarningSpan> warnings,
                               const std::set<int>& job_gpus, const std::optional<int>& exit_code,
                               const SamplerCost& cost, double process_share) {
  nlohmann::json spans = nlohmann::json::array();
  for (const VerdictSpan& v : timeline)
    spans.push_back({{"gpu", v.gpu},
                     {"begin", v.begin},
                     {"end", v.end},
                     {"windows", v.windows},
                     {"verdict", watch_verdict(v.verdict.kind)},
                     {"evidence", v.verdict.evidence}});
  nlohmann::json warned = nlohmann::json::array();
  for (const WarningSpan& w : warnings) {
    nlohmann::json line = {{"gpu", w.gpu},
                           {"begin", w.begin},
                           {"end", w.end},
                           {"windows", w.windows},
                           {"warning", watch_verdict(w.kind)},
                           {"evidence", w.verdict.evidence}};
    if (w.kind == Bottleneck::memory_growth) {
      line["growth_bytes_per_second_mean"] = w.growth_rate_mean();
      line["growth_bytes_per_second_max"] = w.growth_rate_max;
    }
    warned.push_back(std::move(line));
  }
  return {{"type", "summary"},
          {"timeline", spans},
          {"warnings", warned},
          {"gpus", job_gpus},
          {"exit_code", exit_code ? nlohmann::json(*exit_code) : nlohmann::json(nullptr)},
          {"sampler",
           {{"cpu_seconds", cost.cpu_seconds},
            {"wall_seconds", cost.wall_seconds},
            {"samples", cost.samples},
            {"core_fraction", cost.core_fraction()}}},
          {"process_core_fraction", process_share}};
}

}  // namespace

struct WatchSession::State {
  WatchOptions options;
  std::unique_ptr<Nvml> nvml;
  std::unique_ptr<MetricsServer> server;
  JsonlFile jsonl;
  std::string command_text;  // the job's command line, its arguments joined by spaces
  bool ran = false;
};

WatchSession::WatchSession(WatchOptions options) : state_(std::make_unique<State>()) {
  const WatchOptions& o = options;
  // Written so that NaN, which fails every comparison, is refused rather than waited on forever.
  if (!(o.interval_seconds >= 0.01 && o.interval_seconds <= 60))
    throw InputError("--interval must be between 0.01 and 60 seconds");
  check_window(o.window_seconds);
  if (!(o.duration_seconds >= 0 && std::isfinite(o.duration_seconds)))
    throw InputError("--duration must be a number of seconds, not negative");
  if (!o.command.empty() && o.pid) throw InputError("give either --pid or a command after --, not both");
  if (o.pid && kill(o.pid, 0) != 0 && errno == ESRCH) throw InputError(fmt::format("no process {}", o.pid));

  // Checked before the recording is opened (and truncated): watch would read its own lines back as
  // events and write them again, every tick, without end.
  if (!o.events_path.empty() && !o.jsonl_path.empty() && same_file(o.events_path, o.jsonl_path))
    throw InputError(fmt::format("--events and --jsonl name the same file ('{}'): watch would read its own recording",
                                 trainfit::detail::printable(o.jsonl_path)));

  State& s = *state_;
  s.nvml = Nvml::open(o.nvml_library);
  if (!o.prometheus.empty()) s.server = std::make_unique<MetricsServer>(parse_endpoint(o.prometheus));
  if (!o.jsonl_path.empty()) s.jsonl.open(o.jsonl_path);
  for (const auto& a : o.command) s.command_text += (s.command_text.empty() ? "" : " ") + a;
  if (s.jsonl) {
    s.jsonl.add(header_to_json(s.nvml->gpus(), s.nvml->driver_version(), s.command_text));
    s.jsonl.flush();  // a file that refuses its first line (a full disk): SystemError before any job starts
  }
  s.options = std::move(options);
}

WatchSession::~WatchSession() = default;

std::string WatchSession::metrics_url() const {
  if (!state_->server) return "";
  const std::string& host = state_->server->host();
  return fmt::format("http://{}:{}/metrics", host.find(':') != std::string::npos ? "[" + host + "]" : host,
                     state_->server->port());
}

WatchResult WatchSession::run(const WatchOutput& output, const std::atomic<int>& last_signal) {
  State& s = *state_;
  if (s.ran) throw std::logic_error("WatchSession::run: a session runs once");
  s.ran = true;
  const WatchOptions& o = s.options;
  const std::vector<GpuInfo>& gpus = s.nvml->gpus();
  JsonlFile& jsonl = s.jsonl;

  Job job;
  std::string events_path = o.events_path;
  TempDir events_dir;
  if (!o.command.empty()) {
    if (events_path.empty()) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "trainfit-watch-XXXXXX").string();
      if (!mkdtemp(tmpl.data()))
        throw SystemError(
            fmt::format("cannot create a temporary folder for the job's events: {}", std::strerror(errno)));
      events_dir.path = tmpl;
      events_path = (events_dir.path / "events.jsonl").string();
      std::ofstream(events_path).flush();
    }
    job.start(o.command, events_path);
  }
  const std::uint32_t root = job.pid ? static_cast<std::uint32_t>(job.pid) : static_cast<std::uint32_t>(o.pid);

  const bool live = static_cast<bool>(output.live_view);
  Sampler sampler(*s.nvml, std::chrono::duration<double>(o.interval_seconds));
  const double t0 = now();
  const double cpu0 = process_cpu_seconds();
  sampler.start();
  if (live) output.live_view("\x1b[2J");

  EventTail tail(events_path);
  std::deque<Sample> history;
  std::vector<StepEvent> steps;
  std::vector<PhaseMarker> phases;
  VerdictTimeline timeline;  // the verdicts over time, merged as they come (a watch may run for days)
  std::map<int, Diagnosis> current;
  // The job's GPUs: those NVML lists its processes on; until any is seen (or in a container whose
  // NVML reports host process ids, which never match), the ones CUDA_VISIBLE_DEVICES names; else
  // those any compute process was seen on; else all.
  std::set<int> matched, busy;
  std::set<int> hinted;
  if (root) {
    const char* name = "CUDA_VISIBLE_DEVICES";
    std::optional<std::string> visible;
    if (job.pid) {
      if (const char* v = std::getenv(name)) visible = v;
    } else {
      visible = environment_of(root, name);
    }
    if (visible) hinted = visible_devices(*visible, gpus.size());
  }
  const auto watched = [&]() -> const std::set<int>& {
    if (!matched.empty()) return matched;
    if (!hinted.empty()) return hinted;
    return busy;  // empty: every GPU
  };
  std::vector<std::uint32_t> tree;
  HostCpuReader host_reader;
  std::deque<HostSample> host;  // the job's /proc readings of the last window
  bool host_baseline = true;    // the first reading only starts the counts
  std::vector<std::pair<std::uint32_t, int>> gpu_of;
  // --plan: each GPU's window medians of the probe's step time and its highest NVML memory, for the
  // summary's measurement beside the prediction (a median of medians: warm-up and the end weigh little).
  std::map<int, std::vector<double>> step_medians;
  std::map<int, std::int64_t> memory_max;
  double next_verdict = t0 + 1, next_tree = t0;
  int bad_events = 0;
  bool warned_long_events = false;
  std::set<int> forwarded;  // signals passed on to the job, each once
  bool finished = false;
  // Why the recording stopped (a write that failed), and when. With a job, watch then only waits
  // for it: the job is the user's (hours of training), a full disk for the recording is no reason to
  // stop it, and leaving it would orphan it on the terminal.
  std::optional<std::string> recording_failed;
  double failed_at = 0;
  const auto flush_recording = [&] {
    if (!jsonl || recording_failed) return;
    try {
      jsonl.flush();
    } catch (const SystemError& e) {
      recording_failed = e.what();
      failed_at = now() - t0;
      sampler.stop();
      if (job.pid && !job.exit_code && output.warning)
        output.warning(fmt::format("trainfit watch: {}: sampling and recording stopped; waiting for the job to end\n",
                                   *recording_failed));
    }
  };
  while (!finished) {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(o.interval_seconds, 0.1)));
    const double t = now();
    const int raw_signal = last_signal.load();
    const int signal = raw_signal & ~kSignalReachedJob;
    finished = signal != 0 && o.command.empty();
    // A signal sent to watch alone (kill -INT, -TERM, -HUP <watch>) is passed on, once; one the job
    // received itself (the terminal's Ctrl-C reaches the whole foreground group) is not sent again.
    if (signal != 0 && !(raw_signal & kSignalReachedJob) && job.pid && !job.exit_code && !forwarded.count(signal) &&
        kill(job.pid, signal) == 0)
      forwarded.insert(signal);
    if (job.pid && job.poll()) finished = true;  // after this last pass
    if (o.duration_seconds > 0 && t - t0 >= o.duration_seconds) finished = true;
    if (recording_failed) {  // nothing more is sampled or written: only the job is waited for
      if (!job.pid) finished = true;
      continue;
    }
    if (finished) sampler.stop();
    for (Sample& sample : sampler.take()) {
      if (jsonl) jsonl.add(sample_to_json(sample));
      history.push_back(std::move(sample));
    }
    while (!history.empty() && history.front().time < t - o.window_seconds - 1) history.pop_front();
    for (const std::string& line : tail.read()) {
      try {
        parse_event_line(line, steps, phases);
        if (jsonl) {
          auto event = nlohmann::json::parse(line);
          event["type"] = "event";
          jsonl.add(event);
        }
      } catch (const std::exception&) {
        if (bad_events++ == 0 && output.warning)
          output.warning("trainfit watch: ignoring malformed probe events in " +
                         trainfit::detail::printable(events_path) + "\n");
      }
    }
    if (tail.dropped() > 0 && !warned_long_events && output.warning) {
      warned_long_events = true;
      output.warning(fmt::format("trainfit watch: dropping probe event lines longer than {} in {}\n",
                                 format_bytes(static_cast<std::int64_t>(kMaxEventLineBytes)),
                                 trainfit::detail::printable(events_path)));
    }
    phases.clear();  // phase markers matter to recordings (copied above) and the golden test only
    // Several processes (ranks) may append to one events file: keep the steps in time order.
    if (!std::is_sorted(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.time < b.time; }))
      std::stable_sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.time < b.time; });
    // Two minutes of steps: the retry lookback needs 30 s, the spill rule the run's earlier steps.
    if (steps.size() > 100 && steps.front().time < t - 120)
      steps.erase(steps.begin(), std::lower_bound(steps.begin(), steps.end(), t - 120,
                                                  [](const StepEvent& e, double x) { return e.time < x; }));
    if (steps.size() > kMaxLiveSteps) steps.erase(steps.begin(), steps.end() - kMaxLiveSteps);
    flush_recording();
    if (recording_failed) continue;
    if (root && t >= next_tree) {
      tree = process_tree(root);
      next_tree = t + 1;
      gpu_of.clear();
      if (!history.empty())
        for (const GpuReading& g : history.back().gpus)
          if (g.processes)
            for (const auto& p : *g.processes) {
              if (!job.exit_code) busy.insert(g.index);
              if (std::find(tree.begin(), tree.end(), p.pid) != tree.end()) {
                matched.insert(g.index);
                gpu_of.emplace_back(p.pid, g.index);
              }
            }
      HostSample reading = host_reader.read(t, tree, gpu_of);
      if (!host_baseline && !reading.processes.empty()) {
        if (jsonl) jsonl.add(host_to_json(reading));
        host.push_back(std::move(reading));
      }
      host_baseline = false;
      while (!host.empty() && host.front().time < t - o.window_seconds - 1) host.pop_front();
    }
    if ((t < next_verdict && !finished) || history.size() < 3) continue;
    next_verdict += 1;
    const std::vector<Sample> window(history.begin(), history.end());
    const std::vector<HostSample> host_window(host.begin(), host.end());
    const bool tagged = std::any_of(steps.begin(), steps.end(), [](const StepEvent& e) { return e.device; });
    std::vector<Diagnosis> judged;
    for (const GpuInfo& g : gpus) {
      if (!watched().empty() && !watched().count(g.index)) continue;
      // A multi-GPU probe tags each step with its GPU: each GPU is judged on its own steps.
      Diagnosis d = tagged ? diagnose(window, steps_of_gpu(steps, g.index), g, host_window)
                           : diagnose(window, steps, g, host_window);
      if (d.stats.samples >= 3) judged.push_back(std::move(d));
    }
    // Then the job's GPUs together: a straggler, or ranks waiting in the collectives, is a relation
    // between them (known to be one job's when the probe tags its steps or the job's GPUs are known).
    if (tagged || !watched().empty()) judge_ranks(judged);
    for (const Diagnosis& d : judged) {
      if (jsonl) jsonl.add(diagnosis_to_json(d));
      const auto prev = current.find(d.gpu);
      // A job's own output shares the terminal: only changes of verdict are worth a line there.
      const bool changed = prev == current.end() || prev->second.primary().kind != d.primary().kind;
      if (!live && output.verdict_line && (o.command.empty() || changed))
        output.verdict_line(fmt::format("[{:6.1f} s] GPU {}: {}: {}\n", t - t0, d.gpu, watch_verdict(d.primary().kind),
                                        d.primary().evidence));
      if (o.plan) {
        if (d.stats.step_seconds_median && step_medians[d.gpu].size() < kMaxLiveSteps)
          step_medians[d.gpu].push_back(*d.stats.step_seconds_median);
        if (d.stats.memory_used_max) memory_max[d.gpu] = std::max(memory_max[d.gpu], *d.stats.memory_used_max);
      }
      current[d.gpu] = d;
      timeline.add(d);
    }
    if (s.server && !history.empty()) s.server->publish(render_prometheus(gpus, history.back(), judged));
    if (live && !history.empty()) {
      std::vector<const GpuReading*> latest(gpus.size(), nullptr);
      for (std::size_t i = 0; i < gpus.size(); ++i)
        for (const GpuReading& g : history.back().gpus)
          if (g.index == gpus[i].index) latest[i] = &g;
      output.live_view("\x1b[H" + detail::live_view_text(gpus, latest, current, tree, o.interval_seconds,
                                                         o.window_seconds, t - t0, o.plan ? &*o.plan : nullptr));
    }
  }
  const double wall = now() - t0;
  const SamplerCost cost = sampler.cost();
  const double process_share = (process_cpu_seconds() - cpu0) / std::max(wall, 1e-9);
  std::set<int> job_gpus = watched();
  if (job_gpus.empty())
    for (const GpuInfo& g : gpus) job_gpus.insert(g.index);

  // A recording that failed is the machine failing: a SystemError (exit code 3), once the job has
  // ended, with what became of the job.
  const auto job_fate = [&]() -> std::string {
    if (!job.pid) return "";
    return job.exit_code ? fmt::format("; the job ran on and exited with code {}", *job.exit_code)
                         : std::string("; the job still runs");
  };
  if (recording_failed)
    throw SystemError(
        fmt::format("{} (sampling and recording stopped at {:.1f} s{})", *recording_failed, failed_at, job_fate()));

  std::string beside_plan;
  nlohmann::json plan_json = nullptr;
  if (o.plan) {
    beside_plan = fmt::format("beside the plan ({}: {:.3f} s a step, {} on the device, {}):\n", o.plan->setup,
                              o.plan->step_seconds, format_bytes(o.plan->device_used_bytes), o.plan->bottleneck);
    plan_json = {{"setup", o.plan->setup},
                 {"step_seconds", o.plan->step_seconds},
                 {"device_used_bytes", o.plan->device_used_bytes},
                 {"bottleneck", o.plan->bottleneck},
                 {"gpus", nlohmann::json::array()}};
    for (const int g : job_gpus) {
      const auto medians = step_medians.find(g);
      const std::optional<double> step =
          medians == step_medians.end() ? std::nullopt : trainfit::detail::median(medians->second);
      const auto mem = memory_max.find(g);
      const std::optional<std::int64_t> used = mem == memory_max.end() ? std::nullopt : std::optional(mem->second);
      const std::string text = beside_plan_text(step, used, *o.plan);
      beside_plan += fmt::format("  GPU {}: {}\n", g, text.empty() ? "nothing measured to compare" : text);
      plan_json["gpus"].push_back({{"gpu", g},
                                   {"step_seconds_measured", step ? nlohmann::json(*step) : nlohmann::json(nullptr)},
                                   {"memory_used_bytes_max", used ? nlohmann::json(*used) : nlohmann::json(nullptr)}});
    }
  }
  WatchResult result;
  result.exit_code = job.exit_code;
  result.summary = detail::summary_text({s.command_text, job.exit_code, wall, cost, process_share, beside_plan},
                                        timeline, gpus, t0, job_gpus, o.window_seconds);
  if (tail.dropped() > 0)
    result.summary +=
        fmt::format("probe events: {} line{} longer than {} dropped\n", tail.dropped(), tail.dropped() == 1 ? "" : "s",
                    format_bytes(static_cast<std::int64_t>(kMaxEventLineBytes)));
  if (jsonl) {
    nlohmann::json summary =
        summary_to_json(timeline.spans(), timeline.warnings(), job_gpus, job.exit_code, cost, process_share);
    if (o.plan) summary["plan"] = plan_json;
    jsonl.add(summary);
    try {
      jsonl.close();
    } catch (const SystemError& e) {
      throw SystemError(e.what() + job_fate());
    }
  }
  return result;
}

}  // namespace trainfit::telemetry
