// trainfit advise: every result is the command it prints, ranked for its goal, and the search's
// pruning by monotonicity loses nothing an exhaustive search finds.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "support/plan_args.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit {
namespace {

AdviseRequest request(const char* model, const char* card, std::int64_t seq) {
  AdviseRequest r;
  r.base.model = model;
  r.base.gpu = card;
  r.base.seq = seq;
  r.base.batch = 8;  // the tokens of a step: 8 sequences
  r.free = free_by_default();
  return r;
}

void expect_reproduces(const AdvisedSetup& a) {
  const TrainingSetup s = testing::setup_from_plan_args(a.args);
  PlanOptions o;
  o.suggest = false;
  const Plan p = make_plan(load_model(s.model), s, resolve_card(s), o);
  EXPECT_EQ(p.memory.peak_allocated_bytes, a.peak_allocated_bytes) << plan_command(a.args);
  EXPECT_EQ(p.memory.device_used_bytes, a.device_used_bytes) << plan_command(a.args);
  EXPECT_EQ(p.verdict, a.verdict) << plan_command(a.args);
  EXPECT_EQ(p.time.step_seconds, a.step_seconds) << plan_command(a.args);
}

TEST(Advise, EveryResultIsItsCommandAndFits) {
  AdviseRequest r = request("mistral-7b", "a100-40gb", 2048);
  r.gpus_max = 4;
  const Advice a = advise(load_model("mistral-7b"), r);
  ASSERT_EQ(a.results.size(), 5u);
  for (const AdvisedSetup& s : a.results) {
    EXPECT_EQ(s.verdict, Verdict::fits);
    expect_reproduces(s);
    // The tokens of an optimizer step are held: 8 sequences of 2048, however they are cut.
    EXPECT_EQ(s.setup.batch * s.setup.grad_accum * s.setup.gpus, 8);
  }
  for (std::size_t i = 1; i < a.results.size(); ++i)
    EXPECT_GE(a.results[i - 1].tokens_per_second * 1.002, a.results[i].tokens_per_second);
  for (const AdvisedSetup& s : a.pareto) expect_reproduces(s);
  EXPECT_GT(a.judged, 0u);
  EXPECT_GE(a.searched, a.judged);
}

// The front of memory against speed: each point uses more memory and is faster than the one before.
TEST(Advise, TheParetoFrontIsNonDominated) {
  const Advice a = advise(load_model("qwen2.5-7b"), request("qwen2.5-7b", "h100-sxm", 2048));
  ASSERT_GE(a.pareto.size(), 2u);
  for (std::size_t i = 1; i < a.pareto.size(); ++i) {
    EXPECT_GT(a.pareto[i].peak_allocated_bytes, a.pareto[i - 1].peak_allocated_bytes);
    EXPECT_GT(a.pareto[i].tokens_per_second, a.pareto[i - 1].tokens_per_second);
  }
  EXPECT_EQ(a.pareto.back().tokens_per_second, a.results.front().tokens_per_second);
}

// Pruning at the first micro-batch over the card finds what planning every point finds.
TEST(Advise, PruningLosesNothingAgainstAnExhaustiveSearch) {
  for (const char* card : {"rtx-4090", "a100-40gb", "h100-sxm"}) {
    AdviseRequest r = request("llama3.1-8b", card, 2048);
    r.base.batch = 16;
    const Advice a = advise(load_model("llama3.1-8b"), r);
    double best = 0;
    std::size_t fitting = 0;
    for (const bool ckpt : {false, true})
      for (const Attention attn : {Attention::sdpa, Attention::eager})
        for (const Optimizer opt : {Optimizer::adamw, Optimizer::adamw_8bit})
          for (std::int64_t b = 1; b <= 16; b *= 2) {
            TrainingSetup s = r.base;
            s.grad_ckpt = ckpt;
            s.attention = attn;
            s.optimizer = opt;
            s.batch = b;
            s.grad_accum = 16 / b;
            PlanOptions o;
            o.suggest = false;
            const Plan p = make_plan(load_model("llama3.1-8b"), s, find_gpu(card), o);
            if (p.verdict != Verdict::fits) continue;
            ++fitting;
            best = std::max(best, p.time.tokens_per_second);
          }
    if (fitting == 0) {
      EXPECT_TRUE(a.results.empty()) << card;
      continue;
    }
    ASSERT_FALSE(a.results.empty()) << card;
    EXPECT_EQ(a.results.front().tokens_per_second, best) << card;
  }
}

TEST(Advise, GoalsRankByWhatTheyAskFor) {
  AdviseRequest r = request("qwen2.5-7b", "rtx-4090", 1024);
  r.base.method = Method::qlora;
  r.base.weights = DType::nf4;
  r.base.batch = 1;
  r.goal = AdviseGoal::largest_batch;
  const Advice big = advise(load_model("qwen2.5-7b"), r);
  ASSERT_FALSE(big.results.empty());
  for (std::size_t i = 1; i < big.results.size(); ++i)
    EXPECT_GE(big.results[i - 1].setup.batch, big.results[i].setup.batch);
  // The largest batch fits; twice it does not, with the same other settings.
  TrainingSetup twice = big.results.front().setup;
  twice.batch *= 2;
  PlanOptions o;
  o.suggest = false;
  EXPECT_NE(make_plan(load_model("qwen2.5-7b"), twice, find_gpu("rtx-4090"), o).verdict, Verdict::fits);

  r.goal = AdviseGoal::least_memory;
  const Advice small = advise(load_model("qwen2.5-7b"), r);
  for (std::size_t i = 1; i < small.results.size(); ++i)
    EXPECT_LE(small.results[i - 1].peak_allocated_bytes, small.results[i].peak_allocated_bytes);

  r.goal = AdviseGoal::longest_seq;
  const Advice longest = advise(load_model("qwen2.5-7b"), r);
  ASSERT_FALSE(longest.results.empty());
  EXPECT_GT(longest.results.front().setup.seq, 1024);
  for (const AdvisedSetup& s : longest.results) expect_reproduces(s);
}

TEST(Advise, CheapestRanksByTheCostOfTheTokensAndSkipsUnpricedCards) {
  AdviseRequest r = request("llama3.1-8b", "h100-sxm", 2048);
  for (const GpuSpec& g : gpu_catalog()) r.cards.push_back(g.id);
  r.free.push_back("gpu");
  r.goal = AdviseGoal::cheapest;
  r.tokens = 1e9;
  r.prices = &builtin_prices();
  const Advice a = advise(load_model("llama3.1-8b"), r);
  ASSERT_EQ(a.results.size(), 5u);
  for (std::size_t i = 0; i < a.results.size(); ++i) {
    const AdvisedSetup& s = a.results[i];
    ASSERT_TRUE(s.cost.has_value());
    const GpuPrice* price = builtin_prices().find(s.gpu.id);
    ASSERT_NE(price, nullptr);
    // cost = tokens / tokens a second / 3600 x GPUs x the price of one GPU an hour
    EXPECT_NEAR(*s.cost, 1e9 / s.tokens_per_second / 3600 * static_cast<double>(s.setup.gpus) * price->usd_per_hour,
                1e-9 * *s.cost);
    if (i > 0) {
      EXPECT_LE(*a.results[i - 1].cost, *s.cost * 1.002);
    }
  }
}

TEST(Advise, GivenSettingsStayAsGiven) {
  AdviseRequest r = request("qwen2.5-7b", "a100-80gb", 2048);
  std::erase(r.free, "optimizer");
  std::erase(r.free, "grad_ckpt");
  r.base.grad_ckpt = true;
  const Advice a = advise(load_model("qwen2.5-7b"), r);
  ASSERT_FALSE(a.results.empty());
  for (const AdvisedSetup& s : a.results) {
    EXPECT_EQ(s.setup.optimizer, Optimizer::adamw);
    EXPECT_TRUE(s.setup.grad_ckpt);
  }
}

TEST(Advise, NothingFitsSaysWhatCameNearestAndByHowMuch) {
  AdviseRequest r = request("llama3.1-70b", "rtx-4090", 4096);
  r.base.method = Method::full;
  const Advice a = advise(load_model("llama3.1-70b"), r);
  EXPECT_TRUE(a.results.empty());
  ASSERT_TRUE(a.nearest.has_value());
  const std::string line = nothing_fits_message(a);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(line.find("nothing fits: the nearest, `trainfit plan --model llama3.1-70b"), std::string::npos) << line;
  EXPECT_NE(line.find(" over"), std::string::npos) << line;
}

TEST(Advise, RequestsThatNameNothingToSearchAreErrors) {
  AdviseRequest r = request("qwen2.5-7b", "h100-sxm", 2048);
  r.free.push_back("lora_dropout");
  EXPECT_THROW(advise(load_model("qwen2.5-7b"), r), InputError);
  r = request("qwen2.5-7b", "h100-sxm", 2048);
  r.goal = AdviseGoal::cheapest;  // no tokens, no prices
  EXPECT_THROW(advise(load_model("qwen2.5-7b"), r), InputError);
  EXPECT_THROW(parse_advise_goal("quickest"), InputError);
}

}  // namespace
}  // namespace trainfit

namespace trainfit {
namespace {

// A card from a GPU spec file or known by its memory stays as the user named it in each command.
TEST(Advise, ACardFromASpecFileOrAMemorySizeStaysInTheCommand) {
  AdviseRequest r = request("qwen2.5-1.5b", "", 1024);
  r.base.gpu.clear();
  r.base.gpu_spec = std::string(TRAINFIT_SOURCE_DIR) + "/data/gpus/l4.toml";
  const Advice a = advise(load_model("qwen2.5-1.5b"), r);
  ASSERT_FALSE(a.results.empty());
  for (const AdvisedSetup& s : a.results) {
    EXPECT_NE(std::find(s.args.begin(), s.args.end(), "--gpu-spec"), s.args.end()) << plan_command(s.args);
    expect_reproduces(s);
  }
}

}  // namespace
}  // namespace trainfit
