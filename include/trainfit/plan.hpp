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
};

// The card a setup names: its catalogue `gpu`, its `gpu_spec` file, or a card of `vram` bytes
// (exactly one of them), else the catalogue card `fallback` when one is given. Throws SettingError.
GpuSpec resolve_card(const TrainingSetup& setup, std::string_view fallback = {});

Plan make_plan(const ModelSpec& model, const TrainingSetup& setup, const GpuSpec& gpu, const PlanOptions& options = {});

}  // namespace trainfit
