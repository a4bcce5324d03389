// `trainfit watch`: sample the GPUs through NVML and name what holds a running job back.
//   trainfit watch                      all GPUs, a live view refreshing in place (plain lines when piped)
//   trainfit watch --pid N              the GPUs that process (and its children) use
//   trainfit watch -- python train.py   start the job, watch it, summarise, return its exit code
//   trainfit watch --replay FILE        diagnose a --jsonl recording again, no GPU needed
// The watch itself is the library's (WatchSession); this file has its flags, signals and terminal.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <iostream>
#include <memory>
#include <string>

#include "commands.hpp"
#include "trainfit/report.hpp"
#include "setup_flags.hpp"
#include "trainfit/telemetry.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::cli {
namespace {

using namespace trainfit::telemetry;

struct WatchFlags {
  WatchOptions options;
  std::string replay;
  std::string format = "table";
  bool score = false;
  bool plan = false;
};

// `--plan` with the setup's flags: the planner's prediction for the job, to set the watch's
// measurements beside. The setup is the plan command's (its flags, its checks).
PlanReference plan_reference(const SetupFlags& setup_flags) {
  const TrainingSetup setup = resolve_setup(setup_flags.given());
  if (setup.model.empty())
    throw InputError("--plan needs the job's setup: at least --model and --gpu (trainfit plan's flags)");
  PlanOptions options;
  options.suggest = false;
  const Plan p = make_plan(load_model(setup.model), setup, resolve_card(setup), options);
  PlanReference r;
  r.setup = fmt::format("{} {} on {}, {} x {} tokens", setup.model, to_string(setup.method), p.gpu.name, setup.batch,
                        setup.seq);
  if (setup.grad_accum > 1) r.setup += fmt::format(" x {} accumulated", setup.grad_accum);
  r.step_seconds = p.time.predicted ? p.time.step_seconds : 0;
  r.device_used_bytes = p.memory.device_used_bytes;
  r.bottleneck = to_string(p.time.bottleneck);
  return r;
}

// `--replay FILE --score`: how often each steady phase of the recording was named right, as JSON.
std::string score_json(const Recording& recording, double window_seconds) {
  check_window(window_seconds);
  nlohmann::json phases = nlohmann::json::array();
  for (const PhaseScore& p : score_recording(recording, window_seconds))
    phases.push_back({{"label", p.label},
                      {"expect", watch_verdict(p.expected)},
                      {"windows", p.windows},
                      {"right", p.right},
                      {"share", p.windows > 0 ? static_cast<double>(p.right) / p.windows : 0.0},
                      {"wrong", p.wrong}});
  return nlohmann::json{{"schema", "trainfit.watch-score/1"}, {"phases", phases}}.dump(2) + "\n";
}

// The last SIGINT, SIGTERM or SIGHUP received, for the session to act on.
std::atomic<int> g_last_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "set from a signal handler");
void on_signal(int sig, siginfo_t* info, void*) {
  // A terminal's Ctrl-C comes from the kernel (SI_KERNEL) to the whole foreground process group, the
  // job's too: marked so that it is not passed on a second time. A signal from kill(2) (SI_USER) was
  // meant for watch alone and is passed on. A hang-up is passed on whoever sent it: the kernel sends
  // it to the session's leader only (a shell, or watch itself), never to the job.
  const bool job_has_it = sig == SIGINT && info != nullptr && info->si_code == SI_KERNEL;
  g_last_signal.store(sig | (job_has_it ? kSignalReachedJob : 0));
}

int watch(const WatchOptions& options) {
  WatchSession session(options);  // TelemetryUnavailable: one line and exit code 3, before any job starts

  // Ctrl-C ends a watch of its own; with a job, the terminal delivers it to the job too, and watch
  // summarises when the job ends. A SIGINT, SIGTERM or SIGHUP sent to watch alone is passed on to
  // the job, and watch summarises and cleans up when the job ends: a hang-up no longer kills watch
  // and leaves the job orphaned, with its events folder behind.
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);

  // Port 0 gets any free port: without this line nobody could know which.
  if (const std::string url = session.metrics_url(); !url.empty())
    std::cerr << "trainfit watch: serving " << url << "\n" << std::flush;

  const bool job = !options.command.empty();
  std::ostream& log = job ? std::cerr : std::cout;  // a job's own stdout stays its own
  WatchOutput output;
  output.verdict_line = [&log](const std::string& line) { log << line << std::flush; };
  output.warning = [](const std::string& line) { std::cerr << line; };
  if (!job && isatty(STDOUT_FILENO))
    output.live_view = [](const std::string& screen) { std::cout << screen << std::flush; };
  const WatchResult result = session.run(output, g_last_signal);
  log << result.summary << std::flush;
  return result.exit_code.value_or(0);
}

}  // namespace

void add_watch_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<WatchFlags>();
  WatchOptions& o = f->options;
  auto* cmd = app.add_subcommand("watch", "Sample the GPUs through NVML and name what holds a running job back");
  auto setup_flags = std::make_shared<SetupFlags>(*cmd);
  cmd->add_flag("--plan", f->plan,
                "set the measured step time and memory beside the planner's prediction for the setup given with "
                "trainfit plan's flags (--model, --gpu, --method, --seq, --batch...)");
  cmd->add_option("--pid", o.pid, "watch the GPUs this process and its children use");
  cmd->add_option("--jsonl", o.jsonl_path, "write every sample, probe event and verdict to this file (JSON lines)");
  cmd->add_option("--prometheus", o.prometheus, "serve /metrics at HOST:PORT (loopback unless a host is given)");
  cmd->add_option("--interval", o.interval_seconds, "seconds between samples")->capture_default_str();
  cmd->add_option("--duration", o.duration_seconds, "stop after this many seconds (0: until Ctrl-C or the job ends)")
      ->capture_default_str();
  cmd->add_option("--window", o.window_seconds, "seconds of samples behind each verdict")->capture_default_str();
  cmd->add_option("--events", o.events_path, "a probe's step events file to follow (set for a job started by watch)");
  cmd->add_option("--replay", f->replay, "diagnose a --jsonl recording again instead of sampling");
  cmd->add_option("--format", f->format, "with --replay: table | html (utilisation, memory and verdicts over time)")
      ->capture_default_str();
  cmd->add_flag("--score", f->score,
                "with --replay: print as JSON how many windows of each steady phase (the job's markers) were named "
                "right");
  cmd->add_option("command", o.command, "after --: the job to start and watch; watch returns its exit code");
  cmd->callback([f, setup_flags, &exit_code] {
    if (f->plan) f->options.plan = plan_reference(*setup_flags);
    if (f->score && f->replay.empty()) throw InputError("--score needs --replay FILE");
    if (f->replay.empty()) {
      exit_code = watch(f->options);
    } else if (f->score) {
      std::cout << score_json(load_recording(f->replay), f->options.window_seconds);
      exit_code = 0;
    } else {
      if (f->format != "table" && f->format != "html")
        throw InputError(fmt::format("unknown --format '{}'; expected table or html", f->format));
      const Recording recording = load_recording(f->replay);
      if (f->format == "html")
        std::cout << render_html_report("watch", fmt::format("trainfit watch --replay {}", f->replay),
                                        replay_to_json(recording, f->replay, f->options.window_seconds));
      else
        std::cout << render_replay(recording, f->replay, f->options.window_seconds);
      exit_code = 0;
    }
  });
}

}  // namespace trainfit::cli
