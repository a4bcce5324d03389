// The real `trainfit serve` on a port, and the `--format html` reports of the commands.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "run_cli.hpp"

namespace trainfit::testing {
namespace {

// `trainfit serve --port 0` as a child process; the port from the line it prints first.
class ServeProcess {
 public:
  ServeProcess() {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      close(fds[0]);
      close(fds[1]);
      execl(TRAINFIT_CLI, TRAINFIT_CLI, "serve", "--port", "0", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    FILE* out = fdopen(fds[0], "r");
    char line[256] = {};
    if (out != nullptr && fgets(line, sizeof line, out) != nullptr) {
      const std::string text = line;
      const auto colon = text.rfind(':');
      if (colon != std::string::npos) port_ = std::atoi(text.c_str() + colon + 1);
    }
    if (out != nullptr) fclose(out);
  }
  ~ServeProcess() { stop(); }
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;
  int port() const { return port_; }
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
};

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
