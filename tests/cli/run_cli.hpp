#pragma once
// Runs the real `trainfit` binary as a user would, for the CLI tests: its exit code and what it
// printed (stdout and stderr together).
#include <string>

#include "support/shell.hpp"

namespace trainfit::testing {

using CliResult = CommandResult;

// `env` is prepended to the command line (e.g. "VAR=value").
inline CliResult run_cli(const std::string& args, const std::string& env = "") {
  return run_command(env + (env.empty() ? "" : " ") + std::string(TRAINFIT_CLI) + " " + args);
}

}  // namespace trainfit::testing
