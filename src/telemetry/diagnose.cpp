// The diagnoser: a pure function from a window of samples (and a probe's steps) to verdicts with
// their numbers. The rules follow the seed's reading of nvidia-smi (memory near full with low
// utilisation: capacity; utilisation under 50% with memory to spare: data loading or communication),
// made precise with the signals NVML adds (links, clocks, throttle reasons) and the probe's allocator
// statistics. docs/watch.md states each rule; the thresholds below say why they are where they are.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <queue>

#include "common/statistics.hpp"
#include "trainfit/telemetry.hpp"
#include "trainfit/units.hpp"

namespace trainfit::telemetry {
namespace {

// Below this utilisation in every sample no kernel ran long enough to matter: NVML counts any
// kernel in its sampling period, so even a trickle of small kernels reads above it.
constexpr double kIdleUtil = 5;
// The seed: "GPU-Util under 50% with memory to spare means data loading or communication".
constexpr double kLowUtil = 50;
// At or above this mean the GPU is busy nearly all the time and is itself the limit; between 50%
// and this, a fifth or more of the time is lost waiting on the host, which is worth naming.
constexpr double kBusyUtil = 80;
// Memory in use (or reserved against the allocator's cap) above which the run is out of room: the
// seed keeps 20% headroom; 90% leaves too little for the allocator's rounding and fragmentation.
constexpr double kNearFull = 0.90;
// Sustained host-link traffic that is more than batches going in: a PCIe 4.0 x16 link moves ~25 GB/s
// a direction, a typical input stream (tokens, even images) well under 1 GB/s.
constexpr double kPcieBusy = 2e9;
// GPU-to-GPU traffic that makes NVLink a suspect (NVLink 3/4 carry 300-450 GB/s a direction).
constexpr double kNvlinkBusy = 10e9;
// Communication kernels (NCCL) count as utilisation but spin at low power; real compute at full
// utilisation draws well over half the board's limit.
constexpr double kCommPowerFraction = 0.5;
// A reason must be present in this share of the samples to count, not a blip.
constexpr double kReasonShare = 0.30;
// The power cap under load is the card's normal envelope (boost clocks trade with power), not a
// fault: it counts as throttling only when someone lowered the limit below this share of the default.
// Heat and hardware slowdowns (their own reason bits) always count.
constexpr double kLoweredLimit = 0.95;
// "Full clocks" for compute-bound: within 10% of the maximum SM clock.
constexpr double kFullClock = 0.90;
// Allocator retries and out-of-memory errors come in bursts (one per cache flush), seconds apart:
// while the allocator sits at its cap, one in the last half minute still means the run lives at its
// memory ceiling (the first H200 recording showed windows of 5 s with none between bursts).
constexpr double kRetryLookback = 30;
// The probe: waiting for the next batch this share of the step time means the loader is the limit.
constexpr double kDataShare = 0.30;
// A step time this many times the run's earlier steps while memory is full: spilling.
constexpr double kSpillSlowdown = 3.0;
// Growth worth a warning inside one window: at least this much and 1% of the card, rising in every
// quarter of the window, not one jump (a new tensor, a cache warming up).
constexpr double kGrowthMinBytes = 256.0 * 1024 * 1024;
constexpr double kGrowthMinCard = 0.01;
constexpr double kGrowthMaxJump = 0.5;
// The host: a training process whose main thread plus its busiest other thread (PyTorch's autograd
// thread runs the backward pass, so one Python step alternates between the two) use this much of a
// core is running flat out: while the GPU idles, the GPU waits on it launching work. Below it, that
// thread spends a fifth or more of its time asleep, waiting (for a batch, a queue, a lock).
constexpr double kHostBusyCores = 0.8;
// The probe's data waits under this share of step time: the loader keeps up, the host does not.
constexpr double kNoDataWait = kDataShare / 3;
// A straggler (judge_ranks): in synchronous data parallelism every rank's step lasts as long as the
// slowest one's, the others waiting inside the collective. A rank whose data waits take this much
// more of the step than the other ranks' median is the slow one: its loader decides the step time.
// At least kDataShare itself (an input-bound rank); the gap keeps ranks whose loaders are all
// equally slow (an input-bound job, not a straggler) out.
constexpr double kStragglerDataGap = 0.15;

struct Series {
  std::vector<double> v;
  void add(const std::optional<double>& x) {
    if (x && std::isfinite(*x)) v.push_back(*x);
  }
  std::optional<double> mean() const {
    if (v.empty()) return std::nullopt;
    return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  }
  std::optional<double> min() const {
    return v.empty() ? std::nullopt : std::optional(*std::min_element(v.begin(), v.end()));
  }
  std::optional<double> max() const {
    return v.empty() ? std::nullopt : std::optional(*std::max_element(v.begin(), v.end()));
  }
};

std::optional<double> sum(std::optional<double> a, std::optional<double> b) {
  if (!a && !b) return std::nullopt;
  return a.value_or(0) + b.value_or(0);
}

// Rise of `used` across the window when it climbs through every quarter without one jump making
// most of it; empty otherwise.
std::optional<double> steady_growth(const std::vector<double>& used) {
  if (used.size() < 8) return std::nullopt;
  const std::size_t q = used.size() / 4;
  std::array<double, 4> means{};
  for (std::size_t i = 0; i < 4; ++i) {
    const auto b = used.begin() + static_cast<std::ptrdiff_t>(i * q);
    const auto e = i == 3 ? used.end() : b + static_cast<std::ptrdiff_t>(q);
    means[i] = std::accumulate(b, e, 0.0) / static_cast<double>(e - b);
  }
  if (!(means[0] < means[1] && means[1] < means[2] && means[2] < means[3])) return std::nullopt;
  const double growth = used.back() - used.front();
  double jump = 0;
  for (std::size_t i = 1; i < used.size(); ++i) jump = std::max(jump, used[i] - used[i - 1]);
  if (growth <= 0 || jump > kGrowthMaxJump * growth) return std::nullopt;
  return growth;
}

// The step times of the probe's steps before a window (the run's earlier steps, for the spill rule):
// their median and how many there are. A replay's windows move forward, so the same object follows
// them, adding each step once to a running median (two heaps), instead of each window (and each GPU)
// reading the whole run again: a recording with many steps cost steps x windows x GPUs.
class EarlierSteps {
 public:
  explicit EarlierSteps(std::span<const StepEvent> steps) : steps_(steps) {}
  // To the first `count` steps (the steps are in time order).
  void advance_to(std::size_t count) {
    if (count < added_) *this = EarlierSteps(steps_);  // backwards (never in a replay): start again
    for (; added_ < count; ++added_)
      if (const auto& v = steps_[added_].step_seconds) add(*v);
  }
  std::size_t size() const { return low_.size() + high_.size(); }
  // As detail::median: the middle one, or the mean of the two middle ones.
  std::optional<double> median() const {
    if (low_.empty()) return std::nullopt;
    return low_.size() > high_.size() ? low_.top() : 0.5 * (low_.top() + high_.top());
  }

 private:
  void add(double v) {  // low_ holds the smaller half (one more when odd), high_ the larger
    if (low_.empty() || v <= low_.top())
      low_.push(v);
    else
      high_.push(v);
    if (low_.size() > high_.size() + 1) {
      high_.push(low_.top());
      low_.pop();
    } else if (high_.size() > low_.size()) {
      low_.push(high_.top());
      high_.pop();
    }
  }
  std::span<const StepEvent> steps_;
  std::size_t added_ = 0;
  std::priority_queue<double> low_;
  std::priority_queue<double, std::vector<double>, std::greater<>> high_;
};

// `steps` in time order (the live watch sorts them, a recording is sorted when read).
// The /proc readings inside [begin, end] for GPU `gpu`: its busiest training process (those on the
// GPU; all of them when no process was seen on any GPU) and the workers under it, as window means.
void host_stats(std::span<const HostSample> host, double begin, double end, int gpu, WindowStats& s) {
  const auto first =
      std::lower_bound(host.begin(), host.end(), begin, [](const HostSample& h, double t) { return h.time < t; });
  double main = 0, driving = 0, process = 0, workers_cores = 0;
  int workers = 0;
  for (auto it = first; it != host.end() && it->time <= end; ++it) {
    const auto& procs = it->processes;
    const bool any_on_gpu = std::any_of(procs.begin(), procs.end(), [](const HostProcess& p) {
      return p.role == HostRole::training && !p.gpus.empty();
    });
    const HostProcess* busiest = nullptr;
    for (const HostProcess& p : procs) {
      if (p.role != HostRole::training) continue;
      if (any_on_gpu && std::find(p.gpus.begin(), p.gpus.end(), gpu) == p.gpus.end()) continue;
      if (!busiest ||
          p.main_thread_cores + p.busiest_other_cores > busiest->main_thread_cores + busiest->busiest_other_cores)
        busiest = &p;
    }
    if (!busiest) continue;
    ++s.host_samples;
    main += busiest->main_thread_cores;
    driving += busiest->main_thread_cores + busiest->busiest_other_cores;
    process += busiest->cpu_cores;
    // Its workers: processes whose nearest training ancestor it is (parents come before children).
    int n = 0;
    for (const HostProcess& p : procs) {
      if (p.role != HostRole::worker) continue;
      const HostProcess* up = &p;
      for (int depth = 0; up && up->role != HostRole::training && depth < 64; ++depth) {
        const std::uint32_t parent = up->parent;
        const auto it_parent =
            std::find_if(procs.begin(), procs.end(), [&](const HostProcess& q) { return q.pid == parent; });
        up = it_parent == procs.end() ? nullptr : &*it_parent;
      }
      if (up == busiest) {
        ++n;
        workers_cores += p.cpu_cores;
      }
    }
    workers = std::max(workers, n);
  }
  if (s.host_samples == 0) return;
  const double k = s.host_samples;
  s.host_main_cores = main / k;
  s.host_driving_cores = driving / k;
  s.host_process_cores = process / k;
  s.host_workers = workers;
  s.host_workers_cores = workers_cores / k;
}

WindowStats window_stats(std::span<const Sample> window, std::span<const StepEvent> steps, const GpuInfo& gpu,
                         EarlierSteps& earlier, std::span<const HostSample> host) {
  WindowStats s;
  Series util, mem_util, mem_frac, pcie_rx, pcie_tx, nvl_rx, nvl_tx, clock_busy, clock_all, power, temp;
  std::vector<double> used;
  std::optional<double> limit;
  int with_reasons = 0, power_capped = 0, thermal = 0;
  std::optional<double> prev_util;
  for (const Sample& sample : window) {
    const auto it =
        std::find_if(sample.gpus.begin(), sample.gpus.end(), [&](const GpuReading& g) { return g.index == gpu.index; });
    if (it == sample.gpus.end()) continue;
    const GpuReading& g = *it;
    ++s.samples;
    util.add(g.gpu_util_percent);
    mem_util.add(g.memory_util_percent);
    if (g.gpu_util_percent) {
      if (prev_util && *prev_util < kLowUtil && *g.gpu_util_percent >= kLowUtil) ++s.util_bursts;
      prev_util = g.gpu_util_percent;
    }
    const auto total = g.memory_total_bytes ? g.memory_total_bytes : gpu.memory_total_bytes;
    if (total && *total > 0) {
      const auto t = static_cast<double>(*total);
      if (g.memory_free_bytes)
        mem_frac.add(1.0 - static_cast<double>(*g.memory_free_bytes) / t);
      else if (g.memory_used_bytes)
        mem_frac.add(static_cast<double>(*g.memory_used_bytes) / t);
    }
    if (g.memory_used_bytes) {
      used.push_back(static_cast<double>(*g.memory_used_bytes));
      s.memory_used_max = std::max(s.memory_used_max.value_or(0), *g.memory_used_bytes);
    }
    pcie_rx.add(g.pcie_rx_bytes_per_s);
    pcie_tx.add(g.pcie_tx_bytes_per_s);
    nvl_rx.add(g.nvlink_rx_bytes_per_s);
    nvl_tx.add(g.nvlink_tx_bytes_per_s);
    clock_all.add(g.sm_clock_mhz);
    if (g.gpu_util_percent && *g.gpu_util_percent >= kLowUtil) clock_busy.add(g.sm_clock_mhz);
    power.add(g.power_watts);
    temp.add(g.temperature_c);
    if (g.power_limit_watts) limit = g.power_limit_watts;
    if (g.throttle_reasons) {
      ++with_reasons;
      power_capped += (*g.throttle_reasons & throttle::kSwPowerCap) != 0;
      thermal += (*g.throttle_reasons & throttle::kThermalOrHardware) != 0;
    }
  }
  if (!window.empty()) s.seconds = window.back().time - window.front().time;
  s.util_mean = util.mean();
  s.util_min = util.min();
  s.util_max = util.max();
  s.memory_util_mean = mem_util.mean();
  s.memory_fraction_mean = mem_frac.mean();
  s.memory_fraction_max = mem_frac.max();
  s.memory_growth_bytes = steady_growth(used);
  s.pcie_rx_mean = pcie_rx.mean();
  s.pcie_tx_mean = pcie_tx.mean();
  s.nvlink_rx_mean = nvl_rx.mean();
  s.nvlink_tx_mean = nvl_tx.mean();
  s.sm_clock_mean = clock_busy.v.empty() ? clock_all.mean() : clock_busy.mean();
  if (s.sm_clock_mean && gpu.sm_clock_max_mhz && *gpu.sm_clock_max_mhz > 0)
    s.sm_clock_fraction = *s.sm_clock_mean / *gpu.sm_clock_max_mhz;
  s.power_mean = power.mean();
  s.power_limit = limit;
  if (s.power_mean && limit && *limit > 0) s.power_fraction = *s.power_mean / *limit;
  s.temperature_max = temp.max();
  if (with_reasons > 0) {
    s.power_cap_share = power_capped / static_cast<double>(with_reasons);
    s.thermal_share = thermal / static_cast<double>(with_reasons);
  }

  // The probe's steps inside the window; the last one before it is the baseline for counters.
  if (window.empty()) return s;
  const double begin = window.front().time, end = window.back().time;
  host_stats(host, begin, end, gpu.index, s);
  // Found by bisection, not by reading every step from the run's start.
  const auto before_time = [](const StepEvent& e, double t) { return e.time < t; };
  const auto first = std::lower_bound(steps.begin(), steps.end(), begin, before_time);  // the window's first
  const StepEvent* baseline = first == steps.begin() ? nullptr : &*(first - 1);
  earlier.advance_to(static_cast<std::size_t>(first - steps.begin()));
  std::vector<double> step_times;
  double data = 0, stepped = 0;
  bool have_data = false;
  std::optional<std::int64_t> first_retries, last_retries, first_ooms, last_ooms;
  for (auto it = first; it != steps.end(); ++it) {
    const StepEvent& e = *it;
    if (e.time > end) break;
    ++s.steps;
    if (e.step_seconds) {
      step_times.push_back(*e.step_seconds);
      if (e.data_seconds) {
        data += *e.data_seconds;
        stepped += *e.step_seconds;
        have_data = true;
      }
    }
    if (e.alloc_retries) {
      if (!first_retries)
        first_retries = baseline && baseline->alloc_retries ? baseline->alloc_retries : e.alloc_retries;
      last_retries = e.alloc_retries;
    }
    if (e.ooms) {
      if (!first_ooms) first_ooms = baseline && baseline->ooms ? baseline->ooms : e.ooms;
      last_ooms = e.ooms;
    }
    if (e.reserved_bytes && e.limit_bytes && *e.limit_bytes > 0)
      s.reserved_fraction_of_limit =
          std::max(s.reserved_fraction_of_limit.value_or(0),
                   static_cast<double>(*e.reserved_bytes) / static_cast<double>(*e.limit_bytes));
  }
  s.step_seconds_median = trainfit::detail::median(step_times);
  if (have_data && stepped > 0) s.data_share = data / stepped;
  if (first_retries && last_retries) s.alloc_retries = *last_retries - *first_retries;
  if (first_ooms && last_ooms) s.ooms = *last_ooms - *first_ooms;
  // Retries and OOMs over the lookback: the increase from the last step before it to the window's end.
  const auto after_end =
      std::upper_bound(steps.begin(), steps.end(), end, [](double t, const StepEvent& e) { return t < e.time; });
  const auto in_lookback = std::lower_bound(steps.begin(), after_end, end - kRetryLookback, before_time);
  const StepEvent* lookback_base = in_lookback == steps.begin() ? nullptr : &*(in_lookback - 1);
  const StepEvent* last = after_end == steps.begin() ? nullptr : &*(after_end - 1);
  if (last && last->alloc_retries)
    s.recent_alloc_retries =
        *last->alloc_retries - (lookback_base && lookback_base->alloc_retries ? *lookback_base->alloc_retries : 0);
  if (last && last->ooms)
    s.recent_ooms = *last->ooms - (lookback_base && lookback_base->ooms ? *lookback_base->ooms : 0);
  if (earlier.size() >= 5 && s.step_seconds_median) {
    const auto b = earlier.median();
    if (b && *b > 0) s.step_slowdown = *s.step_seconds_median / *b;
  }
  return s;
}

std::string share(std::optional<double> v) {
  return v ? fmt::format("{:.0f}%", 100 * *v) : "unknown";
}
std::string rate(std::optional<double> v) {
  return v ? fmt::format("{:.1f} GB/s", *v / 1e9) : "unknown";
}

std::string util_text(const WindowStats& s) {
  if (!s.util_mean) return "util unknown";
  std::string t = fmt::format("util {:.0f}% mean ({:.0f}-{:.0f}%", *s.util_mean, *s.util_min, *s.util_max);
  if (s.util_bursts >= 2 && *s.util_max - *s.util_min >= kLowUtil)
    t += fmt::format(", bursts {:.0f}→{:.0f}% every {:.1f} s", *s.util_min, *s.util_max, s.seconds / s.util_bursts);
  return t + ")";
}

std::string memory_text(const WindowStats& s) {
  if (!s.memory_fraction_max) return "memory unknown";
  std::string t = fmt::format("memory {:.0f}% of card", 100 * *s.memory_fraction_max);
  if (s.memory_used_max) t += fmt::format(" ({} used)", format_bytes(*s.memory_used_max));
  return t;
}

std::string link_text(const WindowStats& s) {
  std::string t = fmt::format("PCIe rx {} tx {}", rate(s.pcie_rx_mean), rate(s.pcie_tx_mean));
  if (s.nvlink_rx_mean || s.nvlink_tx_mean)
    t += fmt::format(", NVLink rx {} tx {}", rate(s.nvlink_rx_mean), rate(s.nvlink_tx_mean));
  return t;
}

std::string clock_text(const WindowStats& s, const GpuInfo& gpu) {
  std::string t = s.sm_clock_mean ? fmt::format("SM clock {:.0f}", *s.sm_clock_mean) : "SM clock unknown";
  if (s.sm_clock_mean && gpu.sm_clock_max_mhz)
    t += fmt::format(" of {:.0f} MHz", *gpu.sm_clock_max_mhz);
  else if (s.sm_clock_mean)
    t += " MHz";
  if (s.power_mean) t += fmt::format(", {:.0f} W", *s.power_mean);
  if (s.power_mean && s.power_limit) t += fmt::format(" of {:.0f} W", *s.power_limit);
  return t;
}

std::string steps_text(const WindowStats& s) {
  if (s.steps == 0) return "";
  std::string t = fmt::format(", {} steps", s.steps);
  if (s.step_seconds_median) t += fmt::format(" of {:.3f} s", *s.step_seconds_median);
  if (s.data_share) t += fmt::format(", waiting for data {:.0f}% of step time", 100 * *s.data_share);
  return t;
}

std::string host_text(const WindowStats& s) {
  if (!s.host_driving_cores) return "";
  std::string t = fmt::format(", training process: main thread {:.2f} core, with its busiest other thread {:.2f}",
                              *s.host_main_cores, *s.host_driving_cores);
  t += fmt::format(" (all its threads {:.2f})", s.host_process_cores.value_or(0));
  if (s.host_workers > 0)
    t += fmt::format(", {} worker process{} {:.2f} core{}", s.host_workers, s.host_workers == 1 ? "" : "es",
                     s.host_workers_cores.value_or(0), s.host_workers_cores.value_or(0) == 1 ? "" : "s");
  return t;
}

bool near_full(const WindowStats& s) {
  return s.memory_fraction_max.value_or(0) >= kNearFull || s.reserved_fraction_of_limit.value_or(0) >= kNearFull;
}

const char* const kAdviceCapacity =
    "memory is the limit: lower the micro-batch (keep the global batch with gradient accumulation), turn on gradient "
    "checkpointing, train in bf16, quantise frozen weights (QLoRA), or set "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation; keep ~20% headroom (trainfit plan shows "
    "what fits)";
const char* const kAdviceSpill =
    "memory is full and data streams over PCIe: something is offloaded or spilling to host memory (ZeRO/CPU offload, "
    "unified memory). Free GPU memory (checkpointing, smaller batch, quantisation) so everything stays on the card; "
    "offload trades speed for capacity";
const char* const kAdviceInput =
    "the GPU waits for data: raise DataLoader num_workers, use pin_memory=True with non_blocking copies and "
    "prefetching, "
    "move decoding and augmentation off the critical path, use faster storage (local NVMe, pre-tokenised shards); "
    "a bigger GPU will not help";
const char* const kAdviceHost =
    "the GPU waits for the host to launch work, not for data: give each kernel more work (larger micro-batches), "
    "capture steps with CUDA graphs or torch.compile, use fused optimizers and kernels (AdamW fused=True, fused "
    "loss), avoid .item(), printing and other host synchronisations inside the step; more DataLoader workers will "
    "not help";
const char* const kAdviceComm =
    "time goes to moving data between GPUs or to the host: NVLink-connected GPUs, fewer and larger collectives "
    "(gradient bucketing, no_sync under gradient accumulation), overlap communication with compute, a parallel "
    "layout with less traffic";
const char* const kAdviceCompute =
    "the GPU itself is the limit: bf16/fp8 tensor cores, fused kernels (FlashAttention, fused optimizer), "
    "torch.compile; more speed needs more or faster GPUs, not more memory";
const char* const kAdviceThrottled =
    "the GPU runs below its clocks for power or heat: check cooling and airflow, the temperature, and the power limit "
    "(nvidia-smi -q -d POWER,PERFORMANCE); restore a lowered limit (nvidia-smi -pl)";
const char* const kAdviceIdle =
    "no kernel is running: the job may be starting, loading, checkpointing, evaluating on the CPU, waiting on another "
    "rank, or not using this GPU";
const char* const kAdviceGrowth =
    "memory rises step over step: something is kept across steps (losses appended without .item()/.detach(), growing "
    "caches, hooks); it ends in out-of-memory";

Diagnosis diagnose_window(std::span<const Sample> window, std::span<const StepEvent> steps, const GpuInfo& gpu,
                          EarlierSteps& earlier, std::span<const HostSample> host) {
  Diagnosis d;
  d.gpu = gpu.index;
  if (!window.empty()) {
    d.begin = window.front().time;
    d.end = window.back().time;
  }
  WindowStats& s = d.stats;
  s = window_stats(window, steps, gpu, earlier, host);
  const bool spill_slowdown = s.step_slowdown.value_or(0) >= kSpillSlowdown;

  const double util = s.util_mean.value_or(0);
  const std::string base = fmt::format("{}, {}, {}", util_text(s), memory_text(s), link_text(s));
  const double pcie = sum(s.pcie_rx_mean, s.pcie_tx_mean).value_or(0);
  const double nvlink = sum(s.nvlink_rx_mean, s.nvlink_tx_mean).value_or(0);
  auto add = [&](Bottleneck k, std::string evidence, const char* advice) {
    d.verdicts.push_back({k, std::move(evidence), advice});
  };

  const bool thrash_now = s.alloc_retries.value_or(0) > 0 || s.ooms.value_or(0) > 0;
  const bool thrash_recent = s.recent_alloc_retries.value_or(0) > 0 || s.recent_ooms.value_or(0) > 0;
  if (thrash_now || (thrash_recent && near_full(s))) {
    // The allocator hit its ceiling, freed its cache and tried again (or gave up): capacity by definition.
    std::string why;
    if (thrash_now) {
      why = fmt::format("allocator retried {} times", s.alloc_retries.value_or(0));
      if (s.ooms.value_or(0) > 0) why += fmt::format(" and ran out of memory {} times", *s.ooms);
      why += fmt::format(" in {:.1f} s", s.seconds);
    } else {
      why = fmt::format("allocator retried {} times", s.recent_alloc_retries.value_or(0));
      if (s.recent_ooms.value_or(0) > 0) why += fmt::format(" and ran out of memory {} times", *s.recent_ooms);
      why += fmt::format(" in the last {:.0f} s", kRetryLookback);
    }
    if (s.reserved_fraction_of_limit)
      why += fmt::format(", reserved {} of its cap", share(s.reserved_fraction_of_limit));
    add(Bottleneck::capacity, why + ", " + base + steps_text(s), kAdviceCapacity);
  } else if (!s.util_mean) {
    add(Bottleneck::unknown, "no utilisation reading from the driver; " + memory_text(s), "");
  } else if (*s.util_max < kIdleUtil) {
    add(Bottleneck::idle, base, kAdviceIdle);
  } else if (near_full(s) && util < kBusyUtil && !(s.data_share.value_or(0) >= kDataShare)) {
    std::string mem = s.reserved_fraction_of_limit
                          ? fmt::format(", allocator reserved {} of its cap", share(s.reserved_fraction_of_limit))
                          : "";
    if (pcie >= kPcieBusy || spill_slowdown)
      add(Bottleneck::host_link_spill,
          base + mem + steps_text(s) +
              (spill_slowdown ? fmt::format(", steps {:.1f}x slower than earlier in the run", *s.step_slowdown) : ""),
          kAdviceSpill);
    else
      add(Bottleneck::capacity, base + mem + steps_text(s), kAdviceCapacity);
  } else if (util >= kIdleUtil &&
             (s.thermal_share >= kReasonShare ||
              (s.power_cap_share >= kReasonShare && s.power_limit && gpu.power_default_limit_watts &&
               *s.power_limit < kLoweredLimit * *gpu.power_default_limit_watts))) {
    std::string why = fmt::format("{}, {}", util_text(s), clock_text(s, gpu));
    if (s.thermal_share >= kReasonShare)
      why += fmt::format(", thermal/hardware slowdown in {:.0f}% of samples", 100 * s.thermal_share);
    if (s.power_cap_share >= kReasonShare)
      why += fmt::format(", power cap in {:.0f}% of samples", 100 * s.power_cap_share);
    if (s.power_limit && gpu.power_default_limit_watts &&
        *s.power_limit < kLoweredLimit * *gpu.power_default_limit_watts)
      why += fmt::format(", limit lowered from {:.0f} W", *gpu.power_default_limit_watts);
    if (s.temperature_max) why += fmt::format(", up to {:.0f} °C", *s.temperature_max);
    add(Bottleneck::throttled, why, kAdviceThrottled);
  } else if ((nvlink >= kNvlinkBusy || (pcie >= kPcieBusy && !near_full(s))) &&
             (util < kLowUtil || s.power_fraction.value_or(1) < kCommPowerFraction)) {
    std::string why = base;
    if (s.power_fraction) why += fmt::format(", power {:.0f}% of limit", 100 * *s.power_fraction);
    add(Bottleneck::communication, why + steps_text(s), kAdviceComm);
  } else if (util < kBusyUtil) {
    // The probe's data waits decide when there are any; else the host readings: a training thread
    // running flat out while the GPU idles is launching work as fast as it can.
    const bool host_bound =
        s.data_share ? *s.data_share < kNoDataWait : s.host_driving_cores.value_or(0) >= kHostBusyCores;
    add(host_bound ? Bottleneck::launch_overhead : Bottleneck::input_pipeline,
        fmt::format("{}, GPU idle {:.0f}% of the time", base, 100 - util) + steps_text(s) + host_text(s),
        host_bound ? kAdviceHost : kAdviceInput);
  } else {
    std::string why = fmt::format("{}, {}", util_text(s), clock_text(s, gpu));
    if (s.sm_clock_fraction && *s.sm_clock_fraction < kFullClock && s.power_cap_share >= kReasonShare)
      why += ", at the power limit (the card's normal envelope)";
    add(Bottleneck::compute, why + ", " + memory_text(s) + steps_text(s), kAdviceCompute);
  }

  // Warnings after the bottleneck.
  const double card = gpu.memory_total_bytes ? static_cast<double>(*gpu.memory_total_bytes) : 0;
  if (s.memory_growth_bytes && *s.memory_growth_bytes >= std::max(kGrowthMinBytes, kGrowthMinCard * card) &&
      util >= kIdleUtil)
    add(Bottleneck::memory_growth,
        fmt::format("used memory rose {} in {:.1f} s, steadily ({:.0f} MiB/s)",
                    format_bytes(static_cast<std::int64_t>(std::min(*s.memory_growth_bytes, 9e18))), s.seconds,
                    *s.memory_growth_bytes / (1024.0 * 1024.0) / std::max(s.seconds, 1e-9)),
        kAdviceGrowth);
  if (d.primary().kind == Bottleneck::compute && near_full(s))
    add(Bottleneck::capacity, memory_text(s) + ": little headroom left (keep ~20%)", kAdviceCapacity);
  return d;
}

}  // namespace

Diagnosis diagnose(std::span<const Sample> window, std::span<const StepEvent> steps, const GpuInfo& gpu,
                   std::span<const HostSample> host) {
  EarlierSteps earlier(steps);
  return diagnose_window(window, steps, gpu, earlier, host);
}

const char* const kAdviceStraggler =
    "one rank is slower and every other rank waits for it in the collectives: give that rank's DataLoader more "
    "workers or a faster shard (its disk, its decoding, its CPU cores: taskset/numactl may pin it to busy cores), "
    "or balance the samples' lengths across ranks";

// The job's GPUs busy at low power: in a job of several GPUs, a GPU whose utilisation reads busy
// while it draws under kCommPowerFraction of its limit is running NCCL's kernels, which spin while
// they wait for the link or for the other ranks (real compute at that utilisation draws well over
// half the limit). The link counters alone miss it when they under-read (NVML's PCIe counters saw
// 3-4 GB/s of an all-reduce through host memory that moves far more).
void waiting_in_collectives(std::span<Diagnosis> same_window) {
  const auto busy = [](const Diagnosis& d) { return d.stats.util_mean.value_or(0) >= kBusyUtil; };
  const auto busy_gpus = std::count_if(same_window.begin(), same_window.end(), busy);
  if (busy_gpus < 2) return;
  for (Diagnosis& d : same_window) {
    const WindowStats& s = d.stats;
    if (!busy(d) || d.primary().kind != Bottleneck::compute || !s.power_fraction ||
        *s.power_fraction >= kCommPowerFraction)
      continue;
    d.verdicts.front() = {Bottleneck::communication,
                          fmt::format("{}, power {:.0f}% of limit while {} of the job's GPUs are busy: NCCL's kernels "
                                      "spin at low power while they wait for the link or the other ranks",
                                      util_text(s), 100 * *s.power_fraction, busy_gpus) +
                              steps_text(s),
                          kAdviceComm};
  }
}

void judge_ranks(std::span<Diagnosis> same_window) {
  waiting_in_collectives(same_window);
  std::vector<const Diagnosis*> probed;
  for (const Diagnosis& d : same_window)
    if (d.stats.data_share) probed.push_back(&d);
  if (probed.size() < 2) return;
  const auto slowest = *std::max_element(probed.begin(), probed.end(), [](const Diagnosis* a, const Diagnosis* b) {
    return *a->stats.data_share < *b->stats.data_share;
  });
  std::vector<double> others;
  for (const Diagnosis* d : probed)
    if (d != slowest) others.push_back(*d->stats.data_share);
  const std::size_t n = others.size();
  const double median = trainfit::detail::median(others).value_or(0);
  const double share = *slowest->stats.data_share;
  if (share < kDataShare || share - median < kStragglerDataGap) return;
  const int gpu = slowest->gpu;
  for (Diagnosis& d : same_window) {
    const std::string evidence =
        d.gpu == gpu ? fmt::format("this GPU's rank waits for its data {:.0f}% of each step against {:.0f}% (median) on "
                                   "the other {} GPU{}, which wait for it in the collectives",
                                   100 * share, 100 * median, n, n == 1 ? "" : "s")
                     : fmt::format("GPU {}'s rank waits for its data {:.0f}% of each step against {:.0f}% (median) "
                                   "on the others: this GPU waits for it in the collectives",
                                   gpu, 100 * share, 100 * median);
    d.verdicts.push_back({Bottleneck::straggler, evidence, kAdviceStraggler});
  }
}

std::vector<StepEvent> steps_of_gpu(std::span<const StepEvent> steps, int gpu) {
  std::vector<StepEvent> out;
  for (const StepEvent& e : steps)
    if (!e.device || *e.device == gpu) out.push_back(e);
  return out;
}

void VerdictTimeline::add(const Diagnosis& d, int windows) {
  // The warnings first: a span goes on while each diagnosis of its GPU carries it.
  auto adds = std::find_if(adds_.begin(), adds_.end(), [&](const auto& p) { return p.first == d.gpu; });
  if (adds == adds_.end()) adds = adds_.insert(adds_.end(), {d.gpu, 0});
  const std::int64_t at = ++adds->second;
  for (std::size_t i = 1; i < d.verdicts.size(); ++i) {
    const Verdict& w = d.verdicts[i];
    const double rate = w.kind == Bottleneck::memory_growth && d.stats.memory_growth_bytes && d.stats.seconds > 0
                            ? *d.stats.memory_growth_bytes / d.stats.seconds
                            : 0.0;
    auto open = std::find_if(open_.begin(), open_.end(),
                             [&](const OpenWarning& o) { return o.gpu == d.gpu && o.kind == w.kind; });
    if (open != open_.end() && open->at == at - 1) {
      WarningSpan& span = warnings_[open->span];
      span.end = d.end;
      span.windows += windows;
      span.growth_rate_sum += rate * windows;
      span.growth_rate_max = std::max(span.growth_rate_max, rate);
      span.verdict = w;
      open->at = at;
      continue;
    }
    if (open == open_.end()) open = open_.insert(open_.end(), {d.gpu, w.kind, 0, 0});
    open->span = warnings_.size();
    open->at = at;
    warnings_.push_back({d.gpu, w.kind, d.begin, d.end, windows, rate * windows, rate, w});
  }

  // A handful of GPUs: a linear look-up is as fast as a map and keeps the class simple.
  const auto it = std::find_if(last_.begin(), last_.end(), [&](const auto& p) { return p.first == d.gpu; });
  if (it != last_.end() && spans_[it->second].verdict.kind == d.primary().kind) {
    VerdictSpan& v = spans_[it->second];
    v.end = d.end;
    v.windows =
        static_cast<int>(std::min<std::int64_t>(std::int64_t{v.windows} + windows, std::numeric_limits<int>::max()));
    v.verdict = d.primary();
    return;
  }
  if (it != last_.end())
    it->second = spans_.size();
  else
    last_.emplace_back(d.gpu, spans_.size());
  spans_.push_back({d.gpu, d.begin, d.end, windows, d.primary()});
}

std::vector<VerdictSpan> verdict_timeline(std::span<const Diagnosis> diagnoses) {
  VerdictTimeline timeline;
  for (const Diagnosis& d : diagnoses) timeline.add(d);
  return timeline.spans();
}

void for_each_recording_window(const Recording& r, double window_seconds, double hop_seconds,
                               const std::function<void(std::span<const Diagnosis>, int windows)>& f) {
  // NaN fails every comparison: the checks are written so that it is refused, not looped on.
  if (r.samples.empty() || !(window_seconds > 0 && std::isfinite(window_seconds)) ||
      !(hop_seconds > 0 && std::isfinite(hop_seconds)))
    return;
  const auto at_or_before = [&](double t) {
    return std::upper_bound(r.samples.begin(), r.samples.end(), t,
                            [](double x, const Sample& s) { return x < s.time; });
  };
  const double first = r.samples.front().time + window_seconds;
  const double last = r.samples.back().time + 1e-9;
  // A hop so small that the hops cannot be counted in an int64 would never end the walk.
  if (!((last - first) / hop_seconds < 1e15)) return;
  const auto hop_time = [&](std::int64_t k) { return first + static_cast<double>(k) * hop_seconds; };
  std::vector<Diagnosis> per_gpu;
  // Each GPU its own steps (a multi-GPU probe tags them with the device), each followed forward.
  std::vector<std::vector<StepEvent>> gpu_steps;
  std::vector<EarlierSteps> earlier;
  const bool tagged = std::any_of(r.steps.begin(), r.steps.end(), [](const StepEvent& e) { return e.device; });
  const auto judged = [&](const GpuInfo& g) {
    return r.job_gpus.empty() || std::find(r.job_gpus.begin(), r.job_gpus.end(), g.index) != r.job_gpus.end();
  };
  gpu_steps.reserve(r.gpus.size());
  earlier.reserve(r.gpus.size());
  for (const GpuInfo& g : r.gpus) {
    if (tagged) gpu_steps.push_back(steps_of_gpu(r.steps, g.index));
    earlier.emplace_back(tagged ? std::span<const StepEvent>(gpu_steps.back()) : std::span<const StepEvent>(r.steps));
  }
  for (std::int64_t k = 0;; ++k) {
    const double t = hop_time(k);
    if (t > last) break;
    const auto b = at_or_before(t - window_seconds), e = at_or_before(t);
    if (e - b < 3) {  // a gap in the recording: too few samples to judge; skip to the next sample
      if (e != r.samples.end())
        k = std::max(k, static_cast<std::int64_t>(std::floor((e->time - first) / hop_seconds)) - 1);
      continue;
    }
    // The hops after k that see the same samples [b, e) make the same diagnosis. b and e only move
    // forward with k, so the last such hop is found by galloping and bisection, with the very
    // arithmetic of the hop-by-hop walk (same windows, same count): a recording with samples minutes
    // apart costs a diagnosis per distinct window, not one per GPU per second of its span.
    const auto sees_same = [&](std::int64_t j) {
      const double tj = hop_time(j);
      return tj <= last && at_or_before(tj - window_seconds) == b && at_or_before(tj) == e;
    };
    std::int64_t same = k, step = 1;
    while (sees_same(same + step)) {
      same += step;
      step *= 2;
    }
    for (std::int64_t miss = same + step; miss - same > 1;) {
      const std::int64_t mid = same + (miss - same) / 2;
      (sees_same(mid) ? same : miss) = mid;
    }
    const std::span<const Sample> window(&*b, static_cast<std::size_t>(e - b));
    per_gpu.clear();
    for (std::size_t i = 0; i < r.gpus.size(); ++i)
      if (judged(r.gpus[i]))
        per_gpu.push_back(diagnose_window(window, tagged ? std::span<const StepEvent>(gpu_steps[i]) : r.steps,
                                          r.gpus[i], earlier[i], r.host));
    if (tagged || !r.job_gpus.empty()) judge_ranks(per_gpu);  // the GPUs of one job
    f(per_gpu, static_cast<int>(std::min<std::int64_t>(same - k + 1, std::numeric_limits<int>::max())));
    k = same;
  }
}

std::vector<Diagnosis> diagnose_recording(const Recording& r, double window_seconds, double hop_seconds) {
  std::vector<Diagnosis> out;
  for_each_recording_window(r, window_seconds, hop_seconds, [&](std::span<const Diagnosis> per_gpu, int windows) {
    for (int i = 0; i < windows; ++i) out.insert(out.end(), per_gpu.begin(), per_gpu.end());
  });
  return out;
}

std::vector<PhaseScore> score_recording(const Recording& r, double window_seconds) {
  std::vector<PhaseScore> scores;
  for (std::size_t i = 0; i < r.phases.size(); ++i) {
    const PhaseMarker& p = r.phases[i];
    if (p.phase != "steady" || p.expect.empty()) continue;
    PhaseScore score;
    score.label = p.label;
    score.expected = parse_bottleneck(p.expect);
    score.begin = p.time;
    score.end = i + 1 < r.phases.size() ? r.phases[i + 1].time : (r.samples.empty() ? p.time : r.samples.back().time);
    scores.push_back(std::move(score));
  }
  if (scores.empty()) return scores;
  for_each_recording_window(r, window_seconds, 1.0, [&](std::span<const Diagnosis> per_gpu, int windows) {
    for (const Diagnosis& d : per_gpu)
      for (PhaseScore& score : scores) {
        if (d.begin < score.begin || d.end > score.end) continue;
        score.windows += windows;
        // The warnings count when carried; the bottlenecks when first.
        const bool right = score.expected == Bottleneck::memory_growth || score.expected == Bottleneck::straggler
                               ? std::any_of(d.verdicts.begin(), d.verdicts.end(),
                                             [&](const Verdict& v) { return v.kind == score.expected; })
                               : d.primary().kind == score.expected;
        if (right)
          score.right += windows;
        else
          score.wrong[std::string(watch_verdict(d.primary().kind))] += windows;
      }
  });
  return scores;
}

}  // namespace trainfit::telemetry
