// Measurement files (`validate`, `calibrate`): bounded reading, and errors that name the row.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

const std::string kRow =
    R"({"config": {"model": "qwen2.5-0.5b", "gpu": "h200"}, "measured": {"peak_allocated_mib": 4000, "step_seconds_median": 0.1}})";

std::string write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

// One 100 MB line took 623 MB to refuse as JSON: a line past 1 MiB is refused by number, from a
// file (read line by line) and from text alike.
TEST(MeasurementFiles, ALineLongerThanTheCapIsNamed) {
  const std::string long_line = kRow + "\n" + std::string(kMaxMeasurementLineBytes + 1, ' ') + "\n";
  const std::string path = write("long.jsonl", long_line);
  EXPECT_EQ(error_of([&] { (void)load_measurements(path); }), path + ":2: line 2 is longer than 1.0 MiB");
  EXPECT_EQ(error_of([&] { (void)parse_measurements(long_line, "text"); }), "text:2: line 2 is longer than 1.0 MiB");
  // At the cap exactly, the line is read (a blank one here).
  EXPECT_EQ(load_measurements(write("at-cap.jsonl", kRow + "\n" + std::string(kMaxMeasurementLineBytes, ' '))).size(), 1u);
}

// /dev/zero is one endless line, and a file of blank lines holds no row that the row cap would
// count: both stop at a cap instead of reading until memory (or time) runs out.
TEST(MeasurementFiles, DevicesAndHugeFilesStopAtACap) {
  EXPECT_EQ(error_of([] { (void)load_measurements("/dev/zero"); }), "/dev/zero:1: line 1 is longer than 1.0 MiB");
  // Blank lines (of spaces, so that the test reads few lines) one byte past the file cap.
  std::string blank;
  blank.reserve(kMaxMeasurementFileBytes + 1);
  while (blank.size() < kMaxMeasurementFileBytes) blank += std::string(1023, ' ') + "\n";
  const std::string path = write("blank.jsonl", blank + "\n");
  EXPECT_EQ(error_of([&] { (void)load_measurements(path); }),
            "measurements file '" + path + "' is larger than 64.0 MiB");
  std::filesystem::remove(path);
  EXPECT_EQ(error_of([] { (void)load_measurements("/nonexistent/rows.jsonl"); }),
            "cannot read measurements file '/nonexistent/rows.jsonl': no such file");
}

TEST(MeasurementFiles, MoreRowsThanTheCapAreRefused) {
  const std::string row = R"({"config": {"model": "m"}})";
  std::string text;
  text.reserve((row.size() + 1) * (kMaxMeasurementRows + 1));
  for (std::size_t i = 0; i <= kMaxMeasurementRows; ++i) text += row + "\n";
  EXPECT_EQ(error_of([&] { (void)parse_measurements(text, "rows"); }),
            "rows:100001: more than 100000 rows; split the file (docs/model.md, \"Measurement files\")");
}

// An unknown model or card in a row is found when the row is compared or fitted, after reading:
// the error still names the file and the line.
TEST(MeasurementFiles, ErrorsFoundWhenComparingNameTheRow) {
  const std::string bad_model =
      R"({"config": {"model": "no-such-model"}, "measured": {"peak_allocated_mib": 4000, "step_seconds_median": 0.1}})";
  const std::string bad_gpu =
      R"({"config": {"model": "qwen2.5-0.5b", "gpu": "no-such-gpu"}, "measured": {"peak_allocated_mib": 4000, "step_seconds_median": 0.1}})";
  const std::string bad_targets =
      R"({"config": {"model": "qwen2.5-0.5b", "lora_targets": "nonexistent_proj"}, "measured": {"peak_allocated_mib": 4000}})";
  const auto model_rows = load_measurements(write("model.jsonl", kRow + "\n\n" + bad_model + "\n"));
  const auto gpu_rows = parse_measurements(kRow + "\n" + bad_gpu + "\n", "gpu.jsonl");
  const auto target_rows = parse_measurements(bad_targets + "\n", "targets.jsonl");
  EXPECT_EQ(error_of([&] { (void)compare_with_measurements(model_rows); }).rfind(
                ::testing::TempDir() + "/model.jsonl:3: ", 0),
            0u);
  EXPECT_EQ(error_of([&] { (void)timed_steps(model_rows); }).rfind(::testing::TempDir() + "/model.jsonl:3: ", 0), 0u);
  EXPECT_EQ(error_of([&] { (void)compare_with_measurements(gpu_rows); }).rfind("gpu.jsonl:2: ", 0), 0u);
  EXPECT_EQ(error_of([&] { (void)timed_steps(gpu_rows); }).rfind("gpu.jsonl:2: ", 0), 0u);
  EXPECT_EQ(error_of([&] { (void)compare_with_measurements(target_rows); }).rfind("targets.jsonl:1: lora_targets: ", 0),
            0u);
}

}  // namespace
}  // namespace trainfit
