#pragma once
// What `trainfit trace` keeps of a Kineto trace's events while it streams through them: a few
// integers per GPU activity, per step annotation and per host call of interest, and the kernel
// totals by name. analyse() turns it into the figures of a RankTrace (docs/trace.md).
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "trainfit/trace.hpp"

namespace trainfit::trace::detail {

struct Interval {
  std::int64_t begin = 0, end = 0;  // nanoseconds, as the trace's clock gives them
};

struct GpuSpan {
  std::int64_t begin = 0, end = 0;
  std::int32_t device = 0;
  KernelCategory category = KernelCategory::elementwise;
  bool kernel = false;  // a kernel, not a memcpy or memset (the launch-bound test counts kernels)
};

struct NamedInterval {
  std::string name;
  Interval span;
  // The event's pid: on the host, the process (what tells one process's files from another's in a
  // folder); on the device, the GPU.
  std::int64_t pid = -1;
  // The GPU's copy of the annotation (gpu_user_annotation): from the first to the last activity of
  // the work the host step launched.
  bool on_device = false;
};

struct KernelTotal {
  KernelCategory category = KernelCategory::elementwise;
  std::size_t count = 0;
  std::int64_t total_ns = 0;
};

// Looks kernel names up by string_view, without making a string for each event.
struct NameHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};

// Distinct kernel names kept with their totals; the rest are summed under one name. Real traces
// have a few thousand; the cap bounds memory for a file made to have millions.
inline constexpr std::size_t kMaxKernelNames = 100000;

struct TraceData {
  std::vector<GpuSpan> gpu;
  std::vector<NamedInterval> steps;    // ProfilerStep#N on the host, and their copies on the device
  std::vector<Interval> data_loader;   // waiting for the next batch
  bool loader_in_workers = false;      // the loader's batches come from worker processes
  std::vector<Interval> synchronise;   // host calls that block until the GPU is done
  std::vector<std::int64_t> launches;  // start of each kernel launch call
  std::unordered_map<std::string, KernelTotal, NameHash, std::equal_to<>> kernels;
  std::int64_t first_ns = INT64_MAX, last_ns = INT64_MIN;  // over every complete event
  int rank = -1;
  std::unordered_map<int, std::string> device_names;  // deviceProperties
  TraceCounts counts;
  std::uint64_t other_phases = 0;   // events of phases the analysis does not use but knows (i, s, f)
  std::string unsupported_example;  // one unknown phase, for the message
  bool truncated = false;
  std::vector<std::string> warnings;
  std::size_t read_threads = 1;  // how many threads read it (ReadOptions): for the tests and the benchmark
};

// How a trace is read: on how many threads, in chunks of how many bytes (docs/trace.md, "How a
// trace is read"). The answer is the same whatever they are; the tests set them to reach every path.
struct ReadOptions {
  // 0: as many as the process may use, up to kMaxThreads, for a plain file large enough to gain
  // from them; for a gzip file as large, one fewer than it may use, up to kMaxGzipThreads, with one
  // more inflating ahead (on two CPUs: one, with ChunkReader's inflating ahead); 1: one; 2 or more:
  // that many, for any file or text (the tests, the benchmark).
  std::size_t threads = 0;
  std::size_t chunk_bytes = 0;     // 0: 256 KiB for a file, 64 KiB for text
  std::size_t segment_chunks = 0;  // chunks a thread claims at a time; 0: the defaults below (text: 1)
  // A gzip file read on several threads: inflated on a thread of its own, ahead of them
  // (SharedChunks::inflate_ahead); false, by the threads as they need chunks.
  bool inflate_ahead = true;
  // Measured in docs/trace.md, "Speed".
  static constexpr std::size_t kMaxThreads = 8;
  static constexpr std::size_t kSegmentChunks = 4, kGzipSegmentChunks = 4;
  // A gzip file is read on several threads, with one more inflating ahead of them, when the process
  // may use three CPUs or more; then on at most this many: one decoder keeps no more busy.
  static constexpr std::size_t kMaxGzipThreads = 2;
  static constexpr std::size_t kInflateAheadChunks = 4;  // the ring's room for the inflating thread
  static constexpr std::size_t kGzipRingChunkBytes = std::size_t{128} << 10;
  static constexpr std::uint64_t kParallelFromBytes = std::uint64_t{4} << 20;  // a plain file's size
};

// Adds what `from` counted and spanned to `into`: the event counts but the bytes (a thread's
// segments end where the next begins; two files' bytes add), the phases known and not used, the
// loader's kind, and the first and last times. For the readings a thread's segments and a
// process's files are merged from.
inline void add_totals(TraceData& into, const TraceData& from) {
  into.counts.events += from.counts.events;
  into.counts.gpu_activities += from.counts.gpu_activities;
  into.counts.malformed += from.counts.malformed;
  into.counts.unsupported += from.counts.unsupported;
  into.other_phases += from.other_phases;
  into.loader_in_workers = into.loader_in_workers || from.loader_in_workers;
  into.first_ns = std::min(into.first_ns, from.first_ns);
  into.last_ns = std::max(into.last_ns, from.last_ns);
}

// Reads a whole trace (a file, or text in memory) into TraceData.
TraceData read_trace_file(const std::string& path, const ReadOptions& options = {});
TraceData read_trace_text(std::string_view json, const std::string& source, const ReadOptions& options = {});

// The verdict of a step (or of the run, on its sums) from its figures, with its evidence.
// loader_in_workers: the data loader's batches come from worker processes (docs/trace.md, "Verdicts").
void judge_step(StepTrace& step, bool loader_in_workers = false);
// The middle value (the upper one of an even count); 0 for none. Reorders `values`.
double median_of(std::vector<double>& values);

RankTrace analyse(TraceData data, const std::string& source, const TraceOptions& options);

// Whether `later` is a later profiling cycle of the process that wrote `earlier` (the same rank,
// or without ranks the same pid, and after it in time), and `from` appended to `into` as one
// reading of both (its warnings prefixed with the file's `name`).
bool same_process(const TraceData& earlier, const TraceData& later);
void append_cycle(TraceData& into, TraceData&& from, const std::string& name);

// "123.456" microseconds (a JSON number token) to integer nanoseconds, exactly for the decimal
// forms Kineto writes (digits beyond the nanosecond dropped); false when the token is not a number.
// readable_after: how many bytes after the token may be read (the digits are read eight at a time).
bool microseconds_to_ns(std::string_view token, std::int64_t& ns, std::size_t readable_after = 0);

}  // namespace trainfit::trace::detail
