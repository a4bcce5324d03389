// `trainfit advise`: the best setups that fit for a goal, each a `trainfit plan` command.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "common/text.hpp"
#include "setup_flags.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::cli {
namespace {

struct AdviseFlags {
  std::string goal = "fastest", free, fix, format = "table", profile, prices;
  std::int64_t gpus_max = 1, top = 5, tokens_per_step = 0;
  double tokens = 0, epochs = 0, dataset_tokens = 0;
  bool verbose = false;
};

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

// A count from the command line: finite and positive.
double positive(double v, const char* flag) {
  if (!std::isfinite(v) || v <= 0) throw InputError(fmt::format("{}: must be a positive number (got {})", flag, v));
  return v;
}

}  // namespace

void add_advise_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "advise",
      "Search the settings you leave free for the setups that fit, best first for a goal; each is a "
      "`trainfit plan` command.\nThe settings you give are fixed; by default batch, grad-accum (at the same "
      "tokens per step), grad-ckpt, attn, optimizer (adamw or adamw-8bit), gpus (up to --gpus-max) and parallel are "
      "free.");
  auto setup_flags = std::make_shared<SetupFlags>(*cmd);
  auto f = std::make_shared<AdviseFlags>();
  cmd->add_option("--goal", f->goal, "fastest | largest-batch | longest-seq | least-memory | cheapest | fewest-gpus")
      ->capture_default_str();
  cmd->add_option("--free", f->free, "settings to vary as well, even if given: e.g. rank,lora-targets,method,seq");
  cmd->add_option("--fix", f->fix, "settings to hold at their value (given or default): e.g. grad-ckpt,optimizer");
  cmd->add_option("--gpus-max", f->gpus_max, "with gpus free: try 1, 2, 4... GPUs up to this")->capture_default_str();
  cmd->add_option("--tokens-per-step", f->tokens_per_step,
                  "tokens per optimizer step, all GPUs together, held while batch, accumulation and GPUs vary "
                  "(default: seq x batch x grad-accum x gpus of the setup given)");
  cmd->add_option("--tokens", f->tokens, "tokens to train, for hours and cost (e.g. 1e9)")->check(tokens_check());
  cmd->add_option("--epochs", f->epochs, "with --dataset-tokens: tokens to train = epochs x dataset tokens");
  cmd->add_option("--dataset-tokens", f->dataset_tokens, "tokens in one pass over the dataset")->check(tokens_check());
  cmd->add_option("--prices", f->prices, "hourly GPU prices (TOML) replacing the built-in ones card by card");
  cmd->add_option("--top", f->top, "how many setups to show")->capture_default_str();
  cmd->add_option("--format", f->format, "table | json | markdown")->capture_default_str();
  cmd->add_option("--profile", f->profile, "time profile from `trainfit calibrate` (default: each card's default)");
  cmd->add_flag("--verbose", f->verbose, "say how many setups were judged and how long the search took");
  cmd->footer(
      "--gpu any tries every card of the catalogue, --gpu a100-80gb,h100-sxm a list; --method any tries "
      "full, LoRA and QLoRA.\nThe setups are defined in docs/advise.md.");
  cmd->callback([setup_flags, f, &exit_code] {
    AdviseRequest r;
    // The card and the method take "any" (and the card a list) here, which no setup can hold.
    std::vector<std::string> except;
    const std::string gpu_text = setup_flags->text_of("gpu");
    if (gpu_text == "any" || gpu_text.find(',') != std::string::npos) {
      except.push_back("gpu");
      if (gpu_text == "any") {
        for (const GpuSpec& g : gpu_catalog()) r.cards.push_back(g.id);
      } else {
        for (const std::string& id : detail::split_names(gpu_text)) r.cards.push_back(find_gpu(id).id);
      }
    }
    const bool any_method = setup_flags->text_of("method") == "any";
    if (any_method) except.push_back("method");
    std::vector<GivenSetting> given = setup_flags->given(except);
    if (!r.cards.empty()) given.emplace_back(find_setting("gpu"), SettingValue(r.cards.front()));
    r.base = resolve_setup(given);
    if (r.base.model.empty())
      throw SettingError("model", "name the model: a built-in name (`trainfit models`) or a path to a config.json");

    // Free: the defaults not given, then --free, less --fix.
    for (const std::string& key : free_by_default())
      if (!setup_flags->was_given(key)) r.free.push_back(key);
    if (any_method) r.free.push_back("method");
    for (const std::string& key : setting_keys(f->free, "--free"))
      if (std::find(r.free.begin(), r.free.end(), key) == r.free.end()) r.free.push_back(key);
    for (const std::string& key : setting_keys(f->fix, "--fix")) std::erase(r.free, key);
    if (r.cards.size() > 1) r.free.push_back("gpu");

    r.goal = parse_advise_goal(f->goal);
    if (f->gpus_max < 1 || f->gpus_max > 1024)
      throw InputError(fmt::format("--gpus-max: must be 1-1024 (got {})", f->gpus_max));
    r.gpus_max = f->gpus_max;
    if (f->tokens_per_step < 0)
      throw InputError(fmt::format("--tokens-per-step: must be positive (got {})", f->tokens_per_step));
    r.tokens_per_step = f->tokens_per_step;
    if (f->top < 1 || f->top > 1000) throw InputError(fmt::format("--top: must be 1-1000 (got {})", f->top));
    r.top = static_cast<std::size_t>(f->top);
    r.tokens = f->tokens;  // checked by tokens_check when given
    if (f->epochs != 0 || f->dataset_tokens != 0) {
      if (f->tokens != 0) throw InputError("give --tokens, or --epochs with --dataset-tokens, not both");
      if (f->dataset_tokens == 0) throw InputError("--epochs needs --dataset-tokens, the tokens of one pass");
      r.tokens = positive(f->epochs, "--epochs") * f->dataset_tokens;
      try {
        check_training_tokens(r.tokens);
      } catch (const InputError& e) {
        throw InputError(fmt::format("--epochs x --dataset-tokens: {}", e.what()));
      }
    }
    if (!f->profile.empty()) r.profile = load_profile(f->profile);
    // The built-in prices, with the user's replacing them card by card.
    const PriceTable prices =
        f->prices.empty() ? builtin_prices() : merge_prices(builtin_prices(), load_prices(f->prices));
    r.prices = &prices;
    const Format format = parse_format(f->format);

    const Advice advice = advise(load_model(r.base.model), r);
    if (advice.results.empty()) throw InputError(nothing_fits_message(advice));
    std::cout << render_advice(advice, r, format, f->verbose);
    exit_code = 0;
  });
}

}  // namespace trainfit::cli
