// libFuzzer target for a line of a bench results file (results.jsonl, written by trainfit but
// damaged by hand or by a crash) and for a runner's output row: any input is read as a row that
// writes back and judges, or gives an InputError; nothing crashes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "trainfit/bench.hpp"
#include "trainfit/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return 0;
  try {
    trainfit::bench::BenchRow row = trainfit::bench::row_from_json(j);
    (void)trainfit::bench::row_to_json(row).dump();
    const trainfit::bench::ExperimentPlan plan;
    (void)trainfit::bench::judge_results(plan, {row});  // unknown models are InputErrors too
  } catch (const trainfit::InputError&) {
  }
  return 0;
}
