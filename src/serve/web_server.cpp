// handle() on a port: cpp-httplib's server, bounded as common/http_server.hpp says (one request a
// connection under a deadline, a fixed pool of workers, a bounded queue), with the body's size
// capped before it is read.
#include <nlohmann/json.hpp>

#include "common/http_server.hpp"
#include "trainfit/serve.hpp"

namespace trainfit::serve {
namespace {

detail::HttpServerLimits server_limits(const Limits& limits) {
  detail::HttpServerLimits l;
  l.connection_deadline = limits.connection_deadline;
  l.workers = limits.workers;
  return l;
}

void answer(const Request& request, const Limits& limits, httplib::Response& res) {
  const Response r = handle(request, limits);
  res.status = r.status;
  res.set_content(r.body, r.content_type.c_str());
  // The page and the API are this machine's: no other site's script may read them.
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Cache-Control", "no-store");
}

Request request_of(const httplib::Request& req) {
  Request r;
  r.method = req.method;
  r.path = req.path;
  for (const auto& [name, value] : req.params) r.query.emplace_back(name, value);
  r.body = req.body;
  return r;
}

}  // namespace

struct WebServer::State {
  explicit State(const Limits& l) : limits(l), server(server_limits(l), "trainfit serve") {}
  Limits limits;
  detail::BoundedHttpServer server;
  int port = 0;
};

WebServer::WebServer(const std::string& host, int port, const Limits& limits)
    : state_(std::make_unique<State>(limits)) {
  State& s = *state_;
  // httplib answers 413 itself when a body's Content-Length is over this, without reading it.
  s.server.set_payload_max_length(limits.max_body_bytes);
  const auto serve = [&s](const httplib::Request& req, httplib::Response& res) {
    answer(request_of(req), s.limits, res);
  };
  s.server.Get(R"(/.*)", serve);
  s.server.Post(R"(/.*)", serve);
  for (const char* method : {"PUT", "DELETE", "PATCH", "OPTIONS"}) {
    const auto refuse = [&s, method](const httplib::Request& req, httplib::Response& res) {
      Request r = request_of(req);
      r.method = method;
      answer(r, s.limits, res);
    };
    if (std::string_view(method) == "PUT")
      s.server.Put(R"(/.*)", refuse);
    else if (std::string_view(method) == "DELETE")
      s.server.Delete(R"(/.*)", refuse);
    else if (std::string_view(method) == "PATCH")
      s.server.Patch(R"(/.*)", refuse);
    else
      s.server.Options(R"(/.*)", refuse);
  }
  // What httplib refuses before a handler runs (413 for a body too large, 400 for a malformed
  // request line, 414 for a URI over 8 KiB) gets a message too.
  s.server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    const char* what = res.status == 413   ? "the request's body is too large (docs/serve.md, \"Limits\")"
                       : res.status == 414 ? "the request's URI is too long (at most 8 KiB)"
                                           : "the request cannot be read";
    res.set_content(
        nlohmann::json{{"error", what}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
        "application/json");
  });
  s.port = s.server.start(host, port);
}

WebServer::~WebServer() {
  state_->server.stop_all();
}

int WebServer::port() const {
  return state_->port;
}

}  // namespace trainfit::serve
