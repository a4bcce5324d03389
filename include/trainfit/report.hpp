#pragma once
// Renders plans as text. Returns strings; printing is the caller's business.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainfit/hardware.hpp"
#include "trainfit/plan.hpp"
#include "trainfit/prices.hpp"

namespace trainfit {

enum class Format { table, json, markdown };
Format parse_format(std::string_view s);

nlohmann::json plan_to_json(const Plan& plan);  // schema "trainfit.plan/1"
std::string render_plan(const Plan& plan, Format format);
// Several plans side by side (the seed scenario: one row per model and setup).
std::string render_plan_comparison(const std::vector<Plan>& plans, Format format, const std::string& title);
std::string render_gpu_catalog(const std::vector<GpuSpec>& gpus, Format format);
std::string render_model_catalog(Format format);
// `trainfit gpus --for`: a setup ranked over the catalogue (rank_cards), with the tokens it was
// costed for and the prices used (schema "trainfit.gpus-for/1"; docs/prices.md defines each figure).
nlohmann::json card_ranking_to_json(const std::vector<CardRank>& ranks, const TrainingSetup& setup, double tokens,
                                    const PriceTable& prices);
std::string render_card_ranking(const std::vector<CardRank>& ranks, const TrainingSetup& setup, double tokens,
                                const PriceTable& prices, Format format);

}  // namespace trainfit
