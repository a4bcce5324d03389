// libFuzzer target for `trainfit watch --replay` and the probe's events: any input either parses
// (and then replays through the diagnoser, and is scored, without crashing) or is an InputError / JSON error.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "trainfit/telemetry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace trainfit::telemetry;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    std::vector<StepEvent> steps;
    std::vector<PhaseMarker> phases;
    parse_event_line(text, steps, phases);
  } catch (const trainfit::InputError&) {
  } catch (const nlohmann::json::exception&) {
  }
  try {
    const Recording r = parse_recording(text, "fuzz");
    for (const Diagnosis& d : diagnose_recording(r, 5, 1))
      if (d.verdicts.empty()) __builtin_trap();
    for (const PhaseScore& p : score_recording(r, 5))
      if (p.right > p.windows) __builtin_trap();
  } catch (const trainfit::InputError&) {
  }
  return 0;
}
