// `trainfit gpus --for`: every catalogue card ranked for a setup, as a user runs it.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "run_cli.hpp"

namespace {

using Result = trainfit::testing::CliResult;
Result run(const std::string& args) { return trainfit::testing::run_cli(args); }

constexpr const char* kLora8b = "gpus --for --model llama3.1-8b --method lora --seq 2048";

const nlohmann::json& result_for(const nlohmann::json& j, const std::string& gpu) {
  for (const auto& r : j["results"])
    if (r["gpu"] == gpu) return r;
  throw std::runtime_error("no result for " + gpu);
}

// The catalogue's and the ranking's tables and notes keep to a terminal's 100 columns, whatever the
// rows hold (the widest card ids, AMD's link name, verdicts hundreds of GiB over).
TEST(GpusFor, TablesKeepTo100Columns) {
  for (const std::string args : {"gpus", "gpus --for --model qwen2.5-7b", "gpus --for --model qwen2.5-72b --method full"}) {
    const auto r = run(args);
    ASSERT_EQ(r.code, 0) << args << r.out;
    std::istringstream lines(r.out);
    std::string line;
    int rows = 0;
    while (std::getline(lines, line)) {
      EXPECT_LE(line.size(), 100u) << args << ": " << line;
      ++rows;
    }
    EXPECT_GT(rows, 20) << args;
  }
}

TEST(GpusFor, JsonRanksEveryCardWithItsCost) {
  const auto r = run(std::string(kLora8b) + " --tokens 1e9 --format json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "trainfit.gpus-for/1");
  EXPECT_EQ(j["tokens"], 1e9);
  EXPECT_EQ(j["prices"], "built-in (data/prices/gpu-hourly.toml)");
  EXPECT_EQ(j["setup"]["model"], "llama3.1-8b");
  EXPECT_EQ(j["setup"]["seq"], 2048);
  EXPECT_FALSE(j["setup"].contains("gpu"));  // each result names its own card
  const auto catalogue = nlohmann::json::parse(run("gpus --format json").out);
  ASSERT_EQ(j["results"].size(), catalogue.size());
  for (const auto& res : j["results"]) {
    for (const char* key : {"gpu", "verdict", "peak_allocated_bytes", "step_seconds", "tokens_per_second", "hours",
                            "usd_per_hour", "cost", "price_source"})
      EXPECT_TRUE(res.contains(key)) << key;
  }

  // An 80 GB card fits the setup and is costed: hours at its tokens/s, times its price.
  const auto& h100 = result_for(j, "h100-sxm");
  EXPECT_EQ(h100["verdict"], "fits");
  const double hours = h100["hours"].get<double>();
  EXPECT_NEAR(hours, 1e9 / h100["tokens_per_second"].get<double>() / 3600.0, 1e-9 * hours);
  EXPECT_DOUBLE_EQ(h100["usd_per_hour"].get<double>(), 3.99);
  EXPECT_NEAR(h100["cost"].get<double>(), hours * 3.99, 1e-9 * hours);
  EXPECT_NE(h100["price_source"].get<std::string>().find("runpod.io"), std::string::npos);
  // A 16 GB card cannot hold it: ranked last of all, over capacity, with no time and no cost.
  const auto& small = result_for(j, "rtx-4060-ti-16gb");
  EXPECT_EQ(small["verdict"], "oom");
  EXPECT_GT(small["over_capacity_bytes"].get<long long>(), 0);
  EXPECT_TRUE(small["step_seconds"].is_null());
  EXPECT_TRUE(small["hours"].is_null());
  EXPECT_TRUE(small["cost"].is_null());
  EXPECT_EQ(j["results"].front()["verdict"], "fits");
  EXPECT_EQ(j["results"].back()["verdict"], "oom");
  // A card without a price has hours but no cost.
  const auto& unpriced = result_for(j, "v100");
  EXPECT_TRUE(unpriced["usd_per_hour"].is_null());
  EXPECT_TRUE(unpriced["cost"].is_null());
}

TEST(GpusFor, TableAndMarkdownShowTheRanking) {
  const auto table = run(kLora8b);
  ASSERT_EQ(table.code, 0) << table.out;
  EXPECT_NE(table.out.find("1,000,000,000 tokens"), std::string::npos) << table.out;  // the default --tokens
  EXPECT_NE(table.out.find("built-in (data/prices/gpu-hourly.toml)"), std::string::npos);
  EXPECT_NE(table.out.find("h100-sxm"), std::string::npos);
  EXPECT_NE(table.out.find("$3.99"), std::string::npos);
  EXPECT_NE(table.out.find("oom +"), std::string::npos);  // how far over
  EXPECT_LT(table.out.find("h100-sxm"), table.out.find("rtx-4060-ti-16gb"));
  const auto md = run(std::string(kLora8b) + " --format markdown");
  ASSERT_EQ(md.code, 0) << md.out;
  EXPECT_NE(md.out.find("| card | peak allocated |"), std::string::npos);
  EXPECT_NE(md.out.find("| h100-sxm |"), std::string::npos);
}

TEST(GpusFor, DataParallelGpusMultiplyTheCost) {
  const auto one = nlohmann::json::parse(run(std::string(kLora8b) + " --format json").out);
  const auto two = run(std::string(kLora8b) + " --gpus 2 --format json");
  ASSERT_EQ(two.code, 0) << two.out;
  const auto both = nlohmann::json::parse(two.out);
  const auto& h = result_for(both, "h100-sxm");
  EXPECT_NEAR(h["cost"].get<double>(), h["hours"].get<double>() * 2 * 3.99, 1e-6);
  EXPECT_LT(h["hours"].get<double>(), result_for(one, "h100-sxm")["hours"].get<double>());
}

TEST(GpusFor, UsersPricesReplaceTheBuiltInOnes) {
  const std::string path = testing::TempDir() + "/my-prices.toml";
  std::ofstream(path) << "[h100-sxm]\nusd_per_hour = 1.5\n\n[v100]\nusd_per_hour = 0.25\n";
  const auto r = run(std::string(kLora8b) + " --prices " + path + " --format json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prices"], path + " over built-in (data/prices/gpu-hourly.toml)");
  EXPECT_DOUBLE_EQ(result_for(j, "h100-sxm")["usd_per_hour"].get<double>(), 1.5);
  EXPECT_EQ(result_for(j, "h100-sxm")["price_source"], path);
  EXPECT_DOUBLE_EQ(result_for(j, "v100")["usd_per_hour"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(result_for(j, "a100-80gb")["usd_per_hour"].get<double>(), 1.79);  // kept

  std::ofstream(path) << "[h100-sxn]\nusd_per_hour = 1.5\n";
  const auto bad = run(std::string(kLora8b) + " --prices " + path);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find("my-prices.toml:1: h100-sxn: not a catalogue id; did you mean 'h100-sxm'?"), std::string::npos)
      << bad.out;
  const auto dev = run(std::string(kLora8b) + " --prices /dev/zero");
  EXPECT_EQ(dev.code, 2);
  EXPECT_NE(dev.out.find("is larger than"), std::string::npos) << dev.out;
}

TEST(GpusFor, BadTokensAreRefused) {
  for (const char* bad : {"0", "-1", "nan", "inf", "1e99", "lots"}) {
    const auto r = run(std::string(kLora8b) + " --tokens=" + bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("--tokens"), std::string::npos) << r.out;
    const bool explained = r.out.find("must be a number of tokens above 0") != std::string::npos ||
                           r.out.find("is not a number of tokens") != std::string::npos;
    EXPECT_TRUE(explained) << bad << ": " << r.out;
  }
  EXPECT_EQ(run(std::string(kLora8b) + " --tokens 1000000000 --format json").code, 0);
}

TEST(GpusFor, RefusesWhatNamesOneCardAndNeedsAModel) {
  const auto gpu = run(std::string(kLora8b) + " --gpu h100");
  EXPECT_EQ(gpu.code, 2);
  EXPECT_NE(gpu.out.find("--gpu: gpus --for plans the setup on every card"), std::string::npos) << gpu.out;
  EXPECT_EQ(run(std::string(kLora8b) + " --vram 24GiB").code, 2);
  const auto no_model = run("gpus --for --method lora");
  EXPECT_EQ(no_model.code, 2);
  EXPECT_NE(no_model.out.find("gpus --for needs --model"), std::string::npos) << no_model.out;
  EXPECT_EQ(run("gpus --for --model no-such-model").code, 2);
}

TEST(GpusFor, WithoutForTheCatalogueIsListedAsBefore) {
  const auto r = run("gpus");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("rtx-5070-ti"), std::string::npos);
  // A setup flag without --for would be ignored: it is refused instead.
  const auto flag = run("gpus --model llama3.1-8b");
  EXPECT_EQ(flag.code, 2);
  EXPECT_NE(flag.out.find("--model describes a setup"), std::string::npos) << flag.out;
  EXPECT_EQ(run("gpus --tokens 1e9").code, 2);
  const auto help = run("gpus --help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("--for"), std::string::npos);
  EXPECT_NE(help.out.find("--tokens"), std::string::npos);
  EXPECT_NE(help.out.find("--prices"), std::string::npos);
}

}  // namespace
