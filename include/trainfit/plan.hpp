#pragma once
// A plan: the memory estimate judged against a card, with what to change when it does not fit.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainfit/hardware.hpp"
#include "trainfit/memory.hpp"
#include "trainfit/model.hpp"
#include "trainfit/setup.hpp"
#include "trainfit/time.hpp"
#include "trainfit/units.hpp"

namespace trainfit {

enum class Verdict { fits, tight, spills, oom };
std::string to_string(Verdict v);

// One way to make the setup fit: a whole setup (the user's with one to three changes made), with
// the figures `trainfit plan` gives for exactly that setup.
struct Suggestion {
  std::string change;                // the changes in words, joined by " + "
  TrainingSetup setup;               // the user's setup with the changes made, and nothing else
  std::vector<std::string> args;     // setup_to_args(setup): `trainfit plan` arguments that reproduce it
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t device_used_bytes = 0;
  Verdict verdict = Verdict::fits;
  double step_seconds = 0;           // 0 when the card's throughput is unknown
  // Whether it trains what the user's setup trains: the same method, targets and sequence, changed
  // only in layout, precision, optimizer, checkpointing or how the batch is cut (listed first).
  bool keeps_method = true;
};

// What a step does on a card whose allocator is short (docs/model.md, "The boundary"): it runs
// with its memory cached as planned (device use inside the card); it runs only under pressure
// (the cache no longer fits, and the allocator frees cached blocks and retries, slower, before its
// requests succeed: the tensors alive at the peak and the CUDA context fit); or it fails.
enum class RunState { runs, under_pressure, fails };
std::string to_string(RunState s);

// The largest batch (or sequence) of a setup, all else held: every integer searched (memory grows
// with either, so the answer is where each state ends), beside the headroom policy's largest.
struct Boundary {
  std::string setting;                // "batch" or "seq"
  std::int64_t largest_runs = 0;      // runs with its cache as planned; 0: none
  std::int64_t largest_at_all = 0;    // runs, under pressure past largest_runs; 0: none; the boundary
  std::int64_t largest_fits = 0;      // "fits" under the setup's headroom: what advise recommends
  std::int64_t searched_up_to = 0;    // the setting's largest value (a boundary there is not the card's)
  std::vector<std::string> args;      // `trainfit plan` arguments of the largest that runs at all
};

struct Plan {
  ModelSpec model;
  TrainingSetup setup;
  GpuSpec gpu;
  MemoryEstimate memory;
  Verdict verdict = Verdict::fits;
  // 1 - peak_allocated / capacity: the fraction of the card the step's tensors leave free
  // (negative when over). The headroom policy is judged on this figure.
  double headroom_fraction = 0;
  std::int64_t over_capacity_bytes = 0;  // device_used - capacity when positive
  // Only when the verdict is not "fits": the fewest changes that make it fit (single changes, else
  // pairs, else triples), least intrusive first; when none fits, the nearest of them (by peak).
  std::vector<Suggestion> suggestions;
  TimeProfile profile;                   // the rates the time estimate used
  TimeEstimate time;
  std::vector<std::string> warnings;  // plan_warnings(model, setup)
  RunState run_state = RunState::runs;  // on a Linux card of this capacity, out of memory as an error
  std::optional<Boundary> boundary;     // with PlanOptions::largest
};

// What the user should know about a setup that the figures do not say: a sequence longer than the
// model's max_position_embeddings (positions it was never trained on), a multimodal config of which
// only the text model is planned. Sentences, without a trailing period.
std::vector<std::string> plan_warnings(const ModelSpec& model, const TrainingSetup& setup);

// The verdict against a card and a headroom policy: over capacity when the peak allocated or the
// whole device use (reserved + CUDA context) exceeds the card; tight when inside it but the
// peak allocated leaves less than `headroom` of the card free.
// spills vs oom: over capacity, a Windows driver falls back to system memory (spills, very slow);
// Linux has no such fallback and raises an out-of-memory error.
Verdict judge(std::int64_t peak_allocated_bytes, std::int64_t device_used_bytes, std::int64_t capacity_bytes,
              double headroom, Platform platform);

// Host memory a GPU's share of a server has for offloaded states: an 8-GPU DGX or HGX H100/H200
// server has 2 TiB, 256 GiB a GPU. advise does not offer a layout that needs more; plan warns.
inline constexpr double kTypicalHostBytesPerGpu = 256.0 * static_cast<double>(kGiB);

struct PlanOptions {
  bool suggest = true;
  std::optional<TimeProfile> profile;  // default: default_profile(gpu)
  std::string largest;                 // "batch" or "seq": find that boundary too (Plan::boundary)
};

// The card a setup names: its catalogue `gpu`, its `gpu_spec` file, or a card of `vram` bytes
// (exactly one of them), else the catalogue card `fallback` when one is given. Throws SettingError.
GpuSpec resolve_card(const TrainingSetup& setup, std::string_view fallback = {});

Plan make_plan(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu, const PlanOptions& options = {});

}  // namespace trainfit
