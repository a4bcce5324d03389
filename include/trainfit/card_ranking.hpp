#pragma once
// Every catalogue card ranked for one setup (`trainfit gpus --for`): the setup planned on each
// card, with its price and what the tokens cost there (docs/prices.md). Above the plan (it plans
// every card) and the price table (trainfit/prices.hpp), which it reads.
#include <optional>
#include <vector>

#include "trainfit/model.hpp"
#include "trainfit/plan.hpp"
#include "trainfit/prices.hpp"
#include "trainfit/setup.hpp"

namespace trainfit {

// One catalogue card's answer for a setup: its plan, its price, and what the tokens cost on it.
struct CardRank {
  Plan plan;                      // make_plan on this card (no search for changes that fit)
  std::optional<GpuPrice> price;  // absent when the price table has none for the card
  // Hours (and dollars, with a price) to train the tokens; absent when the step cannot run on the
  // card (oom) or its time is unknown.
  std::optional<RunCost> run;
};
// The setup planned on every catalogue card (its own gpu, gpu_spec and vram are replaced by each
// card), best first: cards that fit (fits, then tight), each group by cost where priced, then by
// tokens/s; then cards that do not fit (spills, oom), the least over capacity first. Ties keep the
// catalogue's order. Throws what make_plan throws, and check_training_tokens' InputError.
std::vector<CardRank> rank_cards(const ModelSpec& model, const TrainingSetup& setup, const PriceTable& prices,
                                 double tokens);

}  // namespace trainfit
