#pragma once
// cpp-httplib's server with every connection bounded (watch's /metrics, `trainfit serve`): one
// request a connection, a deadline on its whole life (not on each wait, as httplib 0.11's own
// timeouts are: a client trickling a header byte every few seconds held a worker as long as it
// liked), a fixed number of workers, a bounded queue of accepted connections, Range ignored (a Range
// of 2,600 parts made a reply 962 times its page), and stopping that ends every wait at once.
#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

namespace trainfit::detail {

struct HttpServerLimits {
  std::chrono::milliseconds connection_deadline{10000};  // a connection's whole life, request and response
  std::size_t workers = 8;                               // connections served at once
  std::size_t max_queued = 1024;  // accepted connections waiting for a worker; past it accept waits (the
                                  // kernel's backlog holds the next ones)
  int listen_backlog = 1024;      // httplib listens with 5, which drops the connections of a burst
};

class BoundedHttpServer final : public httplib::Server {
 public:
  // `what` names the server in error messages ("/metrics", "trainfit serve"). Throws SystemError.
  BoundedHttpServer(const HttpServerLimits& limits, std::string what);
  ~BoundedHttpServer() override;
  BoundedHttpServer(const BoundedHttpServer&) = delete;
  BoundedHttpServer& operator=(const BoundedHttpServer&) = delete;

  // Binds host:port (0: any free port) and serves on a thread of its own until stop_all or the
  // destructor. Returns the port. Throws InputError when the address cannot be bound.
  int start(const std::string& host, int port);
  // Ends every connection's waits now and for good, then the server, and joins its thread.
  void stop_all();

 private:
  bool process_and_close_socket(socket_t sock) override;

  HttpServerLimits limits_;
  std::string what_;
  int stop_fd_;
  socket_t listen_socket_ = INVALID_SOCKET;
  std::thread thread_;
};

}  // namespace trainfit::detail
