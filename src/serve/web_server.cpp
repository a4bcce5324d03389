// handle() on a port: the library's HTTP server (common/http_server.hpp: cpp-httplib's, bounded,
// in a module loaded when the first server is made), with the body's size capped before it is read.
#include <nlohmann/json.hpp>

#include "common/http_server.hpp"
#include "trainfit/serve.hpp"

namespace trainfit::serve {
namespace {

detail::HttpServerLimits server_limits(const Limits& limits) {
  detail::HttpServerLimits l;
  l.connection_deadline = limits.connection_deadline;
  l.workers = limits.workers;
  // A body whose Content-Length is over this is answered 413 without being read.
  l.max_body_bytes = limits.max_body_bytes;
  l.large_body_path = "/api/snapshot";  // a snapshot file, posted whole
  l.large_body_bytes = limits.max_snapshot_bytes;
  return l;
}

detail::HttpRoutes routes(const Limits& limits) {
  detail::HttpRoutes r;
  // handle() answers every method itself (405 for those it does not take).
  r.methods = {"GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"};
  r.handle = [limits](const detail::HttpRequest& req, detail::HttpReply& reply) {
    Request request;
    request.method = req.method;
    request.path = req.path;
    request.query = req.query;
    request.body = req.body;
    const Response answer = handle(request, limits);
    reply.status = answer.status;
    reply.body = answer.body;
    reply.content_type = answer.content_type;
    // The page and the API are this machine's: no other site's script may read them.
    reply.headers = {{"X-Content-Type-Options", "nosniff"}, {"Cache-Control", "no-store"}};
  };
  // What the server refuses before handle() runs (413 for a body too large, 400 for a malformed
  // request line, 414 for a URI over 8 KiB) gets a message too.
  r.refused = [](detail::HttpReply& reply) {
    const char* what = reply.status == 413   ? "the request's body is too large (docs/serve.md, \"Limits\")"
                       : reply.status == 414 ? "the request's URI is too long (at most 8 KiB)"
                                             : "the request cannot be read";
    reply.body = nlohmann::json{{"error", what}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    reply.content_type = "application/json";
  };
  return r;
}

}  // namespace

struct WebServer::State {
  explicit State(const Limits& limits) : server(server_limits(limits), "trainfit serve", routes(limits)) {}
  detail::HttpServer server;
  int port = 0;
};

WebServer::WebServer(const std::string& host, int port, const Limits& limits)
    : state_(std::make_unique<State>(limits)) {
  state_->port = state_->server.start(host, port);
}

WebServer::~WebServer() {
  state_->server.stop_all();
}

int WebServer::port() const {
  return state_->port;
}

}  // namespace trainfit::serve
