// `trainfit serve`: the web page and its JSON API on a port, until Ctrl-C (docs/serve.md).
#include <fmt/format.h>
#include <signal.h>

#include <iostream>
#include <memory>
#include <string>

#include "commands.hpp"
#include "trainfit/error.hpp"
#include "trainfit/serve.hpp"

namespace trainfit::cli {
namespace {

struct ServeFlags {
  std::string host = "127.0.0.1";
  int port = 8800;
};

}  // namespace

void add_serve_command(CLI::App& app, int& exit_code) {
  auto f = std::make_shared<ServeFlags>();
  auto* cmd =
      app.add_subcommand("serve",
                         "Serve the web page (plan, memory and time charts, the advisor) and its JSON API: /api/plan, "
                         "/api/curves, /api/advise, /api/models, /api/gpus, /api/schema (docs/serve.md)");
  cmd->add_option("--host", f->host, "address to listen on (another than loopback serves other machines)")
      ->capture_default_str();
  cmd->add_option("--port", f->port, "port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->callback([f, &exit_code] {
    // SIGINT and SIGTERM are waited for here, blocked before the server's threads start so that
    // none of them takes the signal.
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGTERM);
    if (pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr) != 0) throw SystemError("cannot block SIGINT");
    const serve::WebServer server(f->host, f->port);
    // The address on stdout (a script waits for this line to know the port); Ctrl-C stops.
    std::cout << fmt::format("trainfit serve: http://{}:{}/\n", f->host, server.port()) << std::flush;
    int signal = 0;
    sigwait(&stop_signals, &signal);
    exit_code = 0;
  });
}

}  // namespace trainfit::cli
