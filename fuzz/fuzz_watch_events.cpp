// libFuzzer target for the probe's event lines as `trainfit watch` handles them live: a line is
// either refused (InputError / JSON error, then skipped with a warning) or accepted, and then the
// event watch copies into its recording (parsed again, "type" set, dumped) must itself read back
// as a recording line: whatever watch records, --replay can read. The copy is json::dump, which
// recurses once per nesting level: parse_event_line must refuse what would overflow the stack.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "trainfit/telemetry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace trainfit::telemetry;
  // EventTail hands over lines without their newline, and none longer than kMaxEventLineBytes.
  if (size > kMaxEventLineBytes) return 0;
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  if (line.find('\n') != std::string_view::npos) return 0;
  std::vector<StepEvent> steps;
  std::vector<PhaseMarker> phases;
  try {
    parse_event_line(line, steps, phases);
  } catch (const trainfit::InputError&) {
    return 0;
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  // What WatchSession::run records for an accepted line.
  auto event = nlohmann::json::parse(line);
  event["type"] = "event";
  const std::string recorded = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  try {
    const Recording r = parse_recording(recorded, "fuzz");
    if (r.steps.size() != steps.size() || r.phases.size() != phases.size()) __builtin_trap();
  } catch (const trainfit::InputError&) {
    __builtin_trap();  // a recorded event that its own replay refuses
  }
  return 0;
}
