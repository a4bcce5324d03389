// trainfit serve under load, on loopback (docs/serve.md, "Speed"): the latency of /api/plan one
// request after another (p50, p99, max over 2,000 requests, each a new connection as the page's
// are), then a burst of 1,000 requests from 100 clients at once, counting every error. Prints the
// figures; it asserts nothing (speed is measured, never tested).
//   build/release/bench/trainfit_serve_load [requests] [burst] [clients]
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "trainfit/serve.hpp"

namespace {

using Clock = std::chrono::steady_clock;

const char* const kPaths[] = {
    "/api/plan?model=qwen2.5-7b&gpu=rtx-5070-ti&method=qlora&seq=512",
    "/api/plan?model=llama3.1-8b&gpu=a100-40gb&seq=2048&batch=4&grad-ckpt=",
    "/api/plan?model=qwen2.5-14b&gpu=h100-sxm&method=full&gpus=8&parallel=fsdp",
    "/api/plan?model=mistral-7b&gpu=rtx-4090&method=lora&seq=4096&no-suggest=",
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  const int requests = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int burst = argc > 2 ? std::atoi(argv[2]) : 1000;
  const int clients = argc > 3 ? std::atoi(argv[3]) : 100;
  const trainfit::serve::WebServer server("127.0.0.1", 0);
  const int port = server.port();

  std::vector<double> ms;
  int errors = 0;
  for (int i = 0; i < requests; ++i) {
    httplib::Client client("127.0.0.1", port);
    const auto t0 = Clock::now();
    const auto res = client.Get(kPaths[i % 4]);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (!res || res->status != 200) ++errors;
  }
  std::printf("sequential: %d requests of /api/plan, %d errors; latency p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
              requests, errors, percentile(ms, 0.5), percentile(ms, 0.99), *std::max_element(ms.begin(), ms.end()));

  std::atomic<int> ok{0}, failed{0}, next{0};
  std::vector<double> burst_ms(static_cast<std::size_t>(burst));
  const auto b0 = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&] {
      for (int i = next++; i < burst; i = next++) {
        httplib::Client client("127.0.0.1", port);
        client.set_connection_timeout(10);
        const auto t0 = Clock::now();
        const auto res = client.Get(kPaths[i % 4]);
        burst_ms[static_cast<std::size_t>(i)] = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        (res && res->status == 200 ? ok : failed)++;
      }
    });
  for (std::thread& t : threads) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - b0).count();
  std::printf(
      "burst: %d requests from %d clients at once: %d answered 200, %d errors, in %.3f s (%.0f requests/s); "
      "latency p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
      burst, clients, ok.load(), failed.load(), wall, burst / wall, percentile(burst_ms, 0.5),
      percentile(burst_ms, 0.99), *std::max_element(burst_ms.begin(), burst_ms.end()));
  return failed.load() == 0 && errors == 0 ? 0 : 1;
}
