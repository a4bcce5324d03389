// What the sliding-window layers of Gemma 3 1B and Gemma 2 2B add to a step's memory, against the H200
// measurement of the same model run as published and with every layer made causal
// (python/trainfit_runner/measure_sliding_window.py; data/bench/h200-sliding-window-*.json): the mask's
// additive bias, and for Gemma 2 (four key/value heads) the key and value repeated to the query heads.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>

#include "step/step.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::detail {
namespace {

// The tensors a sliding-window layer keeps that a causal one does not.
bool kept_for_the_window(const Sized& kept) {
  return kept.name() == "sliding-window mask (additive bias)" ||
         kept.name() == "key and value repeated to query heads (masked SDPA)";
}

void expect_what_the_h200_kept_more(const std::string& model_name, const std::string& file, int comparisons) {
  std::ifstream in(std::string(TRAINFIT_SOURCE_DIR) + "/data/bench/" + file);
  ASSERT_TRUE(in) << file;
  const auto doc = nlohmann::json::parse(in);
  const ModelSpec model = load_model(model_name);
  int compared = 0;
  for (const auto& published : doc["rows"]) {
    if (published["full_attention"].get<bool>()) continue;
    const auto seq = published["seq"].get<std::int64_t>();
    for (const auto& causal : doc["rows"]) {
      if (!causal["full_attention"].get<bool>() || causal["seq"].get<std::int64_t>() != seq) continue;
      const double measured = published["peak_allocated_above_weights_bytes"].get<double>() -
                              causal["peak_allocated_above_weights_bytes"].get<double>();
      TrainingSetup s;
      s.method = Method::full;
      s.seq = seq;
      double per_token = 0;
      for (const auto& kept : describe_step(model, s).tensors.layer_activations)
        if (kept_for_the_window(kept)) per_token += kept.bytes;
      const double predicted = per_token * static_cast<double>(model.num_layers) * static_cast<double>(seq);
      std::cout << fmt::format("{} seq {}: {:.1f} MiB kept more measured, {:.1f} MiB predicted ({:+.1f}%)\n",
                               model_name, seq, measured / 1048576, predicted / 1048576,
                               100 * (predicted / measured - 1));
      EXPECT_LT(std::abs(predicted / measured - 1), 0.02) << model_name << " seq " << seq;
      ++compared;
    }
  }
  EXPECT_EQ(compared, comparisons) << file;
}

TEST(SlidingWindow, TheMaskBiasIsWhatTheH200KeptMore) {
  expect_what_the_h200_kept_more("gemma3-1b", "h200-sliding-window-gemma3-1b-2026-12-01.json", 3);
}

// Four key/value heads under eight query heads: with the mask, transformers repeats them (repeat_kv)
// before SDPA, and the repeated copies are what autograd keeps (416 MiB at 8k tokens, on top of the
// 1,664 MiB of bias).
TEST(SlidingWindow, MaskedLayersKeepTheKeysAndValuesRepeatedToTheQueryHeads) {
  expect_what_the_h200_kept_more("gemma2-2b", "h200-sliding-window-gemma2-2b-2026-12-01.json", 1);
}

}  // namespace
}  // namespace trainfit::detail
