// Runs each config in its own process and never loses a finished row.
//
// Durability: a row is one write() of one line to results.jsonl (O_APPEND), then fsync, as soon
// as its config finishes; a torn last line (the orchestrator killed inside write) and a line that
// is not a row (a hand edit's typo) are moved to results.set-aside.jsonl on the next start, named in
// a warning, and their configs run again. Isolation: each runner is its own process group
// (setpgid), so a timeout kills it and everything it started (torchrun's workers); it also dies
// with the orchestrator (PR_SET_PDEATHSIG), and what a SIGKILLed orchestrator's runners left
// behind is killed on the next start: .running lists every running group with a token that its
// processes carry in their environment (TRAINFIT_BENCH_RUN), so they are found even after the
// group's leader is gone.
//
// Concurrency (RunOptions::devices): a pool of GPUs; configs start in plan order while the free
// devices cover the next one's `gpus`, and each running config is polled in turn (its own timeout,
// its own sampler).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
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
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/subprocess.hpp"
#include "bench/bench_row.hpp"
#include "common/text.hpp"
#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"
#include "trainfit/settings.hpp"
#include "trainfit/units.hpp"

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

// What the orchestrator reads of the files it did not write itself is bounded: a runner may write
// gigabytes of log, and one config must not cost the orchestrator that memory.
constexpr std::size_t kLogTailBytes = std::size_t{1} << 20;  // enough to find an OOM message and show the end
// A runner's row is copied whole into results.jsonl, and every resume and judgement reads it
// again: it holds a config's figures, not its data. The Python runner's is 3-6 KB for 4 steps,
// about 300 bytes more a step (10,000 steps, the most a plan allows: 3 MB), with a traceback of at
// most 3,000 characters. Past this the row is not read: an error row says its size and the limit.
constexpr std::size_t kRunnerRowBytes = std::size_t{4} << 20;
// A line of results.jsonl: the runner's row and the config (in "config", "bench.key" and the label,
// each at most about the plan's 1 MiB), with room to spare. repair_tail looks this far back for
// the end of the last whole line.
constexpr std::size_t kResultsLineBytes = std::size_t{64} << 20;
// Where a resume moves the lines of results.jsonl that are not rows (beside it, appended to).
constexpr const char* kSetAsideFile = "results.set-aside.jsonl";
constexpr std::size_t kProcFileBytes = std::size_t{1} << 20;  // /proc/PID/stat and environ

std::string tail(const std::string& s, std::size_t n) { return s.size() <= n ? s : s.substr(s.size() - n); }

void write_all(int fd, const std::string& s, const fs::path& what) {
  std::size_t done = 0;
  while (done < s.size()) {
    const ssize_t w = ::write(fd, s.data() + done, s.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw SystemError(fmt::format("cannot write '{}': {}", what.string(), std::strerror(errno)));
    done += static_cast<std::size_t>(w);
  }
}

// Opens `path` with `flags` (O_TRUNC, or O_APPEND), writes `text` and syncs it: on return the
// bytes are on disk.
void write_synced(const fs::path& path, int flags, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0644);
  if (fd < 0) throw SystemError(fmt::format("cannot write '{}': {}", path.string(), std::strerror(errno)));
  try {
    write_all(fd, text, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) throw SystemError(fmt::format("cannot sync '{}': {}", path.string(), std::strerror(errno)));
}

// Writes a temporary file, syncs it and renames it over `path`: a reader sees the old file or the
// new one, never half of one.
void write_file_atomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  write_synced(tmp, O_TRUNC, text);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw SystemError(fmt::format("cannot write '{}': {}", path.string(), ec.message()));
}

// The directory's lock: two orchestrators appending to one file would interleave configs.
class DirLock {
 public:
  explicit DirLock(const fs::path& dir) {
    const fs::path p = dir / ".lock";
    fd_ = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw SystemError(fmt::format("cannot open '{}': {}", p.string(), std::strerror(errno)));
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
  const std::string stat = detail::read_file_tail(fmt::format("/proc/{}/stat", pid), kProcFileBytes);
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && in >> field; ++i) {
    if (i == 22) return field;
  }
  return {};
}

constexpr std::string_view kTokenVar = "TRAINFIT_BENCH_RUN";

// Every process (but this one) whose environment carries TRAINFIT_BENCH_RUN=token.
std::vector<pid_t> processes_with_token(const std::string& token) {
  const std::string needle = std::string(1, '\0') + std::string(kTokenVar) + "=" + token + std::string(1, '\0');
  std::vector<pid_t> out;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid == ::getpid()) continue;
    const std::string env =
        std::string(1, '\0') + detail::read_file_tail((it->path() / "environ").string(), kProcFileBytes);  // unreadable: empty
    if (env.find(needle) != std::string::npos) out.push_back(pid);
  }
  return out;
}

// .running: one line per running config, "PGID START TOKEN" (START: the leader's /proc start time).
struct RunningGroup {
  long pgid = 0;
  std::string started;
  std::string token;
};

// Kills what a SIGKILLed orchestrator's runners left behind: each group whose leader is still the
// process that was started, and every process carrying one of the tokens (the leader has died
// with the orchestrator, but torchrun's workers or a runner's children may live on).
void kill_stale_groups(const fs::path& running) {
  std::ifstream f(running);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    RunningGroup g;
    if (!(in >> g.pgid >> g.started) || g.pgid <= 1) continue;
    in >> g.token;  // absent in a file written before tokens
    if (start_time_of(static_cast<pid_t>(g.pgid)) == g.started) ::kill(static_cast<pid_t>(-g.pgid), SIGKILL);
    if (!g.token.empty())
      for (const pid_t pid : processes_with_token(g.token)) ::kill(pid, SIGKILL);
  }
  f.close();
  std::error_code ec;
  fs::remove(running, ec);
}

// Rewrites .running (a temporary file renamed over it) with the groups running now; removes it
// when none is.
void write_running(const fs::path& running, const std::vector<RunningGroup>& groups) {
  std::error_code ec;
  if (groups.empty()) {
    fs::remove(running, ec);
    return;
  }
  const fs::path tmp = running.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& g : groups) out << g.pgid << " " << g.started << " " << g.token << "\n";
  }
  fs::rename(tmp, running, ec);
}

// Appends `lines` (each ending in a newline) to results.set-aside.jsonl and syncs it: what a resume
// takes out of results.jsonl is kept there, never dropped.
void set_aside(const fs::path& results, const std::string& lines) {
  write_synced(results.parent_path() / kSetAsideFile, O_APPEND, lines);
}

// Moves a torn last line (no newline) to the set-aside file and cuts it, so the next row starts on
// a line of its own; the warning names it. A torn row is the end of one write(), so the last
// newline is within the last row's length of the end.
void repair_tail(const fs::path& results, const std::function<void(const std::string&)>& warn) {
  std::error_code ec;
  const auto size = fs::file_size(results, ec);
  if (ec || size == 0) return;
  if (detail::read_file_tail(results.string(), 1) == "\n") return;  // the usual case: read one byte, not the tail
  const std::string end = detail::read_file_tail(results.string(), kResultsLineBytes);
  if (end.empty() || end.back() == '\n') return;
  const auto keep = end.rfind('\n');
  const std::uintmax_t cut = keep == std::string::npos ? size - end.size() : size - end.size() + keep + 1;
  set_aside(results, end.substr(keep == std::string::npos ? 0 : keep + 1) + "\n");
  fs::resize_file(results, cut, ec);
  if (ec) throw SystemError(fmt::format("cannot repair '{}': {}", results.string(), ec.message()));
  if (warn)
    warn(
        fmt::format("{}: its last line ({} bytes) was cut short, by a bench stopped while writing it: moved to {}; "
                    "its config runs again",
                    results.string(), size - cut, kSetAsideFile));
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

// The runner: its own process group (a timeout's kill reaches whatever it started), dead with the
// orchestrator, its output in `log`; a command that cannot be executed exits 127 with a line there.
Spawned spawn(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
              const fs::path& log) {
  if (argv.empty()) throw InputError("no runner command");
  detail::SubprocessOptions runner;
  runner.argv = argv;
  runner.set_env = env;
  runner.output = log;
  runner.stdin_from_null = true;
  runner.own_process_group = true;
  runner.die_with_parent = true;
  runner.exec_failure_note = "trainfit bench: cannot execute the runner command\n";
  return {detail::start_subprocess(runner).pid};
}

// One running config.
struct Slot {
  std::size_t position = 0;  // in the plan's configs
  Spawned child;
  RunningGroup group;
  std::vector<std::size_t> pool_slots;  // positions in RunOptions::devices
  std::vector<int> devices;             // the NVML indices (empty without a pool)
  std::unique_ptr<ConfigSampler> sampler;
  fs::path out, log;
  std::string started;  // UTC
  Clock::time_point t0, last_tick, term_at;
  bool terminated = false;
  bool timed_out = false;
};

// One look at a running config: its exit once it has ended (the rest of its group killed), else
// the timeout's SIGTERM and SIGKILL when due, and a sample every 0.5 s.
std::optional<Exit> poll(Slot& s, double timeout, double grace) {
  int status = 0;
  const pid_t r = ::waitpid(s.child.pid, &status, WNOHANG);
  if (r == 0 || (r < 0 && errno == EINTR)) {
    if (!s.terminated && seconds_since(s.t0) > timeout) {
      s.timed_out = true;
      s.terminated = true;
      s.term_at = Clock::now();
      ::kill(-s.child.pid, SIGTERM);
    } else if (s.terminated && seconds_since(s.term_at) > grace) {
      ::kill(-s.child.pid, SIGKILL);
    }
    if (s.sampler != nullptr && seconds_since(s.last_tick) >= 0.5) {
      s.sampler->tick();
      s.last_tick = Clock::now();
    }
    return std::nullopt;
  }
  ::kill(-s.child.pid, SIGKILL);  // whatever the runner left behind (workers, a stuck child) goes too
  Exit e;
  e.timed_out = s.timed_out;
  e.seconds = seconds_since(s.t0);
  if (r == s.child.pid && WIFSIGNALED(status)) {
    e.signaled = true;
    e.code = WTERMSIG(status);
  } else if (r == s.child.pid && WIFEXITED(status)) {
    e.code = WEXITSTATUS(status);
  }
  return e;
}

// Kills and reaps the configs still running when run_configs leaves early (an exception).
struct RunningReaper {
  std::vector<std::unique_ptr<Slot>>& slots;
  ~RunningReaper() {
    for (const auto& s : slots) {
      ::kill(-s->child.pid, SIGKILL);
      int status = 0;
      while (::waitpid(s->child.pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
  }
};

std::string join_devices(const std::vector<int>& devices) { return fmt::format("{}", fmt::join(devices, ",")); }

bool mentions_oom(const std::string& log) {
  for (const char* s : {"OutOfMemoryError", "CUDA out of memory", "std::bad_alloc", "Cannot allocate memory"})
    if (log.find(s) != std::string::npos) return true;
  return false;
}

// The row for one finished config: the runner's measurement when it wrote one, otherwise what
// the exit says (timeout / crashed / oom / error), with the end of its output. A runner's file is
// outside input: a malformed one makes an error row, never a lost one.
BenchRow make_row(const ExperimentPlan& plan, const BenchConfig& c, const Exit& exit, const fs::path& out,
                  const fs::path& log, const std::string& started, const std::vector<int>* devices) {
  BenchRow row;
  row.config = c;
  json reported;
  std::string unreadable;  // why the runner's row could not be read, when it wrote one
  std::error_code size_error;
  const std::uintmax_t size = fs::file_size(out, size_error);
  if (!size_error && size > kRunnerRowBytes) {
    unreadable = fmt::format("the runner's row is {}, over the limit of {} for a row; not read",
                             format_bytes(static_cast<std::int64_t>(size)),
                             format_bytes(static_cast<std::int64_t>(kRunnerRowBytes)));
  } else {
    try {  // the cap holds here too, for a file that grew after its size was taken
      reported = json::parse(detail::read_text_file(out.string(), "the runner's row", kRunnerRowBytes), nullptr, false);
    } catch (const InputError& e) {
      if (fs::exists(out)) unreadable = e.what();
    }
  }
  const bool have = reported.is_object() && reported.contains("measured") && reported["measured"].is_object();
  if (have) {
    row.reported = reported["measured"];
    if (reported.contains("stack") && reported["stack"].is_object()) row.stack = reported["stack"];
    read_reported_measurement(row);
  }
  const std::string log_text = detail::read_file_tail(log.string(), kLogTailBytes);
  Measurement& m = row.measured;
  if (exit.timed_out) {
    m.status = "timeout";
    m.error = fmt::format("no result after {:.0f} s (the run's timeout); killed", plan.timeout_seconds);
  } else if (!have) {
    if (exit.signaled) {
      m.status = "crashed";
      m.error = fmt::format("the runner died of signal {} ({})", exit.code, ::strsignal(exit.code));
    } else if (mentions_oom(log_text)) {
      m.status = "oom";
      m.error = fmt::format("the runner exited with code {} after running out of memory", exit.code);
    } else {
      m.status = "error";
      m.error = !unreadable.empty() ? unreadable
                : exit.code == 0    ? "the runner exited without writing a result"
                                    : fmt::format("the runner exited with code {} without a result", exit.code);
    }
  }
  if (m.status != "ok") row.output_tail = tail(log_text, 3000);
  row.run = {.plan = plan.name,
             .key = c.key,
             .index = c.index,
             .label = c.label,
             .started = started,
             .wall_seconds = std::round(exit.seconds * 100) / 100,
             .exit = exit.timed_out ? "timeout"
                     : exit.signaled ? fmt::format("signal {}", exit.code)
                                     : fmt::format("code {}", exit.code),
             .log = log.filename().string(),
             .devices = devices != nullptr ? std::optional(*devices) : std::nullopt};
  return row;
}

// The row of a config that cannot run on the listed devices: it is not started.
BenchRow unrunnable_row(const ExperimentPlan& plan, const BenchConfig& c, std::size_t needed, std::size_t listed,
                        const std::string& started) {
  BenchRow row;
  row.config = c;
  row.measured.status = "error";
  row.measured.error = fmt::format("needs {} GPUs but --devices lists {}; not run", needed, listed);
  row.run = {.plan = plan.name,
             .key = c.key,
             .index = c.index,
             .label = c.label,
             .started = started,
             .wall_seconds = 0.0,
             .exit = "not run",
             .log = "",
             .devices = std::vector<int>{}};
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

std::vector<int> parse_devices(std::string_view text, const std::vector<int>* available) {
  const auto trim = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  };
  const std::string_view all = trim(text);
  if (all == "all") {
    if (available == nullptr)
      throw InputError("--devices all: NVML is not available to list the GPUs; name them (--devices 0,1)");
    return *available;
  }
  if (all.empty()) throw InputError("--devices: empty list; expected GPU indices like 0,1 or all");
  std::vector<int> out;
  std::size_t from = 0;
  for (;;) {
    const std::size_t comma = all.find(',', from);
    const std::string_view item =
        trim(all.substr(from, comma == std::string_view::npos ? std::string_view::npos : comma - from));
    const bool digits = !item.empty() && item.size() <= 6 &&
                        std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits)
      throw InputError(
          fmt::format("--devices '{}': '{}' is not a GPU index; expected indices like 0,1 or all", text, item));
    const int d = std::stoi(std::string(item));
    if (std::find(out.begin(), out.end(), d) != out.end())
      throw InputError(fmt::format("--devices '{}': GPU {} is listed twice", text, d));
    if (available != nullptr && std::find(available->begin(), available->end(), d) == available->end())
      throw InputError(
          fmt::format("--devices '{}': there is no GPU {}; NVML lists {}", text, d, join_devices(*available)));
    out.push_back(d);
    if (comma == std::string_view::npos) break;
    from = comma + 1;
  }
  return out;
}

namespace {

// A line of results.jsonl that is no row of any config: its number (from 1), why, and whether it
// is not a row at all (not a JSON object with "bench" and "measured": a typo, a cut line), which a
// resume moves aside, or a row this trainfit cannot use, which stays where it is.
struct UnreadLine {
  std::size_t number = 0;
  std::string why;
  bool not_a_row = false;
};

struct ReadRows {
  std::unordered_map<std::string, BenchRow> done;
  std::vector<UnreadLine> unread;
};

// What is already done: the last row of each config (a retried config's new row wins), by the
// config's canonical key. The key is recomputed from the config the row was run as (its stored
// key is that config's JSON), so rows written by an older trainfit, whose keys spelled defaults
// differently, still resume. Every other line is listed in `unread` (empty lines aside), except
// a last line without its newline when `whole_lines_only` (a row still being written).
ReadRows read_rows(const fs::path& results, bool whole_lines_only = false) {
  ReadRows out;
  std::ifstream in(results);
  std::string line;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (whole_lines_only && in.eof()) break;  // getline met the end before a newline
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      // nlohmann's message says where ("at line 1, column 45") and what it met, in a few words.
      out.unread.push_back({number, fmt::format("not JSON ({})", detail::printable(e.what(), 160)), true});
      continue;
    }
    if (!j.is_object() || !j.contains("bench") || !j["bench"].is_object() || !j.contains("measured") ||
        !j["measured"].is_object()) {
      out.unread.push_back({number, "not a row: a row is an object with \"bench\" and \"measured\" objects", true});
      continue;
    }
    try {
      BenchRow row = row_from_json(j);
      std::string key = row.config.key;
      const json& stored = j["bench"].contains("key") ? j["bench"]["key"] : json();
      if (stored.is_string()) {
        const json as_run = json::parse(stored.get<std::string>(), nullptr, false);
        if (as_run.is_object()) {
          BenchConfig run_as = config_from_json(as_run);
          read_built_model_class(run_as, j);
          // A row is judged as the config it names, and found by the one it was run as: the two
          // must be one config (the row's names the card once known). A row edited by hand so
          // that they differ (its config names an unknown model, say) is no row of that config;
          // judged, it would stop every resume. The config runs again.
          BenchConfig named = row.config;
          if (run_as.setup.gpu.empty()) named.setup.gpu.clear();
          if (config_to_json(named).dump() != run_as.key) {
            out.unread.push_back(
                {number, "its \"config\" is not the config it was run as (\"bench.key\"): edited?", false});
            continue;
          }
          key = run_as.key;
        }
      }
      out.done.insert_or_assign(key, std::move(row));
    } catch (const InputError& e) {
      // A row this trainfit cannot read as a config of any plan (an older one's, another build's).
      out.unread.push_back({number, detail::printable(e.what(), 160), false});
    }
  }
  return out;
}

// The warning for an unread line.
std::string unread_warning(const fs::path& results, const UnreadLine& u, std::string_view what_happens) {
  return fmt::format("{} line {}: {}; {}", results.string(), u.number, u.why, what_happens);
}

// Moves the lines that are not rows out of results.jsonl into the set-aside file (appended and
// synced first, then results.jsonl rewritten atomically without them), so a resume reads a file of
// rows and nothing a user wrote is lost.
void set_aside_lines(const fs::path& results, const std::vector<UnreadLine>& unread) {
  std::vector<std::size_t> numbers;
  for (const UnreadLine& u : unread)
    if (u.not_a_row) numbers.push_back(u.number);
  if (numbers.empty()) return;
  std::ifstream in(results);
  std::string line, kept, aside;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    (std::binary_search(numbers.begin(), numbers.end(), number) ? aside : kept) += line + "\n";
  }
  in.close();
  set_aside(results, aside);
  write_file_atomically(results, kept);
}

}  // namespace

FinishedRows finished_rows(const std::vector<BenchConfig>& configs, const std::string& results_dir) {
  const fs::path results = fs::path(results_dir) / "results.jsonl";
  if (!fs::exists(results)) throw InputError(fmt::format("no results to judge: '{}' does not exist", results.string()));
  FinishedRows out;
  // The directory's lock says whether a bench runs there: it holds .lock exclusively, so a shared
  // hold is refused. Otherwise the shared hold lasts while reading, so that no bench starts
  // appending meanwhile (one starting in that moment is refused, as a second bench is). No .lock
  // (rows copied from elsewhere): none runs.
  const fs::path lock = fs::path(results_dir) / ".lock";
  const int fd = ::open(lock.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0 && ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) out.run_in_progress = true;
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } closer{fd};
  ReadRows read = read_rows(results, out.run_in_progress);
  for (const UnreadLine& u : read.unread) out.warnings.push_back(unread_warning(results, u, "not judged"));
  auto& done = read.done;
  for (const auto& c : configs)
    if (auto it = done.find(c.key); it != done.end()) out.rows.push_back(std::move(it->second));
  return out;
}

std::vector<BenchRow> run_configs(const ExperimentPlan& plan, const std::vector<BenchConfig>& configs,
                                  const RunOptions& options) {
  const fs::path dir(options.results_dir);
  std::error_code ec;
  fs::create_directories(dir / "runs", ec);
  if (ec) throw SystemError(fmt::format("cannot create '{}': {}", (dir / "runs").string(), ec.message()));
  const DirLock lock(dir);
  const fs::path running_file = dir / ".running";
  kill_stale_groups(running_file);
  const fs::path results = dir / "results.jsonl";
  repair_tail(results, options.on_warning);
  // The vocabulary the configs are written in, for the runners (python/trainfit_runner/setup_schema.py):
  // a runner reads this binary's settings and defaults, not those of the package it was installed with.
  const fs::path schema = dir / "setup_schema.json";
  write_file_atomically(schema, setup_schema().dump(2) + "\n");

  ReadRows read = read_rows(results);
  for (const UnreadLine& u : read.unread)
    if (options.on_warning)
      options.on_warning(unread_warning(results, u,
                                        u.not_a_row ? fmt::format("moved to {}; fix it there and put it back to keep "
                                                                  "its config from running again",
                                                                  kSetAsideFile)
                                                    : "left in place, and its config runs again"));
  set_aside_lines(results, read.unread);
  std::unordered_map<std::string, BenchRow>& done = read.done;
  auto finished = [&](const BenchConfig& c) {
    const auto it = done.find(c.key);
    if (it == done.end()) return false;
    const std::string& st = it->second.measured.status;
    return !options.retry_failed || st == "ok" || st == "oom";
  };

  const int fd = ::open(results.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw SystemError(fmt::format("cannot open '{}': {}", results.string(), std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  // The pool: without devices, one anonymous slot (one config at a time, every GPU visible).
  const bool pooled = !options.devices.empty();
  const std::size_t pool = pooled ? options.devices.size() : 1;
  std::vector<bool> busy(pool, false);
  std::size_t free_count = pool;
  auto needs = [&](const BenchConfig& c) -> std::size_t {
    if (!pooled) return 1;
    return static_cast<std::size_t>(std::max<std::int64_t>(1, c.setup.gpus));
  };

  // ETA: the device-seconds still to spend (at the mean per device of the configs run so far),
  // spread over the pool.
  const auto t0 = Clock::now();
  std::size_t units_left = 0;  // sum of needs() over the configs still to run
  for (const auto& c : configs)
    if (!finished(c) && needs(c) <= pool) units_left += needs(c);
  std::size_t units_ran = 0;
  double unit_seconds = 0;
  auto eta = [&]() -> std::optional<double> {
    if (units_ran == 0) return std::nullopt;
    return unit_seconds / static_cast<double>(units_ran) * static_cast<double>(units_left) / static_cast<double>(pool);
  };

  std::vector<std::optional<BenchRow>> rows_at(configs.size());
  std::vector<std::unique_ptr<Slot>> slots;
  const RunningReaper reaper{slots};
  auto running_groups = [&] {
    std::vector<RunningGroup> groups;
    for (const auto& s : slots) groups.push_back(s->group);
    return groups;
  };
  auto report = [&](Progress::Event event, std::size_t i, const BenchRow* row, const std::vector<int>* devices) {
    if (!options.on_progress) return;
    Progress p;
    p.event = event;
    p.position = i + 1;
    p.total = configs.size();
    p.config = &configs[i];
    p.row = row;
    p.elapsed_seconds = seconds_since(t0);
    if (event != Progress::Event::skipped) p.eta_seconds = eta();
    p.devices = pooled ? devices : nullptr;
    p.running = slots.size() + (event == Progress::Event::started ? 1 : 0);
    options.on_progress(p);
  };
  auto append = [&](const BenchRow& row) {
    write_all(fd, row_to_json(row).dump() + "\n", results);
    if (::fsync(fd) != 0) throw SystemError(fmt::format("cannot sync '{}': {}", results.string(), std::strerror(errno)));
  };
  const std::vector<int> no_devices;

  const std::string token_base =
      fmt::format("{}-{}", ::getpid(), std::chrono::system_clock::now().time_since_epoch().count());
  std::size_t next = 0;
  while (next < configs.size() || !slots.empty()) {
    // Start what fits, in plan order: the first config that does not fit waits, and so do the ones after it.
    while (next < configs.size()) {
      const std::size_t i = next;
      const BenchConfig& c = configs[i];
      if (finished(c)) {
        rows_at[i] = done[c.key];
        report(Progress::Event::skipped, i, &*rows_at[i], nullptr);
        ++next;
        continue;
      }
      const std::size_t need = needs(c);
      if (need > pool) {
        BenchRow row = unrunnable_row(plan, c, need, pool, utc_now());
        annotate_row(plan, row);
        append(row);
        rows_at[i] = std::move(row);
        report(Progress::Event::finished, i, &*rows_at[i], &no_devices);
        ++next;
        continue;
      }
      if (need > free_count) break;
      auto slot = std::make_unique<Slot>();
      slot->position = i;
      for (std::size_t k = 0; k < pool && slot->pool_slots.size() < need; ++k) {
        if (busy[k]) continue;
        busy[k] = true;
        slot->pool_slots.push_back(k);
        if (pooled) slot->devices.push_back(options.devices[k]);
      }
      free_count -= need;
      report(Progress::Event::started, i, nullptr, &slot->devices);

      const std::string stem = fmt::format("{:04}-{}", c.index + 1, fnv1a_hex(c.key));
      slot->out = dir / "runs" / (stem + ".json");
      slot->log = dir / "runs" / (stem + ".log");
      fs::remove(slot->out, ec);
      // The config goes in a file beside the row, not on the command line: one argument may hold
      // at most 128 KiB (MAX_ARG_STRLEN), and a long x_ field would make exec fail with E2BIG.
      const fs::path config_file = dir / "runs" / (stem + ".config.json");
      write_file_atomically(config_file, c.key + "\n");
      std::vector<std::string> argv = options.runner;
      argv.insert(argv.end(), {"--config-file", config_file.string(), "--out", slot->out.string()});
      std::vector<std::pair<std::string, std::string>> env = options.env;
      env.emplace_back("TRAINFIT_SETUP_SCHEMA", fs::absolute(schema).string());
      slot->group.token = fmt::format("{}-{}", token_base, i);
      env.emplace_back(kTokenVar, slot->group.token);
      if (pooled) {
        env.emplace_back("CUDA_VISIBLE_DEVICES", join_devices(slot->devices));
        env.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
      }
      slot->started = utc_now();
      if (options.make_sampler) slot->sampler = options.make_sampler(slot->devices);
      slot->child = spawn(argv, env, slot->log);
      slot->t0 = slot->last_tick = Clock::now();
      slot->group.pgid = slot->child.pid;
      slot->group.started = start_time_of(slot->child.pid);
      slots.push_back(std::move(slot));
      write_running(running_file, running_groups());
      ++next;
    }

    // Look at each running config; write the rows of those that ended, in the order they ended.
    bool ended = false;
    for (auto it = slots.begin(); it != slots.end();) {
      Slot& s = **it;
      const std::optional<Exit> exit = poll(s, plan.timeout_seconds, options.kill_grace_seconds);
      if (!exit) {
        ++it;
        continue;
      }
      ended = true;
      const BenchConfig& c = configs[s.position];
      BenchRow row = make_row(plan, c, *exit, s.out, s.log, s.started, pooled ? &s.devices : nullptr);
      if (s.sampler) row.telemetry = s.sampler->summary();
      annotate_row(plan, row);
      append(row);
      const std::size_t need = s.pool_slots.size();
      for (const std::size_t k : s.pool_slots) busy[k] = false;
      free_count += need;
      units_ran += need;
      unit_seconds += exit->seconds * static_cast<double>(need);
      units_left -= std::min(units_left, need);
      const std::size_t i = s.position;
      const std::vector<int> devices = s.devices;
      rows_at[i] = std::move(row);
      it = slots.erase(it);
      write_running(running_file, running_groups());
      report(Progress::Event::finished, i, &*rows_at[i], &devices);
    }
    if (!ended && !slots.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  std::vector<BenchRow> rows;
  rows.reserve(configs.size());
  for (auto& r : rows_at)
    if (r) rows.push_back(std::move(*r));
  return rows;
}

void write_results_json(const std::string& dir, const json& doc) {
  write_file_atomically(fs::path(dir) / "results.json", doc.dump(2) + "\n");
}

}  // namespace trainfit::bench
