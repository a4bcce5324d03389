// A stand-in for python/trainfit_runner in CI (no GPU, no torch): it speaks the runner protocol
// (--config-file PATH --out PATH, or --config JSON by hand; one row of JSON written to PATH) and
// does real work on the CPU:
// it allocates and touches the memory a config asks for, against the emulated card's size as a
// capped allocator would, multiplies matrices for each step and times them. The config's x_do
// field makes it misbehave: "oom" (ask for more than the card), "crash" (SIGSEGV), "kill"
// (SIGKILL itself), "hang" (never finish), "hang-hard" (and ignore SIGTERM), "fail" (exit 1
// without a row), "noresult" (exit 0 without a row), "row" (write x_row, verbatim, as its row),
// "big-row" (an ok row padded to x_row_mib MiB, written a MiB at a time). It writes its pid to
// PATH.pid first.
// For the concurrency tests: x_gate (a path, or "" for none: wait until that file exists first),
// x_rendezvous and x_peers (a folder: add a file for this runner, then wait, up to x_rendezvous_s
// seconds (default 60), until x_peers runners have; status "error" if they never do),
// x_spawn_child (fork a child that sleeps forever in the runner's process group; its pid goes to
// PATH.child.pid). The row's measured.standin records CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER,
// NCCL_NVLS_ENABLE, PYTHONPATH and TRAINFIT_HOST_PROBE as the runner saw them (null when unset)
// and its start and end (Unix seconds), and the options it was given (flags).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

using nlohmann::json;

namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json env_or_null(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? json(v) : json(nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_text, out;
  json flags = json::array();  // the options it was given, for the row: the protocol as used
  for (int i = 1; i + 1 < argc; i += 2) {
    flags.push_back(argv[i]);
    if (std::strcmp(argv[i], "--config") == 0) config_text = argv[i + 1];
    if (std::strcmp(argv[i], "--config-file") == 0) {
      std::ifstream f(argv[i + 1]);
      config_text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    if (std::strcmp(argv[i], "--out") == 0) out = argv[i + 1];
  }
  if (config_text.empty() || out.empty()) {
    std::cerr << "usage: standin --config-file PATH --out PATH (or --config JSON)\n";
    return 2;
  }
  const double started_unix = unix_now();
  std::ofstream(out + ".pid") << ::getpid() << "\n";
  const json c = json::parse(config_text);
  const std::string what = c.value("x_do", "ok");
  const double sleep_s = c.value("x_sleep_s", 0.02);
  const double alloc_mib = c.value("x_alloc_mib", 16.0);
  const int steps = c.value("steps", 3);
  std::cerr << "standin: " << what << " " << c.value("model", "") << "\n";

  if (what == "crash") {
    // Die by the signal itself, as a crashing runner does: a sanitizer build installs its own
    // SIGSEGV handler, which would report and exit with a status instead.
    ::signal(SIGSEGV, SIG_DFL);
    ::raise(SIGSEGV);
  }
  if (what == "kill") ::kill(::getpid(), SIGKILL);
  if (what == "fail") {
    std::cerr << "standin: failing on purpose\n";
    return 1;
  }
  if (what == "noresult") return 0;
  if (what == "row") {  // write x_row as the row, verbatim: a runner that writes nonsense
    std::ofstream(out) << c.value("x_row", "") << "\n";
    return 0;
  }
  if (what == "big-row") {  // a runner that writes a huge row: x_row_mib MiB, never all in memory
    const auto mib = static_cast<std::size_t>(c.value("x_row_mib", 1.0) * 1048576.0);
    std::ofstream f(out);
    const std::string head = R"({"measured": {"status": "ok", "peak_allocated_mib": 16.0, "padding": ")";
    const std::string tail = "\"}}\n";
    f << head;
    const std::string chunk(std::size_t{1} << 20, 'x');
    for (std::size_t left = mib - std::min(mib, head.size() + tail.size()); left > 0;) {
      const std::size_t n = std::min(left, chunk.size());
      f.write(chunk.data(), static_cast<std::streamsize>(n));
      left -= n;
    }
    f << tail;
    return 0;
  }
  if (what == "hang-hard") ::signal(SIGTERM, SIG_IGN);
  if (what == "hang" || what == "hang-hard")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));

  if (c.value("x_spawn_child", false)) {
    const pid_t child = ::fork();
    if (child == 0)
      for (;;) ::pause();
    std::ofstream(out + ".child.pid") << child << "\n";
  }
  if (const std::string gate = c.value("x_gate", ""); !gate.empty()) {
    while (!std::filesystem::exists(gate)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  json measured = {{"status", "ok"}};
  bool met = true;
  if (c.contains("x_rendezvous")) {
    namespace fs = std::filesystem;
    const fs::path dir = c["x_rendezvous"].get<std::string>();
    const auto peers = c.value("x_peers", 2);
    fs::create_directories(dir);
    std::ofstream(dir / std::to_string(::getpid())) << "\n";
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(c.value("x_rendezvous_s", 60.0));
    for (;;) {
      const auto n = std::distance(fs::directory_iterator(dir), fs::directory_iterator());
      if (n >= peers) break;
      if (std::chrono::steady_clock::now() > until) {
        met = false;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  const double want = what == "oom" ? 1e9 : alloc_mib;
  const double cap_mib = c.contains("vram_bytes") && c.value("overflow", "oom") == "oom"
                             ? c["vram_bytes"].get<double>() / 1048576.0
                             : 1e12;
  std::vector<double> step_seconds;
  if (!met) {
    measured = {{"status", "error"}, {"error", "standin: the other runners of the rendezvous never came"}};
  } else if (want > cap_mib) {  // what a capped CUDA allocator does: refuse, and the runner reports it
    measured = {{"status", "oom"}, {"error", "standin: tried to allocate past the emulated card"},
                {"oom_at_step", 1}, {"num_ooms", 1}};
  } else {
    std::vector<char> block(static_cast<std::size_t>(want * 1048576.0));
    for (std::size_t i = 0; i < block.size(); i += 4096) block[i] = static_cast<char>(i);
    const std::size_t n = 96;
    std::vector<double> a(n * n, 1.0), b(n * n, 0.5), r(n * n, 0.0);
    for (int s = 0; s < steps; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t k = 0; k < n; ++k)
          for (std::size_t j = 0; j < n; ++j) r[i * n + j] += a[i * n + k] * b[k * n + j];
      std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
      step_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::vector<double> steady(step_seconds.begin() + std::min<long>(c.value("warmup", 1), steps - 1), step_seconds.end());
    std::sort(steady.begin(), steady.end());
    const double median = steady[steady.size() / 2];
    measured["peak_allocated_mib"] = want + (r[0] > 0 ? 0.0 : 0.0);
    measured["peak_reserved_mib"] = want + 2;
    measured["step_seconds"] = step_seconds;
    measured["step_seconds_median"] = median;
    measured["tokens_per_second"] = c.value("seq", 512) * c.value("batch", 1) / median;
    measured["num_alloc_retries"] = 0;
    measured["num_ooms"] = 0;
  }
  measured["standin"] = {{"cuda_visible_devices", env_or_null("CUDA_VISIBLE_DEVICES")},
                         {"cuda_device_order", env_or_null("CUDA_DEVICE_ORDER")},
                         {"nccl_nvls_enable", env_or_null("NCCL_NVLS_ENABLE")},
                         {"pythonpath", env_or_null("PYTHONPATH")},
                         {"host_probe", env_or_null("TRAINFIT_HOST_PROBE")},
                         {"flags", flags},
                         {"started_unix", started_unix},
                         {"ended_unix", unix_now()}};
  const json row = {{"config", c}, {"measured", measured},
                    {"stack", {{"gpu", "stand-in"}, {"torch", "none"}, {"transformers", "none"}, {"peft", "none"},
                               {"driver", "none"}}}};
  std::ofstream(out) << row.dump() << "\n";
  return 0;
}
