#pragma once
// Runs the real `trainfit` binary as a user would, for the CLI tests: its exit code and what it
// printed (stdout and stderr together).
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace trainfit::testing {

struct CliResult {
  int code = -1;    // the exit code; -1 when it did not exit normally
  std::string out;  // stdout and stderr together
};

// `env` is prepended to the command line (e.g. "VAR=value").
inline CliResult run_cli(const std::string& args, const std::string& env = "") {
  const std::string cmd = env + (env.empty() ? "" : " ") + std::string(TRAINFIT_CLI) + " " + args + " 2>&1";
  CliResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace trainfit::testing
