// `plan --largest` against the capped-allocator boundary scans of issue 35
// (data/bench/h200-boundary-2026-12-05/boundary.jsonl: 12 setups on an H200, the allocator capped at
// each card less the CUDA context the scan measured). trainfit is asked about the card whose
// allocator limit is the scan's (vram - x_context_bytes + trainfit's own 1382 MiB context), with the
// runner's settings pinned, as python/boundary_jobs/compare.py asks it. docs/model.md, "The
// boundary", lists the three LoRA setups it still misses and why; this test holds the nine it gets,
// so that a change that loses one says so.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "trainfit/trainfit.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

TEST(BoundaryScans, PlanLargestIsTheMeasuredBoundary) {
  std::ifstream in(fs::path(TRAINFIT_SOURCE_DIR) / "data/bench/h200-boundary-2026-12-05/boundary.jsonl");
  ASSERT_TRUE(in);
  // Off as docs/model.md says: not a stranding the plan models yet, or within the peak's own error.
  const std::set<std::string> known_misses = {"q7b-lora-ckpt-24g", "l3b-lora-16g-seq", "q7b-qlora-ckpt-24g-seq"};
  int right = 0, rows = 0;
  std::string line;
  while (std::getline(in, line)) {
    const json row = json::parse(line);
    const std::string scan = row.at("scan");
    json setup = {{"optimizer", "adamw"}, {"attn", "sdpa"}, {"gpus", 1}, {"grad_accum", 1}, {"grad_ckpt", false}};
    for (const auto& [key, value] : row.at("config").items())
      if (key != "vram_bytes" && key != scan) setup[key] = value;
    const std::int64_t vram = row.at("config").at("vram_bytes").get<std::int64_t>() -
                              row.at("x_context_bytes").get<std::int64_t>() + std::int64_t{1382} * 1048576;
    setup["vram"] = std::to_string(vram) + "B";
    const trainfit::TrainingSetup s = trainfit::setup_from_json(setup);
    trainfit::PlanOptions options;
    options.suggest = false;
    options.largest = scan;
    const trainfit::Plan p = trainfit::make_plan(trainfit::load_model(s.model), s, trainfit::resolve_card(s), options);
    ASSERT_TRUE(p.boundary);
    const std::int64_t ran = row.at("largest_runs"), failed = row.at("smallest_fails");
    const bool ok = p.boundary->largest_at_all >= ran && p.boundary->largest_at_all < failed;
    const std::string name = row.at("setup");
    if (!known_misses.contains(name)) {
      EXPECT_TRUE(ok) << name << ": trainfit's boundary " << p.boundary->largest_at_all << ", measured: " << ran
                      << " ran, " << failed << " failed";
    }
    right += ok ? 1 : 0;
    ++rows;
  }
  EXPECT_EQ(rows, 12);
  EXPECT_GE(right, 9);
}

}  // namespace
