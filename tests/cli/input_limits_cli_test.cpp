// plan, validate and calibrate at the edges of their input: files that never end, writes that fail,
// fits outside what a profile holds, values that name nothing. Each is an error with its exit code
// (2 bad input, 3 the machine), in bounded memory, never a silent success.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run_cli.hpp"

namespace {

using Result = trainfit::testing::CliResult;
Result run(const std::string& args) { return trainfit::testing::run_cli(args); }

const std::string kCalibration = std::string(TRAINFIT_SOURCE_DIR) + "/data/reference/h200-hf-peft-calibration.jsonl";

// The command under an address-space limit, so that reading a file whole fails fast instead of
// taking the machine's memory. Sanitiser builds reserve terabytes of shadow memory and cannot run
// under such a limit; there the caps are checked by the error alone.
Result run_in_bounded_memory(const std::string& args) {
#if defined(__SANITIZE_ADDRESS__)
  return run(args);
#else
  return trainfit::testing::run_cli(args, "ulimit -v 1048576;");  // 1 GiB
#endif
}

// A shell line as it is (run_cli sends the whole line's stderr to its stdout).
Result shell(const std::string& line) {
  return trainfit::testing::run_line(line);
}

std::string write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// /dev/zero as a measurements file or a profile read until memory ran out; one 100 MB line took
// 623 MB. Every input of these commands is read within a cap, and the error says which.
TEST(InputLimits, EndlessInputsStopAtTheirCaps) {
  const auto validate = run_in_bounded_memory("validate /dev/zero");
  EXPECT_EQ(validate.code, 2) << validate.out;
  EXPECT_NE(validate.out.find("/dev/zero:1: line 1 is longer than 1.0 MiB"), std::string::npos) << validate.out;
  const auto calibrate = run_in_bounded_memory("calibrate /dev/zero");
  EXPECT_EQ(calibrate.code, 2) << calibrate.out;
  EXPECT_NE(calibrate.out.find("/dev/zero:1: line 1 is longer than 1.0 MiB"), std::string::npos) << calibrate.out;
  const auto profile = run_in_bounded_memory("plan --model qwen2.5-0.5b --gpu h200 --profile /dev/zero");
  EXPECT_EQ(profile.code, 2) << profile.out;
  EXPECT_NE(profile.out.find("profile '/dev/zero' is larger than 1.0 MiB"), std::string::npos) << profile.out;
  // One 100 MB line (the second): refused by its number before it is held.
  const std::string big = write("big-line.jsonl", "\n" + std::string(100'000'000, 'x') + "\n");
  const auto line = run_in_bounded_memory("validate " + big);
  EXPECT_EQ(line.code, 2) << line.out;
  EXPECT_NE(line.out.find(big + ":2: line 2 is longer than 1.0 MiB"), std::string::npos) << line.out;
  std::filesystem::remove(big);
}

// `calibrate -o /dev/full` exited 0 with nothing written; so did a full standard output.
TEST(InputLimits, AFailedWriteIsASystemError) {
  const auto file = run("calibrate " + kCalibration + " -o /dev/full");
  EXPECT_EQ(file.code, 3) << file.out;
  EXPECT_NE(file.out.find("cannot write '/dev/full': No space left on device"), std::string::npos) << file.out;
  // Standard output on a full device: the message on stderr, the exit code 3.
  const auto out = shell(std::string(TRAINFIT_CLI) + " calibrate " + kCalibration + " 2>&1 >/dev/full");
  EXPECT_EQ(out.code, 3) << out.out;
  EXPECT_NE(out.out.find("trainfit: cannot write standard output"), std::string::npos) << out.out;
}

// Step times in microseconds fit host_seconds_per_op = 32.7 s, which `plan --profile` refuses:
// calibrate refuses it first, naming the parameter and the likely cause, and writes nothing.
TEST(InputLimits, CalibrateRefusesAFitAProfileCannotHold) {
  std::ifstream in(kCalibration);
  std::string row, scaled;
  while (std::getline(in, row)) {
    if (row.empty()) continue;
    auto j = nlohmann::json::parse(row);
    auto& m = j["measured"];
    for (auto& [key, value] : m.items())
      if (key.rfind("step_seconds", 0) == 0 && value.is_number()) value = value.get<double>() * 1e6;
    scaled += j.dump() + "\n";
  }
  const std::string path = write("microseconds.jsonl", scaled);
  const std::string profile = ::testing::TempDir() + "/microseconds.toml";
  std::filesystem::remove(profile);
  const auto r = run("calibrate " + path + " -o " + profile);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("calibrate: the fitted host_seconds_per_op is 32.7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("are they in seconds?"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(profile));
}

// Values that plan something nobody asked for are refused.
TEST(InputLimits, ValuesThatNameNothingAreRefused) {
  const auto vram = run("plan --model qwen2.5-7b --vram 24");
  EXPECT_EQ(vram.code, 2) << vram.out;
  EXPECT_NE(vram.out.find("--vram: must be between 1.0 GiB and 16.0 TiB (got 24, that is 24 bytes"), std::string::npos)
      << vram.out;
  const auto targets = run("plan --model qwen2.5-7b --gpu h200 --lora-targets nonexistent_proj");
  EXPECT_EQ(targets.code, 2) << targets.out;
  EXPECT_NE(targets.out.find("--lora-targets: 'nonexistent_proj' names no module of qwen2.5-7b"), std::string::npos)
      << targets.out;
  EXPECT_NE(targets.out.find("q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"), std::string::npos)
      << targets.out;
  EXPECT_EQ(run("plan --model qwen2.5-7b --gpu h200 --lora-targets all-linear --no-suggest").code, 0);
  const auto model = run("plan --model ''");
  EXPECT_EQ(model.code, 2) << model.out;
  EXPECT_NE(model.out.find("--model: empty name"), std::string::npos) << model.out;
  const auto dir = run("plan --model qwen2.5-0.5b --gpu h200 --profile " + ::testing::TempDir());
  EXPECT_EQ(dir.code, 2) << dir.out;
  EXPECT_NE(dir.out.find("it is a directory"), std::string::npos) << dir.out;
  const auto seq = run("plan --model qwen2.5-0.5b --gpu h200 --headroom 9223372036854775808");
  EXPECT_EQ(seq.code, 2) << seq.out;
  EXPECT_NE(seq.out.find("(got 9223372036854775808)"), std::string::npos) << seq.out;
}

// Nothing to compare is not "0 rows: median error 0.0%", nothing to fit not a fit.
TEST(InputLimits, NoRowsToCompareOrFitIsAnError) {
  const auto validate = run("validate /dev/null");
  EXPECT_EQ(validate.code, 2) << validate.out;
  EXPECT_NE(validate.out.find("/dev/null: no rows to compare"), std::string::npos) << validate.out;
  const std::string failed = write("failed.jsonl", R"({"config": {"model": "qwen2.5-0.5b"}, "measured": {"status": "oom"}})" "\n");
  EXPECT_EQ(run("validate " + failed).code, 2);
  const auto calibrate = run("calibrate /dev/null");
  EXPECT_EQ(calibrate.code, 2) << calibrate.out;
  EXPECT_NE(calibrate.out.find("/dev/null: no timed rows"), std::string::npos) << calibrate.out;
}

// An unknown model or card in a row is found when the row is compared: the error names the row.
TEST(InputLimits, RowErrorsNameFileAndLine) {
  const std::string path = write("unknown-model.jsonl",
                                 "\n" R"({"config": {"model": "qwen2.5-0.5b", "gpu": "no-such-gpu"}, )"
                                 R"("measured": {"peak_allocated_mib": 4000, "step_seconds_median": 0.1}})" "\n");
  const auto validate = run("validate " + path);
  EXPECT_EQ(validate.code, 2) << validate.out;
  EXPECT_NE(validate.out.find(path + ":2: "), std::string::npos) << validate.out;
  const auto calibrate = run("calibrate " + path);
  EXPECT_EQ(calibrate.code, 2) << calibrate.out;
  EXPECT_NE(calibrate.out.find(path + ":2: "), std::string::npos) << calibrate.out;
}

// 1,000 rows (the calibration file repeated) took 24 s; the fitted profile is the same.
// The speed of this fit is measured by BM_CalibrateThousandSteps (bench/); here, its outcome.
TEST(InputLimits, CalibrateFitsAThousandRows) {
  std::ifstream in(kCalibration);
  std::vector<std::string> rows;
  for (std::string row; std::getline(in, row);)
    if (!row.empty()) rows.push_back(row);
  std::string text;
  for (std::size_t i = 0; i < 1000; ++i) text += rows[i % rows.size()] + "\n";
  const std::string path = write("thousand.jsonl", text);
  const auto r = run("calibrate " + path);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("fitted to 1000 steps"), std::string::npos) << r.out;
}

}  // namespace
