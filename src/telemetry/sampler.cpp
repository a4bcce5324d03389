// The sampling thread. It only reads NVML and queues samples: writing files, serving metrics and
// diagnosing happen on the caller's thread, so the cost measured here is the cost of watching.
#include <sys/resource.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "telemetry/thread_cpu.hpp"
#include "trainfit/telemetry.hpp"

namespace trainfit::telemetry {

double detail::thread_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

namespace {

// A consumer that stops taking must not grow memory without bound: at 10 Hz this is over an hour.
constexpr std::size_t kMaxQueued = 40000;

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct Sampler::State {
  Nvml& nvml;
  std::chrono::duration<double> interval, slow_interval;
  std::thread thread;
  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::deque<Sample> queue;
  SamplerCost cost;
  std::chrono::steady_clock::time_point started;

  State(Nvml& n, std::chrono::duration<double> i, std::chrono::duration<double> s)
      : nvml(n), interval(i), slow_interval(s) {}

  void run() {
    using clock = std::chrono::steady_clock;
    const auto n = nvml.gpus().size();
    std::vector<GpuReading> last_slow(n);
    auto next = clock::now();
    auto next_slow = next;
    for (;;) {
      const bool slow = clock::now() >= next_slow;
      if (slow) next_slow += std::chrono::duration_cast<clock::duration>(slow_interval);
      Sample s;
      s.time = wall_now();
      s.gpus.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        GpuReading g = nvml.read(i, slow);
        if (slow) {
          last_slow[i] = g;
        } else {  // carry the slow metrics forward: they are averages over the slow interval anyway
          const GpuReading& l = last_slow[i];
          g.memory_clock_mhz = l.memory_clock_mhz;
          g.power_limit_watts = l.power_limit_watts;
          g.temperature_c = l.temperature_c;
          g.pcie_rx_bytes_per_s = l.pcie_rx_bytes_per_s;
          g.pcie_tx_bytes_per_s = l.pcie_tx_bytes_per_s;
          g.nvlink_rx_bytes_per_s = l.nvlink_rx_bytes_per_s;
          g.nvlink_tx_bytes_per_s = l.nvlink_tx_bytes_per_s;
          g.processes = l.processes;
        }
        s.gpus.push_back(std::move(g));
      }
      next += std::chrono::duration_cast<clock::duration>(interval);
      if (next < clock::now()) next = clock::now();  // fell behind (a slow driver call): don't burst
      std::unique_lock lock(mutex);
      queue.push_back(std::move(s));
      if (queue.size() > kMaxQueued) queue.pop_front();
      ++cost.samples;
      cost.cpu_seconds = detail::thread_cpu_seconds();
      cost.wall_seconds = std::chrono::duration<double>(clock::now() - started).count();
      if (wake.wait_until(lock, next, [this] { return stopping; })) return;
    }
  }
};

Sampler::Sampler(Nvml& nvml, std::chrono::duration<double> interval, std::chrono::duration<double> slow_interval)
    : state_(std::make_unique<State>(nvml, interval, slow_interval)) {}

Sampler::~Sampler() {
  stop();
}

void Sampler::start() {
  if (state_->thread.joinable()) return;
  state_->started = std::chrono::steady_clock::now();
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

void Sampler::stop() {
  {
    const std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wake.notify_all();
  if (state_->thread.joinable()) state_->thread.join();
}

std::vector<Sample> Sampler::take() {
  const std::lock_guard lock(state_->mutex);
  std::vector<Sample> out(std::make_move_iterator(state_->queue.begin()), std::make_move_iterator(state_->queue.end()));
  state_->queue.clear();
  return out;
}

SamplerCost Sampler::cost() const {
  const std::lock_guard lock(state_->mutex);
  return state_->cost;
}

}  // namespace trainfit::telemetry
