#pragma once
// Renders plans as text. Returns strings; printing is the caller's business.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainfit/advise.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/plan.hpp"
#include "trainfit/prices.hpp"

namespace trainfit {

enum class Format { table, json, markdown };
Format parse_format(std::string_view s);

nlohmann::json plan_to_json(const Plan& plan);  // schema "trainfit.plan/1"
std::string render_plan(const Plan& plan, Format format);
// "trainfit plan --model qwen2.5-7b --seq 2048": arguments (setup_to_args) as one shell command,
// each word quoted when the shell would split or expand it.
std::string plan_command(const std::vector<std::string>& args);
std::string shell_word(std::string_view word);
// Several plans side by side (the seed scenario: one row per model and setup).
std::string render_plan_comparison(const std::vector<Plan>& plans, Format format, const std::string& title);
// `trainfit advise`: schema "trainfit.advise/1"; the text lists each result as its command, its
// figures and why it ranks there, then the Pareto front; `verbose` adds the search's counts and time.
nlohmann::json advice_to_json(const Advice& advice, const AdviseRequest& request);
std::string render_advice(const Advice& advice, const AdviseRequest& request, Format format, bool verbose);
// The one line for a search where nothing fits: the nearest setup's command and how far over it is.
std::string nothing_fits_message(const Advice& advice);
std::string render_gpu_catalog(const std::vector<GpuSpec>& gpus, Format format);
std::string render_model_catalog(Format format);
// `trainfit gpus --for`: a setup ranked over the catalogue (rank_cards), with the tokens it was
// costed for and the prices used (schema "trainfit.gpus-for/1"; docs/prices.md defines each figure).
nlohmann::json card_ranking_to_json(const std::vector<CardRank>& ranks, const TrainingSetup& setup, double tokens,
                                    const PriceTable& prices);
std::string render_card_ranking(const std::vector<CardRank>& ranks, const TrainingSetup& setup, double tokens,
                                const PriceTable& prices, Format format);

}  // namespace trainfit
