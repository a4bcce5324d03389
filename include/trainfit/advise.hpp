#pragma once
// `trainfit advise`: the setups that fit, searched over the settings the user leaves free, ranked
// for what the user wants (docs/advise.md).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainfit/hardware.hpp"
#include "trainfit/model.hpp"
#include "trainfit/plan.hpp"
#include "trainfit/settings.hpp"
#include "trainfit/setup.hpp"
#include "trainfit/time.hpp"

namespace trainfit {

struct PriceTable;

enum class AdviseGoal {
  fastest,        // the most tokens a second
  largest_batch,  // the largest micro-batch
  longest_seq,    // the longest sequence
  least_memory,   // the lowest peak allocated memory
  cheapest,       // the lowest cost for the tokens to train
  fewest_gpus,    // the fewest GPUs (up to gpus_max), then the most tokens a second
};
AdviseGoal parse_advise_goal(std::string_view s);  // InputError listing the goals
std::string to_string(AdviseGoal g);

// The settings advise may vary, by settings-table key, and the keys that are free unless the
// user fixes them (or gives them: a setting given on the command line is fixed).
const std::vector<std::string>& advisable_settings();
const std::vector<std::string>& free_by_default();

struct AdviseRequest {
  TrainingSetup base;              // the user's setup: the values of the fixed settings
  std::vector<std::string> free;   // keys of advisable_settings() the search varies
  std::vector<std::string> cards;  // catalogue ids to try; empty: the base's card only
  std::int64_t gpus_max = 1;       // with "gpus" free: 1, 2, 4... up to this
  // Tokens per optimizer step, all GPUs together (seq x batch x grad_accum x gpus), held while
  // batch, accumulation and GPU count vary. 0: the base's.
  std::int64_t tokens_per_step = 0;
  bool tokens_per_step_implied = false;  // set by make_advise_request from --gpus-max (docs/advise.md)
  AdviseGoal goal = AdviseGoal::fastest;
  double tokens = 0;                   // tokens to train, for hours and cost (0: none)
  const PriceTable* prices = nullptr;  // for cost; required by the cheapest goal
  std::size_t top = 5;
  std::optional<TimeProfile> profile;  // default: each card's default profile
};

struct AdvisedSetup {
  TrainingSetup setup;            // complete: model, card and every setting
  std::vector<std::string> args;  // setup_to_args(setup): `trainfit plan` reproduces it
  GpuSpec gpu;
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t device_used_bytes = 0;
  Verdict verdict = Verdict::fits;
  double headroom_fraction = 0;  // 1 - peak allocated / capacity
  double step_seconds = 0;       // 0 when the card's rates are unknown
  double tokens_per_second = 0;
  double hours = 0;                    // for request.tokens; 0 without tokens or a time (JSON: null)
  std::optional<double> cost;          // USD, with a price for the card
  std::optional<double> usd_per_hour;  // one GPU
  std::string why;                     // why it ranks where it does
};

struct Advice {
  std::vector<AdvisedSetup> results;  // best first, at most request.top
  // The fitting setups no other beats on both peak memory and tokens a second, lowest memory first.
  std::vector<AdvisedSetup> pareto;
  // When nothing fits: the setup that came nearest (least over the card less its headroom).
  std::optional<AdvisedSetup> nearest;
  // How far it is over: its peak allocated past the card less the headroom, or its device use past
  // the card, whichever is further.
  std::int64_t nearest_over_bytes = 0;
  // For the largest-batch and longest-seq goals: the boundary with all else as the first result
  // (the largest that runs at all, past the headroom the recommendation keeps).
  std::optional<Boundary> boundary;
  std::string refusal;       // when none was judged: why the first setup of the search was refused
  std::size_t judged = 0;    // setups whose memory was estimated
  std::size_t searched = 0;  // setups in the grid, including those skipped by monotonicity
  double seconds = 0;        // wall time of the search
};

// advise's inputs as a front end received them (`trainfit advise`'s flags, the query of `trainfit
// serve`'s /api/advise), turned into a request by make_advise_request: one reading of them for both.
struct AdviseInputs {
  std::vector<GivenSetting> given;  // the settings given, except `gpu` and `method` (their text below)
  std::string gpu_text;             // `gpu` as given ("" when not): a card, a list "a100-80gb,h100-sxm", or "any"
  std::string method_text;          // `method` as given ("" when not): a method, or "any"
  std::string goal = "fastest";
  std::string free, fix;  // comma lists of settings (keys or flag names) to vary as well / to hold
  std::int64_t gpus_max = 1, top = 5, tokens_per_step = 0;
  double tokens = 0, epochs = 0, dataset_tokens = 0;  // tokens to train, or epochs x dataset tokens
  std::optional<TimeProfile> profile;
};
// The request those inputs describe: the given settings fixed, free_by_default() less those given,
// plus `free`, less `fix`; `prices` must outlive the request. Throws InputError / SettingError
// naming the flag.
AdviseRequest make_advise_request(const AdviseInputs& inputs, const PriceTable& prices);

// Searches the grid the request describes. Throws InputError for a request that names nothing to
// search (an unknown setting, no price for the cheapest goal...). Nothing fitting is not an
// error: results is empty and `nearest` says what came closest.
Advice advise(const ModelSpec& model, const AdviseRequest& request);

}  // namespace trainfit
