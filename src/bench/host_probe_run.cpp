// `trainfit calibrate --host`: the host probe's steps run through the bench's runner, in a scratch
// folder, with a time limit (include/trainfit/bench.hpp, run_host_probe).
#include <fmt/format.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>

#include "common/subprocess.hpp"
#include "common/text.hpp"
#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"
#include "trainfit/settings.hpp"

namespace trainfit::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The record is a few KB (every step's seconds of two setups); past this it is not one.
constexpr std::size_t kRecordBytes = std::size_t{4} << 20;
constexpr std::size_t kProbeLogTailBytes = 4000;

// A folder of its own under the temporary directory, removed when done.
class ScratchDir {
 public:
  ScratchDir() {
    std::error_code ec;
    std::string tmpl = (fs::temp_directory_path(ec) / "trainfit-host-probe-XXXXXX").string();
    if (ec) tmpl = "/tmp/trainfit-host-probe-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw SystemError(fmt::format("cannot make a scratch folder '{}': {}", tmpl, std::strerror(errno)));
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string output_tail(const fs::path& log) {
  const std::string t = detail::read_file_tail(log.string(), kProbeLogTailBytes);
  return t.empty() ? std::string("(no output)") : detail::printable(t);
}

}  // namespace

RunnerCommand runner_command(std::string_view given, std::string_view plan_runner) {
  RunnerCommand r;
  const char* env_runner = std::getenv("TRAINFIT_RUNNER");
  r.text = !given.empty()          ? std::string(given)
           : !plan_runner.empty()  ? std::string(plan_runner)
           : env_runner != nullptr ? std::string(env_runner)
                                   : std::string("python3 -m trainfit_runner");
  r.argv = split_command(r.text);
  if (r.argv.empty()) throw InputError("--runner: empty command");
  // The runner package: share/trainfit/python beside this binary, or $TRAINFIT_PYTHON_DIR.
  if (const auto python_dir = runner_python_dir()) {
    const char* pythonpath = std::getenv("PYTHONPATH");  // kept after it; an empty one would add the cwd
    r.env.emplace_back("PYTHONPATH",
                       python_dir->string() + (pythonpath && *pythonpath ? std::string(":") + pythonpath : ""));
  }
  r.env.emplace_back("PYTHONUNBUFFERED", "1");
  return r;
}

nlohmann::json run_host_probe(const RunnerCommand& runner, const nlohmann::json& request, double timeout_seconds) {
  const ScratchDir dir;
  const fs::path request_file = dir.path() / "request.json";
  const fs::path schema_file = dir.path() / "setup_schema.json";
  const fs::path out = dir.path() / "record.json";
  const fs::path log = dir.path() / "runner.log";
  detail::write_text_file(request_file.string(), request.dump() + "\n");
  // The runner speaks this binary's vocabulary, as bench's runners do.
  detail::write_text_file(schema_file.string(), setup_schema().dump() + "\n");

  detail::SubprocessOptions o;
  o.argv = runner.argv;
  o.argv.insert(o.argv.end(), {"--host-probe", request_file.string(), "--out", out.string()});
  o.set_env = runner.env;
  o.set_env.emplace_back("TRAINFIT_SETUP_SCHEMA", schema_file.string());
  o.output = log;
  o.stdin_from_null = true;
  o.own_process_group = true;
  o.die_with_parent = true;
  o.exec_failure_note = "trainfit calibrate --host: cannot execute the runner command\n";
  const detail::Subprocess child = detail::start_subprocess(o);

  const auto start = Clock::now();
  int status = 0;
  bool timed_out = false;
  for (;;) {
    const pid_t done = ::waitpid(child.pid, &status, WNOHANG);
    if (done == child.pid) break;
    if (done < 0 && errno != EINTR) throw SystemError(fmt::format("waiting for the runner: {}", std::strerror(errno)));
    if (std::chrono::duration<double>(Clock::now() - start).count() > timeout_seconds) {
      timed_out = true;
      ::kill(-child.pid, SIGTERM);
      std::this_thread::sleep_for(std::chrono::seconds(3));
      ::kill(-child.pid, SIGKILL);
      ::waitpid(child.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (child.exec_error != 0)
    throw SystemError(fmt::format("cannot execute the runner '{}': {}", runner.text, std::strerror(child.exec_error)));
  if (timed_out)
    throw SystemError(fmt::format("the host probe ran past {:.0f} s (--timeout); the runner's output ends:\n{}",
                                  timeout_seconds, output_tail(log)));
  std::error_code ec;
  if (!fs::is_regular_file(out, ec)) {
    const std::string how = WIFSIGNALED(status) ? fmt::format("was killed by signal {}", WTERMSIG(status))
                                                : fmt::format("exited with {}", WEXITSTATUS(status));
    throw SystemError(fmt::format("the runner '{}' {} without writing the host probe's record; its output ends:\n{}",
                                  runner.text, how, output_tail(log)));
  }
  const std::string text = detail::read_text_file(out.string(), "host probe record", kRecordBytes);
  nlohmann::json record = nlohmann::json::parse(text, nullptr, false);
  if (record.is_discarded() || !record.is_object())
    throw InputError(fmt::format("the runner '{}' wrote a host probe record that is not a JSON object", runner.text));
  return record;
}

}  // namespace trainfit::bench
