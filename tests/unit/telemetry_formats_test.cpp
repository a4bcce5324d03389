// What watch writes and serves: JSON lines that read back, probe events, the Prometheus text,
// listen addresses, the /metrics endpoint scraped over loopback, and a job's process tree.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "trainfit/telemetry.hpp"

namespace {

using namespace trainfit::telemetry;

Sample sample() {
  GpuReading g;
  g.index = 0;
  g.memory_total_bytes = 150000000000;
  g.memory_used_bytes = 30000000000;
  g.memory_free_bytes = 120000000000;
  g.gpu_util_percent = 34;
  g.pcie_rx_bytes_per_s = 2e8;
  g.sm_clock_mhz = 1980;
  g.power_watts = 512.5;
  g.throttle_reasons = throttle::kSwPowerCap;
  g.processes = std::vector<ProcessMemory>{{4242, 20000000000}, {77, std::nullopt}};
  return {1.8e9 + 0.25, {g}};
}

GpuInfo info() {
  return {0, "NVIDIA \"H200\"", 150000000000, 1980.0, 3201.0, 700.0};
}

TEST(WatchJsonl, RoundTripsWithUnknownsKeptUnknown) {
  const std::vector<GpuInfo> gpus{info()};
  std::string text = header_to_json(gpus, "580.1", "python train.py").dump() + "\n" + sample_to_json(sample()).dump() +
                     "\n" +
                     R"({"type": "event", "t": 1800000000.3, "step": 7, "step_seconds": 0.04, "alloc_retries": 2})" +
                     "\n" + R"({"type": "event", "t": 1800000000.1, "phase": "steady", "expect": "compute"})" + "\n\n";
  const Recording r = parse_recording(text, "rec.jsonl");
  ASSERT_EQ(r.gpus.size(), 1u);
  EXPECT_EQ(r.gpus[0].name, "NVIDIA \"H200\"");
  EXPECT_EQ(r.gpus[0].power_default_limit_watts, 700);
  ASSERT_EQ(r.samples.size(), 1u);
  const GpuReading& g = r.samples[0].gpus[0];
  EXPECT_EQ(g.memory_used_bytes, 30000000000);
  EXPECT_EQ(g.gpu_util_percent, 34);
  EXPECT_EQ(g.power_watts, 512.5);
  EXPECT_EQ(g.throttle_reasons, throttle::kSwPowerCap);
  EXPECT_FALSE(g.temperature_c);  // written as null, read back unknown
  EXPECT_FALSE(g.nvlink_rx_bytes_per_s);
  ASSERT_TRUE(g.processes);
  EXPECT_FALSE((*g.processes)[1].used_bytes);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.steps[0].alloc_retries, 2);
  ASSERT_EQ(r.phases.size(), 1u);
  EXPECT_EQ(r.phases[0].expect, "compute");
}

TEST(WatchJsonl, MalformedLinesNameTheLine) {
  try {
    parse_recording(
        "{\"type\": \"sample\", \"t\": 1, \"gpus\": []}\n{\"type\": \"sample\", \"t\": \"x\", \"gpus\": []}\n",
        "r.jsonl");
    FAIL();
  } catch (const trainfit::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("r.jsonl:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_recording("not json\n", "r"), trainfit::InputError);
  EXPECT_THROW(parse_recording("{\"type\": \"mystery\"}\n", "r"), trainfit::InputError);
  EXPECT_THROW(parse_recording("{\"type\": \"sample\", \"t\": 1, \"gpus\": [{\"util\": [1]}]}\n", "r"),
               trainfit::InputError);
}

TEST(WatchJsonl, ProbeEvents) {
  std::vector<StepEvent> steps;
  std::vector<PhaseMarker> phases;
  parse_event_line(R"({"t": 5, "step": 1, "step_seconds": 0.5, "data_seconds": 0.4, "limit_bytes": null})", steps,
                   phases);
  parse_event_line(R"({"t": 6, "phase": "end"})", steps, phases);
  parse_event_line(R"({"t": 7, "note": "nothing a diagnoser uses"})", steps, phases);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].data_seconds, 0.4);
  EXPECT_FALSE(steps[0].limit_bytes);
  ASSERT_EQ(phases.size(), 1u);
  EXPECT_THROW(parse_event_line(R"({"step": 1})", steps, phases), trainfit::InputError);  // no time
  EXPECT_ANY_THROW(parse_event_line("{broken", steps, phases));
}

// A header of `gpus` GPUs, then `samples` samples of one GPU 0.1 s apart.
std::string recording_text(int gpus, int samples) {
  std::vector<GpuInfo> list;
  for (int i = 0; i < gpus; ++i) list.push_back({i, "G", 150000000000, 1980.0, 3201.0, 700.0});
  std::string text = header_to_json(list, "580", "").dump() + "\n";
  for (int i = 0; i < samples; ++i) {
    Sample s = sample();
    s.time += 0.1 * i;
    text += sample_to_json(s).dump() + "\n";
  }
  return text;
}

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "/formats_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// The message of the InputError `f` throws ("" when it throws none).
template <typename F>
std::string input_error(F f) {
  try {
    f();
  } catch (const trainfit::InputError& e) {
    return e.what();
  }
  return "";
}

TEST(WatchJsonl, ARecordingListsAtMost64Gpus) {
  // 20,000 GPUs in a 400 KB header took over 4 GB to replay (a diagnosis per GPU per second).
  EXPECT_EQ(parse_recording(recording_text(64, 3), "r").gpus.size(), 64u);
  EXPECT_EQ(input_error([] { parse_recording(recording_text(65, 3), "r"); }),
            "r:1: the header lists 65 GPUs; a recording may list at most 64");
  std::string two_headers = recording_text(40, 0) + recording_text(40, 0);
  EXPECT_EQ(input_error([&] { parse_recording(two_headers, "r"); }),
            "r:2: the headers list 80 GPUs; a recording may list at most 64");
  std::string wide = "{\"type\": \"sample\", \"t\": 1, \"gpus\": [{}";
  for (int i = 1; i < 65; ++i) wide += ", {}";
  EXPECT_EQ(input_error([&] { parse_recording(wide + "]}\n", "r"); }),
            "r:1: a sample lists 65 GPUs; a recording may list at most 64");
}

TEST(WatchJsonl, ALineLongerThanOneMebibyteIsRefused) {
  const std::string line(RecordingLimits{}.max_line_bytes + 1, ' ');
  EXPECT_EQ(input_error([&] { parse_recording(recording_text(1, 3) + line + "\n", "r"); }),
            "r:5: line 5 is longer than 1.0 MiB");
  // The same from a file, read line by line; and from a device that never ends a line, at once.
  const std::string path = temp_file("long.jsonl", recording_text(1, 3) + line + "\n");
  EXPECT_EQ(input_error([&] { load_recording(path); }),
            path + ":5: line 5 is longer than 1.0 MiB");
  EXPECT_EQ(input_error([] { load_recording("/dev/zero"); }), "/dev/zero:1: line 1 is longer than 1.0 MiB");
}

TEST(WatchJsonl, WhatARecordingHoldsAndReadsIsBounded) {
  RecordingLimits small;
  small.max_held_bytes = 64 * 1024;
  // A GpuReading is hundreds of bytes in memory for 2 of text ("{}"): memory is what is counted.
  std::string text;
  for (int i = 0; i < 100; ++i)
    text += R"({"type": "sample", "t": 1, "gpus": [{}, {}, {}, {}]})"
            "\n";
  const std::string why = input_error([&] { parse_recording(text, "r", small); });
  EXPECT_NE(why.find(": the recording holds more than 64.0 KiB of samples and events once read; replay a part of it"),
            std::string::npos)
      << why;
  EXPECT_EQ(parse_recording(text, "r").samples.size(), 100u);
  RecordingLimits short_file;
  short_file.max_file_bytes = 1000;
  const std::string path = temp_file("big.jsonl", recording_text(1, 10));
  EXPECT_EQ(input_error([&] { load_recording(path, short_file); }), "recording '" + path + "' is larger than 1000 B");
  // Read line by line, a file gives what the same text gives (a last line without its newline too).
  const std::string text2 = recording_text(2, 30);
  const std::string path2 = temp_file("same.jsonl", text2.substr(0, text2.size() - 1));
  const Recording a = parse_recording(text2, "r"), b = load_recording(path2);
  EXPECT_EQ(a.gpus.size(), b.gpus.size());
  EXPECT_EQ(a.samples.size(), b.samples.size());
  EXPECT_EQ(b.samples.back().time, a.samples.back().time);
}

TEST(WatchJsonl, EventsNestedDeeperThanAnEventCanBeAreRefused) {
  // Watch copies each event into its recording with json::dump, which recurses once per level.
  std::vector<StepEvent> steps;
  std::vector<PhaseMarker> phases;
  parse_event_line(R"({"t": 5, "step": 1, "x": [[{"a": "[[[[[[[[[[[[[[[[[[[["}]]})", steps, phases);
  EXPECT_EQ(steps.size(), 1u);  // brackets inside strings do not count
  const std::string deep = "{\"t\": 5, \"step\": 2, \"x\": " + std::string(10000, '[') + std::string(10000, ']') + "}";
  EXPECT_EQ(input_error([&] { parse_event_line(deep, steps, phases); }), "an event is nested more than 16 levels deep");
  EXPECT_EQ(steps.size(), 1u);
}

TEST(Prometheus, TextFormatWithUnknownsLeftOut) {
  const std::vector<GpuInfo> gpus{info()};
  Diagnosis d;
  d.gpu = 0;
  d.verdicts.push_back({Bottleneck::input_pipeline, "e", "a"});
  const std::vector<Diagnosis> ds{d};
  const std::string t = render_prometheus(gpus, sample(), ds);
  EXPECT_NE(t.find("# TYPE trainfit_gpu_memory_used_bytes gauge\n"), std::string::npos);
  EXPECT_NE(t.find("trainfit_gpu_memory_used_bytes{gpu=\"0\",name=\"NVIDIA \\\"H200\\\"\"} 30000000000\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("trainfit_gpu_utilization_ratio{gpu=\"0\",name=\"NVIDIA \\\"H200\\\"\"} 0.34\n"), std::string::npos);
  EXPECT_NE(t.find("trainfit_gpu_sm_clock_hertz{gpu=\"0\",name=\"NVIDIA \\\"H200\\\"\"} 1980000000\n"),
            std::string::npos);
  EXPECT_NE(t.find("trainfit_process_gpu_memory_bytes{gpu=\"0\",pid=\"4242\"} 20000000000\n"), std::string::npos);
  EXPECT_EQ(t.find("pid=\"77\""), std::string::npos);  // unknown: no series, never 0
  EXPECT_EQ(t.find("trainfit_gpu_temperature_celsius{"), std::string::npos);
  EXPECT_NE(t.find("# HELP trainfit_gpu_temperature_celsius"), std::string::npos);
  EXPECT_NE(t.find("trainfit_bottleneck{gpu=\"0\",verdict=\"input-pipeline-bound\"} 1\n"), std::string::npos);
}

TEST(Endpoint, LoopbackUnlessAHostIsGiven) {
  EXPECT_EQ(parse_endpoint("9400").host, "127.0.0.1");
  EXPECT_EQ(parse_endpoint(":9500").port, 9500);
  EXPECT_EQ(parse_endpoint(":9500").host, "127.0.0.1");
  EXPECT_EQ(parse_endpoint("0.0.0.0:9400").host, "0.0.0.0");
  EXPECT_EQ(parse_endpoint("[::1]:9401").host, "::1");
  EXPECT_EQ(parse_endpoint("[::1]:9401").port, 9401);
  for (const char* bad : {"", "host", "1.2.3.4:", "1.2.3.4:70000", ":-1", "[::1]", "x:9a"})
    EXPECT_THROW(parse_endpoint(bad), trainfit::InputError) << bad;
}

// A bounded HTTP GET over loopback: 5 s timeouts, no library.
std::string http_get(int port, const std::string& path, const std::string& extra_headers = "") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req =
        "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n" + extra_headers + "\r\n";
    if (send(fd, req.data(), req.size(), 0) == static_cast<ssize_t>(req.size())) {
      std::array<char, 4096> buf{};
      ssize_t n = 0;
      while ((n = recv(fd, buf.data(), buf.size(), 0)) > 0) out.append(buf.data(), static_cast<std::size_t>(n));
    }
  }
  close(fd);
  return out;
}

TEST(MetricsServer, ServesTheLatestTextOverLoopback) {
  MetricsServer server({"127.0.0.1", 0});
  ASSERT_GT(server.port(), 0);
  server.publish("trainfit_gpu_utilization_ratio{gpu=\"0\"} 0.5\n");
  std::string r = http_get(server.port(), "/metrics");
  EXPECT_NE(r.find("200 OK"), std::string::npos) << r;
  EXPECT_NE(r.find("text/plain; version=0.0.4"), std::string::npos) << r;
  EXPECT_NE(r.find("trainfit_gpu_utilization_ratio{gpu=\"0\"} 0.5"), std::string::npos) << r;
  server.publish("trainfit_gpu_utilization_ratio{gpu=\"0\"} 0.75\n");
  EXPECT_NE(http_get(server.port(), "/metrics").find("0.75"), std::string::npos);
  EXPECT_NE(http_get(server.port(), "/nothing").find("404"), std::string::npos);
  // The same port twice cannot be: a clear error, not a crash.
  EXPECT_THROW(MetricsServer({"127.0.0.1", server.port()}), trainfit::InputError);
}  // the destructor stops the server: the test ends by itself

// A client that connects and sends "GET /metrics HTTP/1.1\r\n..." a byte every `every`, from its
// own thread, until told to stop or the server closes the connection.
class TricklingClient {
 public:
  TricklingClient(int port, std::chrono::milliseconds every) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    thread_ = std::thread([this, every] {
      const std::string req = "GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Padding: ";
      for (std::size_t i = 0; !stop_; ++i) {
        const char c = i < req.size() ? req[i] : 'x';
        if (send(fd_, &c, 1, MSG_NOSIGNAL) != 1) break;
        for (auto slept = std::chrono::milliseconds(0); slept < every && !stop_; slept += std::chrono::milliseconds(10))
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  ~TricklingClient() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  bool connected() const { return connected_; }
  // Whether the server has closed the connection within `within` (recv sees the end or an error).
  bool closed_by_server(std::chrono::seconds within) const {
    timeval tv{static_cast<time_t>(within.count()), 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::array<char, 256> buf{};
    for (;;) {
      const ssize_t n = recv(fd_, buf.data(), buf.size(), 0);
      if (n > 0) continue;  // an error page: the end follows
      return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(MetricsServer, ClientsTricklingHeadersDoNotBlockScrapes) {
  // Two clients sending a header byte every second held both of httplib's workers (each wait for a
  // byte was under its 5 s timeout): /metrics answered no one.
  MetricsServer server({"127.0.0.1", 0});
  server.publish("trainfit_gpu_utilization_ratio{gpu=\"0\"} 0.5\n");
  std::vector<std::unique_ptr<TricklingClient>> slow;
  for (int i = 0; i < 2; ++i) {
    slow.push_back(std::make_unique<TricklingClient>(server.port(), std::chrono::seconds(1)));
    ASSERT_TRUE(slow.back()->connected());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // both being served
  const auto t0 = std::chrono::steady_clock::now();
  const std::string r = http_get(server.port(), "/metrics");
  EXPECT_NE(r.find("0.5\n"), std::string::npos) << r;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2);
}

TEST(MetricsServer, AConnectionEndsWithinTenSecondsWhateverTheClientDoes) {
  MetricsServer server({"127.0.0.1", 0});
  TricklingClient slow(server.port(), std::chrono::milliseconds(500));
  ASSERT_TRUE(slow.connected());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(slow.closed_by_server(std::chrono::seconds(20)));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(took, 8);
  EXPECT_LT(took, 13);
}

TEST(MetricsServer, StopsAtOnceWithAClientConnected) {
  auto server = std::make_unique<MetricsServer>(Endpoint{"127.0.0.1", 0});
  TricklingClient idle(server->port(), std::chrono::seconds(60));  // one byte, then nothing
  ASSERT_TRUE(idle.connected());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  server.reset();  // the end of a watch waits for this
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2);
}

TEST(MetricsServer, RangeHeadersAreIgnored) {
  // 2,600 ranges of the whole page made a reply 962 times the page: the page is served whole.
  MetricsServer server({"127.0.0.1", 0});
  const std::string page(2000, 'x');
  server.publish(page + "\n");
  std::string ranges = "bytes=0-";
  for (int i = 1; i < 1500; ++i) ranges += ",0-";
  const std::string r = http_get(server.port(), "/metrics", "Range: " + ranges + "\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r.substr(0, 200);
  EXPECT_LT(r.size(), page.size() + 1000);
  EXPECT_NE(r.find(page + "\n"), std::string::npos);
}

TEST(ProcessTree, FindsChildren) {
  const pid_t child = fork();
  if (child == 0) {
    sleep(5);
    _exit(0);
  }
  const auto tree = process_tree(static_cast<std::uint32_t>(getpid()));
  EXPECT_EQ(tree.front(), static_cast<std::uint32_t>(getpid()));
  EXPECT_NE(std::find(tree.begin(), tree.end(), static_cast<std::uint32_t>(child)), tree.end());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

}  // namespace
