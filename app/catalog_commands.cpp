// `trainfit gpus`, `trainfit models` and `trainfit schema`: the catalogues, and the vocabulary of a setup.
// `trainfit gpus --for SETUP-FLAGS` plans a setup on every card of the catalogue and ranks them.
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "common/text.hpp"
#include "setup_flags.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::cli {
namespace {

struct GpusFlags {
  std::string format = "table";
  bool for_setup = false;
  double tokens = 1e9;
  std::string prices;
};

// The settings that name one card: `gpus --for` plans every card of the catalogue instead.
constexpr const char* kCardSettings[] = {"gpu", "gpu_spec", "vram"};


void run_gpus_for(const SetupFlags& setup_flags, const GpusFlags& f) {
  for (const char* key : kCardSettings) {
    if (setup_flags.was_given(key)) {
      const std::string flag = find_setting(key)->flag;
      throw InputError(fmt::format("{}: gpus --for plans the setup on every card of the catalogue; leave {} out "
                                   "(`trainfit plan {} ...` plans one card)",
                                   flag, flag, flag));
    }
  }
  if (!setup_flags.was_given("model"))
    throw InputError("gpus --for needs --model: a built-in model (`trainfit models`) or a path to a config.json");
  const Format format = parse_format(f.format);
  const TrainingSetup setup = resolve_setup(setup_flags.given());
  if (setup.model.empty())
    throw SettingError("model", "empty name; give a built-in model (`trainfit models`) or a path to a config.json");
  const PriceTable prices = f.prices.empty() ? builtin_prices() : merge_prices(builtin_prices(), load_prices(f.prices));
  const std::vector<CardRank> ranks = rank_cards(load_model(setup.model), setup, prices, f.tokens);
  std::cout << render_card_ranking(ranks, setup, f.tokens, prices, format);
}

}  // namespace

// --tokens reads as a number (1e9, 1000000000); what numbers it may be is the library's rule.
CLI::Validator tokens_check() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double tokens = 0;
        if (!CLI::detail::lexical_cast(text, tokens))
          return fmt::format("'{}' is not a number of tokens (write 1e9 or 1000000000)", detail::printable(text));
        try {
          check_training_tokens(tokens);
        } catch (const InputError& e) {
          return e.what();
        }
        return {};
      },
      "TOKENS");
}

void add_catalog_commands(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<GpusFlags>();
  auto* gpus = app.add_subcommand("gpus", "List the GPU catalogue (docs/gpus.md); with --for, rank every card for a "
                                          "setup by fit, cost and speed (docs/prices.md)");
  gpus->add_option("--format", flags->format, "table | json | markdown")->capture_default_str();
  gpus->add_flag("--for", flags->for_setup,
                 "plan the setup the flags below describe (as `trainfit plan` takes them, without a card) on every "
                 "card of the catalogue, and rank the cards: memory, verdict, step time, tokens/s, hours and cost "
                 "of --tokens");
  gpus->add_option("--tokens", flags->tokens, "with --for: tokens to train (1e9, 1000000000)")
      ->default_str("1e9")
      ->check(tokens_check());
  gpus->add_option("--prices", flags->prices,
                   "with --for: a price file (docs/prices.md) whose cards replace the built-in prices");
  auto setup_flags = std::make_shared<SetupFlags>(*gpus);
  gpus->footer("With --for, --gpu, --gpu-spec and --vram are refused: every card of the catalogue is planned. "
               "--gpus N multiplies the cost by N.\n");
  gpus->callback([gpus, flags, setup_flags, &exit_code] {
    if (flags->for_setup) {
      run_gpus_for(*setup_flags, *flags);
      exit_code = 0;
      return;
    }
    // Without --for the catalogue is listed: a setup flag would be silently ignored.
    for (const Setting& s : settings())
      if (setup_flags->was_given(s.key))
        throw InputError(fmt::format("{} describes a setup: `trainfit gpus --for {} ...` ranks the cards for it",
                                     s.flag, s.flag));
    for (const char* option : {"--tokens", "--prices"})
      if (gpus->count(option) > 0) throw InputError(fmt::format("{} needs --for", option));
    std::cout << render_gpu_catalog(gpu_catalog(), parse_format(flags->format));
    exit_code = 0;
  });

  auto models_format = std::make_shared<std::string>("table");
  auto* models = app.add_subcommand("models", "List the built-in models (docs/models.md)");
  models->add_option("--format", *models_format, "table | json | markdown")->capture_default_str();
  models->callback([models_format, &exit_code] {
    std::cout << render_model_catalog(parse_format(*models_format));
    exit_code = 0;
  });

  auto* schema = app.add_subcommand("schema",
                                    "Print the JSON Schema of a training setup: every setting's JSON key, flag (x-flag), "
                                    "type, allowed values, default and description");
  schema->callback([&exit_code] {
    std::cout << setup_schema().dump(2) << "\n";
    exit_code = 0;
  });
}

}  // namespace trainfit::cli
