// advise's inputs (flags or a query string) as a request: the one reading `trainfit advise` and
// `trainfit serve`'s /api/advise share, so that both answer the same setup the same way.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "common/text.hpp"
#include "trainfit/advise.hpp"
#include "trainfit/error.hpp"
#include "trainfit/prices.hpp"

namespace trainfit {
namespace {

// "batch,grad-ckpt" or "batch,grad_ckpt": settings-table keys, each one advise can vary.
std::vector<std::string> setting_keys(const std::string& list, const char* flag) {
  std::vector<std::string> out;
  for (const std::string& name : detail::split_names(list)) {
    const Setting* s = find_setting(name);
    if (s == nullptr) s = find_setting_by_flag("--" + name);
    if (s == nullptr ||
        std::find(advisable_settings().begin(), advisable_settings().end(), s->key) == advisable_settings().end()) {
      std::vector<std::string> names;
      for (const std::string& k : advisable_settings()) names.push_back(find_setting(k)->flag.substr(2));
      throw InputError(
          fmt::format("{}: '{}' is not a setting advise varies; it varies {}", flag, name, fmt::join(names, ", ")));
    }
    out.push_back(s->key);
  }
  return out;
}

// A count: finite and positive.
double positive(double v, const char* flag) {
  if (!std::isfinite(v) || v <= 0) throw InputError(fmt::format("{}: must be a positive number (got {})", flag, v));
  return v;
}

void check_tokens(double tokens, const char* flag) {
  try {
    check_training_tokens(tokens);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", flag, e.what()));
  }
}

}  // namespace

AdviseRequest make_advise_request(const AdviseInputs& in, const PriceTable& prices) {
  AdviseRequest r;
  std::vector<GivenSetting> given = in.given;
  // The card and the method take "any" (and the card a list) here, which no setup can hold.
  if (!in.gpu_text.empty()) {
    if (in.gpu_text == "any") {
      for (const GpuSpec& g : gpu_catalog()) r.cards.push_back(g.id);
    } else if (in.gpu_text.find(',') != std::string::npos) {
      for (const std::string& id : detail::split_names(in.gpu_text)) r.cards.push_back(find_gpu(id).id);
    } else {
      const Setting* gpu = find_setting("gpu");
      given.emplace_back(gpu, parse_setting_text(*gpu, in.gpu_text));
    }
  }
  const bool any_method = in.method_text == "any";
  if (!in.method_text.empty() && !any_method) {
    const Setting* method = find_setting("method");
    given.emplace_back(method, parse_setting_text(*method, in.method_text));
  }
  if (!r.cards.empty()) given.emplace_back(find_setting("gpu"), SettingValue(r.cards.front()));
  r.base = resolve_setup(given);
  if (r.base.model.empty())
    throw SettingError("model", "name the model: a built-in name (`trainfit models`) or a path to a config.json");

  // Free: the defaults not given, then --free, less --fix.
  auto was_given = [&](const std::string& key) {
    if (key == "gpu") return !in.gpu_text.empty();
    if (key == "method") return !in.method_text.empty();
    return std::any_of(in.given.begin(), in.given.end(), [&](const GivenSetting& g) { return g.setting->key == key; });
  };
  for (const std::string& key : free_by_default())
    if (!was_given(key)) r.free.push_back(key);
  if (any_method) r.free.push_back("method");
  for (const std::string& key : setting_keys(in.free, "--free"))
    if (std::find(r.free.begin(), r.free.end(), key) == r.free.end()) r.free.push_back(key);
  for (const std::string& key : setting_keys(in.fix, "--fix")) std::erase(r.free, key);
  if (r.cards.size() > 1) r.free.push_back("gpu");

  r.goal = parse_advise_goal(in.goal);
  if (in.gpus_max < 1 || in.gpus_max > 1024)
    throw InputError(fmt::format("--gpus-max: must be 1-1024 (got {})", in.gpus_max));
  r.gpus_max = in.gpus_max;
  if (in.tokens_per_step < 0)
    throw InputError(fmt::format("--tokens-per-step: must be positive (got {})", in.tokens_per_step));
  r.tokens_per_step = in.tokens_per_step;
  // --gpus-max without a token budget: the setup's sequences a GPU, on the most GPUs tried. Held
  // on fewer GPUs by accumulating, every count of the search divides it; the setup's own budget
  // (its sequences on its own GPUs) would fit no count but its own, and a search for more GPUs
  // would try none (docs/advise.md, "GPUs").
  const bool gpus_free = std::find(r.free.begin(), r.free.end(), "gpus") != r.free.end();
  if (r.tokens_per_step == 0 && gpus_free && r.gpus_max > r.base.gpus) {
    std::int64_t most = 1;
    while (most * 2 <= r.gpus_max) most *= 2;
    r.tokens_per_step = r.base.seq * r.base.batch * r.base.grad_accum * most;
    r.tokens_per_step_implied = true;
  }
  if (in.top < 1 || in.top > 1000) throw InputError(fmt::format("--top: must be 1-1000 (got {})", in.top));
  r.top = static_cast<std::size_t>(in.top);
  if (in.tokens != 0) check_tokens(in.tokens, "--tokens");
  r.tokens = in.tokens;
  if (in.epochs != 0 || in.dataset_tokens != 0) {
    if (in.tokens != 0) throw InputError("give --tokens, or --epochs with --dataset-tokens, not both");
    if (in.dataset_tokens == 0) throw InputError("--epochs needs --dataset-tokens, the tokens of one pass");
    check_tokens(in.dataset_tokens, "--dataset-tokens");
    r.tokens = positive(in.epochs, "--epochs") * in.dataset_tokens;
    check_tokens(r.tokens, "--epochs x --dataset-tokens");
  }
  r.profile = in.profile;
  r.prices = &prices;
  return r;
}

}  // namespace trainfit
