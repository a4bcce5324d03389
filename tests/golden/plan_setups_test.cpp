// The plan golden set: every setup of tests/golden/plan_setups.jsonl.gz (the repository's bench plans,
// measured rows and documented commands, and a generated set over every method, objective, layout
// and family) plans to the same JSON as when the set was captured, to the last digit, or is refused
// with the same words. A change that means to move a number recaptures the set
// (tests/golden_capture/capture_plan_setups.cpp) and says which numbers moved and why.
#include <gtest/gtest.h>
#include <zlib.h>

#include <array>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "plan/setup_grid.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

struct GoldenLine {
  std::string source;
  nlohmann::json setup;
  nlohmann::json plan;  // null when refused
  std::string error;    // the refusal's words
};

const std::vector<GoldenLine>& golden_lines() {
  static const std::vector<GoldenLine> lines = [] {
    std::vector<GoldenLine> out;
    // Gzipped: 13 MB of JSON lines are 1.5 MB so (the GPU machine takes a working tree of 64 MiB).
    gzFile in = gzopen((std::string(TRAINFIT_SOURCE_DIR) + "/tests/golden/plan_setups.jsonl.gz").c_str(), "rb");
    if (in == nullptr) return out;
    std::array<char, 1 << 16> buffer{};
    std::string text;
    while (gzgets(in, buffer.data(), static_cast<int>(buffer.size())) != nullptr) {
      text += buffer.data();
      if (text.empty() || text.back() != '\n') continue;  // a line longer than the buffer: read on
      text.pop_back();
      const auto j = nlohmann::json::parse(text);
      GoldenLine g{j.at("source").get<std::string>(), j.at("setup"), j.value("plan", nlohmann::json()),
                   j.value("error", std::string())};
      out.push_back(std::move(g));
      text.clear();
    }
    gzclose(in);
    return out;
  }();
  return lines;
}

const ModelSpec& model_named(const std::string& name) {
  static std::map<std::string, ModelSpec> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    // A bench plan names a model folder relative to the repository (plans/mixtral-shape-h200.toml),
    // as `trainfit bench` run from its root reads it, and the set was captured there: the plan's
    // model name is that path, so it is planned from there again.
    std::filesystem::current_path(TRAINFIT_SOURCE_DIR);
    it = cache.emplace(name, load_model(name)).first;
  }
  return it->second;
}

TEST(PlanGoldenSet, HoldsTheRequiredCoverage) {
  std::set<std::string> models, methods, objectives, parallels, offloads;
  std::set<std::int64_t> pipeline_microbatches;
  int planned = 0, tp = 0, cp = 0, nodes = 0, generated = 0, docs = 0, plans = 0, data = 0;
  for (const GoldenLine& g : golden_lines()) {
    if (g.plan.is_null()) continue;
    ++planned;
    const TrainingSetup s = setup_from_json(g.setup);
    models.insert(s.model);
    methods.insert(to_string(s.method));
    objectives.insert(to_string(s.objective));
    if (s.gpus > 1) parallels.insert(to_string(s.parallel));
    offloads.insert(to_string(s.offload));
    if (s.pp > 1) pipeline_microbatches.insert(s.microbatches);
    tp += s.tp > 1;
    cp += s.cp > 1;
    nodes += s.nodes > 1;
    generated += g.source.starts_with("generated:");
    docs += g.source.ends_with(".md");
    plans += g.source.starts_with("plans/");
    data += g.source.starts_with("data/");
  }
  EXPECT_GE(generated, 2000);
  EXPECT_GT(docs, 10);
  EXPECT_GT(plans, 100);
  EXPECT_GT(data, 100);
  for (const std::string& name : builtin_model_names()) EXPECT_TRUE(models.count(name)) << name;
  EXPECT_EQ(methods.size(), 3U);
  EXPECT_EQ(objectives.size(), 7U);
  for (const DataParallelScheme* d : data_parallel_schemes()) EXPECT_TRUE(parallels.count(d->name)) << d->name;
  EXPECT_EQ(offloads.size(), 3U);  // none, optimizer, optimizer_params
  EXPECT_GE(pipeline_microbatches.size(), 3U);
  EXPECT_GT(tp, 100);
  EXPECT_GT(cp, 50);
  EXPECT_GT(nodes, 50);
  EXPECT_GT(planned, 2000);
}

// Where two JSON documents first differ, as a JSON patch's first operation.
std::string first_difference(const nlohmann::json& want, const nlohmann::json& got) {
  const nlohmann::json patch = nlohmann::json::diff(want, got);
  return patch.empty() ? "" : patch.front().dump();
}

TEST(PlanGoldenSet, EverySetupPlansAsCaptured) {
  int differ = 0;
  for (const GoldenLine& g : golden_lines()) {
    std::string error;
    nlohmann::json got;
    try {
      const TrainingSetup s = setup_from_json(g.setup);
      got = plan_to_json(make_plan(model_named(s.model), s, resolve_card(s, "h200")));
    } catch (const std::exception& e) {
      error = e.what();
    }
    const bool same = g.plan.is_null() ? error == g.error : (error.empty() && got == g.plan);
    if (!same && ++differ <= 20)
      ADD_FAILURE() << g.source << ": " << g.setup.dump() << "\n  "
                    << (error.empty() ? first_difference(g.plan, got) : "refused: " + error)
                    << (g.plan.is_null() ? "\n  captured refusal: " + g.error : "");
  }
  EXPECT_EQ(differ, 0) << "setups whose plan moved";
}

// advise prices its grid through SetupGroup (plan/setup_grid.hpp); every point must be the plan's.
TEST(PlanGoldenSet, TheAdviseGridPricesEverySetupAsPlanDoes) {
  int checked = 0, differ = 0;
  for (const GoldenLine& g : golden_lines()) {
    if (g.plan.is_null()) continue;
    const TrainingSetup s = setup_from_json(g.setup);
    const GpuSpec gpu = resolve_card(s, "h200");
    const Plan p = make_plan(model_named(s.model), s, gpu, PlanOptions{.suggest = false, .profile = {}, .largest = {}});
    std::optional<detail::SetupGroup> group;
    try {
      group.emplace(model_named(s.model), s, gpu, p.profile);
    } catch (const std::exception& e) {
      ADD_FAILURE() << g.source << ": the grid refuses a setup plan priced: " << e.what();
      continue;
    }
    const auto point = group->at(s.batch, s.grad_accum, s.grad_ckpt);
    ++checked;
    const bool same = point.peak_allocated_bytes == p.memory.peak_allocated_bytes &&
                      point.device_used_bytes == p.memory.device_used_bytes &&
                      point.busiest_peak_allocated_bytes == p.memory.busiest_peak_allocated_bytes &&
                      point.busiest_device_used_bytes == p.memory.busiest_device_used_bytes &&
                      point.verdict == p.verdict &&
                      point.step_seconds == (p.time.predicted ? p.time.step_seconds : 0.0);
    if (!same && ++differ <= 20)
      ADD_FAILURE() << g.source << " " << setup_label(s) << ": grid " << point.peak_allocated_bytes << " B, "
                    << point.device_used_bytes << " B used, " << to_string(point.verdict) << ", " << point.step_seconds
                    << " s; plan " << p.memory.busiest_peak_allocated_bytes << " B, " << p.memory.device_used_bytes
                    << " B used, " << to_string(p.verdict) << ", " << p.time.step_seconds << " s";
  }
  EXPECT_GT(checked, 2000);
  EXPECT_EQ(differ, 0);
}

}  // namespace
}  // namespace trainfit
