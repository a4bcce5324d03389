// What Gemma 3's sliding-window layers add to a step's memory, against the H200 measurement of the
// same model run as published and with every layer made causal
// (python/trainfit_runner/measure_sliding_window.py; data/bench/h200-sliding-window-gemma3-1b-*.json).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>

#include "memory/step_shape.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::detail {
namespace {

TEST(SlidingWindow, TheMaskBiasIsWhatTheH200KeptMore) {
  std::ifstream in(std::string(TRAINFIT_SOURCE_DIR) + "/data/bench/h200-sliding-window-gemma3-1b-2026-12-01.json");
  ASSERT_TRUE(in);
  const auto doc = nlohmann::json::parse(in);
  const ModelSpec model = load_model("gemma3-1b");
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
      for (const auto& kept : describe_step(model, s).layer_activations)
        if (kept.name() == "sliding-window mask (additive bias)") per_token = kept.bytes;
      const double predicted = per_token * static_cast<double>(model.num_layers) * static_cast<double>(seq);
      std::cout << fmt::format("seq {}: {:.1f} MiB kept more measured, {:.1f} MiB predicted ({:+.1f}%)\n", seq,
                               measured / 1048576, predicted / 1048576, 100 * (predicted / measured - 1));
      EXPECT_LT(std::abs(predicted / measured - 1), 0.02) << "seq " << seq;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 3);
}

}  // namespace
}  // namespace trainfit::detail
