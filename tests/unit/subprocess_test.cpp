// The one way trainfit starts a process (bench's runners, watch's job): environment, output file,
// a command that cannot be executed, its own process group, death with its parent.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "common/subprocess.hpp"
#include "trainfit/error.hpp"

namespace {

namespace fs = std::filesystem;
using trainfit::detail::start_subprocess;
using trainfit::detail::Subprocess;
using trainfit::detail::SubprocessOptions;

// One file per test process: ctest runs the tests in parallel.
fs::path temp_file(const std::string& name) {
  return fs::path(testing::TempDir()) / ("subprocess_" + std::to_string(::getpid()) + "_" + name);
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The raw wait status of a child.
int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

int exit_code_of(pid_t pid) {
  const int status = wait_for(pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Alive and not a zombie waiting for its parent to reap it.
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

bool dies_within(pid_t pid, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (alive(pid) && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return !alive(pid);
}

TEST(Subprocess, EnvironmentAdditionsAndRemovalsReachTheChild) {
  ::setenv("TRAINFIT_TEST_KEPT", "kept", 1);
  ::setenv("TRAINFIT_TEST_REMOVED", "removed", 1);
  ::setenv("TRAINFIT_TEST_REPLACED", "old", 1);
  SubprocessOptions o;
  o.argv = {"env"};  // looked up in $PATH
  o.set_env = {{"TRAINFIT_TEST_REPLACED", "new"}, {"TRAINFIT_TEST_ADDED", "a=b"}};
  o.unset_env = {"TRAINFIT_TEST_REMOVED"};
  o.output = temp_file("env.txt");
  const Subprocess child = start_subprocess(o);
  EXPECT_EQ(child.exec_error, 0);
  ASSERT_EQ(exit_code_of(child.pid), 0);
  std::multiset<std::string> lines;
  std::istringstream in(read(*o.output));
  for (std::string line; std::getline(in, line);) lines.insert(line);
  EXPECT_EQ(lines.count("TRAINFIT_TEST_KEPT=kept"), 1u);
  EXPECT_EQ(lines.count("TRAINFIT_TEST_REPLACED=new"), 1u);
  EXPECT_EQ(lines.count("TRAINFIT_TEST_REPLACED=old"), 0u);
  EXPECT_EQ(lines.count("TRAINFIT_TEST_ADDED=a=b"), 1u);
  EXPECT_EQ(lines.count("TRAINFIT_TEST_REMOVED=removed"), 0u);
  EXPECT_STREQ(std::getenv("TRAINFIT_TEST_REMOVED"), "removed") << "this process's environment is left alone";
}

TEST(Subprocess, TheOutputFileGetsStdoutAndStderrAndStdinCanBeEmpty) {
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", "echo to-stdout; echo to-stderr >&2; if read line; then echo read; else echo eof; fi"};
  o.output = temp_file("output.txt");
  o.stdin_from_null = true;
  std::ofstream(*o.output) << "left over from before\n";
  const Subprocess child = start_subprocess(o);
  ASSERT_EQ(exit_code_of(child.pid), 0);
  EXPECT_EQ(read(*o.output), "to-stdout\nto-stderr\neof\n");  // truncated first
}

TEST(Subprocess, AnOutputFileThatCannotBeCreatedIsASystemError) {
  SubprocessOptions o;
  o.argv = {"/bin/true"};
  o.output = "/nonexistent/folder/out.log";
  EXPECT_THROW(start_subprocess(o), trainfit::SystemError);
}

TEST(Subprocess, ACommandThatCannotBeExecutedIsReportedAndExits127WithTheNote) {
  SubprocessOptions o;
  o.argv = {"/nonexistent/command", "arg"};
  o.output = temp_file("missing.txt");
  o.exec_failure_note = "cannot execute it\n";
  Subprocess child = start_subprocess(o);
  EXPECT_EQ(child.exec_error, ENOENT);
  EXPECT_EQ(exit_code_of(child.pid), 127);
  EXPECT_EQ(read(*o.output), "cannot execute it\n");

  o.argv = {"trainfit-test-no-such-command-in-path"};
  child = start_subprocess(o);
  EXPECT_EQ(child.exec_error, ENOENT);
  EXPECT_EQ(exit_code_of(child.pid), 127);

  const fs::path not_executable = temp_file("not_executable.sh");
  std::ofstream(not_executable) << "#!/bin/sh\nexit 0\n";
  ::chmod(not_executable.c_str(), 0644);
  o.argv = {not_executable.string()};
  child = start_subprocess(o);
  EXPECT_EQ(child.exec_error, EACCES);
  EXPECT_EQ(exit_code_of(child.pid), 127);

  o.argv = {"/bin/sh", "-c", "exit 5"};  // a command that runs: its own exit code, no error
  child = start_subprocess(o);
  EXPECT_EQ(child.exec_error, 0);
  EXPECT_EQ(exit_code_of(child.pid), 5);
  EXPECT_EQ(read(*o.output), "");
}

TEST(Subprocess, AnEmptyCommandIsAProgrammingError) {
  EXPECT_THROW(start_subprocess(SubprocessOptions{}), std::invalid_argument);
}

TEST(Subprocess, ItsOwnProcessGroupHoldsWhatItStarts) {
  SubprocessOptions o;
  o.argv = {"/bin/sh", "-c", "sleep 30 & echo $!; wait"};
  o.output = temp_file("group.txt");
  o.own_process_group = true;
  const Subprocess child = start_subprocess(o);
  EXPECT_EQ(::getpgid(child.pid), child.pid);
  pid_t grandchild = 0;
  for (int i = 0; i < 500 && grandchild == 0; ++i) {
    std::istringstream(read(*o.output)) >> grandchild;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(grandchild, 0);
  EXPECT_EQ(::getpgid(grandchild), child.pid);
  const bool group_killed = ::kill(-child.pid, SIGKILL) == 0;  // the group: the shell and its sleep
  EXPECT_TRUE(group_killed);
  if (!group_killed) ::kill(child.pid, SIGKILL);  // so that the wait below ends anyway
  EXPECT_TRUE(WIFSIGNALED(wait_for(child.pid)));
  EXPECT_TRUE(dies_within(grandchild, std::chrono::seconds(5)));
  if (alive(grandchild)) ::kill(grandchild, SIGKILL);

  o.own_process_group = false;  // by default it stays in ours (a terminal's Ctrl-C reaches it)
  o.argv = {"/bin/sh", "-c", "exit 0"};
  const Subprocess plain = start_subprocess(o);
  EXPECT_EQ(::getpgid(plain.pid), ::getpgrp());
  wait_for(plain.pid);
}

// Starts `sleep 30` from an intermediate process that then exits; returns the sleep's pid.
pid_t orphan_sleep(bool die_with_parent) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return -1;
  const pid_t middle = ::fork();
  if (middle < 0) return -1;
  if (middle == 0) {
    ::close(pipe_fds[0]);
    SubprocessOptions o;
    o.argv = {"sleep", "30"};
    o.die_with_parent = die_with_parent;
    const pid_t pid = start_subprocess(o).pid;
    [[maybe_unused]] const ssize_t w = ::write(pipe_fds[1], &pid, sizeof pid);
    ::_exit(0);
  }
  ::close(pipe_fds[1]);
  pid_t pid = -1;
  if (::read(pipe_fds[0], &pid, sizeof pid) != static_cast<ssize_t>(sizeof pid)) pid = -1;
  ::close(pipe_fds[0]);
  wait_for(middle);
  return pid;
}

TEST(Subprocess, DiesWithItsParentWhenAsked) {
  const pid_t bound = orphan_sleep(true);
  ASSERT_GT(bound, 0);
  EXPECT_TRUE(dies_within(bound, std::chrono::seconds(5)));
  if (alive(bound)) ::kill(bound, SIGKILL);

  const pid_t free = orphan_sleep(false);
  ASSERT_GT(free, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(alive(free)) << "without die_with_parent it outlives its parent";
  ::kill(free, SIGKILL);
}

}  // namespace
