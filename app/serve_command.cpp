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

// Whether only this machine can reach `host`: an address of the loopback network or its name.
bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0 ||
         host.rfind("::ffff:127.", 0) == 0;
}

// The page's address: an IPv6 address in brackets (RFC 3986), so that its colons are not the port's.
std::string page_url(const std::string& host, int port) {
  const bool bracketed = host.find(':') != std::string::npos && host.front() != '[';
  return fmt::format("http://{}{}{}:{}/", bracketed ? "[" : "", host, bracketed ? "]" : "", port);
}

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
    if (!is_loopback(f->host))
      std::cerr << fmt::format(
          "trainfit serve: warning: listening on {}, so other machines can reach the page and "
          "its API; it is built for one user's machine, not the internet (docs/serve.md, "
          "\"Limits\")\n",
          f->host);
    // The address on stdout (a script waits for this line to know the port); Ctrl-C stops.
    std::cout << "trainfit serve: " << page_url(f->host, server.port()) << "\n" << std::flush;
    int signal = 0;
    sigwait(&stop_signals, &signal);
    exit_code = 0;
  });
}

}  // namespace trainfit::cli
