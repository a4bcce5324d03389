#pragma once
// Synthetic Kineto traces for `trainfit trace`'s tests and benchmarks: steps of a simple timeline
// (the host waits for the loader, launches kernels one after another, optionally synchronises; the
// GPU runs each kernel when it is launched and the previous one is done; a collective may run on a
// stream of its own), written as torch.profiler writes them, with the figures the timeline implies
// computed here by brute force, independently of the analyser. Big traces stream through a sink, so
// a test can make gigabytes without holding them.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace trainfit::testing {

struct SyntheticKernel {
  std::string name;
  std::string cat = "kernel";  // kernel, gpu_memcpy, gpu_memset
  double us = 10;
};

struct SyntheticTrace {
  int steps = 3;
  int rank = 0;
  double loader_us = 0;  // the host waits this long for its batch at the start of each step
  bool loader_workers = false;  // the batches come from DataLoader worker processes (num_workers > 0)
  std::vector<SyntheticKernel> kernels = {{"ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", "kernel", 100}};
  int repeats = 10;               // the kernel list is launched this many times a step
  double launch_gap_us = 10;      // between launch calls
  double launch_us = 4;           // a launch call's own duration
  bool synchronise = true;        // cudaStreamSynchronize at the end of each step
  double tail_us = 20;            // host time after the last launch (or the sync)
  double collective_us = 0;       // an NCCL all-reduce on its own stream, each step
  double collective_start = 0.5;  // where it starts, as a fraction of the step's compute launches
  bool annotate_steps = true;
  // The GPU's copy of each step's annotation (gpu_user_annotation), from the first to the last
  // activity the step launched, as Kineto writes it.
  bool annotate_steps_on_device = false;
  bool distributed = true;  // a distributedInfo with `rank`; without it a process is known by its pid
  int pid = 1234;           // the host process
  double start_us = 1000;   // where the first step begins on the trace's clock (a later cycle starts later)
  int padding_args = 6;     // extra args per event, to the size real events have
};

struct SyntheticStepFigures {
  double wall_s = 0, gpu_busy_s = 0, input_wait_s = 0, communication_s = 0;
  double device_wall_s = 0;  // the span of the step's work on the GPU (0 unless annotated there)
};

struct SyntheticInterval {
  double begin = 0, end = 0;
};

// The length of the union of `spans` inside [a, b), by brute force.
inline double union_inside(std::vector<SyntheticInterval> spans, double a, double b) {
  std::sort(spans.begin(), spans.end(),
            [](const SyntheticInterval& x, const SyntheticInterval& y) { return x.begin < y.begin; });
  double total = 0, cursor = a;
  for (const SyntheticInterval& s : spans) {
    const double lo = std::max(s.begin, cursor), hi = std::min(s.end, b);
    if (hi > lo) {
      total += hi - lo;
      cursor = hi;
    }
  }
  return total;
}

// Writes the trace in pieces to `sink`; returns the figures each step should have.
inline std::vector<SyntheticStepFigures> write_synthetic_trace(const SyntheticTrace& t,
                                                               const std::function<void(std::string_view)>& sink) {
  constexpr double kBase = 1700000000000000.0;  // microseconds, as Kineto's clock gives them
  std::string out;
  out.reserve(1 << 16);
  bool first = true;
  long long correlation = 1;
  const auto padding = [&] {
    std::string p;
    for (int k = 0; k < t.padding_args; ++k) p += fmt::format(", \"extra {}\": \"value {}\"", k, k * 7);
    return p;
  };
  const std::string pad = padding();
  const auto flush = [&](bool force) {
    if (force || out.size() > (1 << 16)) {
      sink(out);
      out.clear();
    }
  };
  const auto event = [&](std::string_view ph, std::string_view cat, std::string_view name, int pid,
                         std::string_view tid, double ts, double dur, const std::string& args) {
    out += first ? "\n  " : ",\n  ";
    first = false;
    out += fmt::format(
        R"({{"ph": "{}", "cat": "{}", "name": "{}", "pid": {}, "tid": {}, "ts": {:.3f}, "dur": {:.3f}, "args": {{{}}}}})",
        ph, cat, name, pid, tid, kBase + ts, dur, args);
    flush(false);
  };
  out +=
      R"({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109208576}],)";
  if (t.distributed)
    out += fmt::format(R"( "distributedInfo": {{"backend": "nccl", "rank": {}, "world_size": 2}},)", t.rank);
  out += R"( "traceEvents": [)";
  out += R"(
  {"name": "process_name", "ph": "M", "ts": 1700000000000000.000, "pid": 0, "tid": 0, "args": {"name": "GPU 0"}})";
  first = false;

  std::vector<SyntheticStepFigures> figures;
  std::vector<SyntheticInterval> gpu, comm, loader;
  double now = t.start_us, gpu_free = 0;
  const int pid = t.pid;
  const std::string tid = std::to_string(t.pid);
  for (int step = 0; step < t.steps; ++step) {
    const double step_begin = now;
    double first_on_device = -1, last_on_device = 0;
    if (t.loader_us > 0) {
      event("X", "user_annotation",
            t.loader_workers ? "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
                             : "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
            pid, tid, now, t.loader_us, "\"External id\": 1" + pad);
      loader.push_back({now, now + t.loader_us});
      now += t.loader_us;
    }
    const int launches = static_cast<int>(t.kernels.size()) * t.repeats;
    const int collective_at = static_cast<int>(t.collective_start * launches);
    for (int k = 0; k < launches; ++k) {
      const SyntheticKernel& kernel = t.kernels[static_cast<std::size_t>(k) % t.kernels.size()];
      const bool copy = kernel.cat != "kernel";
      event("X", "cuda_runtime", copy ? "cudaMemcpyAsync" : "cudaLaunchKernel", pid, tid, now, t.launch_us,
            fmt::format("\"correlation\": {}, \"cbid\": 211{}", correlation, pad));
      const double start = std::max(now + t.launch_us, gpu_free);
      event("X", kernel.cat, kernel.name, 0, "7", start, kernel.us,
            fmt::format("\"queued\": 0, \"device\": 0, \"context\": 1, \"stream\": 7, \"correlation\": {}, "
                        "\"registers per thread\": 128, \"grid\": [132, 1, 1], \"block\": [256, 1, 1]{}",
                        correlation, pad));
      ++correlation;
      gpu.push_back({start, start + kernel.us});
      gpu_free = start + kernel.us;
      if (first_on_device < 0) first_on_device = start;
      last_on_device = gpu_free;
      if (t.collective_us > 0 && k == collective_at) {
        const double c0 = std::max(now + t.launch_us, 0.0);
        event("X", "kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 0,
              "20", c0, t.collective_us,
              fmt::format("\"device\": 0, \"stream\": 20, \"correlation\": {}{}", correlation++, pad));
        gpu.push_back({c0, c0 + t.collective_us});
        comm.push_back({c0, c0 + t.collective_us});
      }
      now += t.launch_gap_us;
    }
    if (t.synchronise) {
      double done = gpu_free;
      for (const SyntheticInterval& c : comm) done = std::max(done, c.end);
      const double sync_end = std::max(now, done) + 2;
      event("X", "cuda_runtime", "cudaStreamSynchronize", pid, tid, now, sync_end - now, "\"cbid\": 131" + pad);
      now = sync_end;
    }
    now += t.tail_us;
    if (t.annotate_steps)
      event("X", "user_annotation", fmt::format("ProfilerStep#{}", step + 1), pid, tid, step_begin, now - step_begin,
            "\"External id\": 2" + pad);
    if (t.annotate_steps && t.annotate_steps_on_device && first_on_device >= 0)
      event("X", "gpu_user_annotation", fmt::format("ProfilerStep#{}", step + 1), 0, "7", first_on_device,
            last_on_device - first_on_device, "\"External id\": 2" + pad);
    SyntheticStepFigures f;
    f.wall_s = (now - step_begin) * 1e-6;
    if (t.annotate_steps && t.annotate_steps_on_device && first_on_device >= 0)
      f.device_wall_s = (last_on_device - first_on_device) * 1e-6;
    figures.push_back(f);
    now += 0.001;  // the next step's annotation starts as this one ends (to the nanosecond)
  }
  // The figures, once every GPU interval is known (a step's kernels may run into the next step).
  double begin = t.start_us;
  for (SyntheticStepFigures& f : figures) {
    const double end = begin + f.wall_s * 1e6;
    f.gpu_busy_s = union_inside(gpu, begin, end) * 1e-6;
    f.communication_s = union_inside(comm, begin, end) * 1e-6;
    f.input_wait_s = union_inside(loader, begin, end) * 1e-6;  // the GPU is idle while the loader runs here
    begin = end + 0.001;
  }
  out += "\n], \"traceName\": \"synthetic\", \"displayTimeUnit\": \"ms\"}\n";
  flush(true);
  return figures;
}

inline std::string synthetic_trace_text(const SyntheticTrace& t, std::vector<SyntheticStepFigures>* figures = nullptr) {
  std::string text;
  auto f = write_synthetic_trace(t, [&](std::string_view piece) { text.append(piece); });
  if (figures) *figures = std::move(f);
  return text;
}

}  // namespace trainfit::testing
