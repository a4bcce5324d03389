#pragma once
// `trainfit serve`: a web page over a JSON API that answers with the library's own calls, so that
// /api/plan returns byte for byte what `trainfit plan --format json` prints (docs/serve.md).
// handle() is the whole API, request to response, with no socket: tests and fuzzing call it
// directly; WebServer puts it on a port.
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace trainfit::serve {

// What a request may be (docs/serve.md, "Limits"): past them it is refused with 400 or 413, and the
// server goes on serving.
struct Limits {
  std::size_t max_body_bytes = std::size_t{256} << 10;   // a POST body: a setup and a pasted config.json (a few KiB)
  std::size_t max_snapshot_bytes = std::size_t{64} << 20;  // a memory snapshot posted to /api/snapshot, inflated
  std::size_t max_parameters = 64;                       // query parameters (a setup has about 30 settings)
  std::size_t max_value_bytes = 4096;                    // one query parameter's value
  std::size_t max_json_depth = 32;                       // nesting of a POST body (a config.json nests 3 deep)
  std::chrono::milliseconds connection_deadline{10000};  // a connection's whole life, request and response
  std::size_t workers = 8;                               // requests answered at once
};

struct Request {
  std::string method;                                      // "GET", "POST"
  std::string path;                                        // "/api/plan"
  std::vector<std::pair<std::string, std::string>> query;  // decoded, in the order given
  std::string body;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;  // an error: {"error": "one line"} and a 4xx status
};

// Answers one request: the page's files, /api/plan, /api/curves, /api/advise, /api/models,
// /api/gpus, /api/schema, and POST /api/snapshot (a memory snapshot file, read as trace --snapshot). Never throws for anything a client sends (a bug is a 500 with its message).
Response handle(const Request& request, const Limits& limits = {});

// handle() served over HTTP (cpp-httplib) on its own threads until destroyed.
class WebServer {
 public:
  // Port 0: any free port. Throws InputError when it cannot listen there.
  WebServer(const std::string& host, int port, const Limits& limits = {});
  ~WebServer();
  WebServer(const WebServer&) = delete;
  WebServer& operator=(const WebServer&) = delete;
  int port() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace trainfit::serve
