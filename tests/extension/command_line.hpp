#pragma once
// The trainfit command line run in this process, its standard output captured: the extension
// tests add a row to a table and then look for it where a user would.
#include <CLI/CLI.hpp>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "commands.hpp"

namespace trainfit::test {

struct CommandResult {
  int code = 0;
  std::string out;
};

inline CommandResult run(const std::vector<std::string>& args) {
  CLI::App app{"trainfit"};
  app.require_subcommand(1);
  int code = 0;
  cli::add_plan_command(app, code);
  cli::add_advise_command(app, code);
  cli::add_catalog_commands(app, code);
  std::ostringstream captured;
  std::streambuf* const saved = std::cout.rdbuf(captured.rdbuf());
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.get_subcommand(args.front())->help();
  } catch (...) {
    std::cout.rdbuf(saved);
    throw;
  }
  std::cout.rdbuf(saved);
  return {code, captured.str()};
}

}  // namespace trainfit::test
