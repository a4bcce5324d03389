// Runs each config in its own process and never loses a finished row.
//
// Durability: a row is one write() of one line to results.jsonl (O_APPEND), then fsync, before
// the next config starts; a torn last line (the orchestrator killed inside write) is cut off on
// the next start, and that config runs again. Isolation: each runner is its own process group
// (setpgid), so a timeout kills it and everything it started (torchrun's workers); it also dies
// with the orchestrator (PR_SET_PDEATHSIG), and a group left behind by a SIGKILLed orchestrator
// is killed on the next start (the group id is kept in .running).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"

extern char** environ;

namespace trainfit::bench {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string fnv1a_hex(std::string_view s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return fmt::format("{:016x}", h).substr(0, 10);
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string tail(const std::string& s, std::size_t n) { return s.size() <= n ? s : s.substr(s.size() - n); }

void write_all(int fd, const std::string& s, const fs::path& what) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t w = ::write(fd, s.data() + done, s.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw InputError(fmt::format("cannot write '{}': {}", what.string(), std::strerror(errno)));
    done += static_cast<std::size_t>(w);
  }
}

// The directory's lock: two orchestrators appending to one file would interleave configs.
class DirLock {
 public:
  explicit DirLock(const fs::path& dir) {
    const fs::path p = dir / ".lock";
    fd_ = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw InputError(fmt::format("cannot open '{}': {}", p.string(), std::strerror(errno)));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd_);
      throw InputError(fmt::format("another `trainfit bench` is using '{}'", dir.string()));
    }
  }
  ~DirLock() { ::close(fd_); }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

// Field 22 of /proc/PID/stat: when the process started, to tell a recycled pid from ours.
std::string start_time_of(pid_t pid) {
  const std::string stat = read_file(fmt::format("/proc/{}/stat", pid));
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && in >> field; ++i) {
    if (i == 22) return field;
  }
  return {};
}

void kill_stale_group(const fs::path& running) {
  std::ifstream f(running);
  long pgid = 0;
  std::string started;
  if (f >> pgid >> started && pgid > 1 && start_time_of(static_cast<pid_t>(pgid)) == started)
    ::kill(static_cast<pid_t>(-pgid), SIGKILL);
  std::error_code ec;
  fs::remove(running, ec);
}

// Cuts a torn last line (no newline) so the next row starts on a line of its own.
void repair_tail(const fs::path& results) {
  std::error_code ec;
  if (!fs::exists(results, ec)) return;
  const std::string text = read_file(results);
  if (text.empty() || text.back() == '\n') return;
  const auto keep = text.rfind('\n');
  fs::resize_file(results, keep == std::string::npos ? 0 : keep + 1, ec);
  if (ec) throw InputError(fmt::format("cannot repair '{}': {}", results.string(), ec.message()));
}

struct Exit {
  bool timed_out = false;
  bool signaled = false;
  int code = 0;    // exit code or signal number
  double seconds = 0;
};

struct Spawned {
  pid_t pid = -1;
};

Spawned spawn(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
              const fs::path& log) {
  if (argv.empty()) throw InputError("no runner command");
  const int logfd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (logfd < 0) throw InputError(fmt::format("cannot create '{}': {}", log.string(), std::strerror(errno)));
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view kv(*e);
    const auto eq = kv.find('=');
    const std::string_view k = kv.substr(0, eq);
    if (std::none_of(env.begin(), env.end(), [&](const auto& p) { return p.first == k; })) env_strings.emplace_back(kv);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(logfd);
    throw InputError(fmt::format("cannot start the runner: {}", std::strerror(errno)));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(126);  // the orchestrator died before prctl
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(logfd, 1);
    ::dup2(logfd, 2);
    ::execvpe(cargv[0], cargv.data(), envp.data());
    const char msg[] = "trainfit bench: cannot execute the runner command\n";
    [[maybe_unused]] const ssize_t w = ::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: no window in which a kill of the group misses it
  ::close(logfd);
  return {pid};
}

Exit wait_for(const Spawned& s, double timeout, double grace, ConfigSampler* sampler) {
  const auto t0 = Clock::now();
  auto last_tick = t0;
  Exit e;
  int status = 0;
  bool terminated = false;
  Clock::time_point term_at;
  for (;;) {
    const pid_t r = ::waitpid(s.pid, &status, WNOHANG);
    if (r == s.pid) break;
    if (r < 0 && errno != EINTR) break;
    const double t = seconds_since(t0);
    if (!terminated && t > timeout) {
      e.timed_out = true;
      terminated = true;
      term_at = Clock::now();
      ::kill(-s.pid, SIGTERM);
    } else if (terminated && seconds_since(term_at) > grace) {
      ::kill(-s.pid, SIGKILL);
    }
    if (sampler != nullptr && seconds_since(last_tick) >= 0.5) {
      sampler->tick();
      last_tick = Clock::now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(-s.pid, SIGKILL);  // whatever the runner left behind (workers, a stuck child) goes too
  e.seconds = seconds_since(t0);
  if (WIFSIGNALED(status)) {
    e.signaled = true;
    e.code = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    e.code = WEXITSTATUS(status);
  }
  return e;
}

bool mentions_oom(const std::string& log) {
  for (const char* s : {"OutOfMemoryError", "CUDA out of memory", "std::bad_alloc", "Cannot allocate memory"})
    if (log.find(s) != std::string::npos) return true;
  return false;
}

// The row for one finished config: the runner's measurement when it wrote one, otherwise what
// the exit says (timeout / crashed / oom / error), with the end of its output.
json make_row(const ExperimentPlan& plan, const BenchConfig& c, const Exit& exit, const fs::path& out,
              const fs::path& log, const std::string& started) {
  json row = json::object();
  const json reported = json::parse(read_file(out), nullptr, false);
  const bool have = reported.is_object() && reported.contains("measured") && reported["measured"].is_object();
  json measured = have ? reported["measured"] : json::object();
  const std::string log_text = read_file(log);
  if (exit.timed_out) {
    measured["status"] = "timeout";
    measured["error"] = fmt::format("no result after {:.0f} s (the run's timeout); killed", plan.timeout_seconds);
  } else if (!have) {
    if (exit.signaled) {
      measured["status"] = "crashed";
      measured["error"] = fmt::format("the runner died of signal {} ({})", exit.code, ::strsignal(exit.code));
    } else if (mentions_oom(log_text)) {
      measured["status"] = "oom";
      measured["error"] = fmt::format("the runner exited with code {} after running out of memory", exit.code);
    } else {
      measured["status"] = "error";
      measured["error"] = exit.code == 0 ? "the runner exited without writing a result"
                                         : fmt::format("the runner exited with code {} without a result", exit.code);
    }
  }
  if (!measured.contains("status") || !measured["status"].is_string()) measured["status"] = "error";
  if (measured["status"] != "ok") measured["stderr_tail"] = tail(log_text, 3000);
  row["config"] = c.config;
  row["measured"] = measured;
  row["stack"] = have && reported.contains("stack") ? reported["stack"] : json::object();
  row["bench"] = {{"plan", plan.name},
                  {"key", c.key},
                  {"index", c.index},
                  {"label", c.label},
                  {"started", started},
                  {"wall_seconds", std::round(exit.seconds * 100) / 100},
                  {"exit", exit.timed_out ? "timeout"
                           : exit.signaled ? fmt::format("signal {}", exit.code)
                                           : fmt::format("code {}", exit.code)},
                  {"log", log.filename().string()}};
  return row;
}

}  // namespace

std::vector<std::string> split_command(std::string_view command) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (const char c : command) {
    if (quote != 0) {
      if (c == quote) quote = 0;
      else cur += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) out.push_back(std::move(cur));
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (quote != 0) throw InputError(fmt::format("unterminated quote in command '{}'", command));
  if (in_word) out.push_back(std::move(cur));
  return out;
}

std::vector<json> run_configs(const ExperimentPlan& plan, const std::vector<BenchConfig>& configs,
                              const RunOptions& options) {
  const fs::path dir(options.results_dir);
  std::error_code ec;
  fs::create_directories(dir / "runs", ec);
  if (ec) throw InputError(fmt::format("cannot create '{}': {}", (dir / "runs").string(), ec.message()));
  const DirLock lock(dir);
  kill_stale_group(dir / ".running");
  const fs::path results = dir / "results.jsonl";
  repair_tail(results);

  // What is already done: the last row of each key (a retried config's new row wins).
  std::unordered_map<std::string, json> done;
  {
    std::ifstream in(results);
    std::string line;
    while (std::getline(in, line)) {
      json row = json::parse(line, nullptr, false);
      if (!row.is_object() || !row.contains("bench") || !row["bench"].contains("key")) continue;
      const json& k = row["bench"]["key"];
      if (k.is_string()) done[k.get<std::string>()] = std::move(row);
    }
  }
  auto finished = [&](const BenchConfig& c) {
    const auto it = done.find(c.key);
    if (it == done.end()) return false;
    const json& st = it->second["measured"]["status"];
    return !options.retry_failed || st == "ok" || st == "oom";
  };

  const int fd = ::open(results.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(fmt::format("cannot open '{}': {}", results.string(), std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  const auto t0 = Clock::now();
  std::size_t to_run = 0;
  for (const auto& c : configs) to_run += finished(c) ? 0U : 1U;
  std::size_t ran = 0;
  double ran_seconds = 0;
  std::vector<json> rows;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const BenchConfig& c = configs[i];
    Progress p;
    p.position = i + 1;
    p.total = configs.size();
    p.config = &c;
    if (finished(c)) {
      rows.push_back(done[c.key]);
      p.event = Progress::Event::skipped;
      p.row = &rows.back();
      p.elapsed_seconds = seconds_since(t0);
      if (options.on_progress) options.on_progress(p);
      continue;
    }
    p.elapsed_seconds = seconds_since(t0);
    if (ran > 0) p.eta_seconds = ran_seconds / static_cast<double>(ran) * static_cast<double>(to_run - ran);
    if (options.on_progress) options.on_progress(p);

    const std::string stem = fmt::format("{:04}-{}", c.index + 1, fnv1a_hex(c.key));
    const fs::path out = dir / "runs" / (stem + ".json");
    const fs::path log = dir / "runs" / (stem + ".log");
    fs::remove(out, ec);
    std::vector<std::string> argv = options.runner;
    argv.insert(argv.end(), {"--config", c.key, "--out", out.string()});
    const std::string started = utc_now();
    std::unique_ptr<ConfigSampler> sampler = options.make_sampler ? options.make_sampler() : nullptr;
    const Spawned child = spawn(argv, options.env, log);
    {
      std::ofstream running(dir / ".running", std::ios::trunc);
      running << child.pid << " " << start_time_of(child.pid) << "\n";
    }
    const Exit exit = wait_for(child, plan.timeout_seconds, options.kill_grace_seconds, sampler.get());
    fs::remove(dir / ".running", ec);
    json row = make_row(plan, c, exit, out, log, started);
    if (sampler) row["telemetry"] = sampler->summary();
    annotate_row(plan, row);
    write_all(fd, row.dump() + "\n", results);
    if (::fsync(fd) != 0) throw InputError(fmt::format("cannot sync '{}': {}", results.string(), std::strerror(errno)));
    ++ran;
    ran_seconds += exit.seconds;
    rows.push_back(std::move(row));
    p.event = Progress::Event::finished;
    p.row = &rows.back();
    p.elapsed_seconds = seconds_since(t0);
    p.eta_seconds = ran_seconds / static_cast<double>(ran) * static_cast<double>(to_run - ran);
    if (options.on_progress) options.on_progress(p);
  }
  return rows;
}

void write_results_json(const std::string& dir, const json& doc) {
  const fs::path final_path = fs::path(dir) / "results.json";
  const fs::path tmp = fs::path(dir) / "results.json.tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(fmt::format("cannot write '{}': {}", tmp.string(), std::strerror(errno)));
  try {
    write_all(fd, doc.dump(2) + "\n", tmp);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::fsync(fd);
  ::close(fd);
  std::error_code ec;
  fs::rename(tmp, final_path, ec);  // atomic: a reader sees the old file or the new one
  if (ec) throw InputError(fmt::format("cannot write '{}': {}", final_path.string(), ec.message()));
}

}  // namespace trainfit::bench
