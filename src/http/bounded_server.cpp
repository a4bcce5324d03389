// libtrainfit_http.so: cpp-httplib's server with bounded connections (common/http_server.hpp says
// what is bounded and why it is a module of its own), behind the one entry point of
// common/http_module.hpp. Built and installed beside the library (src/http/CMakeLists.txt).
#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/http_module.hpp"

namespace trainfit::detail {
namespace {

using Clock = std::chrono::steady_clock;

// One wait for the peer (a read or a write), inside the connection's deadline.
constexpr int kWaitMillis = 5000;

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

// httplib's task queue with a bound: its own ThreadPool queues every accepted connection, however
// many; this one makes the accept loop wait while `max_queued` are waiting for a worker.
class BoundedTaskQueue final : public httplib::TaskQueue {
 public:
  BoundedTaskQueue(std::size_t workers, std::size_t max_queued) : max_queued_(std::max<std::size_t>(max_queued, 1)) {
    for (std::size_t i = 0; i < std::max<std::size_t>(workers, 1); ++i) threads_.emplace_back([this] { work(); });
  }
  ~BoundedTaskQueue() override { shutdown(); }
  BoundedTaskQueue(const BoundedTaskQueue&) = delete;
  BoundedTaskQueue& operator=(const BoundedTaskQueue&) = delete;

  void enqueue(std::function<void()> job) override {
    std::unique_lock lock(mutex_);
    room_.wait(lock, [this] { return jobs_.size() < max_queued_ || shutdown_; });
    jobs_.push_back(std::move(job));
    ready_.notify_one();
  }

  void shutdown() override {
    {
      const std::lock_guard lock(mutex_);
      if (shutdown_) return;
      shutdown_ = true;
    }
    ready_.notify_all();
    room_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [this] { return !jobs_.empty() || shutdown_; });
        if (jobs_.empty()) return;  // shut down with nothing left
        job = std::move(jobs_.front());
        jobs_.pop_front();
        room_.notify_one();
      }
      job();
    }
  }

  std::size_t max_queued_;
  std::mutex mutex_;
  std::condition_variable ready_, room_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  bool shutdown_ = false;
};

class BoundedHttpServer final : public httplib::Server {
 public:
  // Throws std::runtime_error when the stop signal cannot be made.
  BoundedHttpServer(const HttpServerLimits& limits, std::string what);
  ~BoundedHttpServer() override;
  BoundedHttpServer(const BoundedHttpServer&) = delete;
  BoundedHttpServer& operator=(const BoundedHttpServer&) = delete;

  // Binds host:port (0: any free port) and starts serving on a thread of its own; the port, or 0
  // when the address cannot be bound.
  int start(const std::string& host, int port);
  void stop_all();

 private:
  bool process_and_close_socket(socket_t sock) override;

  HttpServerLimits limits_;
  std::string what_;
  int stop_fd_;
  socket_t listen_socket_ = INVALID_SOCKET;
  std::thread thread_;
};

BoundedHttpServer::BoundedHttpServer(const HttpServerLimits& limits, std::string what)
    : limits_(limits), what_(std::move(what)), stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (stop_fd_ < 0) throw std::runtime_error("cannot serve " + what_ + ": eventfd: " + std::strerror(errno));
  new_task_queue = [limits] { return new BoundedTaskQueue(limits.workers, limits.max_queued); };
  // SO_REUSEADDR only: the library's default SO_REUSEPORT would let a second server share the port
  // and silently take half the requests. The socket is kept to widen the listen backlog after bind.
  set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_socket_ = sock;
  });
}

BoundedHttpServer::~BoundedHttpServer() {
  stop_all();
  ::close(stop_fd_);
}

int BoundedHttpServer::start(const std::string& host, int port) {
  int bound = -1;
  if (port == 0)
    bound = bind_to_any_port(host);
  else if (bind_to_port(host, port))
    bound = port;
  if (bound <= 0) return 0;
  // Listening again on a listening socket changes its backlog (Linux): httplib's 5 would drop the
  // connections of a burst and leave their clients to retry a second later.
  if (listen_socket_ != INVALID_SOCKET) ::listen(listen_socket_, limits_.listen_backlog);
  thread_ = std::thread([this] { listen_after_bind(); });
  // stop() only stops a server that is running: wait for the loop so a quick stop cannot miss it.
  for (int i = 0; i < 500 && !is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return bound;
}

void BoundedHttpServer::stop_all() {
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(stop_fd_, &one, sizeof one);
  stop();
  if (thread_.joinable()) thread_.join();
}

bool BoundedHttpServer::process_and_close_socket(socket_t sock) {
  DeadlineStream stream(sock, Clock::now() + limits_.connection_deadline, stop_fd_);
  bool closed = false;
  const bool served =
      process_request(stream, /*close_connection=*/true, closed, [](httplib::Request& req) { req.ranges.clear(); });
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return served;
}

HttpRequest request_of(const httplib::Request& req) {
  HttpRequest r;
  r.method = req.method;
  r.path = req.path;
  for (const auto& [name, value] : req.params) r.query.emplace_back(name, value);
  r.body = req.body;
  return r;
}

void reply_to(const HttpReply& reply, httplib::Response& res) {
  res.status = reply.status;
  if (!reply.body.empty() || !reply.content_type.empty()) res.set_content(reply.body, reply.content_type.c_str());
  for (const auto& [name, value] : reply.headers) res.set_header(name.c_str(), value);
}

class Backend final : public HttpBackend {
 public:
  Backend(const HttpServerLimits& limits, const std::string& what, const HttpRoutes& routes)
      : routes_(routes), server_(limits, what) {
    if (limits.max_body_bytes > 0) server_.set_payload_max_length(limits.max_body_bytes);
    const auto serve = [this](const httplib::Request& req, httplib::Response& res) {
      HttpReply reply;
      routes_.handle(request_of(req), reply);
      reply_to(reply, res);
    };
    const char* const any = R"(/.*)";
    for (const std::string& method : routes_.methods) {
      if (method == "GET")
        server_.Get(any, serve);
      else if (method == "POST")
        server_.Post(any, serve);
      else if (method == "PUT")
        server_.Put(any, serve);
      else if (method == "DELETE")
        server_.Delete(any, serve);
      else if (method == "PATCH")
        server_.Patch(any, serve);
      else if (method == "OPTIONS")
        server_.Options(any, serve);
    }
    if (routes_.refused) {
      server_.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return;
        HttpReply reply;
        reply.status = res.status;
        routes_.refused(reply);
        reply_to(reply, res);
      });
    }
  }

  int start(const std::string& host, int port, bool& bad_address, std::string& error) override {
    try {
      const int bound = server_.start(host, port);
      bad_address = bound == 0;
      return bound;
    } catch (const std::exception& e) {  // the thread, the socket
      error = e.what();
      return 0;
    }
  }

  void stop_all() override { server_.stop_all(); }

 private:
  HttpRoutes routes_;
  BoundedHttpServer server_;  // after routes_: stopped, with the workers that call them, first
};

}  // namespace
}  // namespace trainfit::detail

extern "C" [[gnu::visibility("default")]] trainfit::detail::HttpBackend* trainfit_make_http_backend(
    const char* abi, const trainfit::detail::HttpServerLimits& limits, const std::string& what,
    const trainfit::detail::HttpRoutes& routes, std::string& error) {
  using trainfit::detail::kHttpModuleAbi;
  if (abi == nullptr || std::strcmp(abi, kHttpModuleAbi) != 0) {
    error = std::string("the module is of another build (") + kHttpModuleAbi + ")";
    return nullptr;
  }
  try {
    return new trainfit::detail::Backend(limits, what, routes);
  } catch (const std::exception& e) {
    error = e.what();
    return nullptr;
  }
}
