#include "common/subprocess.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include "trainfit/error.hpp"

extern char** environ;

namespace trainfit::detail {
namespace {

// The child's environment as NAME=value strings.
std::vector<std::string> child_environment(const SubprocessOptions& o) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view kv(*e);
    const std::string_view name = kv.substr(0, kv.find('='));
    const bool replaced =
        std::any_of(o.set_env.begin(), o.set_env.end(), [&](const auto& p) { return p.first == name; });
    const bool removed = std::find(o.unset_env.begin(), o.unset_env.end(), name) != o.unset_env.end();
    if (!replaced && !removed) out.emplace_back(kv);
  }
  for (const auto& [name, value] : o.set_env) out.push_back(name + "=" + value);
  return out;
}

std::vector<char*> pointers_to(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// A write from the forked child, which has no one to report a failure to.
void write_in_child(int fd, const void* data, std::size_t size) {
  [[maybe_unused]] const ssize_t written = ::write(fd, data, size);
}

void close_if_open(int fd) {
  if (fd >= 0) ::close(fd);
}

}  // namespace

Subprocess start_subprocess(const SubprocessOptions& options) {
  if (options.argv.empty()) throw std::invalid_argument("start_subprocess: no command");
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls,
  // since another thread of this process may have held a lock (malloc's) at the moment of the fork.
  std::vector<std::string> env_strings = child_environment(options);
  std::vector<char*> envp = pointers_to(env_strings);
  std::vector<std::string> args = options.argv;
  std::vector<char*> argv = pointers_to(args);
  const std::string& note = options.exec_failure_note;
  const std::string& command = options.argv.front();

  int output_fd = -1;
  if (options.output) {
    output_fd = ::open(options.output->c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (output_fd < 0)
      throw SystemError(fmt::format("cannot create '{}': {}", options.output->string(), std::strerror(errno)));
  }
  // The child writes exec's errno here; a successful exec closes it (O_CLOEXEC) with nothing written.
  int exec_pipe[2] = {-1, -1};
  if (::pipe2(exec_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    close_if_open(output_fd);
    throw SystemError(fmt::format("cannot start '{}': {}", command, std::strerror(err)));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    close_if_open(output_fd);
    ::close(exec_pipe[0]);
    ::close(exec_pipe[1]);
    throw SystemError(fmt::format("cannot start '{}': {}", command, std::strerror(err)));
  }
  if (pid == 0) {
    if (options.own_process_group) ::setpgid(0, 0);
    if (options.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);  // the parent died before prctl
    }
    if (options.stdin_from_null) {
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd > 0) {
        ::dup2(null_fd, 0);
        ::close(null_fd);
      }
    }
    if (output_fd >= 0) {
      ::dup2(output_fd, 1);
      ::dup2(output_fd, 2);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    const int err = errno;
    if (!note.empty()) write_in_child(2, note.data(), note.size());
    write_in_child(exec_pipe[1], &err, sizeof err);
    ::_exit(127);
  }
  if (options.own_process_group) ::setpgid(pid, pid);  // also here: no window in which a kill of the group misses it
  ::close(exec_pipe[1]);
  close_if_open(output_fd);
  Subprocess child;
  child.pid = pid;
  int err = 0;
  ssize_t n = 0;
  while ((n = ::read(exec_pipe[0], &err, sizeof err)) < 0 && errno == EINTR) {
  }
  ::close(exec_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof err)) child.exec_error = err;
  return child;
}

}  // namespace trainfit::detail
