// The sampling thread. It only reads NVML and queues samples: writing files, serving metrics and
// diagnosing happen on the caller's thread, so the cost measured here is the cost of watching.
#include <time.h>

#include <array>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "telemetry/thread_cpu.hpp"
#include "trainfit/telemetry.hpp"

namespace trainfit::telemetry {

double detail::thread_cpu_seconds() {
  // The scheduler's own count of the thread's run time, to the nanosecond. getrusage(RUSAGE_THREAD)
  // is sampled at the timer tick on many kernels and reads 0 for a 70 us driver call.
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
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
  std::chrono::duration<double> interval;
  ReadPeriods periods;
  std::thread thread;
  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::deque<Sample> queue;
  SamplerCost cost;
  std::chrono::steady_clock::time_point started;

  State(Nvml& n, std::chrono::duration<double> i, ReadPeriods p) : nvml(n), interval(i), periods(p) {}

  void run() {
    using clock = std::chrono::steady_clock;
    const auto n = nvml.gpus().size();
    std::vector<GpuReading> last(n);
    auto next = clock::now();
    // When each set is next due: all of them on the first tick.
    struct Due {
      unsigned set;
      std::chrono::duration<double> period;
      clock::time_point at;
    };
    std::array<Due, 4> due{{{read_set::kMemory, periods.memory, next},
                            {read_set::kState, periods.state, next},
                            {read_set::kCounters, periods.counters, next},
                            {read_set::kLinks, periods.links, next}}};
    for (;;) {
      const auto now = clock::now();
      unsigned sets = read_set::kActivity;
      for (Due& d : due)
        if (now >= d.at) {
          sets |= d.set;
          d.at += std::chrono::duration_cast<clock::duration>(d.period);
          if (d.at < now) d.at = now;  // fell behind: the next read a period from now, not a burst
        }
      Sample s;
      s.time = wall_now();
      s.gpus.reserve(n);
      for (std::size_t i = 0; i < n; ++i) {
        // The last values of every set, updated with the sets read now: one copy into the sample
        // a tick (the process list is copied once, not once to carry it and again to keep it).
        GpuReading g = nvml.read(i, sets);
        carry_unread(read_set::kAll & ~sets, g, last[i]);
        last[i].index = g.index;
        s.gpus.push_back(last[i]);
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

Sampler::Sampler(Nvml& nvml, std::chrono::duration<double> interval, ReadPeriods periods)
    : state_(std::make_unique<State>(nvml, interval, periods)) {}

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
