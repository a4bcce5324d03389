#pragma once
// Each subcommand of `trainfit` lives in its own file and registers itself on the app. Its
// callback runs once the command line is parsed, writes its output, and sets the exit code;
// a trainfit::InputError escaping it becomes one line on stderr and exit code 2, a
// trainfit::SystemError exit code 3 (main.cpp).
#include <CLI/CLI.hpp>

namespace trainfit::cli {

constexpr int kExitBadInput = 2;     // the input was wrong: a flag, a file, a name
constexpr int kExitSystemError = 3;  // the machine failed: I/O, a process that cannot start, no driver

// A count of tokens to train given on the command line (1e9, 1000000000): a number, and one that
// check_training_tokens (trainfit/prices.hpp) accepts. `gpus --for` and `advise` check theirs with it.
CLI::Validator tokens_check();

void add_plan_command(CLI::App& app, int& exit_code);
void add_advise_command(CLI::App& app, int& exit_code);
void add_catalog_commands(CLI::App& app, int& exit_code);
void add_validate_command(CLI::App& app, int& exit_code);
void add_watch_command(CLI::App& app, int& exit_code);
void add_calibrate_command(CLI::App& app, int& exit_code);
void add_bench_command(CLI::App& app, int& exit_code);
void add_serve_command(CLI::App& app, int& exit_code);
void add_trace_command(CLI::App& app, int& exit_code);

}  // namespace trainfit::cli
