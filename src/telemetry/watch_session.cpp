// The engine of `trainfit watch`: the job, the sampler, the probe's events, the verdict every second,
// the JSON lines and the summary. The caller shows the text (WatchOutput) and turns its signals into
// `last_signal`.
#include <cmath>
#include <fmt/format.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "common/subprocess.hpp"
#include "telemetry/watch_text.hpp"
#include "trainfit/telemetry.hpp"

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

// Follows a file that a probe appends JSON lines to; keeps a partial last line for the next read.
class EventTail {
 public:
  explicit EventTail(std::string path) : path_(std::move(path)) {}
  // New complete lines since the last call.
  std::vector<std::string> read() {
    std::vector<std::string> lines;
    if (path_.empty()) return lines;
    if (!in_.is_open()) {
      in_.open(path_, std::ios::binary);
      if (!in_.is_open()) return lines;
    }
    std::array<char, 65536> buf{};
    for (;;) {
      in_.read(buf.data(), buf.size());
      const auto n = in_.gcount();
      if (n <= 0) break;
      partial_.append(buf.data(), static_cast<std::size_t>(n));
    }
    in_.clear();  // EOF is not the end: the job keeps writing
    std::size_t start = 0, nl = 0;
    while ((nl = partial_.find('\n', start)) != std::string::npos) {
      lines.push_back(partial_.substr(start, nl - start));
      start = nl + 1;
    }
    partial_.erase(0, start);
    return lines;
  }

 private:
  std::string path_;
  std::ifstream in_;
  std::string partial_;
};

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

nlohmann::json summary_to_json(std::span<const Diagnosis> diagnoses, const std::optional<int>& exit_code,
                               const SamplerCost& cost, double process_share) {
  nlohmann::json spans = nlohmann::json::array();
  for (const VerdictSpan& v : verdict_timeline(diagnoses))
    spans.push_back({{"gpu", v.gpu},
                     {"begin", v.begin},
                     {"end", v.end},
                     {"windows", v.windows},
                     {"verdict", to_string(v.verdict.kind)},
                     {"evidence", v.verdict.evidence}});
  return {{"type", "summary"},
          {"timeline", spans},
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
  std::ofstream jsonl;
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

  State& s = *state_;
  s.nvml = Nvml::open(o.nvml_library);
  if (!o.prometheus.empty()) s.server = std::make_unique<MetricsServer>(parse_endpoint(o.prometheus));
  if (!o.jsonl_path.empty()) {
    s.jsonl.open(o.jsonl_path, std::ios::trunc);
    if (!s.jsonl) throw InputError("cannot write '" + o.jsonl_path + "'");
  }
  for (const auto& a : o.command) s.command_text += (s.command_text.empty() ? "" : " ") + a;
  if (s.jsonl)
    s.jsonl << header_to_json(s.nvml->gpus(), s.nvml->driver_version(), s.command_text).dump() << "\n" << std::flush;
  s.options = std::move(options);
}

WatchSession::~WatchSession() = default;

WatchResult WatchSession::run(const WatchOutput& output, const std::atomic<int>& last_signal) {
  State& s = *state_;
  if (s.ran) throw std::logic_error("WatchSession::run: a session runs once");
  s.ran = true;
  const WatchOptions& o = s.options;
  const std::vector<GpuInfo>& gpus = s.nvml->gpus();
  std::ofstream& jsonl = s.jsonl;

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
  std::vector<Diagnosis> diagnoses;
  std::map<int, Diagnosis> current;
  std::set<int> watched;  // GPUs the job was seen on; all of them until then
  std::vector<std::uint32_t> tree;
  double next_verdict = t0 + 1, next_tree = t0;
  int bad_events = 0;
  bool finished = false, terminated = false;
  while (!finished) {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(o.interval_seconds, 0.1)));
    const double t = now();
    const int signal = last_signal.load();
    finished = signal != 0 && o.command.empty();
    if (signal == SIGTERM && job.pid && !job.exit_code && !terminated) terminated = kill(job.pid, SIGTERM) == 0;
    if (job.pid && job.poll()) finished = true;  // after this last pass
    if (o.duration_seconds > 0 && t - t0 >= o.duration_seconds) finished = true;
    if (finished) sampler.stop();
    for (Sample& sample : sampler.take()) {
      if (jsonl) jsonl << sample_to_json(sample).dump() << "\n";
      history.push_back(std::move(sample));
    }
    while (!history.empty() && history.front().time < t - o.window_seconds - 1) history.pop_front();
    for (const std::string& line : tail.read()) {
      try {
        parse_event_line(line, steps, phases);
        if (jsonl) {
          auto event = nlohmann::json::parse(line);
          event["type"] = "event";
          jsonl << event.dump() << "\n";
        }
      } catch (const std::exception&) {
        if (bad_events++ == 0 && output.warning)
          output.warning("trainfit watch: ignoring malformed probe events in " + events_path + "\n");
      }
    }
    // Several processes (ranks) may append to one events file: keep the steps in time order.
    if (!std::is_sorted(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.time < b.time; }))
      std::stable_sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.time < b.time; });
    // Two minutes of steps: the retry lookback needs 30 s, the spill rule the run's earlier steps.
    if (steps.size() > 100 && steps.front().time < t - 120)
      steps.erase(steps.begin(), std::lower_bound(steps.begin(), steps.end(), t - 120,
                                                  [](const StepEvent& e, double x) { return e.time < x; }));
    if (jsonl) jsonl.flush();
    if (root && t >= next_tree) {
      tree = process_tree(root);
      next_tree = t + 1;
      if (!history.empty())
        for (const GpuReading& g : history.back().gpus)
          if (g.processes)
            for (const auto& p : *g.processes)
              if (std::find(tree.begin(), tree.end(), p.pid) != tree.end()) watched.insert(g.index);
    }
    if ((t < next_verdict && !finished) || history.size() < 3) continue;
    next_verdict += 1;
    const std::vector<Sample> window(history.begin(), history.end());
    std::vector<Diagnosis> now_verdicts;
    for (const GpuInfo& g : gpus) {
      if (!watched.empty() && !watched.count(g.index)) continue;
      Diagnosis d = diagnose(window, steps, g);
      if (d.stats.samples < 3) continue;
      if (jsonl) jsonl << diagnosis_to_json(d).dump() << "\n";
      const auto prev = current.find(g.index);
      // A job's own output shares the terminal: only changes of verdict are worth a line there.
      const bool changed = prev == current.end() || prev->second.primary().kind != d.primary().kind;
      if (!live && output.verdict_line && (o.command.empty() || changed))
        output.verdict_line(fmt::format("[{:6.1f} s] GPU {}: {}: {}\n", t - t0, g.index, to_string(d.primary().kind),
                                        d.primary().evidence));
      current[g.index] = d;
      diagnoses.push_back(d);
      now_verdicts.push_back(std::move(d));
    }
    if (s.server && !history.empty()) s.server->publish(render_prometheus(gpus, history.back(), now_verdicts));
    if (live && !history.empty()) {
      std::vector<const GpuReading*> latest(gpus.size(), nullptr);
      for (std::size_t i = 0; i < gpus.size(); ++i)
        for (const GpuReading& g : history.back().gpus)
          if (g.index == gpus[i].index) latest[i] = &g;
      output.live_view(
          "\x1b[H" + detail::live_view_text(gpus, latest, current, tree, o.interval_seconds, o.window_seconds, t - t0));
    }
  }
  const double wall = now() - t0;
  const SamplerCost cost = sampler.cost();
  const double process_share = (process_cpu_seconds() - cpu0) / std::max(wall, 1e-9);
  if (watched.empty())
    for (const GpuInfo& g : gpus) watched.insert(g.index);

  WatchResult result;
  result.exit_code = job.exit_code;
  result.summary = detail::summary_text({s.command_text, job.exit_code, wall, cost, process_share}, diagnoses, gpus, t0,
                                        watched, o.window_seconds);
  if (jsonl) jsonl << summary_to_json(diagnoses, job.exit_code, cost, process_share).dump() << "\n" << std::flush;
  return result;
}

}  // namespace trainfit::telemetry
