#pragma once
// What a training run costs: the hourly price of renting each catalogue card (hardware/prices.cpp)
// and the hours and dollars a number of tokens takes at a predicted step rate. Ranking the cards
// for a setup plans each one: trainfit/card_ranking.hpp, a floor above. The figures and their
// assumptions are in docs/prices.md.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>


namespace trainfit {

// What kind of price a figure is: prices of different kinds compare only roughly (docs/prices.md).
//   on_demand          a provider's own list price for its data centres' GPUs, no commitment
//   marketplace_floor  a marketplace of independent hosts' "starting at": its cheapest listing
//   serverless         billed by the second for the GPU alone (CPU and memory on top)
//   given              a user's price file that does not say (a negotiated rate, a quote)
enum class PriceKind { on_demand, marketplace_floor, serverless, given };
std::string to_string(PriceKind k);  // "on-demand", "marketplace-floor", "serverless", "given"

struct GpuPrice {
  std::string gpu;            // catalogue id ("h100-sxm")
  double usd_per_hour = 0;    // one GPU
  PriceKind kind = PriceKind::given;
  std::string provider, source, date;
};

struct PriceTable {
  std::vector<GpuPrice> prices;
  std::string origin;         // "built-in (data/prices/gpu-hourly.toml)" or the user's file path
  const GpuPrice* find(std::string_view gpu_id) const;  // nullptr when the card has no price
};

// The prices a price file may hold: above 0 and at most this, in USD an hour for one GPU. One GPU
// rents on demand for a few dollars an hour, a few tens at the dearest hyperscaler; past $1000 a
// figure is a month's price, a cluster's, or a unit mistake.
inline constexpr double kMaxUsdPerGpuHour = 1000;

// data/prices/gpu-hourly.toml, compiled in: one published on-demand price a card, with its
// provider, source and date. Cards no provider was found renting have none.
const PriceTable& builtin_prices();
// A user's file in the same format (docs/prices.md): InputError "<file>:<line>: <field>: <why>" on
// malformed TOML, a card id that is not in the catalogue (with the closest id), a price that is not
// a number above 0 and at most kMaxUsdPerGpuHour (NaN and inf included), an unknown field, or a
// file larger than 1 MiB. `provider`, `source` and `date` may be left out (`source` is then the
// file's path).
PriceTable load_prices(std::string_view path);
// The same from text already in memory; `source` names it in errors and is the table's origin.
PriceTable parse_prices(std::string_view toml_text, std::string_view source);
// The user's prices replace the built-in ones card by card; cards the user leaves out keep theirs.
// The origin says both: "<overrides' origin> over <base's origin>".
PriceTable merge_prices(const PriceTable& base, const PriceTable& overrides);

// What training `tokens` tokens costs at this step rate: hours = tokens / tokens_per_second / 3600
// (wall-clock), usd = hours x gpus x usd_per_hour (absent without a price or without a time
// prediction: a tokens_per_second that is not above 0 gives 0 hours and no usd).
struct RunCost { double hours = 0; std::optional<double> usd; };
RunCost run_cost(double tokens_per_second, std::int64_t gpus, double tokens, const GpuPrice* price);

// The tokens a run may train: above 0 and at most this. The largest published pre-training runs
// are about 1.5e13 tokens; past 1e15 an exponent was mistyped.
inline constexpr double kMaxTrainingTokens = 1e15;
// Throws InputError "must be ..." (the caller names the value: "--tokens") when `tokens` is not a
// finite number in (0, kMaxTrainingTokens].
void check_training_tokens(double tokens);

}  // namespace trainfit
