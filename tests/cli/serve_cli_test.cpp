// The real `trainfit serve` on a port, and the `--format html` reports of the commands.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "run_cli.hpp"

namespace trainfit::testing {
namespace {

// `trainfit serve --port 0` (and `extra` flags) as a child process; the port from the line that
// names the page's address, whatever its stderr printed before it (kept in `preamble`).
class ServeProcess {
 public:
  explicit ServeProcess(const std::vector<std::string>& extra = {}) {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<std::string> args = {TRAINFIT_CLI, "serve", "--port", "0"};
      args.insert(args.end(), extra.begin(), extra.end());
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(TRAINFIT_CLI, argv.data());
      _exit(127);
    }
    close(fds[1]);
    out_ = fdopen(fds[0], "r");
    char line[512] = {};
    while (out_ != nullptr && fgets(line, sizeof line, out_) != nullptr) {
      const std::string text = line;
      if (text.find("http://") == std::string::npos) {
        preamble_ += text;
        continue;
      }
      url_ = text.substr(text.find("http://"));
      const auto colon = text.rfind(':');
      if (colon != std::string::npos) port_ = std::atoi(text.c_str() + colon + 1);
      break;
    }
  }
  ~ServeProcess() {
    stop();
    if (out_ != nullptr) fclose(out_);
  }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;
  int port() const { return port_; }
  const std::string& preamble() const { return preamble_; }  // what it printed before the address
  const std::string& url() const { return url_; }
  // SIGTERM, then its exit code (-1 when it did not exit normally).
  int stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  FILE* out_ = nullptr;
  std::string preamble_, url_;
};

// A TCP connection to the server from `source` (any address of 127.0.0.0/8: each is this machine),
// left open; -1 when it cannot be made.
int connect_from(std::uint32_t source, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(source);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Whether the server has closed a connection (a read sees its end or a reset), without waiting.
bool closed_by_server(int fd) {
  char byte = 0;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

TEST(ServeCli, PlanEndpointIsByteForByteThePlanCommand) {
  ServeProcess server;
  ASSERT_GT(server.port(), 0);
  httplib::Client client("127.0.0.1", server.port());
  const auto res =
      client.Get("/api/plan?model=qwen2.5-7b&gpu=rtx-5070-ti&method=qlora&seq=1024&lora-targets=q,v&grad-ckpt=");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  const CliResult cli = run_cli(
      "plan --model qwen2.5-7b --gpu rtx-5070-ti --method qlora --seq 1024 --lora-targets q,v --grad-ckpt "
      "--format json");
  ASSERT_EQ(cli.code, 0) << cli.out;
  EXPECT_EQ(res->body, cli.out);
  const auto schema = client.Get("/api/schema");
  ASSERT_TRUE(schema);
  EXPECT_EQ(schema->body, run_cli("schema").out);
  EXPECT_EQ(server.stop(), 0);
}

TEST(ServeCli, HugeAndSlowRequestsAreRefusedAndServingGoesOn) {
  ServeProcess server;
  ASSERT_GT(server.port(), 0);
  {
    // A body announced as 5 GB: refused from its header, before anything is read.
    httplib::Client client("127.0.0.1", server.port());
    httplib::Headers headers;
    const auto res = client.Post("/api/plan", headers, std::string(300 * 1024, ' '), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 413);
    EXPECT_NE(res->body.find("error"), std::string::npos);
  }
  {
    httplib::Client client("127.0.0.1", server.port());
    const auto bad = client.Post("/api/plan", "{\"model\": ", "application/json");
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400);
    const auto after = client.Get("/api/models");
    ASSERT_TRUE(after);
    EXPECT_EQ(after->status, 200) << "the server goes on serving";
  }
  EXPECT_EQ(server.stop(), 0);
}

// A memory snapshot is a file of megabytes: /api/snapshot takes it whole where every other path
// keeps its small bound (the framing picks the bound from the request line).
TEST(ServeCli, ASnapshotFileIsTakenWholeAndOtherBodiesStaySmall) {
  ServeProcess server;
  ASSERT_GT(server.port(), 0);
  std::ifstream in(TRAINFIT_SOURCE_DIR "/data/trace/snapshot/peak.pickle.json", std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(file.size(), std::size_t{1} << 20);
  httplib::Client client("127.0.0.1", server.port());
  const auto read = client.Post("/api/snapshot?model=qwen2.5-0.5b&gpu=h200", file, "application/octet-stream");
  ASSERT_TRUE(read);
  EXPECT_EQ(read->status, 200) << read->body.substr(0, 300);
  const nlohmann::json j = nlohmann::json::parse(read->body);
  EXPECT_GT(j.at("snapshot").at("peak_allocated_bytes").get<std::int64_t>(), 0);
  EXPECT_TRUE(j.contains("plan"));
  // Over /api/plan's bound, yet small enough for the socket's buffer: the client is still writing
  // nothing when the server answers 413 and closes.
  const auto refused = client.Post("/api/plan", file.substr(0, 300 * 1024), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 413) << "the snapshot's bound is its path's alone";
  EXPECT_EQ(server.stop(), 0);
}

// The HTTP server, and the TLS libraries Debian's cpp-httplib brings, are loaded by the commands
// that serve, when they start serving, and by no other (common/http_server.hpp): the dynamic
// loader's own list of what it loads (LD_DEBUG=files) says which.
TEST(ServeCli, OnlyServingLoadsTheHttpModule) {
  for (const char* args : {"--version", "plan --model qwen2.5-0.5b --gpu h100-sxm",
                           "trace " TRAINFIT_SOURCE_DIR "/data/trace/host/trace.json.gz"}) {
    const CliResult r = run_cli(args, "LD_DEBUG=files");
    ASSERT_EQ(r.code, 0) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find("libtrainfit_http"), std::string::npos) << args;
    EXPECT_EQ(r.out.find("libcrypto"), std::string::npos) << args;
    EXPECT_NE(r.out.find("libsimdjson"), std::string::npos) << "no list of what was loaded: " << r.out;
  }
  // serve loads it: a port it cannot have ends it after the module is loaded.
  const CliResult serving = run_cli("serve --host 192.0.2.1 --port 1", "LD_DEBUG=files");
  EXPECT_EQ(serving.code, 2) << serving.out;
  EXPECT_NE(serving.out.find("libtrainfit_http"), std::string::npos) << serving.out;
}

TEST(ServeCli, AMissingHttpModuleIsAClearErrorOfTheMachine) {
  const CliResult r = run_cli("serve --port 0", "TRAINFIT_HTTP_MODULE=/nonexistent/libtrainfit_http.so");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("trainfit serve"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("HTTP module cannot be loaded: not found (looked for: /nonexistent/libtrainfit_http.so)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("TRAINFIT_HTTP_MODULE"), std::string::npos) << r.out;
}

TEST(ServeCli, ListensOnLoopbackByDefaultAndRefusesABadPort) {
  const CliResult help = run_cli("serve --help");
  EXPECT_NE(help.out.find("127.0.0.1"), std::string::npos);
  EXPECT_NE(help.out.find("8800"), std::string::npos);
  EXPECT_EQ(run_cli("serve --port 70000").code, 2);
  EXPECT_EQ(run_cli("serve --host 203.0.113.7 --port 0").code, 2) << "not an address of this machine";
}

// 300 clients, each from an address of its own, that send a request's first bytes one a second
// (slowloris): no worker is theirs while they trickle, so a normal request is answered at once
// while they still hold their sockets. On the server before issue 39 each held one of the 8
// workers for 10 s, and no other request was answered for as long as they went on.
TEST(ServeCli, SlowClientsHoldNoWorkerAndANormalRequestIsAnsweredAtOnce) {
  ServeProcess server;
  ASSERT_GT(server.port(), 0);
  std::vector<int> slow;
  for (std::uint32_t i = 0; i < 300; ++i) {
    const int fd = connect_from(0x7f000102 + i, server.port());  // 127.0.1.2, 127.0.1.3, ...
    ASSERT_GE(fd, 0) << "connection " << i << ": " << std::strerror(errno);
    slow.push_back(fd);
  }
  const std::string request = "GET /api/models HTTP/1.1\r\nHost: x\r\n\r\n";
  std::atomic<bool> done{false};
  std::thread trickle([&] {
    for (std::size_t k = 0; !done && k < 12; ++k) {
      for (const int fd : slow)
        [[maybe_unused]] const ssize_t n = ::send(fd, &request[k], 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      for (int t = 0; t < 20 && !done; ++t) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // every slow client has begun
  for (int i = 0; i < 3; ++i) {
    httplib::Client client("127.0.0.1", server.port());
    client.set_connection_timeout(5);
    client.set_read_timeout(5);
    const auto t0 = std::chrono::steady_clock::now();
    const auto res = client.Get("/api/models");
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(res) << "request " << i << " not answered in 5 s";
    if (!res) break;
    EXPECT_EQ(res->status, 200);
    EXPECT_LT(seconds, 2.0) << "request " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  std::size_t still_open = 0;
  for (const int fd : slow) still_open += closed_by_server(fd) ? 0U : 1U;
  EXPECT_EQ(still_open, slow.size()) << "the slow clients still hold their sockets (inside the 10 s deadline)";
  done = true;
  trickle.join();  // before any return: a joinable thread's destructor ends the process
  for (const int fd : slow) ::close(fd);
  EXPECT_EQ(server.stop(), 0);
}

// One address may hold 64 unfinished connections: past them its new one closes those that have
// waited a second or more, oldest first, down to 64, so a client that opens hundreds and never
// finishes them cannot keep the server's connections (its descriptors) for itself.
TEST(ServeCli, OneClientsUnfinishedConnectionsGiveWayToItsNewOnes) {
  ServeProcess server;
  ASSERT_GT(server.port(), 0);
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) {
    const int fd = connect_from(INADDR_LOOPBACK, server.port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // past the server's patience
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(5);
  const auto t0 = std::chrono::steady_clock::now();
  const auto res = client.Get("/api/models");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  std::size_t closed = 0;
  for (const int fd : idle) closed += closed_by_server(fd) ? 1U : 0U;
  EXPECT_EQ(closed, idle.size() - 63) << "the oldest beyond the address's 64 (the request's own among them) were closed";
  for (const int fd : idle) ::close(fd);
  EXPECT_EQ(server.stop(), 0);
}

// A request whose bytes arrive in pieces, and one with a chunked body, are read whole before a
// worker answers them (the server frames requests itself: src/http/bounded_server.cpp).
TEST(ServeCli, RequestsInPiecesAndChunkedBodiesAreAnswered) {
  ServeProcess server;
  ASSERT_GT(server.port(), 0);
  const auto exchange = [&](const std::vector<std::string>& pieces) {
    const int fd = connect_from(INADDR_LOOPBACK, server.port());
    EXPECT_GE(fd, 0);
    for (const std::string& p : pieces) {
      EXPECT_EQ(::send(fd, p.data(), p.size(), MSG_NOSIGNAL), static_cast<ssize_t>(p.size()));
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
    }
    std::string reply;
    char buffer[4096];
    for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) reply.append(buffer, static_cast<std::size_t>(n));
    ::close(fd);
    return reply;
  };
  const std::string body = R"({"model": "qwen2.5-0.5b", "gpu": "h100-sxm"})";
  const std::string by_length =
      exchange({"POST /api/plan HT", "TP/1.1\r\nHost: x\r\nContent-Len",
                "gth: " + std::to_string(body.size()) + "\r\n\r\n", body.substr(0, 10), body.substr(10)});
  EXPECT_EQ(by_length.rfind("HTTP/1.1 200", 0), 0U) << by_length.substr(0, 300);
  EXPECT_NE(by_length.find("\"peak_allocated_bytes\""), std::string::npos);
  const std::string chunked = exchange({"POST /api/plan HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
                                        fmt::format("{:x}\r\n{}\r\n", 10, body.substr(0, 10)),
                                        fmt::format("{:x}\r\n{}\r\n", body.size() - 10, body.substr(10)), "0\r\n\r\n"});
  EXPECT_EQ(chunked.rfind("HTTP/1.1 200", 0), 0U) << chunked.substr(0, 300);
  const std::string continued =
      exchange({"POST /api/plan HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                "Content-Length: " +
                    std::to_string(body.size()) + "\r\n\r\n",
                body});
  EXPECT_EQ(continued.rfind("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200", 0), 0U) << continued.substr(0, 300);
  EXPECT_EQ(server.stop(), 0);
}

TEST(ServeCli, WarnsWhenOtherMachinesCanReachItAndBracketsIpv6) {
  {
    ServeProcess loopback;
    ASSERT_GT(loopback.port(), 0);
    EXPECT_EQ(loopback.preamble(), "") << "no warning on loopback";
  }
  {
    ServeProcess everyone({"--host", "0.0.0.0"});
    ASSERT_GT(everyone.port(), 0);
    EXPECT_NE(everyone.preamble().find("warning: listening on 0.0.0.0, so other machines can reach"), std::string::npos)
        << everyone.preamble();
  }
  ServeProcess v6({"--host", "::1"});
  if (v6.port() == 0) GTEST_SKIP() << "no IPv6 loopback here: " << v6.preamble();
  EXPECT_EQ(v6.url(), fmt::format("http://[::1]:{}/\n", v6.port()));
  EXPECT_EQ(v6.preamble(), "");
}

void expect_report(const std::string& args, const std::string& kind) {
  const CliResult r = run_cli(args);
  ASSERT_EQ(r.code, 0) << args << ": " << r.out.substr(0, 400);
  EXPECT_NE(r.out.find("<!doctype html>"), std::string::npos) << args;
  EXPECT_NE(r.out.find("TrainfitCharts.renderReport(\"" + kind + "\""), std::string::npos) << args;
  EXPECT_NE(r.out.find("</html>"), std::string::npos) << args;
}

TEST(ServeCli, EveryReportIsHtml) {
  const std::string src = TRAINFIT_SOURCE_DIR;
  expect_report("plan --model qwen2.5-14b --gpu rtx-5070-ti --method qlora --format html", "plan");
  expect_report("advise --model qwen2.5-1.5b --gpu rtx-4090 --seq 1024 --format html", "advise");
  expect_report("validate " + src + "/data/reference/h200-hf-peft-calibration.jsonl --format html", "validate");
  expect_report("watch --replay " + src + "/data/watch/h200_capacity_bound.jsonl --format html", "watch");
  const auto dir = std::filesystem::temp_directory_path() / ("trainfit-serve-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(src + "/data/bench/h200-seed-16gb-2026-11-30.jsonl", dir / "results.jsonl",
                             std::filesystem::copy_options::overwrite_existing);
  expect_report("bench " + src + "/plans/seed-16gb.toml --results " + dir.string() + " --judge-only --format html",
                "bench");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(run_cli("watch --replay " + src + "/data/watch/h200_capacity_bound.jsonl --format pdf").code, 2);
  EXPECT_EQ(run_cli("gpus --format html").code, 2) << "a catalogue has no report";
}

}  // namespace
}  // namespace trainfit::testing
