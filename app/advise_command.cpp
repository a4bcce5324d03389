// `trainfit advise`: the best setups that fit for a goal, each a `trainfit plan` command.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "setup_flags.hpp"
#include "trainfit/trainfit.hpp"

namespace trainfit::cli {
namespace {

struct AdviseFlags {
  AdviseInputs inputs;
  std::string format = "table", profile, prices;
  bool verbose = false;
};

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
  AdviseInputs& in = f->inputs;
  cmd->add_option("--goal", in.goal, "fastest | largest-batch | longest-seq | least-memory | cheapest | fewest-gpus")
      ->capture_default_str();
  cmd->add_option("--free", in.free, "settings to vary as well, even if given: e.g. rank,lora-targets,method,seq");
  cmd->add_option("--fix", in.fix, "settings to hold at their value (given or default): e.g. grad-ckpt,optimizer");
  cmd->add_option("--gpus-max", in.gpus_max, "with gpus free: try 1, 2, 4... GPUs up to this")->capture_default_str();
  cmd->add_option("--tokens-per-step", in.tokens_per_step,
                  "tokens per optimizer step, all GPUs together, held while batch, accumulation and GPUs vary "
                  "(default: seq x batch x grad-accum x gpus of the setup given)");
  cmd->add_option("--tokens", in.tokens, "tokens to train, for hours and cost (e.g. 1e9)")->check(tokens_check());
  cmd->add_option("--epochs", in.epochs, "with --dataset-tokens: tokens to train = epochs x dataset tokens");
  cmd->add_option("--dataset-tokens", in.dataset_tokens, "tokens in one pass over the dataset")->check(tokens_check());
  cmd->add_option("--prices", f->prices, "hourly GPU prices (TOML) replacing the built-in ones card by card");
  cmd->add_option("--top", in.top, "how many setups to show")->capture_default_str();
  cmd->add_option("--format", f->format, "table | json | markdown | html")->capture_default_str();
  cmd->add_option("--profile", f->profile, "time profile from `trainfit calibrate` (default: each card's default)");
  cmd->add_flag("--verbose", f->verbose, "say how many setups were judged and how long the search took");
  cmd->footer(
      "--gpu any tries every card of the catalogue, --gpu a100-80gb,h100-sxm a list; --method any tries "
      "full, LoRA and QLoRA.\nThe setups are defined in docs/advise.md.");
  cmd->callback([setup_flags, f, &exit_code] {
    AdviseInputs inputs = f->inputs;
    // The card and the method take "any" (and the card a list), read by make_advise_request.
    inputs.given = setup_flags->given({"gpu", "method"});
    inputs.gpu_text = setup_flags->text_of("gpu");
    inputs.method_text = setup_flags->text_of("method");
    if (!f->profile.empty()) inputs.profile = load_profile(f->profile);
    // The built-in prices, with the user's replacing them card by card.
    const PriceTable prices =
        f->prices.empty() ? builtin_prices() : merge_prices(builtin_prices(), load_prices(f->prices));
    const Format format = parse_report_format(f->format);
    const AdviseRequest r = make_advise_request(inputs, prices);
    const Advice advice = advise(load_model(r.base.model), r);
    if (advice.results.empty()) {
      // JSON readers get the object still (no results, the nearest setup and by how much, what was
      // searched); the exit code and the line on stderr say that nothing fits.
      if (format == Format::json) std::cout << render_advice(advice, r, format, f->verbose) << std::flush;
      throw InputError(nothing_fits_message(advice));
    }
    std::cout << render_advice(advice, r, format, f->verbose);
    exit_code = 0;
  });
}

}  // namespace trainfit::cli
