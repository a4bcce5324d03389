// libtrainfit_http.so: cpp-httplib's server with bounded connections (common/http_server.hpp says
// what is bounded and why it is a module of its own), behind the one entry point of
// common/http_module.hpp. Built and installed beside the library (src/http/CMakeLists.txt).
#include <fcntl.h>
#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/http_module.hpp"
#include "http/request_framing.hpp"

namespace trainfit::detail {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
// How long a client's unfinished connection is left alone before one past its share may take its
// place: a burst (a page's requests, the load test's 100 clients at once) finishes well within it.
constexpr auto kUnfinishedPatience = std::chrono::seconds(1);

// A whole request for httplib's process_request: read from memory, the reply written to memory, the
// peer's address as accepted. The I/O loop sends the reply; no worker waits on a socket.
class MemoryStream final : public httplib::Stream {
 public:
  MemoryStream(const std::string& request, std::string& reply, const std::string& peer, int peer_port,
               const std::string& local, int local_port)
      : request_(request), reply_(reply), peer_(peer), local_(local), peer_port_(peer_port), local_port_(local_port) {}

  bool is_readable() const override { return at_ < request_.size(); }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const std::size_t n = std::min(size, request_.size() - at_);
    std::copy_n(request_.data() + at_, n, ptr);
    at_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    reply_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = peer_;
    port = peer_port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = local_;
    port = local_port_;
  }
  socket_t socket() const override { return INVALID_SOCKET; }

 private:
  const std::string& request_;
  std::string& reply_;
  const std::string& peer_;
  const std::string& local_;
  int peer_port_, local_port_;
  std::size_t at_ = 0;
};

bool numeric_address(const sockaddr* addr, socklen_t len, std::string& ip, int& port) {
  std::array<char, NI_MAXHOST> host{};
  std::array<char, NI_MAXSERV> serv{};
  if (getnameinfo(addr, len, host.data(), host.size(), serv.data(), serv.size(), NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  ip = host.data();
  port = std::atoi(serv.data());
  return true;
}

// One accepted connection, from accept to close.
struct Connection {
  enum class State { reading, answering, writing };
  Connection(std::size_t max_body, std::string_view large_path, std::size_t large_max_body)
      : framing(max_body, large_path, large_max_body) {}
  int fd = -1;
  State state = State::reading;
  std::string peer, local;  // numeric addresses; `peer` is the key of the per-client bound
  int peer_port = 0, local_port = 0;
  Clock::time_point accepted;
  Clock::time_point deadline;  // reading: from accept; writing: from when the reply was ready
  std::string in;
  RequestFraming framing;
  bool sent_continue = false;
  std::string out;
  std::size_t written = 0;
};

// The server's connections on one I/O thread (poll), its requests on a fixed pool of workers:
//  - a connection is read without a worker until its request is whole, within a deadline counted
//    from accept (a client that trickles a byte a second is dropped at the deadline, and holds no
//    worker meanwhile);
//  - a worker runs httplib on a whole request in memory and hands the reply back; the I/O thread
//    sends it within a deadline of its own, so a client that does not read holds no worker either;
//  - at most `max_connections` are open, at most `max_per_client` of them unfinished from one
//    address: past the first, the oldest unfinished connection is closed for the new one; past the
//    second, that address's unfinished ones that have waited a second, oldest first, so clients that
//    never finish cannot hold the server's connections while a burst of new ones is left alone.
class BoundedHttpServer final : public httplib::Server {
 public:
  // Throws std::runtime_error when the signals cannot be made.
  BoundedHttpServer(const HttpServerLimits& limits, std::string what);
  ~BoundedHttpServer() override;
  BoundedHttpServer(const BoundedHttpServer&) = delete;
  BoundedHttpServer& operator=(const BoundedHttpServer&) = delete;

  // Binds host:port (0: any free port) and serves on threads of its own; the port, or 0 when the
  // address cannot be bound.
  int start(const std::string& host, int port);
  void stop_all();
  // How a request refused before httplib reads it is answered (HttpRoutes::refused).
  void set_refused(std::function<void(HttpReply&)> refused) { refused_ = std::move(refused); }

 private:
  struct Job {
    std::uint64_t id;
    std::string request, peer, local;
    int peer_port, local_port;
    bool too_large;  // answered 413 without httplib (RequestFraming::too_large)
  };
  struct Answer {
    std::uint64_t id;
    std::string reply;
  };

  void serve_connections();
  void accept_all(Clock::time_point now);
  void read_from(std::uint64_t id, Connection& c);
  bool write_to(Connection& c);  // false: done or broken (close it)
  void close_connection(std::uint64_t id);
  // Closes up to `count` unfinished connections accepted before `before` (of `peer`, or of any
  // client when null), oldest first; how many it closed.
  std::size_t evict_unfinished(const std::string* peer, std::size_t count, Clock::time_point before);
  void take_answers(Clock::time_point now);
  void work();
  std::string refusal(int status) const;  // the whole HTTP response, the connection then closed
  std::function<void(HttpReply&)> refused_;

  HttpServerLimits limits_;
  std::string what_;
  std::size_t max_body_;
  int stop_fd_ = -1, wake_fd_ = -1;
  socket_t listen_socket_ = INVALID_SOCKET;
  std::thread io_thread_;
  std::vector<std::thread> workers_;
  bool stopped_ = false;

  // The I/O thread's own: connections by the order they were accepted (the oldest first).
  std::map<std::uint64_t, Connection> connections_;
  std::unordered_map<std::string, std::size_t> unfinished_by_peer_;
  std::uint64_t next_id_ = 0;
  Clock::time_point accept_again_{};  // accept waits until then after running out of descriptors

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<Job> jobs_;
  std::vector<Answer> answers_;
  bool shutdown_ = false;
};

BoundedHttpServer::BoundedHttpServer(const HttpServerLimits& limits, std::string what)
    : limits_(limits),
      what_(std::move(what)),
      max_body_(limits.max_body_bytes > 0 ? limits.max_body_bytes : kDefaultMaxBodyBytes),
      stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      wake_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (stop_fd_ < 0 || wake_fd_ < 0) {
    const std::string why = std::strerror(errno);
    if (stop_fd_ >= 0) ::close(stop_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
    throw std::runtime_error("cannot serve " + what_ + ": eventfd: " + why);
  }
  limits_.max_connections = std::max<std::size_t>(limits_.max_connections, 1);
  // Each connection is a descriptor: the soft limit (1,024 on many systems) is raised to the hard
  // one, and the connections kept under what it leaves (64 for the process's other files).
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0) {
    if (files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      ::setrlimit(RLIMIT_NOFILE, &files);
      ::getrlimit(RLIMIT_NOFILE, &files);
    }
    if (files.rlim_cur != RLIM_INFINITY && files.rlim_cur > 128)
      limits_.max_connections = std::min<std::size_t>(limits_.max_connections, files.rlim_cur - 64);
  }
  limits_.max_per_client = std::clamp<std::size_t>(limits_.max_per_client, 1, limits_.max_connections);
  // SO_REUSEADDR only: the library's default SO_REUSEPORT would let a second server share the port
  // and silently take half the requests. The socket is kept: the I/O loop accepts on it.
  set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_socket_ = sock;
  });
}

BoundedHttpServer::~BoundedHttpServer() {
  stop_all();
  ::close(stop_fd_);
  ::close(wake_fd_);
}

int BoundedHttpServer::start(const std::string& host, int port) {
  int bound = -1;
  if (port == 0)
    bound = bind_to_any_port(host);
  else if (bind_to_port(host, port))
    bound = port;
  if (bound <= 0 || listen_socket_ == INVALID_SOCKET) return 0;
  // Listening again on a listening socket changes its backlog (Linux): httplib's 5 would drop the
  // connections of a burst and leave their clients to retry a second later.
  ::listen(listen_socket_, limits_.listen_backlog);
  ::fcntl(listen_socket_, F_SETFL, ::fcntl(listen_socket_, F_GETFL) | O_NONBLOCK);
  for (std::size_t i = 0; i < std::max<std::size_t>(limits_.workers, 1); ++i) workers_.emplace_back([this] { work(); });
  io_thread_ = std::thread([this] { serve_connections(); });
  return bound;
}

void BoundedHttpServer::stop_all() {
  if (stopped_) return;
  stopped_ = true;
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(stop_fd_, &one, sizeof one);
  if (io_thread_.joinable()) io_thread_.join();
  {
    const std::lock_guard lock(mutex_);
    shutdown_ = true;
  }
  ready_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  for (auto& [id, c] : connections_) ::close(c.fd);
  connections_.clear();
  if (listen_socket_ != INVALID_SOCKET) ::close(listen_socket_);
  listen_socket_ = INVALID_SOCKET;
}

std::string BoundedHttpServer::refusal(int status) const {
  HttpReply reply;
  reply.status = status;
  if (refused_) refused_(reply);
  // The only refusal answered here is 413 (RFC 9110, 15.5.14).
  std::string out = "HTTP/1.1 " + std::to_string(status) + (status == 413 ? " Content Too Large" : " Refused") + "\r\n";
  if (!reply.content_type.empty()) out += "Content-Type: " + reply.content_type + "\r\n";
  for (const auto& [name, value] : reply.headers) out += name + ": " + value + "\r\n";
  out += "Content-Length: " + std::to_string(reply.body.size()) + "\r\nConnection: close\r\n\r\n" + reply.body;
  return out;
}

void BoundedHttpServer::work() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [this] { return !jobs_.empty() || shutdown_; });
      if (shutdown_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    Answer answer{job.id, {}};
    if (job.too_large) {
      answer.reply = refusal(413);
    } else {
      MemoryStream stream(job.request, answer.reply, job.peer, job.peer_port, job.local, job.local_port);
      bool closed = false;
      process_request(stream, /*close_connection=*/true, closed, [](httplib::Request& req) { req.ranges.clear(); });
    }
    {
      const std::lock_guard lock(mutex_);
      answers_.push_back(std::move(answer));
    }
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof one);
  }
}

void BoundedHttpServer::serve_connections() {
  std::vector<pollfd> fds;
  std::vector<std::uint64_t> ids;  // the connection of each pollfd past the first three
  for (;;) {
    const Clock::time_point now = Clock::now();
    fds.clear();
    ids.clear();
    // Accept only while there is room, or an unfinished connection to make room with.
    const bool room = (connections_.size() < limits_.max_connections || !unfinished_by_peer_.empty()) &&
                      now >= accept_again_;
    fds.push_back({stop_fd_, POLLIN, 0});
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({room ? listen_socket_ : -1, POLLIN, 0});
    Clock::time_point next = now + std::chrono::seconds(1);
    if (accept_again_ > now) next = std::min(next, accept_again_);
    for (const auto& [id, c] : connections_) {
      if (c.state == Connection::State::answering) continue;
      fds.push_back({c.fd, c.state == Connection::State::reading ? short{POLLIN} : short{POLLOUT}, 0});
      ids.push_back(id);
      next = std::min(next, c.deadline);
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
    const int r = ::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<std::int64_t>(wait, 0, 1000)));
    if (r < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;
    const Clock::time_point after = Clock::now();
    if (fds[1].revents != 0) take_answers(after);
    for (std::size_t i = 3; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      const auto it = connections_.find(ids[i - 3]);
      if (it == connections_.end()) continue;
      if (it->second.state == Connection::State::reading)
        read_from(it->first, it->second);
      else if (!write_to(it->second))
        close_connection(it->first);
    }
    if (fds[2].revents != 0) accept_all(after);
    // Past their deadline: unfinished requests, and replies the client did not take.
    for (auto it = connections_.begin(); it != connections_.end();) {
      const auto here = it++;
      if (here->second.state != Connection::State::answering && here->second.deadline <= after)
        close_connection(here->first);
    }
  }
}

void BoundedHttpServer::accept_all(Clock::time_point now) {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = ::accept4(listen_socket_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      // Out of descriptors (EMFILE, ENFILE, ENOBUFS): the socket stays readable, so listening
      // is paused a moment rather than the loop spinning on it; EAGAIN: none left.
      if (errno != EAGAIN && errno != EWOULDBLOCK) accept_again_ = now + std::chrono::milliseconds(100);
      return;
    }
    Connection c(max_body_, limits_.large_body_path, limits_.large_body_bytes);
    c.fd = fd;
    c.accepted = now;
    c.deadline = now + limits_.connection_deadline;
    numeric_address(reinterpret_cast<sockaddr*>(&addr), len, c.peer, c.peer_port);
    sockaddr_storage local{};
    socklen_t local_len = sizeof local;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) == 0)
      numeric_address(reinterpret_cast<sockaddr*>(&local), local_len, c.local, c.local_port);
    // Room for it: a client past its share gives up, oldest first, its unfinished connections that
    // have waited a second or more, down to its share (a burst of new connections, a page's
    // requests, is not cut; connections held open unfinished are); a full server, its oldest
    // unfinished connection of any client.
    const auto mine = unfinished_by_peer_.find(c.peer);
    if (mine != unfinished_by_peer_.end() && mine->second >= limits_.max_per_client)
      evict_unfinished(&c.peer, mine->second - limits_.max_per_client + 1, now - kUnfinishedPatience);
    if (connections_.size() >= limits_.max_connections && evict_unfinished(nullptr, 1, Clock::time_point::max()) == 0) {
      ::close(fd);  // every connection is being answered: the client retries
      return;
    }
    ++unfinished_by_peer_[c.peer];
    connections_.emplace(next_id_++, std::move(c));
  }
}

std::size_t BoundedHttpServer::evict_unfinished(const std::string* peer, std::size_t count, Clock::time_point before) {
  std::vector<std::uint64_t> ids;
  for (const auto& [id, c] : connections_) {
    if (ids.size() == count || c.accepted >= before) break;  // accepted in order: the rest are newer
    if (c.state == Connection::State::reading && (peer == nullptr || c.peer == *peer)) ids.push_back(id);
  }
  for (const std::uint64_t id : ids) close_connection(id);
  return ids.size();
}

void BoundedHttpServer::read_from(std::uint64_t id, Connection& c) {
  std::array<char, 16384> buffer{};
  for (;;) {
    const ssize_t n = ::recv(c.fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {  // the client hung up (or the socket failed) before its request was whole
      close_connection(id);
      return;
    }
    c.in.append(buffer.data(), static_cast<std::size_t>(n));
    if (c.framing.whole(c.in)) break;
  }
  if (!c.framing.whole(c.in)) {
    // A client that waits to be told to send its body (curl does past 1 MiB) is told now.
    if (c.framing.expects_continue() && !c.sent_continue) {
      c.sent_continue = true;
      [[maybe_unused]] const ssize_t n = ::send(c.fd, kContinue.data(), kContinue.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    return;
  }
  c.state = Connection::State::answering;
  if (--unfinished_by_peer_[c.peer] == 0) unfinished_by_peer_.erase(c.peer);
  {
    const std::lock_guard lock(mutex_);
    jobs_.push_back({id, std::move(c.in), c.peer, c.local, c.peer_port, c.local_port, c.framing.too_large()});
  }
  c.in.clear();
  ready_.notify_one();
}

void BoundedHttpServer::take_answers(Clock::time_point now) {
  std::uint64_t count = 0;
  [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof count);
  std::vector<Answer> answers;
  {
    const std::lock_guard lock(mutex_);
    answers.swap(answers_);
  }
  for (Answer& a : answers) {
    const auto it = connections_.find(a.id);
    if (it == connections_.end()) continue;
    Connection& c = it->second;
    c.out = std::move(a.reply);
    // httplib tells the client to go on too; it was told already, while its body was read.
    if (c.sent_continue && std::string_view(c.out).substr(0, kContinue.size()) == kContinue)
      c.written = kContinue.size();
    c.state = Connection::State::writing;
    c.accepted = now;
    c.deadline = now + limits_.connection_deadline;
    if (!write_to(c)) close_connection(a.id);
  }
}

bool BoundedHttpServer::write_to(Connection& c) {
  while (c.written < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.written, c.out.size() - c.written, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) return false;
    c.written += static_cast<std::size_t>(n);
  }
  return false;  // all sent
}

void BoundedHttpServer::close_connection(std::uint64_t id) {
  const auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  if (c.state == Connection::State::reading) {
    const auto mine = unfinished_by_peer_.find(c.peer);
    if (mine != unfinished_by_peer_.end() && --mine->second == 0) unfinished_by_peer_.erase(mine);
  }
  ::shutdown(c.fd, SHUT_RDWR);
  ::close(c.fd);
  connections_.erase(it);
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
    // httplib's bound is the larger one; the framing and handle() hold each path to its own.
    if (limits.max_body_bytes > 0)
      server_.set_payload_max_length(std::max(limits.max_body_bytes, limits.large_body_bytes));
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
    server_.set_refused(routes_.refused);
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
