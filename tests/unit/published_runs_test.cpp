// Published runs (`validate --published`): what a row must hold, errors that name the line and
// the field, and the figures read in the units and kinds the sources print.
#include <gtest/gtest.h>

#include <string>

#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

// A one-GPU run of a built-in model on a catalogue card, as torchtune's README prints one.
const std::string kRun =
    R"({"id": "a", "framework": "torchtune", "gpus": 1,
        "measured": {"tokens_per_sec": 7075, "peak_memory": 60.0, "memory_unit": "GiB", "memory_kind": "max_active"},
        "trainfit": {"setup": {"model": "llama3.2-3b", "gpu": "a100-80gb", "seq": 4096, "batch": 2, "weights": "bf16"}}})";

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n') c = ' ';
  return s;
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

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

TEST(PublishedRuns, ARunIsReadInTheUnitsAndKindsItsSourcePrints) {
  const auto runs = parse_published_runs(one_line(kRun), "runs.jsonl");
  ASSERT_EQ(runs.size(), 1u);
  const PublishedRun& r = runs[0];
  EXPECT_EQ(r.id, "a");
  ASSERT_TRUE(r.setup.has_value());
  EXPECT_EQ(r.setup->seq, 4096);
  // One GPU: the total throughput is the GPU's.
  ASSERT_TRUE(r.tokens_per_second_per_gpu.has_value());
  EXPECT_DOUBLE_EQ(*r.tokens_per_second_per_gpu, 7075);
  EXPECT_EQ(r.memory_kind, "active");
  EXPECT_DOUBLE_EQ(*r.memory_bytes, 60.0 * 1073741824.0);
  // GB are 1e9 bytes; a reserved peak is compared with the plan's reserved figure.
  const auto gb = parse_published_runs(
      one_line(replaced(replaced(kRun, R"("GiB")", R"("GB")"), "max_active", "max_reserved")), "runs.jsonl");
  EXPECT_DOUBLE_EQ(*gb[0].memory_bytes, 60e9);
  EXPECT_EQ(gb[0].memory_kind, "reserved");
}

TEST(PublishedRuns, FiguresTheSourceDoesNotPinDownAreNotCompared) {
  // A memory figure of no stated kind is not compared; a total throughput over several GPUs is
  // not a per-GPU one unless the row says why it is.
  const std::string unknown = replaced(replaced(kRun, "max_active", "unknown"), R"("gpus": 1)", R"("gpus": 8)");
  const auto runs = parse_published_runs(one_line(unknown), "runs.jsonl");
  EXPECT_FALSE(runs[0].memory_bytes.has_value());
  EXPECT_FALSE(runs[0].tokens_per_second_per_gpu.has_value());
  const auto per_gpu = parse_published_runs(
      one_line(replaced(unknown, R"("trainfit": {)", R"("trainfit": {"tokens_per_sec_is_per_gpu": true, )")),
      "runs.jsonl");
  EXPECT_DOUBLE_EQ(per_gpu[0].tokens_per_second_per_gpu.value_or(0), 7075);
  // The row's own reading of its memory kind (the framework's logging code) wins over "unknown".
  const auto kind = parse_published_runs(
      one_line(replaced(unknown, R"("trainfit": {)", R"("trainfit": {"memory_kind": "max_reserved", )")), "runs.jsonl");
  EXPECT_EQ(kind[0].memory_kind, "reserved");
}

TEST(PublishedRuns, MalformedRowsAreRefusedByLineAndField) {
  const auto error = [](const std::string& row) {
    return error_of([&] { (void)parse_published_runs(one_line(kRun) + "\n" + one_line(row), "runs.jsonl"); });
  };
  EXPECT_EQ(error("{"),
            "runs.jsonl:2: not JSON: [json.exception.parse_error.101] parse error at line 1, column 2: "
            "syntax error while parsing object key - unexpected end of input; expected string literal");
  EXPECT_EQ(error(kRun), "runs.jsonl:2: id 'a' is also line 1's");
  EXPECT_EQ(error(replaced(kRun, R"("id": "a", )", "")), "runs.jsonl:2: field \"id\" is missing");
  EXPECT_EQ(error(replaced(replaced(kRun, R"("id": "a")", R"("id": "b")"), R"("GiB")", R"("TB")")),
            "runs.jsonl:2: field \"memory_unit\": 'TB' is not GiB, GB or MiB");
  EXPECT_EQ(error(replaced(replaced(kRun, R"("id": "a")", R"("id": "b")"), "7075", "-1")),
            "runs.jsonl:2: field \"tokens_per_sec\" must be a positive number");
  const std::string b = replaced(kRun, R"("id": "a")", R"("id": "b")");
  EXPECT_EQ(error(replaced(b, R"("trainfit": {"setup")", R"("trainfit": {"not_expressed": ["x"], "setup")")),
            "runs.jsonl:2: field \"trainfit\" must hold either \"setup\" or \"not_expressed\"");
  EXPECT_EQ(error(R"({"id": "b", "trainfit": {"not_expressed": []}})"),
            "runs.jsonl:2: field \"not_expressed\" must be a non-empty list of what no setting describes");
  EXPECT_EQ(error(R"({"id": "b"})"),
            "runs.jsonl:2: field \"trainfit\" must be an object: the setup that expresses the run, or not_expressed");
  EXPECT_EQ(error(replaced(b, R"("gpu": "a100-80gb", )", "")),
            "runs.jsonl:2: field \"trainfit.setup\" names no card (gpu or gpu_spec)");
  // A setup the settings refuse is named as the settings name it.
  EXPECT_NE(error(replaced(b, R"("seq": 4096)", R"("seq": -4)")).find("runs.jsonl:2: "), std::string::npos);
}

TEST(PublishedRuns, TheComparisonCountsWhatNoSettingDescribes) {
  const std::string blocked_a = R"({"id": "b", "trainfit": {"not_expressed": ["torch.compile", "float8 linears"]}})";
  const std::string blocked_b = R"({"id": "c", "trainfit": {"not_expressed": ["torch.compile"]}})";
  const auto runs = parse_published_runs(one_line(kRun) + "\n" + blocked_a + "\n\n" + blocked_b + "\n", "runs.jsonl");
  const PublishedSummary s = compare_with_published(runs);
  EXPECT_EQ(s.runs, 3u);
  ASSERT_EQ(s.rows.size(), 1u);
  ASSERT_EQ(s.blocked_by.size(), 2u);
  EXPECT_EQ(s.blocked_by[0], (std::pair<std::string, std::size_t>{"torch.compile", 2}));
  EXPECT_EQ(s.blocked_by[1], (std::pair<std::string, std::size_t>{"float8 linears", 1}));
  // The one expressed run: planned on its card, both figures compared.
  const PublishedComparison& c = s.rows[0];
  ASSERT_TRUE(c.tokens_error.has_value());
  ASSERT_TRUE(c.memory_error.has_value());
  EXPECT_NEAR(*c.tokens_error, c.predicted_tokens_per_second_per_gpu / 7075 - 1, 1e-12);
  EXPECT_EQ(s.throughput_rows, 1u);
  EXPECT_EQ(s.memory_rows, 1u);
  EXPECT_EQ(c.time_profile_card, "h200");
  // An unknown model in an expressed run is an error that names the run's line.
  const auto unknown = parse_published_runs(one_line(replaced(kRun, "llama3.2-3b", "no-such-model")), "runs.jsonl");
  EXPECT_EQ(error_of([&] { (void)compare_with_published(unknown); }).rfind("runs.jsonl:1: ", 0), 0u);
}

}  // namespace
}  // namespace trainfit
