// The /metrics endpoint, on the library's HTTP server (common/http_server.hpp: cpp-httplib's,
// bounded, in a module loaded when the first server is made). The page is rendered by the caller
// and published here, so a scrape never touches NVML and costs one string copy.
#include <chrono>
#include <mutex>

#include "common/http_server.hpp"
#include "trainfit/telemetry.hpp"

namespace trainfit::telemetry {
namespace {

// A Prometheus scrape times out after 10 s by default, so a connection still open after that
// serves no one and only holds a worker. Scrapes come every few seconds from one or two servers:
// eight workers leave room for that many slow or idle connections at once, each gone within the
// deadline, without a scraper waiting.
constexpr trainfit::detail::HttpServerLimits kLimits{std::chrono::seconds(10), 8, 64, 64, 0};

}  // namespace

struct MetricsServer::State {
  State() : server(kLimits, "/metrics", routes()) {}
  std::mutex mutex;
  std::string text;
  std::string host;
  int port = 0;
  trainfit::detail::HttpServer server;  // last: stopped, with its workers that read `text`, before the rest goes

  trainfit::detail::HttpRoutes routes() {
    trainfit::detail::HttpRoutes r;
    r.methods = {"GET"};
    r.handle = [this](const trainfit::detail::HttpRequest& req, trainfit::detail::HttpReply& reply) {
      if (req.path == "/metrics") {
        const std::lock_guard lock(mutex);
        reply.body = text;
        reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
      } else if (req.path == "/") {
        reply.body = "trainfit watch: metrics at /metrics\n";
        reply.content_type = "text/plain";
      } else {
        reply.status = 404;
      }
    };
    return r;
  }
};

MetricsServer::MetricsServer(const Endpoint& where) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.host = where.host;
  s.port = s.server.start(where.host, where.port);
}

MetricsServer::~MetricsServer() {
  state_->server.stop_all();
}

int MetricsServer::port() const {
  return state_->port;
}

const std::string& MetricsServer::host() const {
  return state_->host;
}

void MetricsServer::publish(std::string text) {
  const std::lock_guard lock(state_->mutex);
  state_->text = std::move(text);
}

}  // namespace trainfit::telemetry
