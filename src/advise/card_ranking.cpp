// Every catalogue card ranked for one setup (`trainfit gpus --for`): which cards fit, how fast the
// setup runs on each, and what the tokens cost there (docs/prices.md).
#include <algorithm>
#include <utility>

#include "trainfit/hardware.hpp"
#include "trainfit/card_ranking.hpp"

namespace trainfit {
namespace {

// Cards that fit come first, those that fit only under the headroom policy next, those that do
// not fit at all last.
int fit_group(Verdict v) {
  switch (v) {
    case Verdict::fits: return 0;
    case Verdict::tight: return 1;
    case Verdict::spills:
    case Verdict::oom: return 2;
  }
  return 2;
}

bool ranks_before(const CardRank& a, const CardRank& b) {
  const int ga = fit_group(a.plan.verdict), gb = fit_group(b.plan.verdict);
  if (ga != gb) return ga < gb;
  // A card that does not fit is the nearer to fitting the less it is over.
  if (ga == 2) return a.plan.over_capacity_bytes < b.plan.over_capacity_bytes;
  const auto cost = [](const CardRank& c) { return c.run ? c.run->usd : std::nullopt; };
  const auto ca = cost(a), cb = cost(b);
  if (ca.has_value() != cb.has_value()) return ca.has_value();  // priced cards first: they can be compared
  if (ca && *ca != *cb) return *ca < *cb;
  const auto speed = [](const CardRank& c) { return c.run ? c.plan.time.tokens_per_second : 0.0; };
  return speed(a) > speed(b);
}

}  // namespace

std::vector<CardRank> rank_cards(const ModelSpec& model, const TrainingSetup& setup, const PriceTable& prices,
                                 double tokens) {
  check_training_tokens(tokens);
  PlanOptions options;
  options.suggest = false;  // the other cards are the alternatives here
  std::vector<CardRank> ranks;
  for (const GpuSpec& gpu : gpu_catalog()) {
    TrainingSetup on_card = setup;
    on_card.gpu = gpu.id;  // each plan's setup names the card it was planned on
    on_card.gpu_spec.clear();
    on_card.vram_bytes.reset();
    CardRank rank;
    rank.plan = make_plan(model, on_card, gpu, options);
    if (const GpuPrice* price = prices.find(gpu.id)) rank.price = *price;
    // An out-of-memory step never completes: it has no time, whatever the time model says of a
    // step that would fit. A spilling one runs, slowly, and its time says how slowly.
    if (rank.plan.verdict != Verdict::oom && rank.plan.time.predicted)
      rank.run = run_cost(rank.plan.time.tokens_per_second, on_card.gpus, tokens, rank.price ? &*rank.price : nullptr);
    ranks.push_back(std::move(rank));
  }
  std::stable_sort(ranks.begin(), ranks.end(), ranks_before);
  return ranks;
}

}  // namespace trainfit
