// The text report's sentence wrapping (report/report_text.hpp): the verdict and the warnings keep
// to the 100 columns of a terminal.
#include "report/report_text.hpp"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "trainfit/trainfit.hpp"

namespace trainfit::detail {
namespace {

TEST(Wrapped, BreaksAtSpacesWithinTheWidthAndIndentsTheRest) {
  EXPECT_EQ(wrapped("one two three four", 9, "  "), "one two\n  three\n  four");
  EXPECT_EQ(wrapped("short", 100), "short");
  EXPECT_EQ(wrapped("a verylongword b", 5), "a\nverylongword\nb") << "a longer word stands alone";
  EXPECT_EQ(wrapped("", 10), "");
}

TEST(Wrapped, APlansVerdictAndWarningsKeepToTheColumns) {
  // A verdict with its reason and a warning, both longer than a line.
  TrainingSetup s;
  s.model = "qwen2.5-3b";
  s.method = Method::full;
  s.seq = 2048;
  s.batch = 13;
  s.grad_ckpt = true;
  s.gpu = "a100";
  const Plan p = make_plan(load_model(s.model), s, resolve_card(s));
  const std::string text = render_plan(p, Format::table);
  // The sentences stand between the GPU line and the memory table.
  const std::size_t from = text.find("\n\n") + 2, to = text.find("Memory at the peak");
  ASSERT_LT(from, to) << text;
  std::istringstream lines(text.substr(from, to - from));
  std::string line;
  bool warning = false, verdict = false;
  while (std::getline(lines, line)) {
    warning = warning || line.starts_with("Warning:");
    verdict = verdict || line.starts_with("OOM:");
    EXPECT_LE(line.size(), kTextColumns) << line;
  }
  EXPECT_TRUE(warning) << text;
  EXPECT_TRUE(verdict) << text;
}

}  // namespace
}  // namespace trainfit::detail
