#pragma once
// Runs a command line through the shell, for the tests that run programs as a user would (the CLI,
// the Python reading, the runner on a GPU): its exit code and what it printed.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace trainfit::testing {

struct CommandResult {
  int code = -1;    // the exit code; -1 when it did not exit normally or could not start
  std::string out;  // stdout and stderr together
};

// The line as it is: what it prints on stdout (its stderr goes where the test's goes).
inline CommandResult run_line(const std::string& line) {
  CommandResult r;
  FILE* pipe = popen(line.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The command with its stderr sent to its stdout: all it prints.
inline CommandResult run_command(const std::string& cmd) {
  return run_line(cmd + " 2>&1");
}

// The environment's value of `name`, or `fallback` when it is unset or empty (the GPU tests take the
// carried binaries' and the repository's paths so when they were built on another machine).
inline std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

}  // namespace trainfit::testing
