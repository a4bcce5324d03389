// GPU prices: the built-in file, users' price files and their rejections, merging, the cost of a
// run, and the catalogue ranked for a setup (docs/prices.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

std::string error_of(std::string_view toml) {
  try {
    (void)parse_prices(toml, "my-prices.toml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

TEST(BuiltinPrices, EveryPriceIsACatalogueCardWithItsSourceAndDate) {
  const PriceTable& t = builtin_prices();
  EXPECT_EQ(t.origin, "built-in (data/prices/gpu-hourly.toml)");
  ASSERT_GE(t.prices.size(), 16u);
  std::set<std::string> seen;
  for (const GpuPrice& p : t.prices) {
    SCOPED_TRACE(p.gpu);
    EXPECT_NO_THROW((void)find_gpu(p.gpu));
    EXPECT_EQ(find_gpu(p.gpu).id, p.gpu);  // keyed by id, not by an alias
    EXPECT_TRUE(seen.insert(p.gpu).second);
    EXPECT_GT(p.usd_per_hour, 0.0);
    EXPECT_LE(p.usd_per_hour, kMaxUsdPerGpuHour);
    EXPECT_FALSE(p.provider.empty());
    EXPECT_NE(p.kind, PriceKind::given);  // every built-in price says what kind it is
    EXPECT_FALSE(p.source.empty());
    ASSERT_EQ(p.date.size(), 10u);
    EXPECT_TRUE(p.date.starts_with("202")) << p.date;
    EXPECT_EQ(t.find(p.gpu), &p);
  }
  // One figure as the file gives it, and a card no provider was found renting (no row, no guess).
  ASSERT_NE(t.find("h100-sxm"), nullptr);
  EXPECT_DOUBLE_EQ(t.find("h100-sxm")->usd_per_hour, 3.99);
  EXPECT_EQ(t.find("h100-sxm")->provider, "RunPod Secure Cloud");
  EXPECT_EQ(t.find("h100-sxm")->date, "2026-11-09");
  EXPECT_EQ(t.find("h100-sxm")->kind, PriceKind::on_demand);
  ASSERT_NE(t.find("rtx-4090"), nullptr);
  EXPECT_EQ(t.find("rtx-4090")->kind, PriceKind::marketplace_floor);  // Akash's "starting at"
  ASSERT_NE(t.find("t4"), nullptr);
  EXPECT_EQ(t.find("t4")->kind, PriceKind::serverless);  // Modal, the GPU alone
  EXPECT_EQ(t.find("rtx-5070-ti"), nullptr);
  EXPECT_EQ(t.find("h100"), nullptr);  // find() takes ids, as the file's keys are
}

// The file the build embeds is the one in the tree: a price edited there is the price the binary has.
TEST(BuiltinPrices, AreTheFileInTheTree) {
  std::ifstream in(std::string(TRAINFIT_SOURCE_DIR) + "/data/prices/gpu-hourly.toml");
  std::stringstream text;
  text << in.rdbuf();
  const PriceTable from_file = parse_prices(text.str(), "gpu-hourly.toml");
  const PriceTable& built_in = builtin_prices();
  ASSERT_EQ(from_file.prices.size(), built_in.prices.size());
  for (std::size_t i = 0; i < built_in.prices.size(); ++i) {
    EXPECT_EQ(from_file.prices[i].gpu, built_in.prices[i].gpu);
    EXPECT_DOUBLE_EQ(from_file.prices[i].usd_per_hour, built_in.prices[i].usd_per_hour);
  }
}

TEST(PriceFile, OptionalLabelsDefaultToTheFile) {
  const PriceTable t = parse_prices(R"(
[h100-sxm]
usd_per_hour = 2.25
provider = "our reserved pool"
date = 2026-11-01

[a10]
usd_per_hour = 1
)",
                                    "my-prices.toml");
  EXPECT_EQ(t.origin, "my-prices.toml");
  ASSERT_EQ(t.prices.size(), 2u);
  EXPECT_EQ(t.prices[0].gpu, "h100-sxm");
  EXPECT_DOUBLE_EQ(t.prices[0].usd_per_hour, 2.25);
  EXPECT_EQ(t.prices[0].provider, "our reserved pool");
  EXPECT_EQ(t.prices[0].source, "my-prices.toml");  // no source: the file the price came from
  EXPECT_EQ(t.prices[0].date, "2026-11-01");        // a TOML date reads as YYYY-MM-DD
  EXPECT_DOUBLE_EQ(t.prices[1].usd_per_hour, 1.0);  // an integer price is a price
  EXPECT_EQ(t.prices[1].provider, "");
  EXPECT_EQ(t.prices[1].kind, PriceKind::given);  // a user's price need not say its kind
  EXPECT_EQ(parse_prices("[a10]\nusd_per_hour = 1\nkind = \"marketplace-floor\"\n", "f").prices[0].kind,
            PriceKind::marketplace_floor);
  EXPECT_TRUE(parse_prices("# nothing priced\n", "empty.toml").prices.empty());
}

TEST(PriceFile, TheDocumentedExampleReads) {
  const PriceTable t = load_prices(std::string(TRAINFIT_SOURCE_DIR) + "/docs/examples/example-prices.toml");
  ASSERT_EQ(t.prices.size(), 2u);
  EXPECT_EQ(t.prices[0].gpu, "h100-sxm");
  EXPECT_EQ(t.prices[0].source, "contract 2026-11");
  EXPECT_EQ(t.prices[1].gpu, "rtx-5080");
}

TEST(PriceFile, RejectsWhatIsNotAPrice) {
  EXPECT_TRUE(starts_with(error_of("[h100-sxm\nusd_per_hour = 2\n"), "my-prices.toml:1: invalid TOML"))
      << error_of("[h100-sxm\n");
  EXPECT_EQ(error_of("\n[h100-sxn]\nusd_per_hour = 2\n"),
            "my-prices.toml:2: h100-sxn: not a catalogue id; did you mean 'h100-sxm'? (`trainfit gpus` lists every id)");
  // A name --gpu forgives is still not the file's key: the id it means is named.
  EXPECT_EQ(error_of("[h100]\nusd_per_hour = 2\n"),
            "my-prices.toml:1: h100: not a catalogue id; did you mean 'h100-sxm'? (prices are keyed by id: `trainfit gpus`)");
  EXPECT_EQ(error_of("[h100-sxm]\nusd_per_hour = -1\n"),
            "my-prices.toml:2: h100-sxm.usd_per_hour: must be above 0 and at most 1000 USD an hour for one GPU (got -1)");
  EXPECT_EQ(error_of("[h100-sxm]\nusd_per_hour = 0\n"),
            "my-prices.toml:2: h100-sxm.usd_per_hour: must be above 0 and at most 1000 USD an hour for one GPU (got 0)");
  EXPECT_EQ(error_of("[h100-sxm]\nusd_per_hour = 25000\n"),
            "my-prices.toml:2: h100-sxm.usd_per_hour: must be above 0 and at most 1000 USD an hour for one GPU (got 25000)");
  EXPECT_EQ(error_of("[h100-sxm]\nusd_per_hour = nan\n"), "my-prices.toml:2: h100-sxm.usd_per_hour: must be a finite number");
  EXPECT_EQ(error_of("[h100-sxm]\nusd_per_hour = inf\n"), "my-prices.toml:2: h100-sxm.usd_per_hour: must be a finite number");
  EXPECT_EQ(error_of("[h100-sxm]\nusd_per_hour = \"2.99\"\n"),
            "my-prices.toml:2: h100-sxm.usd_per_hour: expected a number, got a string");
  EXPECT_EQ(error_of("[h100-sxm]\nprovider = \"x\"\n"),
            "my-prices.toml:1: h100-sxm.usd_per_hour: missing: the price of one GPU, USD an hour");
  EXPECT_TRUE(starts_with(error_of("[h100-sxm]\nusd_per_hour = 2\nusd_per_hr = 3\n"),
                          "my-prices.toml:3: h100-sxm.usd_per_hr: unknown field (known: usd_per_hour, kind, provider"));
  EXPECT_EQ(error_of("[h100-sxm]\nusd_per_hour = 2\nkind = \"spot\"\n"),
            "my-prices.toml:3: h100-sxm.kind: \"spot\" is not a kind of price (on-demand, marketplace-floor, serverless or given)");
  EXPECT_EQ(error_of("h100-sxm = 2.99\n"),
            "my-prices.toml:1: h100-sxm: expected a table [h100-sxm] holding usd_per_hour, got a float");
  // What a hand-edited file holds is shown escaped, never sent to the terminal as it is.
  EXPECT_EQ(error_of("[\"\\u001b[31mred\"]\nusd_per_hour = 2\n").find('\x1b'), std::string::npos);
}

TEST(PriceFile, ReadsAtMostAMebibyte) {
  try {
    (void)load_prices("/dev/zero");
    FAIL() << "/dev/zero was read as prices";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("price file '/dev/zero' is larger than"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)load_prices("/nonexistent/prices.toml"), InputError);
  const std::string path = ::testing::TempDir() + "/prices.toml";
  std::ofstream(path) << "[l4]\nusd_per_hour = 0.5\n";
  const PriceTable t = load_prices(path);
  EXPECT_EQ(t.origin, path);
  ASSERT_NE(t.find("l4"), nullptr);
  EXPECT_EQ(t.find("l4")->source, path);
}

TEST(PriceFile, ReplacesTheBuiltInPricesCardByCard) {
  const PriceTable mine = parse_prices("[h100-sxm]\nusd_per_hour = 2.25\n\n[v100]\nusd_per_hour = 0.5\n", "mine.toml");
  const PriceTable merged = merge_prices(builtin_prices(), mine);
  EXPECT_EQ(merged.origin, "mine.toml over built-in (data/prices/gpu-hourly.toml)");
  EXPECT_EQ(merged.prices.size(), builtin_prices().prices.size() + 1);  // v100 had none
  ASSERT_NE(merged.find("h100-sxm"), nullptr);
  EXPECT_DOUBLE_EQ(merged.find("h100-sxm")->usd_per_hour, 2.25);
  EXPECT_EQ(merged.find("h100-sxm")->source, "mine.toml");
  ASSERT_NE(merged.find("v100"), nullptr);
  EXPECT_DOUBLE_EQ(merged.find("v100")->usd_per_hour, 0.5);
  ASSERT_NE(merged.find("a100-80gb"), nullptr);  // left out by the user: the built-in price stays
  EXPECT_DOUBLE_EQ(merged.find("a100-80gb")->usd_per_hour, builtin_prices().find("a100-80gb")->usd_per_hour);
  EXPECT_EQ(merge_prices(builtin_prices(), PriceTable{}).origin, builtin_prices().origin);
}

TEST(RunCost, IsWallClockHoursTimesEveryGpuTimesThePrice) {
  GpuPrice price;
  price.usd_per_hour = 2.5;
  // 3.6 million tokens at 1000 tokens/s (both GPUs together) is one hour, rented twice.
  const RunCost c = run_cost(1000, 2, 3.6e6, &price);
  EXPECT_DOUBLE_EQ(c.hours, 1.0);
  ASSERT_TRUE(c.usd.has_value());
  EXPECT_DOUBLE_EQ(*c.usd, 5.0);
  const RunCost big = run_cost(12345, 1, 1e9, &price);
  EXPECT_DOUBLE_EQ(big.hours, 1e9 / 12345.0 / 3600.0);
  EXPECT_DOUBLE_EQ(*big.usd, big.hours * 2.5);
  const RunCost unpriced = run_cost(1000, 1, 3.6e6, nullptr);
  EXPECT_DOUBLE_EQ(unpriced.hours, 1.0);
  EXPECT_FALSE(unpriced.usd.has_value());
  const RunCost untimed = run_cost(0, 1, 3.6e6, &price);  // no time prediction: no hours, no cost
  EXPECT_DOUBLE_EQ(untimed.hours, 0.0);
  EXPECT_FALSE(untimed.usd.has_value());
  EXPECT_FALSE(run_cost(std::nan(""), 1, 3.6e6, &price).usd.has_value());
  EXPECT_THROW((void)run_cost(1000, 0, 3.6e6, &price), InputError);
  EXPECT_THROW((void)run_cost(1000, 1, 0, &price), InputError);
}

TEST(RunCost, TokensMustBeAPositiveFiniteCount) {
  for (const double bad : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity(), 2e15}) {
    try {
      check_training_tokens(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_TRUE(starts_with(e.what(), "must be a number of tokens above 0 and at most 1e+15 (got ")) << e.what();
    }
  }
  EXPECT_NO_THROW(check_training_tokens(1));
  EXPECT_NO_THROW(check_training_tokens(1e15));
}

TrainingSetup lora_8b(std::int64_t seq) {
  TrainingSetup s;
  s.model = "llama3.1-8b";
  s.method = Method::lora;
  s.seq = seq;
  return s;
}

const CardRank& rank_of(const std::vector<CardRank>& ranks, std::string_view id) {
  const auto it = std::find_if(ranks.begin(), ranks.end(), [&](const CardRank& r) { return r.plan.gpu.id == id; });
  if (it == ranks.end()) throw std::runtime_error("no rank for " + std::string(id));
  return *it;
}

int group(Verdict v) { return v == Verdict::fits ? 0 : v == Verdict::tight ? 1 : 2; }

TEST(RankCards, FittingCardsFirstCheapestFirstThenTheOnesOver) {
  const TrainingSetup setup = lora_8b(2048);
  const std::vector<CardRank> ranks = rank_cards(load_model("llama3.1-8b"), setup, builtin_prices(), 1e9);
  ASSERT_EQ(ranks.size(), gpu_catalog().size());

  // Llama-3.1-8B under LoRA at 2048 tokens without checkpointing peaks near 39 GiB (bf16 weights,
  // activations, logits): an 80 GB card fits it, a 16 GB card cannot hold it.
  const CardRank& h100 = rank_of(ranks, "h100-sxm");
  EXPECT_EQ(h100.plan.verdict, Verdict::fits);
  ASSERT_TRUE(h100.run.has_value());
  ASSERT_TRUE(h100.price.has_value());
  EXPECT_DOUBLE_EQ(h100.run->hours, 1e9 / h100.plan.time.tokens_per_second / 3600.0);
  EXPECT_DOUBLE_EQ(*h100.run->usd, h100.run->hours * 3.99);
  EXPECT_EQ(h100.plan.setup.gpu, "h100-sxm");
  const CardRank& small = rank_of(ranks, "rtx-4060-ti-16gb");
  EXPECT_EQ(small.plan.verdict, Verdict::oom);
  EXPECT_GT(small.plan.over_capacity_bytes, 0);
  EXPECT_FALSE(small.run.has_value());  // an oom step never runs: no hours, no cost

  for (std::size_t i = 1; i < ranks.size(); ++i) {
    const CardRank& a = ranks[i - 1];
    const CardRank& b = ranks[i];
    SCOPED_TRACE(a.plan.gpu.id + " before " + b.plan.gpu.id);
    ASSERT_LE(group(a.plan.verdict), group(b.plan.verdict));
    if (group(a.plan.verdict) != group(b.plan.verdict)) continue;
    if (group(a.plan.verdict) == 2) {
      EXPECT_LE(a.plan.over_capacity_bytes, b.plan.over_capacity_bytes);
      continue;
    }
    const bool a_priced = a.run && a.run->usd, b_priced = b.run && b.run->usd;
    EXPECT_TRUE(a_priced || !b_priced);  // priced cards before unpriced ones
    if (a_priced && b_priced) {
      EXPECT_LE(*a.run->usd, *b.run->usd);
    }
    if (!a_priced && !b_priced) {
      EXPECT_GE(a.plan.time.tokens_per_second, b.plan.time.tokens_per_second);
    }
  }
  EXPECT_EQ(group(ranks.front().plan.verdict), 0);
  EXPECT_EQ(group(ranks.back().plan.verdict), 2);
}

TEST(RankCards, DataParallelGpusMultiplyTheCost) {
  TrainingSetup two = lora_8b(2048);
  two.gpus = 2;
  const std::vector<CardRank> ranks = rank_cards(load_model("llama3.1-8b"), two, builtin_prices(), 1e9);
  const CardRank& h100 = rank_of(ranks, "h100-sxm");
  ASSERT_TRUE(h100.run && h100.run->usd);
  EXPECT_DOUBLE_EQ(*h100.run->usd, h100.run->hours * 2 * 3.99);
  EXPECT_THROW((void)rank_cards(load_model("llama3.1-8b"), two, builtin_prices(), -1), InputError);
}

TEST(RankCards, TheUsersPricesDecideTheOrder) {
  // Priced at a cent an hour, the H200 becomes the cheapest card that fits.
  const PriceTable prices = merge_prices(builtin_prices(), parse_prices("[h200]\nusd_per_hour = 0.01\n", "cheap.toml"));
  const std::vector<CardRank> ranks = rank_cards(load_model("llama3.1-8b"), lora_8b(2048), prices, 1e9);
  EXPECT_EQ(ranks.front().plan.gpu.id, "h200");
  // Without prices the fitting cards are ranked by speed alone.
  const std::vector<CardRank> unpriced = rank_cards(load_model("llama3.1-8b"), lora_8b(2048), PriceTable{}, 1e9);
  EXPECT_EQ(unpriced.front().plan.gpu.id, "b200");
}

}  // namespace
}  // namespace trainfit
