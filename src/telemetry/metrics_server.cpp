// The /metrics endpoint (cpp-httplib from Debian's libcpp-httplib-dev, bounded as
// common/http_server.hpp says). The page is rendered by the caller and published here, so a scrape
// never touches NVML and costs one string copy.
#include <fmt/format.h>

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
constexpr detail::HttpServerLimits kLimits{std::chrono::seconds(10), 8, 64, 64};

}  // namespace

struct MetricsServer::State {
  detail::BoundedHttpServer server{kLimits, "/metrics"};
  std::mutex mutex;
  std::string text;
  std::string host;
  int port = 0;
};

MetricsServer::MetricsServer(const Endpoint& where) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.server.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    const std::lock_guard lock(s.mutex);
    res.set_content(s.text, "text/plain; version=0.0.4; charset=utf-8");
  });
  s.server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("trainfit watch: metrics at /metrics\n", "text/plain");
  });
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
