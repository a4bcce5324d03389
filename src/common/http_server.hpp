#pragma once
// The HTTP servers of the library (watch's /metrics, `trainfit serve`), without cpp-httplib in
// sight: Debian's libcpp-httplib is built with TLS and brings libssl and libcrypto, whose loading
// and relocation cost every run of every command 1.3-2.7 ms (docs/trace.md, "The process's
// start": a third to two fifths of a command's start) for servers that two commands start. So the server lives in a
// module of its own (src/http/, libtrainfit_http.so), loaded with dlopen when a server is first made, as NVML is; a
// process that never serves never maps it.
//
// The server is cpp-httplib's request handling behind an I/O loop of our own, every connection
// bounded: one request a connection, read without a worker until it is whole within a deadline
// counted from accept (httplib 0.11's own timeouts count each wait: a client trickling a header
// byte every few seconds held a worker as long as it liked, and 300 of them starved every other
// client), a fixed number of workers that only ever see whole requests, a reply sent by the loop
// within a deadline of its own, a bound on open connections and on one client's unfinished ones
// (past it the oldest unfinished, once it has waited a second, give way), Range ignored (a Range of 2,600 parts made a reply 962
// times its page), and stopping that ends every wait at once.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trainfit::detail {

struct HttpServerLimits {
  // From accept to the whole request; and again from the reply's being ready to its last byte sent.
  std::chrono::milliseconds connection_deadline{10000};
  std::size_t workers = 8;             // requests answered at once (a worker never waits on a client)
  std::size_t max_connections = 1024;  // open at once; past it the oldest unfinished is closed for a new one
  int listen_backlog = 1024;           // httplib listens with 5, which drops the connections of a burst
  std::size_t max_body_bytes = 0;      // a larger Content-Length is answered 413 unread; 0: 1 MiB
  std::size_t max_per_client = 64;     // unfinished connections of one address; past it those that waited 1 s are closed
  // One path whose requests may bring a larger body (a file posted whole); empty: none. A literal:
  // the connections' framing keeps a view of it.
  std::string_view large_body_path{};
  std::size_t large_body_bytes = 0;
};

struct HttpRequest {
  std::string method;  // as sent: "GET", "HEAD" (answered as GET, without the body), "POST", ...
  std::string path;
  std::vector<std::pair<std::string, std::string>> query;  // decoded, in order
  std::string body;
};

struct HttpReply {
  int status = 200;
  std::string body;
  std::string content_type;                                  // none: no Content-Type (a reply without a body)
  std::vector<std::pair<std::string, std::string>> headers;  // besides Content-Type and Content-Length
};

// What a server answers; called on its worker threads.
struct HttpRoutes {
  std::vector<std::string> methods;  // those handled ("GET" brings HEAD); any other is answered 404
  std::function<void(const HttpRequest&, HttpReply&)> handle;  // every request of those methods
  // A request httplib refuses before `handle` (413 for a body over max_body_bytes, 400 for a
  // malformed request line, 414 for a URI over 8 KiB, 404 for another method): the reply's status
  // is set and its body empty. None: the reply goes with an empty body.
  std::function<void(HttpReply&)> refused;
};

class HttpServer {
 public:
  // `what` names the server in error messages ("/metrics", "trainfit serve"). SystemError when the
  // module cannot be loaded (the message says where it was looked for) or the server not made.
  HttpServer(const HttpServerLimits& limits, std::string what, HttpRoutes routes);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (0: any free port) and serves on a thread of its own until stop_all or the
  // destructor. Returns the port. InputError when the address cannot be bound.
  int start(const std::string& host, int port);
  // Ends every connection's waits now and for good, then the server, and joins its thread.
  void stop_all();

 private:
  struct Backend;
  std::unique_ptr<Backend> backend_;
};

}  // namespace trainfit::detail
