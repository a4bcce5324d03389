// The /metrics endpoint (cpp-httplib from Debian's libcpp-httplib-dev). The page is rendered by the
// caller and published here, so a scrape never touches NVML and costs one string copy.
#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "trainfit/telemetry.hpp"

namespace trainfit::telemetry {

struct MetricsServer::State {
  httplib::Server server;
  std::thread thread;
  std::mutex mutex;
  std::string text;
  int port = 0;
};

MetricsServer::MetricsServer(const Endpoint& where) : state_(std::make_unique<State>()) {
  State& s = *state_;
  // Scrapes come every few seconds: two workers, not the library's default of one per core.
  s.server.new_task_queue = [] { return new httplib::ThreadPool(2); };
  // SO_REUSEADDR only: the library's default SO_REUSEPORT would let a second watch share the port
  // and silently take half the scrapes.
  s.server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  s.server.set_read_timeout(5, 0);
  s.server.set_write_timeout(5, 0);
  s.server.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    const std::lock_guard lock(s.mutex);
    res.set_content(s.text, "text/plain; version=0.0.4; charset=utf-8");
  });
  s.server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("trainfit watch: metrics at /metrics\n", "text/plain");
  });
  if (where.port == 0) {
    s.port = s.server.bind_to_any_port(where.host);
  } else if (s.server.bind_to_port(where.host, where.port)) {
    s.port = where.port;
  } else {
    s.port = -1;
  }
  if (s.port <= 0)
    throw InputError(fmt::format("cannot listen on {}:{} (address in use, or not an address of this machine)",
                                 where.host, where.port));
  s.thread = std::thread([&s] { s.server.listen_after_bind(); });
  // stop() only stops a server that is running: wait for the loop so a quick destruction cannot miss it.
  for (int i = 0; i < 500 && !s.server.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

MetricsServer::~MetricsServer() {
  state_->server.stop();
  if (state_->thread.joinable()) state_->thread.join();
}

int MetricsServer::port() const {
  return state_->port;
}

void MetricsServer::publish(std::string text) {
  const std::lock_guard lock(state_->mutex);
  state_->text = std::move(text);
}

}  // namespace trainfit::telemetry
