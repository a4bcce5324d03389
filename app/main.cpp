// The trainfit command line: a thin client of the library. Each subcommand is in its own file
// (commands.hpp); main maps errors to exit codes: 2 for bad input, 3 for a failure of the machine
// (I/O, a process that cannot start, no driver), 1 for anything unexpected (a bug).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <iostream>
#include <memory>
#include <regex>
#include <string>
#include <string_view>

#include "commands.hpp"
#include "help_formatter.hpp"
#include "setup_flags.hpp"
#include "trainfit/error.hpp"

namespace {

// The commands, in the order of `trainfit --help`, by the subcommand names each adds.
struct CommandGroup {
  std::array<std::string_view, 3> names;
  void (*add)(CLI::App&, int&);
};
constexpr std::array<CommandGroup, 9> kCommands = {{
    {{"plan"}, trainfit::cli::add_plan_command},
    {{"advise"}, trainfit::cli::add_advise_command},
    {{"gpus", "models", "schema"}, trainfit::cli::add_catalog_commands},
    {{"validate"}, trainfit::cli::add_validate_command},
    {{"watch"}, trainfit::cli::add_watch_command},
    {{"calibrate"}, trainfit::cli::add_calibrate_command},
    {{"bench"}, trainfit::cli::add_bench_command},
    {{"serve"}, trainfit::cli::add_serve_command},
    {{"trace"}, trainfit::cli::add_trace_command},
}};

// CLI11's parse errors in trainfit's words: what was wrong and what to do, as the library's own
// errors say it. Anything not recognised keeps CLI11's words, pointed at --help.
std::string parse_error_words(const CLI::ParseError& e, const CLI::App& app, std::string_view first) {
  const std::string what = e.what();
  const CLI::App* command = app.get_subcommands().empty() ? nullptr : app.get_subcommands().front();
  const std::string help = command ? fmt::format("`trainfit {} --help`", command->get_name()) : "`trainfit --help`";
  std::smatch m;
  static const std::regex repeated(R"(^(\S+): At Most (\d+) required but received (\d+)$)");
  static const std::regex no_value(R"(^(\S+): (\d+) required (\S+) missing$)");
  static const std::regex unexpected(R"(^The following arguments? (?:was|were) not expected: (.*)$)");
  if (std::regex_match(what, m, repeated))
    return fmt::format("{} was given {} times: give it {}", m[1].str(), m[3].str(),
                       m[2].str() == "1" ? "once" : "at most " + m[2].str() + " times");
  if (std::regex_match(what, m, no_value)) return fmt::format("{} needs a value ({})", m[1].str(), m[3].str());
  if (std::regex_match(what, m, unexpected))
    return fmt::format("not {} of {}: {} (its options: {})", command ? "an option" : "a command",
                       command ? fmt::format("`trainfit {}`", command->get_name()) : "trainfit", m[1].str(), help);
  if (what == "A subcommand is required") {
    std::string names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
      names += (names.empty() ? "" : ", ") + sub->get_name();
    if (!first.empty() && first.front() != '-')
      return fmt::format("unknown command '{}'; the commands: {}", first, names);
    return "name a command: " + names;
  }
  return fmt::format("{} (see {})", what, help);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainfit: will this training run fit on this GPU, and why?"};
  app.formatter(std::make_shared<trainfit::cli::HelpFormatter>());  // the commands added below inherit it
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("trainfit 0.1.0"));
  int exit_code = 0;
  // Only the command the first argument names is built (the others' few hundred options cost a
  // fraction of a millisecond to build and as much to free); anything else (--help, --version, a
  // name that is no command) gets them all, as the listing and the error messages need.
  const std::string_view first = argc > 1 ? argv[1] : "";
  const auto named = std::find_if(kCommands.begin(), kCommands.end(), [&](const CommandGroup& group) {
    return std::find(group.names.begin(), group.names.end(), first) != group.names.end();
  });
  if (!first.empty() && named != kCommands.end()) {
    named->add(app, exit_code);
  } else {
    for (const CommandGroup& group : kCommands) group.add(app, exit_code);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --version
  } catch (const CLI::ParseError& e) {
    std::cerr << "trainfit: " << parse_error_words(e, app, first) << "\n";
    return trainfit::cli::kExitBadInput;
  } catch (const trainfit::SettingError& e) {
    std::cerr << "trainfit: " << trainfit::cli::flag_message(e) << "\n";
    return trainfit::cli::kExitBadInput;
  } catch (const trainfit::InputError& e) {
    std::cerr << "trainfit: " << e.what() << "\n";
    return trainfit::cli::kExitBadInput;
  } catch (const trainfit::SystemError& e) {
    std::cerr << "trainfit: " << e.what() << "\n";
    return trainfit::cli::kExitSystemError;
  } catch (const std::exception& e) {
    std::cerr << "trainfit: internal error: " << e.what() << "\n";
    return 1;
  }
  // What a command printed must have arrived: `trainfit calibrate ... > /dev/full` or a closed
  // pipe fails here, when the buffer is flushed, and is a failure of the machine, not a success.
  if (!(std::cout << std::flush)) {
    std::cerr << "trainfit: cannot write standard output\n";
    return trainfit::cli::kExitSystemError;
  }
  return exit_code;
}
