// The objectives' example table of docs/model.md ("Objectives") is what `trainfit plan` gives:
// every row is planned again and compared, so the page cannot drift from the planner.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

// A row's flags (`--method full --objective dpo --reference precomputed`) after the table's own.
TrainingSetup setup_of(const std::string& flags) {
  std::vector<GivenSetting> given;
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--model", "qwen2.5-1.5b"}, {"--gpu", "h200"}, {"--seq", "1024"}, {"--batch", "2"}}) {
    const Setting* s = find_setting_by_flag(flag);
    given.emplace_back(s, parse_setting_text(*s, value));
  }
  std::istringstream words(flags);
  std::string flag, value;
  while (words >> flag >> value) {
    const Setting* s = find_setting_by_flag(flag);
    EXPECT_NE(s, nullptr) << flag;
    if (s != nullptr) given.emplace_back(s, parse_setting_text(*s, value));
  }
  return resolve_setup(given);
}

TEST(ObjectiveDoc, ExamplesArePlannedFigures) {
  std::ifstream in(std::string(TRAINFIT_SOURCE_DIR) + "/docs/model.md");
  ASSERT_TRUE(in.good());
  const std::regex row(R"(^\| `(--method [^`]+)` \| ([0-9.]+) \| ([^|]+) \| ([0-9.]+) \|$)");
  std::string line;
  int rows = 0;
  const ModelSpec model = load_model("qwen2.5-1.5b");
  const GpuSpec gpu = find_gpu("h200");
  PlanOptions options;
  options.suggest = false;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, row)) continue;
    SCOPED_TRACE(line);
    const Plan p = make_plan(model, setup_of(m[1]), gpu, options);
    EXPECT_EQ(fmt::format("{:.1f}", to_mib(p.memory.peak_allocated_bytes)), m[2].str());
    std::string moment = m[3].str();
    moment.erase(moment.find_last_not_of(' ') + 1);
    EXPECT_EQ(p.memory.peak_moment, moment);
    EXPECT_EQ(fmt::format("{:.3f}", p.time.step_seconds), m[4].str());
    ++rows;
  }
  EXPECT_EQ(rows, 16);  // full and LoRA, every objective
}

}  // namespace
}  // namespace trainfit
