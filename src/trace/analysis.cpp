// From what the reader kept of a trace to the figures of docs/trace.md: per step the GPU's busy
// and idle time, what the host did in the idle time, kernel time by category, the overlap of
// communication with compute, the launch-bound test and the verdict.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "trace/trace_data.hpp"
#include "trainfit/error.hpp"

namespace trainfit::trace {
namespace detail {
namespace {

constexpr double kNs = 1e-9;
__extension__ using Wide = __int128;  // GCC's and Clang's, on 64-bit targets

// Adds [begin, end) to a merged list made of intervals that come in order of their begin.
void extend_union(std::vector<Interval>& u, std::int64_t begin, std::int64_t end) {
  if (!u.empty() && begin <= u.back().end)
    u.back().end = std::max(u.back().end, end);
  else
    u.push_back({begin, end});
}

// Sorted, disjoint intervals covering the same time as `spans`.
std::vector<Interval> merge(std::vector<Interval> spans) {
  const auto by_begin = [](const Interval& a, const Interval& b) { return a.begin < b.begin; };
  // Host intervals come mostly in the order of the file's time: a check is a tenth of a sort.
  if (!std::is_sorted(spans.begin(), spans.end(), by_begin)) std::sort(spans.begin(), spans.end(), by_begin);
  std::vector<Interval> out;
  for (const Interval& s : spans) extend_union(out, s.begin, s.end);
  return out;
}

// Sorts by `less` what is in order already but for a few places (a trace's activities and launches:
// Kineto writes each stream's and each thread's events in order, and a trace interleaves a few), by
// merging its runs: fewer comparisons than a sort of the whole. False, with nothing changed, when it
// has more than 64 runs (then a sort is as cheap). Equal elements keep their order (std::sort's
// may differ).
template <class T, class Less>
bool merge_runs(std::vector<T>& v, Less less) {
  constexpr std::size_t kMaxRuns = 64;
  std::vector<std::size_t> bounds{0};  // where each run begins, then the end
  for (std::size_t i = 1; i < v.size(); ++i) {
    if (less(v[i], v[i - 1])) {
      if (bounds.size() == kMaxRuns) return false;
      bounds.push_back(i);
    }
  }
  bounds.push_back(v.size());
  const auto at = [&](std::size_t k) { return v.begin() + static_cast<std::ptrdiff_t>(bounds[k]); };
  while (bounds.size() > 2) {  // neighbours merged pairwise, until one run
    std::vector<std::size_t> next;
    std::size_t k = 0;
    for (; k + 2 < bounds.size(); k += 2) {
      std::inplace_merge(at(k), at(k + 1), at(k + 2), less);
      next.push_back(bounds[k]);
    }
    next.insert(next.end(), bounds.begin() + static_cast<std::ptrdiff_t>(k), bounds.end());
    bounds.swap(next);
  }
  return true;
}

// The first interval of a merged list that ends after `t`.
std::vector<Interval>::const_iterator first_ending_after(const std::vector<Interval>& u, std::int64_t t) {
  return std::upper_bound(u.begin(), u.end(), t, [](std::int64_t x, const Interval& i) { return x < i.end; });
}

// How much of [a, b) a merged list covers.
std::int64_t covered(const std::vector<Interval>& u, std::int64_t a, std::int64_t b) {
  std::int64_t total = 0;
  for (auto it = first_ending_after(u, a); it != u.end() && it->begin < b; ++it)
    total += std::min(it->end, b) - std::max(it->begin, a);
  return total;
}

// How much of [a, b) two merged lists both cover.
std::int64_t covered_by_both(const std::vector<Interval>& u, const std::vector<Interval>& v, std::int64_t a,
                             std::int64_t b) {
  std::int64_t total = 0;
  auto i = first_ending_after(u, a), j = first_ending_after(v, a);
  while (i != u.end() && j != v.end() && i->begin < b && j->begin < b) {
    const std::int64_t lo = std::max({i->begin, j->begin, a}), hi = std::min({i->end, j->end, b});
    if (hi > lo) total += hi - lo;
    if (i->end < j->end)
      ++i;
    else
      ++j;
  }
  return total;
}

bool inside(const std::vector<Interval>& u, std::int64_t t) {
  const auto it = first_ending_after(u, t);
  return it != u.end() && it->begin <= t;
}

std::string percent(double part, double whole) {
  return whole > 0 ? fmt::format("{:.0f}%", 100.0 * part / whole) : "0%";
}

}  // namespace

double median_of(std::vector<double>& values) {
  if (values.empty()) return 0;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2), values.end());
  return values[values.size() / 2];
}

// The verdict of a step (or of the run, on the sums), and the numbers behind it. The order is
// that of the questions a profile answers: was the GPU starved (by the loader, by the host), did
// it wait on the host link or on collectives, and else what kind of kernels filled it.
void judge_step(StepTrace& s, bool loader_in_workers) {
  const double w = s.wall_s > 0 ? s.wall_s : 1;
  const CategorySeconds& c = s.categories;
  const auto at = [&](KernelCategory k) { return c[static_cast<std::size_t>(k)]; };
  const double matrix = at(KernelCategory::matmul) + at(KernelCategory::attention);
  const double bandwidth =
      at(KernelCategory::elementwise) + at(KernelCategory::optimizer) + at(KernelCategory::copy_d2d);
  const double host_link = at(KernelCategory::copy_h2d) + at(KernelCategory::copy_d2h);
  const double exposed_comm = s.communication_s - s.communication_overlapped_s;
  const double host_idle = s.host_wait_s + s.sync_wait_s;
  const bool launch_bound = s.kernels >= 2 && s.launch_gap_median_s > 0 && s.kernel_median_s < s.launch_gap_median_s;
  std::string why = fmt::format("GPU busy {} of {:.4g} s", percent(s.gpu_busy_s, w), s.wall_s);
  // A loader that fetches in the training process adds its fetch to the step, beside the host's
  // own idle time: the larger of the two is the bottleneck. One whose workers make the batches runs
  // beside the step, and the wait is what they fall short of it by: the loader sets the pace
  // whatever the host's share, and a faster host only waits longer.
  if (s.input_wait_s >= 0.2 * w && (loader_in_workers || s.input_wait_s >= host_idle)) {
    s.verdict = Bottleneck::input_pipeline;
    why += fmt::format("; {} idle waiting for the data loader", percent(s.input_wait_s, w));
    if (loader_in_workers)
      why += fmt::format(
          " (batches from worker processes: the step's own work took {:.4g} s of the {:.4g} s, and the loader set the "
          "pace)",
          s.wall_s - s.input_wait_s, s.wall_s);
  } else if (host_idle >= 0.3 * w || (launch_bound && s.gpu_busy_s < 0.8 * w)) {
    s.verdict = Bottleneck::launch_overhead;
    why += fmt::format(
        "; {} idle while the host launched ({} in synchronisations); median kernel {:.1f} us, median "
        "gap between launches {:.1f} us",
        percent(host_idle, w), percent(s.sync_wait_s, w), s.kernel_median_s * 1e6, s.launch_gap_median_s * 1e6);
  } else if (host_link >= 0.3 * w) {
    s.verdict = Bottleneck::offload;
    why += fmt::format("; host-device copies {} of the step", percent(host_link, w));
  } else if (exposed_comm >= 0.2 * w || (exposed_comm > 0 && exposed_comm > std::max(matrix, bandwidth))) {
    s.verdict = Bottleneck::communication;
    why += fmt::format("; collectives {} of the step, {} of them not overlapped with compute",
                       percent(s.communication_s, w), percent(exposed_comm, s.communication_s));
  } else if (bandwidth > matrix) {
    s.verdict = Bottleneck::memory_bandwidth;
    why += fmt::format("; elementwise, optimizer and copy kernels {} against matmul and attention {}",
                       percent(bandwidth, w), percent(matrix, w));
  } else {
    s.verdict = Bottleneck::compute;
    why += fmt::format("; matmul and attention kernels {} against elementwise and optimizer {}", percent(matrix, w),
                       percent(bandwidth, w));
  }
  s.evidence = std::move(why);
}

// The step [a, b) in kTimelineBins slices (StepTrace::timeline): the GPU activities from `first`
// on (sorted by start) spread their clipped time over the slices by category; a slice the GPU
// filled at least half of takes its largest category, any other the cause of its idle time, by the
// rules of the step's figures (the loader's fetch, a synchronisation running, else the host).
std::string step_timeline(std::int64_t a, std::int64_t b, std::vector<GpuSpan>::const_iterator first,
                          std::vector<GpuSpan>::const_iterator last, const std::vector<Interval>& busy,
                          const std::vector<Interval>& loader, const std::vector<Interval>& sync) {
  static constexpr std::array<char, kKernelCategories> kLetter{'M', 'A', 'E', 'O', 'C', 'H', 'H', 'D'};
  if (b <= a) return {};
  const auto bins = static_cast<std::int64_t>(kTimelineBins);
  // In 128 bits: a window of a made-up trace's centuries times the bins passes 64 bits (the fuzzer's
  // find); the slices of any real one are the same either way.
  const Wide span = static_cast<Wide>(b) - a;
  const bool narrow = span <= INT64_MAX / bins;  // then in 64 bits, as fast as before
  const auto slice_begin = [&](std::int64_t k) {
    return narrow ? a + (b - a) * k / bins : static_cast<std::int64_t>(a + span * k / bins);
  };
  std::vector<CategorySeconds> by_category(kTimelineBins, CategorySeconds{});
  for (auto it = first; it != last && it->begin < b; ++it) {
    const std::int64_t lo = std::max(it->begin, a), hi = std::min(it->end, b);
    if (hi <= lo) continue;
    // The slices it touches: from the one holding lo to the one holding hi - 1.
    const auto from =
        narrow ? (lo - a) * bins / (b - a) : static_cast<std::int64_t>((static_cast<Wide>(lo) - a) * bins / span);
    for (std::int64_t k = from; k < bins && slice_begin(k) < hi; ++k) {
      const std::int64_t overlap = std::min(hi, slice_begin(k + 1)) - std::max(lo, slice_begin(k));
      if (overlap > 0)
        by_category[static_cast<std::size_t>(k)][static_cast<std::size_t>(it->category)] +=
            static_cast<double>(overlap);
    }
  }
  std::string out(kTimelineBins, 'h');
  for (std::int64_t k = 0; k < bins; ++k) {
    const std::int64_t lo = slice_begin(k), hi = slice_begin(k + 1);
    const std::int64_t busy_ns = covered(busy, lo, hi);
    char& c = out[static_cast<std::size_t>(k)];
    if (hi > lo && 2 * busy_ns >= hi - lo) {
      const CategorySeconds& cat = by_category[static_cast<std::size_t>(k)];
      c = kLetter[static_cast<std::size_t>(std::max_element(cat.begin(), cat.end()) - cat.begin())];
    } else if (2 * covered(loader, lo, hi) >= hi - lo - busy_ns) {
      c = 'i';
    } else if (inside(sync, lo)) {
      c = 's';
    }
  }
  return out;
}

namespace {

// Each host step's span on the device: its gpu_user_annotation of the same name on `device`.
// Removes the device's copies from `steps`, which keeps the host's.
std::unordered_map<std::string, Interval> take_device_steps(std::vector<NamedInterval>& steps, int device) {
  std::unordered_map<std::string, Interval> spans;
  for (const NamedInterval& s : steps)
    if (s.on_device && s.pid == device) spans.try_emplace(s.name, s.span);
  std::erase_if(steps, [](const NamedInterval& s) { return s.on_device; });
  return spans;
}

// The host ran ahead of the GPU when the GPU's spans of the steps' work are far longer than the
// host's windows: the host only queued the work (CUDA graphs, no synchronisation in the loop) and
// the GPU set the pace. Half as long again, and half a millisecond more, is past any shift of the
// spans against the windows that a step with a synchronisation has. The spans leave out what
// autograd's thread launched, so they can only understate the GPU's part: no false alarm from it.
constexpr double kRanAheadRatio = 1.5, kRanAheadSeconds = 0.5e-3;

void note_host_ran_ahead(RankTrace& r) {
  std::vector<double> device, host;
  for (const StepTrace& s : r.steps) {
    if (s.device_wall_s <= 0) return;  // every step needs its span on the device
    device.push_back(s.device_wall_s);
    host.push_back(s.wall_s);
  }
  if (device.empty()) return;
  const double d = median_of(device), h = median_of(host);
  if (d < kRanAheadRatio * h || d - h < kRanAheadSeconds) return;
  r.host_ran_ahead = true;
  r.warnings.push_back(fmt::format(
      "the host ran ahead of the GPU: the work a step launched spans {:.4g} s on the GPU (median) against {:.4g} s of "
      "the host's window, {:.1f}x: the host only queued it (a CUDA graph, or no synchronisation in the loop), so the "
      "GPU sets the pace and a step takes at least {:.4g} s, not the window's wall time; the figures of each window "
      "are of whatever work the GPU ran in it (device_wall_s gives each step's span on the GPU)",
      d, h, d / h, d));
}

// The process that wrote a reading: distributedInfo's rank, else the pid of its host steps.
std::optional<std::pair<bool, std::int64_t>> process_of(const TraceData& d) {
  if (d.rank >= 0) return std::pair{true, std::int64_t{d.rank}};
  for (const NamedInterval& s : d.steps)
    if (!s.on_device && s.pid >= 0) return std::pair{false, s.pid};
  return std::nullopt;
}

// The run is judged on its sums: where its steps are not all of one verdict (a few stalled steps
// among steady ones), the evidence says how many steps, and how much of the time, each verdict
// holds, so that the sums' verdict is read for what it is.
void note_step_verdicts(StepTrace& total, const std::vector<StepTrace>& steps) {
  std::map<std::string, std::pair<std::size_t, double>> by_verdict;
  for (const StepTrace& s : steps) {
    auto& [count, seconds] = by_verdict[verdict_name(s.verdict)];
    ++count;
    seconds += s.wall_s;
  }
  if (by_verdict.size() < 2) return;
  std::vector<std::pair<std::string, std::pair<std::size_t, double>>> order(by_verdict.begin(), by_verdict.end());
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  std::string parts;
  for (const auto& [name, figures] : order)
    parts += fmt::format("{}{} {} of {} ({:.0f}% of the time)", parts.empty() ? "" : ", ", name, figures.first,
                         steps.size(), total.wall_s > 0 ? 100 * figures.second / total.wall_s : 0.0);
  total.evidence += "; the steps: " + parts;
}

}  // namespace

bool same_process(const TraceData& earlier, const TraceData& later) {
  const auto a = process_of(earlier), b = process_of(later);
  // Two processes of one pid on two machines are told apart by time: one process's cycles do not
  // overlap on its clock.
  return a && b && *a == *b && earlier.last_ns <= later.first_ns;
}

void append_cycle(TraceData& into, TraceData&& from, const std::string& name) {
  const auto append = [](auto& to, auto& more) { to.insert(to.end(), more.begin(), more.end()); };
  append(into.gpu, from.gpu);
  append(into.steps, from.steps);
  append(into.data_loader, from.data_loader);
  append(into.synchronise, from.synchronise);
  append(into.launches, from.launches);
  for (auto& [kernel, total] : from.kernels) {
    auto [it, fresh] = into.kernels.try_emplace(kernel, total);
    if (!fresh) {
      it->second.count += total.count;
      it->second.total_ns += total.total_ns;
    }
  }
  add_totals(into, from);
  into.counts.bytes += from.counts.bytes;
  into.device_names.merge(from.device_names);
  if (into.unsupported_example.empty()) into.unsupported_example = std::move(from.unsupported_example);
  into.truncated = into.truncated || from.truncated;
  for (std::string& w : from.warnings) into.warnings.push_back(fmt::format("{}: {}", name, w));
}

RankTrace analyse(TraceData data, const std::string& source, const TraceOptions& options) {
  RankTrace r;
  r.source = source;
  r.sources = {source};
  r.rank = data.rank;
  r.truncated = data.truncated;
  r.counts = data.counts;
  r.warnings = std::move(data.warnings);
  if (data.counts.unsupported > 0)
    r.warnings.push_back(fmt::format("{} events of an unsupported phase (e.g. \"{}\") skipped", data.counts.unsupported,
                                     data.unsupported_example));
  if (data.counts.malformed > 0)
    r.warnings.push_back(fmt::format("{} malformed events skipped", data.counts.malformed));
  if (data.first_ns > data.last_ns) {
    r.warnings.push_back("no complete (\"X\") events: nothing to measure");
    r.step_annotations = !data.steps.empty();
    return r;
  }
  const std::int64_t origin = data.first_ns;

  // The busiest device is the one measured; a file of one rank has one.
  std::map<int, std::int64_t> busy_by_device;
  for (const GpuSpan& g : data.gpu) busy_by_device[g.device] += g.end - g.begin;
  for (const auto& [device, ns] : busy_by_device) r.activity_s += static_cast<double>(ns) * kNs;
  if (!busy_by_device.empty()) {
    r.device = std::max_element(busy_by_device.begin(), busy_by_device.end(), [](const auto& a, const auto& b) {
                 return a.second < b.second;
               })->first;
    if (busy_by_device.size() > 1)
      r.warnings.push_back(fmt::format("activity on {} devices; the figures are of device {}, the busiest",
                                       busy_by_device.size(), r.device));
    if (const auto it = data.device_names.find(r.device); it != data.device_names.end()) r.device_name = it->second;
  } else {
    // Kineto writes the GPU's activities after the host's events: a file cut short may end first.
    r.warnings.push_back(data.truncated ? "no GPU activity (kernels, memcpys, memsets) in what was read: the file is "
                                          "cut short, and Kineto writes the GPU's activities after the host's events"
                                        : "no GPU activity (kernels, memcpys, memsets) in the trace");
  }
  std::erase_if(data.gpu, [&](const GpuSpan& g) { return g.device != r.device; });
  // Kineto writes each stream's activities in order, and a trace of one stream needs no sort; one
  // of a few streams, a merge of its runs. The figures add the activities' times in this order, so
  // where two begin together the order std::sort leaves them in is kept: then it sorts.
  const auto by_begin = [](const GpuSpan& a, const GpuSpan& b) { return a.begin < b.begin; };
  if (!std::is_sorted(data.gpu.begin(), data.gpu.end(), by_begin)) {
    std::vector<GpuSpan> merged = data.gpu;
    const auto same_begin = [](const GpuSpan& a, const GpuSpan& b) { return a.begin == b.begin; };
    if (merge_runs(merged, by_begin) && std::adjacent_find(merged.begin(), merged.end(), same_begin) == merged.end())
      data.gpu = std::move(merged);
    else
      std::sort(data.gpu.begin(), data.gpu.end(), by_begin);
  }
  // The unions are built as the sorted activities go by (no copy of them to merge: that was a
  // tenth of the run and twice the activities' memory).
  std::int64_t longest = 0;
  std::vector<Interval> busy, comm_union, compute_union;
  // At most one interval an activity: reserved once (pages never written are never resident), so
  // that no doubling copies them and faults their pages in twice.
  // The compute union serves only the overlap with communication: none without collectives.
  const bool collectives = std::any_of(data.gpu.begin(), data.gpu.end(),
                                       [](const GpuSpan& g) { return g.category == KernelCategory::communication; });
  busy.reserve(data.gpu.size());
  if (collectives) compute_union.reserve(data.gpu.size());
  for (const GpuSpan& g : data.gpu) {
    longest = std::max(longest, g.end - g.begin);
    extend_union(busy, g.begin, g.end);
    if (g.category == KernelCategory::communication)
      extend_union(comm_union, g.begin, g.end);
    else if (collectives && g.category <= KernelCategory::optimizer)
      extend_union(compute_union, g.begin, g.end);
  }
  const std::vector<Interval> loader = merge(data.data_loader), sync = merge(data.synchronise);
  if (!merge_runs(data.launches, std::less<>())) std::sort(data.launches.begin(), data.launches.end());

  const std::unordered_map<std::string, Interval> device_steps = take_device_steps(data.steps, r.device);
  std::sort(data.steps.begin(), data.steps.end(),
            [](const NamedInterval& a, const NamedInterval& b) { return a.span.begin < b.span.begin; });
  if (data.steps.empty()) {
    r.step_annotations = false;
    r.warnings.push_back("no ProfilerStep#N annotations: the whole trace is one window");
    data.steps.push_back({"whole trace", {data.first_ns, data.last_ns}});
  }

  std::vector<double> all_kernels, all_gaps;
  all_kernels.reserve(data.gpu.size());
  all_gaps.reserve(data.launches.size());
  for (const NamedInterval& step : data.steps) {
    StepTrace s;
    s.name = step.name;
    const std::int64_t a = step.span.begin, b = step.span.end;
    s.begin_s = static_cast<double>(a - origin) * kNs;
    s.wall_s = static_cast<double>(b - a) * kNs;
    if (const auto on_device = device_steps.find(step.name); on_device != device_steps.end())
      s.device_wall_s = static_cast<double>(on_device->second.end - on_device->second.begin) * kNs;
    const std::int64_t busy_ns = covered(busy, a, b);
    s.gpu_busy_s = static_cast<double>(busy_ns) * kNs;
    s.idle_s = s.wall_s - s.gpu_busy_s;
    // The idle gaps, each attributed to what the host was doing: the loader's fetch where it
    // overlaps the gap; then a synchronising call where one overlaps it (the host waited in CUDA:
    // for the queue to drain, or in a copy from pageable memory, which CUDA makes synchronous);
    // the rest to a synchronisation when one was running as the gap began (the queue drained while
    // the host waited, and the host had to launch again), else to the host.
    std::int64_t cursor = a;
    const auto attribute = [&](std::int64_t gap_begin, std::int64_t gap_end) {
      if (gap_end <= gap_begin) return;
      const std::int64_t input = covered(loader, gap_begin, gap_end);
      const std::int64_t waiting =
          covered(sync, gap_begin, gap_end) - covered_by_both(sync, loader, gap_begin, gap_end);
      const std::int64_t rest = gap_end - gap_begin - input - waiting;
      s.input_wait_s += static_cast<double>(input) * kNs;
      s.sync_wait_s += static_cast<double>(waiting) * kNs;
      (inside(sync, gap_begin) ? s.sync_wait_s : s.host_wait_s) += static_cast<double>(rest) * kNs;
    };
    for (auto it = first_ending_after(busy, a); it != busy.end() && it->begin < b; ++it) {
      attribute(cursor, std::max(cursor, it->begin));
      cursor = std::max(cursor, it->end);
    }
    attribute(cursor, b);

    std::vector<double> kernel_durations;
    const auto first = std::lower_bound(data.gpu.begin(), data.gpu.end(), a - longest,
                                        [](const GpuSpan& g, std::int64_t t) { return g.begin < t; });
    for (auto it = first; it != data.gpu.end() && it->begin < b; ++it) {
      const std::int64_t lo = std::max(it->begin, a), hi = std::min(it->end, b);
      if (hi <= lo) continue;
      s.categories[static_cast<std::size_t>(it->category)] += static_cast<double>(hi - lo) * kNs;
      if (it->kernel && it->begin >= a) {
        ++s.kernels;
        kernel_durations.push_back(static_cast<double>(it->end - it->begin) * kNs);
      }
    }
    s.timeline = step_timeline(a, b, first, data.gpu.end(), busy, loader, sync);
    s.communication_s = static_cast<double>(covered(comm_union, a, b)) * kNs;
    s.communication_overlapped_s = static_cast<double>(covered_by_both(comm_union, compute_union, a, b)) * kNs;
    std::vector<double> gaps;
    const auto launch_begin = std::lower_bound(data.launches.begin(), data.launches.end(), a);
    for (auto it = launch_begin; it != data.launches.end() && it + 1 != data.launches.end() && *(it + 1) < b; ++it)
      gaps.push_back(static_cast<double>(*(it + 1) - *it) * kNs);
    all_kernels.insert(all_kernels.end(), kernel_durations.begin(), kernel_durations.end());
    all_gaps.insert(all_gaps.end(), gaps.begin(), gaps.end());
    s.kernel_median_s = median_of(kernel_durations);
    s.launch_gap_median_s = median_of(gaps);
    judge_step(s, data.loader_in_workers);
    r.steps.push_back(std::move(s));
  }

  // The run: sums over the steps, medians over all their kernels and launches.
  StepTrace& t = r.total;
  t.name = "all steps";
  t.begin_s = r.steps.front().begin_s;
  for (const StepTrace& s : r.steps) {
    t.wall_s += s.wall_s;
    t.gpu_busy_s += s.gpu_busy_s;
    t.idle_s += s.idle_s;
    t.input_wait_s += s.input_wait_s;
    t.sync_wait_s += s.sync_wait_s;
    t.host_wait_s += s.host_wait_s;
    for (std::size_t k = 0; k < kKernelCategories; ++k) t.categories[k] += s.categories[k];
    t.communication_s += s.communication_s;
    t.communication_overlapped_s += s.communication_overlapped_s;
    t.kernels += s.kernels;
    t.device_wall_s += s.device_wall_s;
  }
  t.kernel_median_s = median_of(all_kernels);
  t.launch_gap_median_s = median_of(all_gaps);
  judge_step(t, data.loader_in_workers);
  note_step_verdicts(t, r.steps);
  if (busy_by_device.empty()) {  // the host's side alone: no GPU figure to judge by
    t.verdict.reset();
    for (StepTrace& s : r.steps) s.verdict.reset();
    t.evidence =
        fmt::format("{}, only the host's {:.4g} s over {} step{}",
                    r.truncated ? "what was read of the file holds no GPU activity (it is cut short before them)"
                                : "the trace holds no GPU activity (recorded without ProfilerActivity.CUDA?)",
                    t.wall_s, r.steps.size(), r.steps.size() == 1 ? "" : "s");
    for (StepTrace& s : r.steps)
      s.evidence = r.truncated ? "no GPU activity in what was read" : "no GPU activity in the trace";
  }
  note_host_ran_ahead(r);
  r.overlap_fraction = t.communication_s > 0 ? t.communication_overlapped_s / t.communication_s : 0;

  std::vector<KernelStat> kernels;
  kernels.reserve(data.kernels.size());
  for (auto& [name, k] : data.kernels)
    kernels.push_back({name, k.category, k.count, static_cast<double>(k.total_ns) * kNs});
  const std::size_t top = std::min(options.top_kernels, kernels.size());
  std::partial_sort(kernels.begin(), kernels.begin() + static_cast<std::ptrdiff_t>(top), kernels.end(),
                    [](const KernelStat& x, const KernelStat& y) {
                      return x.total_s != y.total_s ? x.total_s > y.total_s : x.name < y.name;
                    });
  kernels.resize(top);
  r.kernels_top = std::move(kernels);
  return r;
}

}  // namespace detail

std::string verdict_name(const std::optional<Bottleneck>& verdict) {
  return verdict ? to_string(*verdict) : "none";
}

RankTrace analyse_trace_text(std::string_view json, const std::string& source, const TraceOptions& options) {
  return detail::analyse(detail::read_trace_text(json, source), source, options);
}

namespace {

bool looks_like_trace_file(const std::filesystem::path& p) {
  const std::string name = p.filename().string();
  return name.ends_with(".json") || name.ends_with(".json.gz");
}

// The straggler of a multi-rank run: the rank with the most GPU work outside collectives a step.
// In data parallelism the others wait for it inside the collective, so its communication time is
// the shortest and its compute the longest. Ranks of the same work differ by a few percent under
// the profiler (its host cost, clocks): a rank is named only when its work exceeds the median of
// the others by kStragglerExcess.
constexpr double kStragglerExcess = 0.10;

// Why the files of a folder are not the ranks of one job, or empty when they may be: ranks of one
// job run on GPUs of one model, each under its own rank. A folder of two runs (a before and an
// after, on two machines) has no straggler to name: its "ranks" did different work by design.
std::string not_one_job(const TraceReport& report) {
  std::string first_gpu;
  std::set<int> ranks;
  for (const RankTrace& r : report.ranks) {
    if (!r.device_name.empty()) {
      if (first_gpu.empty()) first_gpu = r.device_name;
      if (r.device_name != first_gpu)
        return fmt::format("the files are not one job's ranks: their GPUs differ ({}, {})", first_gpu, r.device_name);
    }
    if (r.rank >= 0 && !ranks.insert(r.rank).second)
      return fmt::format("the files are not one job's ranks: two of them are rank {}", r.rank);
  }
  return {};
}

void name_straggler(TraceReport& report) {
  if (report.ranks.size() < 2) return;
  if (std::string why = not_one_job(report); !why.empty()) {
    report.straggler_evidence = "none: " + why;
    return;
  }
  std::vector<double> work;
  for (const RankTrace& r : report.ranks) {
    const double steps = static_cast<double>(std::max<std::size_t>(1, r.steps.size()));
    work.push_back((r.total.gpu_busy_s - r.total.communication_s) / steps);
  }
  const auto slowest = std::max_element(work.begin(), work.end());
  const auto index = static_cast<std::size_t>(slowest - work.begin());
  std::vector<double> others;
  for (std::size_t k = 0; k < work.size(); ++k)
    if (k != index) others.push_back(work[k]);
  const double median = detail::median_of(others);
  const double excess = median > 0 ? (*slowest - median) / median : 0.0;
  const RankTrace& r = report.ranks[index];
  const std::string figures = fmt::format(
      "rank {} ({}): {:.4g} s of GPU work outside collectives a step against a median of {:.4g} s for the other {} "
      "rank{} ({:+.1f}%)",
      r.rank >= 0 ? r.rank : static_cast<int>(index), std::filesystem::path(r.source).filename().string(), *slowest,
      median, others.size(), others.size() == 1 ? "" : "s", 100.0 * excess);
  if (excess >= kStragglerExcess) {
    report.straggler = static_cast<int>(index);
    report.straggler_evidence = figures;
  } else {
    report.straggler_evidence =
        fmt::format("none: the ranks' work is within {:.0f}% ({})", 100 * kStragglerExcess, figures);
  }
}

}  // namespace

TraceReport analyse_trace(const std::string& path, const TraceOptions& options) {
  namespace fs = std::filesystem;
  TraceReport report;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(path, ec))
      if (entry.is_regular_file() && looks_like_trace_file(entry.path())) files.push_back(entry.path());
    if (ec) throw SystemError(fmt::format("cannot list '{}': {}", path, ec.message()));
    if (files.empty()) throw InputError(fmt::format("no trace files (*.json, *.json.gz) in '{}'", path));
    std::sort(files.begin(), files.end());
    // A folder may hold other JSON beside the traces (a run's config, a reading of it): a file
    // that is not a trace is skipped and named, unless no file is one. Files of one process that
    // follow each other in name order (tensorboard_trace_handler's <worker>.<time>.pt.trace.json,
    // a file a profiling cycle) are one rank's: read into one before the analysis, which holds one
    // process's readings at a time.
    std::optional<detail::TraceData> pending;
    std::vector<std::string> pending_files;
    const auto analyse_pending = [&] {
      if (!pending) return;
      RankTrace r = detail::analyse(std::move(*pending), pending_files.front(), options);
      r.sources = std::move(pending_files);
      report.ranks.push_back(std::move(r));
      pending.reset();
      pending_files.clear();
    };
    for (const fs::path& f : files) {
      try {
        detail::TraceData data = detail::read_trace_file(f.string());
        if (pending && detail::same_process(*pending, data)) {
          detail::append_cycle(*pending, std::move(data), f.filename().string());
        } else {
          analyse_pending();
          pending = std::move(data);
        }
        pending_files.push_back(f.string());
      } catch (const InputError& e) {
        report.skipped.push_back(e.what());
      }
    }
    analyse_pending();
    if (report.ranks.empty())
      throw InputError(fmt::format("no trace among the files of '{}': {}", path, report.skipped.front()));
    std::stable_sort(report.ranks.begin(), report.ranks.end(),
                     [](const RankTrace& a, const RankTrace& b) { return a.rank < b.rank; });
    name_straggler(report);
    return report;
  }
  report.ranks.push_back(detail::analyse(detail::read_trace_file(path), path, options));
  return report;
}

}  // namespace trainfit::trace
