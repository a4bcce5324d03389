// The trace reader's speed (docs/trace.md, "Speed"): bytes of Kineto JSON a second on one core,
// through the splitter alone and through the whole analysis, on a synthetic trace held in memory.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "support/synthetic_trace.hpp"
#include "trace/json_stream.hpp"
#include "trace/trace_data.hpp"
#include "trainfit/trace.hpp"

namespace {

const std::string& trace_text() {
  static const std::string text = [] {
    trainfit::testing::SyntheticTrace t;
    t.kernels = {
        {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "kernel", 40},
        {"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>", "kernel", 6}};
    t.repeats = 4000;
    t.steps = 8;
    return trainfit::testing::synthetic_trace_text(t);
  }();
  return text;
}

// What the CPU has, before BM_TraceSplit tries each width (trace uses this one).
const trainfit::trace::detail::BlockScan widest_scan = trainfit::trace::detail::block_scan();

// The splitter alone (the traceEvents array cut into events), at each width of its block scan that
// this CPU has: 0 byte by byte, 1 eight bytes a word (SWAR, what CPUs other than x86-64 use), 2 SSE2,
// 3 AVX2, 4 AVX-512.
void BM_TraceSplit(benchmark::State& state) {
  using trainfit::trace::detail::BlockScan;
  const std::string& text = trace_text();
  if (!trainfit::trace::detail::use_block_scan(static_cast<BlockScan>(state.range(0)))) {
    state.SkipWithError("this CPU lacks that width");
    return;
  }
  for (auto _ : state) {
    std::size_t events = 0;
    trainfit::trace::detail::TraceSplitter splitter(
        [&](std::string_view, const trainfit::trace::detail::EventShape&) { ++events; },
        [](std::string_view, std::string_view) {});
    for (std::size_t at = 0; at < text.size(); at += 1 << 20) splitter.feed(std::string_view(text).substr(at, 1 << 20));
    benchmark::DoNotOptimize(events);
  }
  trainfit::trace::detail::use_block_scan(widest_scan);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(text.size()));
}
BENCHMARK(BM_TraceSplit)->DenseRange(0, 4)->Unit(benchmark::kMillisecond);

void BM_TraceAnalyse(benchmark::State& state) {
  const std::string& text = trace_text();
  for (auto _ : state) {
    auto r = trainfit::trace::analyse_trace_text(text, "bench");
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(text.size()));
}
BENCHMARK(BM_TraceAnalyse)->Unit(benchmark::kMillisecond);

// `trainfit trace FILE`'s work without the process around it (reading the file, from the page
// cache, and the analysis), on the files TRAINFIT_TRACE_FILES names (separated by ':'): real
// traces, whose events are smaller and more varied than the synthetic one's. A large .json.gz is
// inflated on a second thread (ChunkReader's read-ahead): the time is the wall time, and the CPU
// time that of the whole process, both threads.
void BM_TraceFile(benchmark::State& state, const std::string& path) {
  std::uint64_t bytes = 0;
  for (auto _ : state) {
    auto r = trainfit::trace::analyse_trace(path);
    bytes = r.ranks.at(0).counts.bytes;
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

// The same on a given number of threads (ReadOptions): 1 is the one thread's reading, 2 and more
// the reading in segments of 4 chunks (docs/trace.md, "How a trace is read"); for a .json.gz,
// through the threads' ring, inflated by the threads as they need chunks (0) or by a thread of its
// own ahead of them (1: what a machine of three CPUs or more does).
void BM_TraceThreads(benchmark::State& state, const std::string& path) {
  std::uint64_t bytes = 0;
  for (auto _ : state) {
    trainfit::trace::detail::ReadOptions options;
    options.threads = static_cast<std::size_t>(state.range(0));
    options.segment_chunks = static_cast<std::size_t>(state.range(1));
    options.inflate_ahead = state.range(2) != 0;
    auto data = trainfit::trace::detail::read_trace_file(path, options);
    if (data.read_threads != options.threads) state.SkipWithError("read on another number of threads");
    auto r = trainfit::trace::detail::analyse(std::move(data), path, {});
    bytes = r.counts.bytes;
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

const int file_benchmarks = [] {
  const char* files = std::getenv("TRAINFIT_TRACE_FILES");
  std::string_view rest = files != nullptr ? files : "";
  while (!rest.empty()) {
    const std::size_t colon = rest.find(':');
    const std::string path(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
    if (path.empty()) continue;
    benchmark::RegisterBenchmark(("BM_TraceFile/" + path).c_str(), BM_TraceFile, path)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MeasureProcessCPUTime();
    benchmark::RegisterBenchmark(("BM_TraceThreads/" + path).c_str(), BM_TraceThreads, path)
        ->ArgsProduct({{1, 2, 3, 4, 8},
                       {4},
                       path.ends_with(".gz") ? std::vector<std::int64_t>{0, 1} : std::vector<std::int64_t>{0}})
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MeasureProcessCPUTime();
  }
  return 0;
}();

}  // namespace
