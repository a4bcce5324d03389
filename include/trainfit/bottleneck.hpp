#pragma once
// What holds a training step back: one vocabulary for the planner's prediction (`plan`'s
// time.bottleneck), the verdict on profiled steps (`trace`) and the verdict on a running job
// (`watch`), so that a prediction and the two measurements of it can be set side by side.
//
// Each value has one word (to_string: what plan and trace print) and the name watch prints for it
// as a verdict (watch_verdict: "compute-bound", "host-bound"), which watch's JSON lines, /metrics
// and recordings have always used; parse_bottleneck reads either. docs/model.md, docs/trace.md and
// docs/watch.md give the rules each tool names them by.
#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "trainfit/error.hpp"

namespace trainfit {

enum class Bottleneck {
  // Named by plan, trace and watch.
  compute,          // the GPU's own work sets the pace: its matrix kernels (matmuls, attention);
                    // to watch, which cannot see kernels, any work that keeps it busy
  input_pipeline,   // the GPU waits for the data loader's next batch; plan never returns it (it
                    // models no loader)
  communication,    // collectives between GPUs that compute does not hide
  launch_overhead,  // the GPU waits for the host to launch work: Python, kernel launches,
                    // synchronisations (watch: "host-bound", the training thread at a full core)
  host_link_spill,  // the step outgrew the card and pages through system memory over the host
                    // link (watch: "host-spill-suspected", as it sees only the link and the memory);
                    // trace never returns it
  // Named by plan and trace; watch never returns them (NVML cannot tell them apart from the above).
  memory_bandwidth,  // bandwidth-bound kernels (elementwise, normalisation, optimizer, copies)
                     // outweigh the matrix work
  offload,           // host-device copies of offloaded parameters, gradients or optimizer state
  // Named by watch alone: states of a running job that a single step's plan or profile cannot
  // show. Plan and trace never return them.
  capacity,       // the allocator at its ceiling (retries, out-of-memory), or memory full with a
                  // quiet host link; also a warning on a compute-bound GPU with little headroom
  idle,           // the GPU does next to nothing
  throttled,      // clocks held down by heat, a hardware slowdown or a lowered power limit
  memory_growth,  // a warning: used memory rises steadily (a leak, or caches that keep growing)
  unknown,        // the driver gave no utilisation reading: nothing to judge
  straggler,      // a warning on every GPU of a multi-GPU job: one rank is slower and the others
                  // wait for it
};

// Every value, in the enum's order: what parse_bottleneck searches and the tests walk.
inline constexpr std::array kBottlenecks{
    Bottleneck::compute,         Bottleneck::input_pipeline,  Bottleneck::communication,
    Bottleneck::launch_overhead, Bottleneck::host_link_spill, Bottleneck::memory_bandwidth,
    Bottleneck::offload,         Bottleneck::capacity,        Bottleneck::idle,
    Bottleneck::throttled,       Bottleneck::memory_growth,   Bottleneck::unknown,
    Bottleneck::straggler};

namespace detail {
// The switches name every value (-Wswitch); a value with no name here gives "".
constexpr std::string_view bottleneck_word(Bottleneck b) {
  switch (b) {
    case Bottleneck::compute:
      return "compute";
    case Bottleneck::input_pipeline:
      return "input-pipeline";
    case Bottleneck::communication:
      return "communication";
    case Bottleneck::launch_overhead:
      return "launch-overhead";
    case Bottleneck::host_link_spill:
      return "host-link/spill";
    case Bottleneck::memory_bandwidth:
      return "memory-bandwidth";
    case Bottleneck::offload:
      return "offload";
    case Bottleneck::capacity:
      return "capacity";
    case Bottleneck::idle:
      return "idle";
    case Bottleneck::throttled:
      return "throttled";
    case Bottleneck::memory_growth:
      return "memory-growing";
    case Bottleneck::unknown:
      return "unknown";
    case Bottleneck::straggler:
      return "straggler";
  }
  return "";
}
// kBottlenecks lists the values 0, 1, ... in order, and the value after its last has no word: so it
// holds every value a switch names, and a value added to the enum alone fails here.
constexpr bool lists_every_bottleneck() {
  for (std::size_t i = 0; i < kBottlenecks.size(); ++i)
    if (static_cast<std::size_t>(kBottlenecks[i]) != i) return false;
  return bottleneck_word(static_cast<Bottleneck>(kBottlenecks.size())).empty();
}
static_assert(lists_every_bottleneck(), "kBottlenecks must list every Bottleneck, in order");
}  // namespace detail

// "compute", "memory-bandwidth", "launch-overhead", "host-link/spill", ...: plan's time.bottleneck,
// trace's verdict.
inline std::string to_string(Bottleneck b) {
  return std::string(detail::bottleneck_word(b));
}

// The name watch prints for a verdict: a bottleneck "<word>-bound", a state or warning its word.
// Two differ because watch cannot see what plan and trace name: "host-bound" (watch sees the host
// thread busy, not the launches) and "host-spill-suspected" (it sees the link and the memory, not
// the fallback). Watch never returns memory-bandwidth or offload; they are named by the same rule.
constexpr std::string_view watch_verdict(Bottleneck b) {
  switch (b) {
    case Bottleneck::compute:
      return "compute-bound";
    case Bottleneck::input_pipeline:
      return "input-pipeline-bound";
    case Bottleneck::communication:
      return "communication-bound";
    case Bottleneck::launch_overhead:
      return "host-bound";
    case Bottleneck::host_link_spill:
      return "host-spill-suspected";
    case Bottleneck::memory_bandwidth:
      return "memory-bandwidth-bound";
    case Bottleneck::offload:
      return "offload-bound";
    case Bottleneck::capacity:
      return "capacity-bound";
    // States and warnings: watch prints their own word.
    case Bottleneck::idle:
    case Bottleneck::throttled:
    case Bottleneck::memory_growth:
    case Bottleneck::unknown:
    case Bottleneck::straggler:
      break;
  }
  return detail::bottleneck_word(b);
}

// The inverse of both: a word ("launch-overhead"), a watch verdict ("host-bound"), or a watch
// verdict without its "-bound" ("host", "compute", as recordings' phase markers write their
// "expect"), and "input". Throws InputError naming the text otherwise.
inline Bottleneck parse_bottleneck(std::string_view text) {
  constexpr std::string_view bound = "-bound";
  for (const Bottleneck b : kBottlenecks) {
    const std::string_view verdict = watch_verdict(b);
    if (text == detail::bottleneck_word(b) || text == verdict ||
        (verdict.ends_with(bound) && text == verdict.substr(0, verdict.size() - bound.size())))
      return b;
  }
  if (text == "input") return Bottleneck::input_pipeline;
  throw InputError("unknown verdict '" + std::string(text) + "'");
}

}  // namespace trainfit
