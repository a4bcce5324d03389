#pragma once
// Starts a child process: `trainfit bench`'s runners and the job `trainfit watch` starts.
#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trainfit::detail {

struct SubprocessOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in $PATH
  // The child's environment is this process's, less `unset_env`, with `set_env` added (replacing a
  // variable of the same name).
  std::vector<std::pair<std::string, std::string>> set_env;
  std::vector<std::string> unset_env;
  std::optional<std::filesystem::path> output;  // stdout and stderr to this file (created or truncated)
  bool stdin_from_null = false;                 // stdin from /dev/null instead of this process's
  bool own_process_group = false;               // setpgid(0, 0): kill(-pid, ...) then reaches whatever it starts
  bool die_with_parent = false;                 // SIGKILL when this process dies (PR_SET_PDEATHSIG)
  // Written to the child's stderr (the output file when there is one) when the command cannot be
  // executed, before it exits with 127.
  std::string exec_failure_note;
};

struct Subprocess {
  pid_t pid = -1;  // to be reaped by the caller (waitpid), also when exec_error is set
  // errno of the exec that failed: the command was not run and the child has exited with 127.
  // 0 once the command runs.
  int exec_error = 0;
};

// Forks and executes options.argv. Returns once the command runs or has failed to: the child
// reports a failed exec through a close-on-exec pipe. Throws SystemError when no process can be
// made (pipe, fork) or the output file cannot be created, and std::invalid_argument for an empty
// argv.
Subprocess start_subprocess(const SubprocessOptions& options);

}  // namespace trainfit::detail
