// `trainfit watch`: sample the GPUs through NVML and name what holds a running job back.
//   trainfit watch                      all GPUs, a live view refreshing in place (plain lines when piped)
//   trainfit watch --pid N              the GPUs that process (and its children) use
//   trainfit watch -- python train.py   start the job, watch it, summarise, return its exit code
//   trainfit watch --replay FILE        diagnose a --jsonl recording again, no GPU needed
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "trainfit/telemetry.hpp"
#include "trainfit/units.hpp"

extern char** environ;

namespace trainfit::cli {
namespace {

using namespace trainfit::telemetry;

struct WatchFlags {
  int pid = 0;
  std::string jsonl, prometheus, events, replay;
  double interval = 0.1, duration = 0, window = 5;
  std::vector<std::string> command;
};

volatile sig_atomic_t g_signal = 0;  // the last SIGINT or SIGTERM received
void on_signal(int sig) {
  g_signal = sig;
}

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

std::string opt_pct(const std::optional<double>& v) {
  return v ? fmt::format("{:.0f}%", *v) : "?";
}
std::string opt_rate(const std::optional<double>& v) {
  return v ? fmt::format("{:.2f}", *v / 1e9) : "?";
}
std::string opt_num(const std::optional<double>& v, const char* unit) {
  return v ? fmt::format("{:.0f}{}", *v, unit) : "?";
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
  // Starts `argv` with TRAINFIT_WATCH_EVENTS pointing at `events`. posix_spawnp rather than fork: the
  // caller may already run threads, and it reports a command that cannot start.
  void start(const std::vector<std::string>& argv, const std::string& events) {
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e)
      if (std::strncmp(*e, "TRAINFIT_WATCH_EVENTS=", 22) != 0) env_strings.emplace_back(*e);
    env_strings.push_back("TRAINFIT_WATCH_EVENTS=" + events);
    std::vector<char*> envp, args;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_copy = argv;
    for (auto& s : argv_copy) args.push_back(s.data());
    args.push_back(nullptr);
    if (const int err = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), envp.data()); err != 0)
      throw InputError(fmt::format("cannot start '{}': {}", argv[0], std::strerror(err)));
  }
  bool poll() {
    if (exit_code) return true;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) != pid) return false;
    exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return true;
  }
};

std::string timeline_text(std::span<const Diagnosis> diagnoses, std::span<const GpuInfo> gpus, double t0,
                          const std::set<int>& watched, double window) {
  std::string out;
  const auto spans = verdict_timeline(diagnoses);
  for (const GpuInfo& g : gpus) {
    if (!watched.count(g.index)) continue;
    out += fmt::format("GPU {} ({}), verdicts over time ({:.0f} s windows, every second):\n", g.index, g.name, window);
    bool any = false;
    for (const VerdictSpan& v : spans) {
      if (v.gpu != g.index) continue;
      any = true;
      out +=
          fmt::format("  {:>14} {:<22} {:>3} window{}  {}\n", fmt::format("{:.1f}-{:.1f} s", v.begin - t0, v.end - t0),
                      to_string(v.verdict.kind), v.windows, v.windows == 1 ? " " : "s", v.verdict.evidence);
      if (!v.verdict.advice.empty()) out += fmt::format("  {:14} {:<22} try: {}\n", "", "", v.verdict.advice);
    }
    if (!any) out += "  (too short to judge: under one window of samples)\n";
  }
  return out;
}

int replay(const WatchFlags& f) {
  const Recording r = load_recording(f.replay);
  const auto diagnoses = diagnose_recording(r, f.window, 1.0);
  std::set<int> all;
  for (const GpuInfo& g : r.gpus) all.insert(g.index);
  std::cout << fmt::format("{}: {} samples, {} probe steps\n", f.replay, r.samples.size(), r.steps.size());
  std::cout << timeline_text(diagnoses, r.gpus, r.samples.empty() ? 0 : r.samples.front().time, all, f.window);
  return 0;
}

std::string live_view(const std::vector<GpuInfo>& gpus, const GpuReading* const* latest,
                      const std::map<int, Diagnosis>& verdicts, const std::vector<std::uint32_t>& job,
                      const WatchFlags& f, double elapsed) {
  std::string out = fmt::format(
      "trainfit watch: {} GPU{}, a sample every {:.2g} s, verdicts over the last {:.0f} s, "
      "{:.0f} s in (Ctrl-C to stop)\x1b[K\n",
      gpus.size(), gpus.size() == 1 ? "" : "s", f.interval, f.window, elapsed);
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const GpuInfo& info = gpus[i];
    const GpuReading* g = latest[i];
    out += fmt::format("\x1b[K\nGPU {}  {}\x1b[K\n", info.index, info.name);
    if (!g) continue;
    std::string mem = "  memory   ?";
    if (g->memory_used_bytes && g->memory_total_bytes && *g->memory_total_bytes > 0) {
      const auto total = static_cast<double>(*g->memory_total_bytes);
      const double in_use = g->memory_free_bytes ? total - static_cast<double>(*g->memory_free_bytes)
                                                 : static_cast<double>(*g->memory_used_bytes);
      mem = fmt::format("  memory   {} used of {} ({:.0f}% of the card in use)", format_bytes(*g->memory_used_bytes),
                        format_bytes(*g->memory_total_bytes), 100 * in_use / total);
    }
    if (!job.empty() && g->processes) {
      std::int64_t mine = 0;
      for (const auto& p : *g->processes)
        if (std::find(job.begin(), job.end(), p.pid) != job.end()) mine += p.used_bytes.value_or(0);
      mem += fmt::format("   job {}", format_bytes(mine));
    }
    out += mem + "\x1b[K\n";
    out += fmt::format("  util     {} (memory {})   SM {} of {} MHz   memory clock {} MHz\x1b[K\n",
                       opt_pct(g->gpu_util_percent), opt_pct(g->memory_util_percent), opt_num(g->sm_clock_mhz, ""),
                       opt_num(info.sm_clock_max_mhz, ""), opt_num(g->memory_clock_mhz, ""));
    out += fmt::format("  links    PCIe rx {} tx {} GB/s   NVLink rx {} tx {} GB/s\x1b[K\n",
                       opt_rate(g->pcie_rx_bytes_per_s), opt_rate(g->pcie_tx_bytes_per_s),
                       opt_rate(g->nvlink_rx_bytes_per_s), opt_rate(g->nvlink_tx_bytes_per_s));
    out += fmt::format("  power    {} of {}   {}   throttle: {}\x1b[K\n", opt_num(g->power_watts, " W"),
                       opt_num(g->power_limit_watts, " W"), opt_num(g->temperature_c, " °C"),
                       g->throttle_reasons ? describe_throttle(*g->throttle_reasons) : "?");
    if (const auto it = verdicts.find(info.index); it != verdicts.end()) {
      out +=
          fmt::format("  verdict  {}: {}\x1b[K\n", to_string(it->second.primary().kind), it->second.primary().evidence);
      if (!it->second.primary().advice.empty())
        out += fmt::format("  try      {}\x1b[K\n", it->second.primary().advice);
      for (std::size_t v = 1; v < it->second.verdicts.size(); ++v)
        out += fmt::format("  also     {}: {}\x1b[K\n", to_string(it->second.verdicts[v].kind),
                           it->second.verdicts[v].evidence);
    }
  }
  return out + "\x1b[J";
}

int watch(const WatchFlags& f) {
  if (f.interval < 0.01 || f.interval > 60) throw InputError("--interval must be between 0.01 and 60 seconds");
  if (f.window < 1 || f.window > 600) throw InputError("--window must be between 1 and 600 seconds");
  if (f.duration < 0) throw InputError("--duration must not be negative");
  if (!f.command.empty() && f.pid) throw InputError("give either --pid or a command after --, not both");
  if (f.pid && kill(f.pid, 0) != 0 && errno == ESRCH) throw InputError(fmt::format("no process {}", f.pid));

  auto nvml = Nvml::open();  // TelemetryUnavailable: one line and exit code 3, before any job starts
  const std::vector<GpuInfo>& gpus = nvml->gpus();
  std::unique_ptr<MetricsServer> server;
  if (!f.prometheus.empty()) server = std::make_unique<MetricsServer>(parse_endpoint(f.prometheus));
  std::ofstream jsonl;
  if (!f.jsonl.empty()) {
    jsonl.open(f.jsonl, std::ios::trunc);
    if (!jsonl) throw InputError("cannot write '" + f.jsonl + "'");
  }
  std::string command_text;
  for (const auto& a : f.command) command_text += (command_text.empty() ? "" : " ") + a;
  if (jsonl) jsonl << header_to_json(gpus, nvml->driver_version(), command_text).dump() << "\n" << std::flush;

  // Ctrl-C ends a watch of its own; with a job, the terminal delivers it to the job too, and watch
  // summarises when the job ends. A SIGTERM meant for watch is passed on to the job.
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  Job job;
  std::string events_path = f.events;
  struct TempDir {  // the job's events file lives here, removed however watch ends
    std::filesystem::path path;
    ~TempDir() {
      std::error_code ec;
      if (!path.empty()) std::filesystem::remove_all(path, ec);
    }
  } events_dir;
  if (!f.command.empty()) {
    if (events_path.empty()) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "trainfit-watch-XXXXXX").string();
      if (!mkdtemp(tmpl.data())) throw SystemError("cannot create a temporary folder for the job's events");
      events_dir.path = tmpl;
      events_path = (events_dir.path / "events.jsonl").string();
      std::ofstream(events_path).flush();
    }
    job.start(f.command, events_path);
  }
  const std::uint32_t root = job.pid ? static_cast<std::uint32_t>(job.pid) : static_cast<std::uint32_t>(f.pid);

  const bool tty = isatty(STDOUT_FILENO) && f.command.empty();
  std::ostream& log = f.command.empty() ? std::cout : std::cerr;  // a job's own stdout stays its own
  Sampler sampler(*nvml, std::chrono::duration<double>(f.interval));
  const double t0 = now();
  const double cpu0 = process_cpu_seconds();
  sampler.start();
  if (tty) std::cout << "\x1b[2J" << std::flush;

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
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(f.interval, 0.1)));
    const double t = now();
    finished = g_signal != 0 && f.command.empty();
    if (g_signal == SIGTERM && job.pid && !job.exit_code && !terminated) terminated = kill(job.pid, SIGTERM) == 0;
    if (job.pid && job.poll()) finished = true;  // after this last pass
    if (f.duration > 0 && t - t0 >= f.duration) finished = true;
    if (finished) sampler.stop();
    for (Sample& s : sampler.take()) {
      if (jsonl) jsonl << sample_to_json(s).dump() << "\n";
      history.push_back(std::move(s));
    }
    while (!history.empty() && history.front().time < t - f.window - 1) history.pop_front();
    for (const std::string& line : tail.read()) {
      try {
        parse_event_line(line, steps, phases);
        if (jsonl) {
          auto o = nlohmann::json::parse(line);
          o["type"] = "event";
          jsonl << o.dump() << "\n";
        }
      } catch (const std::exception&) {
        if (bad_events++ == 0)
          std::cerr << "trainfit watch: ignoring malformed probe events in " << events_path << "\n";
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
      if (!tty && (f.command.empty() || prev == current.end() || prev->second.primary().kind != d.primary().kind))
        log << fmt::format("[{:6.1f} s] GPU {}: {}: {}\n", t - t0, g.index, to_string(d.primary().kind),
                           d.primary().evidence)
            << std::flush;
      current[g.index] = d;
      diagnoses.push_back(d);
      now_verdicts.push_back(std::move(d));
    }
    if (server && !history.empty()) server->publish(render_prometheus(gpus, history.back(), now_verdicts));
    if (tty && !history.empty()) {
      std::vector<const GpuReading*> latest(gpus.size(), nullptr);
      for (std::size_t i = 0; i < gpus.size(); ++i)
        for (const GpuReading& g : history.back().gpus)
          if (g.index == gpus[i].index) latest[i] = &g;
      std::cout << "\x1b[H" << live_view(gpus, latest.data(), current, tree, f, t - t0) << std::flush;
    }
  }
  const double wall = now() - t0;
  const SamplerCost cost = sampler.cost();
  const double process_share = (process_cpu_seconds() - cpu0) / std::max(wall, 1e-9);
  if (watched.empty())
    for (const GpuInfo& g : gpus) watched.insert(g.index);

  std::string summary;
  if (job.pid)
    summary += fmt::format("\ntrainfit watch: `{}` exited with code {} after {:.1f} s\n", command_text,
                           job.exit_code.value_or(-1), wall);
  else
    summary += fmt::format("\ntrainfit watch: {:.1f} s\n", wall);
  summary += timeline_text(diagnoses, gpus, t0, watched, f.window);
  summary += fmt::format(
      "cost: sampler thread {:.3f} s CPU over {:.1f} s ({} samples) = {:.3f}% of a core; "
      "trainfit watch in all {:.3f}% of a core\n",
      cost.cpu_seconds, cost.wall_seconds, cost.samples, 100 * cost.core_fraction(), 100 * process_share);
  log << summary << std::flush;
  if (jsonl) {
    nlohmann::json spans = nlohmann::json::array();
    for (const VerdictSpan& v : verdict_timeline(diagnoses))
      spans.push_back({{"gpu", v.gpu},
                       {"begin", v.begin},
                       {"end", v.end},
                       {"windows", v.windows},
                       {"verdict", to_string(v.verdict.kind)},
                       {"evidence", v.verdict.evidence}});
    jsonl << nlohmann::json{{"type", "summary"},
                            {"timeline", spans},
                            {"exit_code", job.exit_code ? nlohmann::json(*job.exit_code) : nlohmann::json(nullptr)},
                            {"sampler",
                             {{"cpu_seconds", cost.cpu_seconds},
                              {"wall_seconds", cost.wall_seconds},
                              {"samples", cost.samples},
                              {"core_fraction", cost.core_fraction()}}},
                            {"process_core_fraction", process_share}}
                 .dump()
          << "\n"
          << std::flush;
  }
  return job.exit_code.value_or(0);
}

}  // namespace

void add_watch_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<WatchFlags>();
  auto* cmd = app.add_subcommand("watch", "Sample the GPUs through NVML and name what holds a running job back");
  cmd->add_option("--pid", f->pid, "watch the GPUs this process and its children use");
  cmd->add_option("--jsonl", f->jsonl, "write every sample, probe event and verdict to this file (JSON lines)");
  cmd->add_option("--prometheus", f->prometheus, "serve /metrics at HOST:PORT (loopback unless a host is given)");
  cmd->add_option("--interval", f->interval, "seconds between samples")->capture_default_str();
  cmd->add_option("--duration", f->duration, "stop after this many seconds (0: until Ctrl-C or the job ends)")
      ->capture_default_str();
  cmd->add_option("--window", f->window, "seconds of samples behind each verdict")->capture_default_str();
  cmd->add_option("--events", f->events, "a probe's step events file to follow (set for a job started by watch)");
  cmd->add_option("--replay", f->replay, "diagnose a --jsonl recording again instead of sampling");
  cmd->add_option("command", f->command, "after --: the job to start and watch; watch returns its exit code");
  cmd->callback([f, &exit_code] { exit_code = f->replay.empty() ? watch(*f) : replay(*f); });
}

}  // namespace trainfit::cli
