// The /metrics endpoint (cpp-httplib from Debian's libcpp-httplib-dev). The page is rendered by the
// caller and published here, so a scrape never touches NVML and costs one string copy.
#include <fmt/format.h>
#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "trainfit/telemetry.hpp"

namespace trainfit::telemetry {
namespace {

using Clock = std::chrono::steady_clock;

// A connection's whole life, request and response: a Prometheus scrape times out after 10 s by
// default, so a connection still open after that serves no one and only holds a worker. httplib
// 0.11's own timeouts bound each wait, not the request: a client trickling a header byte every
// few seconds held a worker for as long as it liked (two such clients blocked /metrics).
constexpr auto kConnectionDeadline = std::chrono::seconds(10);
// One wait for the peer (a read or a write), inside the deadline.
constexpr int kWaitMillis = 5000;
// Scrapes come every few seconds from one or two servers. Eight workers leave room for that many
// slow or idle connections at once, each gone within the deadline, without a scraper waiting.
constexpr std::size_t kWorkers = 8;

// A connection's socket for httplib, with the deadline on every read and write. `stop_fd` becomes
// readable when the server stops: every wait ends then, so that a slow client cannot hold up the end
// of the watch (stopping joins the workers).
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(socket_t sock, Clock::time_point deadline, int stop_fd)
      : sock_(sock), deadline_(deadline), stop_fd_(stop_fd) {}

  bool is_readable() const override { return begin_ < end_ || wait(POLLIN); }
  bool is_writable() const override { return wait(POLLOUT); }

  ssize_t read(char* ptr, size_t size) override {
    // httplib reads the request line and headers a byte at a time: served from a buffer.
    if (begin_ == end_) {
      const ssize_t n = io(POLLIN, [&] { return ::recv(sock_, buffer_.data(), buffer_.size(), MSG_DONTWAIT); });
      if (n <= 0) return n;
      begin_ = 0;
      end_ = static_cast<std::size_t>(n);
    }
    const std::size_t n = std::min(size, end_ - begin_);
    std::copy_n(buffer_.data() + begin_, n, ptr);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    // As much as the socket takes now, never a blocking send past the deadline; httplib calls again.
    return io(POLLOUT, [&] { return ::send(sock_, ptr, size, MSG_DONTWAIT | MSG_NOSIGNAL); });
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { address(::getpeername, ip, port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { address(::getsockname, ip, port); }
  socket_t socket() const override { return sock_; }

 private:
  // Whether the socket is ready for `events` before the deadline (a hang-up or an error counts as
  // ready: the call that follows reports it).
  bool wait(short events) const {
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      if (left <= 0) return false;
      std::array<pollfd, 2> p{pollfd{sock_, events, 0}, pollfd{stop_fd_, POLLIN, 0}};
      const int r = ::poll(p.data(), p.size(), static_cast<int>(std::min<std::int64_t>(left, kWaitMillis)));
      if (r < 0 && errno == EINTR) continue;
      return r > 0 && p[1].revents == 0 && p[0].revents != 0;
    }
  }
  // A non-blocking call once the socket is ready: -1 past the deadline (httplib then gives up).
  template <typename F>
  ssize_t io(short events, F call) const {
    for (;;) {
      if (!wait(events)) return -1;
      const ssize_t n = call();
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      return n;
    }
  }
  using NameOf = int (*)(int, sockaddr*, socklen_t*);
  void address(NameOf name_of, std::string& ip, int& port) const {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    std::array<char, NI_MAXHOST> host{};
    std::array<char, NI_MAXSERV> serv{};
    if (name_of(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
        getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host.data(), host.size(), serv.data(), serv.size(),
                    NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host.data();
      port = std::atoi(serv.data());
    }
  }

  socket_t sock_;
  Clock::time_point deadline_;
  int stop_fd_;
  std::array<char, 4096> buffer_{};
  std::size_t begin_ = 0, end_ = 0;
};

// httplib's server with its connections handled here: one request each under kConnectionDeadline,
// and Range ignored (a Range of 2,600 parts made the reply 962 times the page; a scrape wants the
// whole page anyway).
class Server final : public httplib::Server {
 public:
  Server() : stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (stop_fd_ < 0) throw SystemError(fmt::format("cannot serve /metrics: eventfd: {}", std::strerror(errno)));
  }
  ~Server() override { ::close(stop_fd_); }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Ends every connection's waits now and for good (the counter stays readable), then the server.
  void stop_all() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(stop_fd_, &one, sizeof one);
    stop();
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    DeadlineStream stream(sock, Clock::now() + kConnectionDeadline, stop_fd_);
    bool closed = false;
    const bool served =
        process_request(stream, /*close_connection=*/true, closed, [](httplib::Request& req) { req.ranges.clear(); });
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return served;
  }

  int stop_fd_;
};

}  // namespace

struct MetricsServer::State {
  Server server;
  std::thread thread;
  std::mutex mutex;
  std::string text;
  std::string host;
  int port = 0;
};

MetricsServer::MetricsServer(const Endpoint& where) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.server.new_task_queue = [] { return new httplib::ThreadPool(kWorkers); };
  // SO_REUSEADDR only: the library's default SO_REUSEPORT would let a second watch share the port
  // and silently take half the scrapes.
  s.server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  s.server.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    const std::lock_guard lock(s.mutex);
    res.set_content(s.text, "text/plain; version=0.0.4; charset=utf-8");
  });
  s.server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("trainfit watch: metrics at /metrics\n", "text/plain");
  });
  s.host = where.host;
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
  state_->server.stop_all();
  if (state_->thread.joinable()) state_->thread.join();
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
