#pragma once
// `trainfit trace`: where the time and the memory of real steps went, from PyTorch's own files
// (docs/trace.md defines every figure).
//
// - Kineto traces (torch.profiler's Chrome trace JSON, .json or .json.gz, or a folder of per-rank
//   files), read in a stream: per ProfilerStep#N the wall time, the GPU's busy time, its idle time
//   and what the host did in it, kernel time by category, the overlap of communication with
//   compute, and a verdict in the planner's vocabulary (trainfit::Bottleneck, which watch shares).
// - Memory snapshots (torch.cuda.memory._dump_snapshot, rendered as JSON by
//   python/trainfit_runner/snapshot_json.py): the peak moment and what was alive at it, by the
//   planner's memory categories (trainfit::MemoryTerm).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainfit/bottleneck.hpp"
#include "trainfit/memory.hpp"
#include "trainfit/plan.hpp"
#include "trainfit/report.hpp"
#include "trainfit/time.hpp"

namespace trainfit::trace {

// What a GPU activity of a trace did, from its name and Kineto category (docs/trace.md).
enum class KernelCategory {
  matmul,
  attention,
  elementwise,  // elementwise, reductions, normalisation, softmax, the loss: bandwidth-bound work
  optimizer,
  communication,  // NCCL collectives
  copy_h2d,
  copy_d2h,
  copy_d2d,  // device-to-device copies and memsets
};
inline constexpr std::size_t kKernelCategories = 8;
std::string_view to_string(KernelCategory c);
// A step's verdict in words: the bottleneck, or "none" when there was nothing to judge.
std::string verdict_name(const std::optional<Bottleneck>& verdict);
KernelCategory classify_activity(std::string_view name, std::string_view kineto_category);

using CategorySeconds = std::array<double, kKernelCategories>;

struct StepTrace {
  std::string name;              // "ProfilerStep#12", or "whole trace" when the trace has no step annotations
  double begin_s = 0;            // from the start of the trace
  double wall_s = 0;             // the annotation's duration on the host
  double gpu_busy_s = 0;         // union of kernel, memcpy and memset intervals on the device, inside the step
  double idle_s = 0;             // wall_s - gpu_busy_s
  double input_wait_s = 0;       // idle while the host waited for the data loader's next batch
  double sync_wait_s = 0;        // idle that began while the host sat in a synchronisation
  double host_wait_s = 0;        // the rest of the idle time: the host was busy and launched too slowly
  CategorySeconds categories{};  // kernel time by category (intervals clipped to the step; streams may overlap)
  double communication_s = 0;    // union of collective intervals
  double communication_overlapped_s = 0;  // of which other kernels ran at the same time
  std::size_t kernels = 0;
  double kernel_median_s = 0;      // launch-bound test: the median kernel
  double launch_gap_median_s = 0;  // and the median gap between consecutive launch calls
  // The span on the GPU of the work the step's own thread launched (Kineto's copy of the step,
  // gpu_user_annotation: from its first to its last activity; a backward pass that autograd's
  // thread launched is outside it); 0 when the trace has none. Far longer than wall_s when the host
  // ran ahead of the GPU.
  double device_wall_s = 0;
  // None when the trace holds no GPU activity (recorded without ProfilerActivity.CUDA): nothing to judge.
  std::optional<Bottleneck> verdict;
  std::string evidence;
  // The step in time order, for the HTML timeline: kTimelineBins equal slices of the window, each a
  // letter for what filled most of it: a kernel category (M matmul, A attention, E elementwise,
  // O optimizer, C communication, H host-device copies, D device copies) when the GPU was busy at
  // least half of the slice, else the idle's cause (i input, s sync, h host). Empty for the total.
  std::string timeline;
};
inline constexpr std::size_t kTimelineBins = 240;

struct KernelStat {
  std::string name;
  KernelCategory category = KernelCategory::elementwise;
  std::size_t count = 0;
  double total_s = 0;
};

struct TraceCounts {
  std::uint64_t bytes = 0;           // uncompressed JSON read
  std::uint64_t events = 0;          // objects in traceEvents
  std::uint64_t gpu_activities = 0;  // kernels, memcpys, memsets
  std::uint64_t malformed = 0;       // events skipped: not valid JSON, or a field of the wrong type
  std::uint64_t unsupported = 0;     // events of a phase trace does not use (B/E, counters, flows, ...)
};

struct RankTrace {
  std::string source;                // the file (the first, when a process wrote several)
  std::vector<std::string> sources;  // every file of the process read into it, in the folder's order
  int rank = -1;                     // distributedInfo.rank, -1 when absent
  int device = -1;     // the device whose activity the figures are of (the busiest)
  std::string device_name;
  bool step_annotations = true;  // false: no ProfilerStep#N; the whole trace is one window
  bool truncated = false;        // the file ended inside traceEvents: the steps read so far
  std::vector<StepTrace> steps;
  StepTrace total;              // the sums over the steps (medians for the launch test); its verdict is the run's
  double overlap_fraction = 0;  // communication overlapped with other kernels / communication (0 without any)
  std::vector<KernelStat> kernels_top;
  double activity_s = 0;        // the device's activities summed over the whole file (the top kernels' share is of it)
  bool host_ran_ahead = false;  // the steps' GPU spans are far longer than their host windows (a warning says)
  TraceCounts counts;
  std::vector<std::string> warnings;  // what was skipped or assumed, in words
};

struct TraceReport {
  std::vector<RankTrace> ranks;
  int straggler = -1;  // index into ranks: the rank the others waited for (multi-rank only)
  std::string straggler_evidence;
  std::vector<std::string> skipped;  // files of a folder that are not traces, each with the reason
};

struct TraceOptions {
  std::size_t top_kernels = 10;
};

// A trace file (.json or .json.gz, detected by content) or a folder of them: one rank (or process)
// each, the files of one process read as one (tensorboard_trace_handler writes one a profiling cycle).
// InputError for a file that is not a trace at all; a truncated or partly malformed one gives what
// it held, with warnings. SystemError when a file cannot be read.
TraceReport analyse_trace(const std::string& path, const TraceOptions& options = {});
// One trace from memory (tests, fuzzing); `source` names it in messages.
RankTrace analyse_trace_text(std::string_view json, const std::string& source, const TraceOptions& options = {});

// A memory snapshot: the pickle torch.cuda.memory._dump_snapshot writes (plain or gzipped), or its
// JSON rendering (schema trainfit.snapshot/1), docs/trace.md.
struct AllocationStack {
  std::string frames;  // the allocation's innermost frames of user and library code, "fn (file:line) < ..."
  std::string category;
  std::int64_t bytes = 0;
  std::size_t blocks = 0;
};

// The moment of an out-of-memory error in the allocator's history (its "oom" event; the last one
// when there are several): what failed and why (docs/trace.md, "Why it ran out").
struct SnapshotOom {
  std::int64_t requested_bytes = 0;  // the block the allocator could not find, rounded as it rounds
  // The segment it then asked the driver for, which PyTorch's message names ("Tried to allocate"):
  // 2 MiB for a request up to 1 MiB, 20 MiB up to 10 MiB, else the request rounded up to 2 MiB.
  std::int64_t segment_request_bytes = 0;
  std::int64_t allocated_bytes = 0;  // in blocks handed out, at the error
  std::int64_t reserved_bytes = 0;   // in segments the allocator holds, after it freed its unused ones
  std::int64_t cached_free_bytes = 0;         // reserved - allocated: free inside segments still in use
  std::int64_t largest_free_block_bytes = 0;  // of the pool the request is served from
  std::optional<std::int64_t> device_free_bytes;  // what the driver called free on the card (pickles only)
  bool fragmentation = false;  // the cached free memory held the request, but not in one block
  // The history replayed through the caching allocator's rules (docs/trace.md, "Replaying the
  // allocator"): the smallest allocator limit under which the failed request is served, a
  // multiple of 2 MiB; none when the history does not reach back to the process's first
  // allocation. And what it would need were no free memory stranded: allocated + request.
  std::optional<std::int64_t> limit_needed_bytes;
  std::int64_t unstranded_need_bytes = 0;
  double time_s = 0;           // from the first event of the history
  std::string moment;          // the frames of the request that failed
  std::size_t oom_events = 0;
  std::vector<MemoryTerm> breakdown;  // planner categories alive at the error, plus cached_free
  std::vector<AllocationStack> top_stacks;
};

struct SnapshotReport {
  std::string source;
  std::int64_t peak_allocated_bytes = 0;  // the highest allocated total the allocator's history reaches
  std::int64_t reserved_at_peak_bytes = 0;
  std::optional<std::int64_t> allocator_peak_allocated_bytes;  // max_memory_allocated() the probe wrote
  double peak_time_s = 0;                                      // from the first event of the history
  std::string peak_moment;                                     // the frame of the allocation that reached the peak
  std::vector<MemoryTerm> breakdown;   // planner categories alive at the peak, plus cached_free; sums to reserved
  std::int64_t free_cached_bytes = 0;  // reserved - allocated at the end of the history
  std::int64_t largest_free_block_bytes = 0;
  double fragmentation = 0;  // 1 - largest free block / free cached bytes, at the end of the history
  std::vector<AllocationStack> top_stacks;
  std::size_t history_events = 0;
  std::optional<SnapshotOom> oom;  // when the history holds an out-of-memory error
  std::vector<std::string> warnings;
};

// The planner's memory category of an allocation from its frames (docs/trace.md): weights,
// adapters, gradients, optimizer_states, activations, logits_and_loss, cublas_workspace, transient,
// or untracked (no frames: allocated before the history began).
std::string snapshot_category(std::string_view frames);
SnapshotReport analyse_snapshot(const std::string& path, std::size_t top_stacks = 10);
// From memory (tests, fuzzing): a pickle (by its first bytes) or JSON; gzip only from a file.
SnapshotReport analyse_snapshot_text(std::string_view text, const std::string& source, std::size_t top_stacks = 10);

// The trace's measured terms beside a plan's predicted ones (docs/trace.md, "Beside the plan").
struct TermComparison {
  std::string term;     // the planner's term (time: matmul, attention, ...; memory: its categories)
  double measured = 0;  // seconds a step (time) or bytes (memory)
  double predicted = 0;
};
struct PlanComparison {
  std::vector<TermComparison> time;    // per step: medians of the trace's steps
  std::vector<TermComparison> memory;  // when a snapshot is given
  std::string measured_verdict, predicted_verdict;
  std::string largest_disagreement;  // the time term with the largest |measured - predicted|
};
PlanComparison compare_with_plan(const RankTrace& trace, const SnapshotReport* snapshot, const Plan& plan);

// Output (table, Markdown, or JSON of schema trainfit.trace/1).
std::string render_trace(const TraceReport& report, const SnapshotReport* snapshot, const PlanComparison* comparison,
                         Format format);
std::string render_snapshot(const SnapshotReport& snapshot, const PlanComparison* comparison, Format format);

}  // namespace trainfit::trace
