#pragma once
// Renders plans as text. Returns strings; printing is the caller's business.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainfit/advise.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/measurements.hpp"
#include "trainfit/plan.hpp"
#include "trainfit/card_ranking.hpp"

namespace trainfit {

enum class Format { table, json, markdown, html };
Format parse_format(std::string_view s);  // table | json | markdown
// The same, and html: the commands that draw a report (plan, advise, validate).
Format parse_report_format(std::string_view s);

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


// ---- HTML reports and the web page (docs/serve.md) ---------------------------------------------
// One self-contained page: the stylesheet and chart code of web/ (compiled in), `data` inlined as
// JSON and drawn in the browser by the renderer `kind` of web/charts.js ("plan", "advise", "bench",
// "validate", "watch"; another report is a function added there and a call here). Nothing is
// fetched: it opens offline, from a file.
std::string render_html_report(std::string_view kind, std::string_view title, const nlohmann::json& data);
// A plan's figures and summary words as HTML (from plan_to_json): what a report and the page show
// before, or without, their scripts.
std::string plan_summary_html(const nlohmann::json& plan);
// `const TrainfitWords = {...};`: report_words() for the charts' legends, the script the page loads
// as /words.js and each report inlines.
std::string web_words_script();
// A file of web/ as compiled in ("index.html", "charts.js"); empty when there is none.
std::string_view web_asset(std::string_view name);
// The names of web/'s files, sorted.
std::vector<std::string> web_asset_names();
// Memory against sequence length and against micro-batch, the rest of the setup held: each point
// the plan of that setup (peak allocated, device used, verdict), and the largest value that still
// fits (docs/serve.md, "Curves").
nlohmann::json plan_curves(const Plan& plan);
// What a plan's report and the page draw: {"plan": plan_to_json, "curves": plan_curves}.
nlohmann::json plan_report_data(const Plan& plan);
// The words the text output uses for the JSON's keys: the memory categories' ({"activations":
// "saved activations", ...}) and the time terms whose words are not the key with spaces for its
// underscores ({"matmul": "matmuls", ...}); any other key reads that way. The charts' legends say
// the same (docs/serve.md).
nlohmann::json report_words();
// `trainfit validate`: prediction beside measurement, row by row, with the error summary.
nlohmann::json comparison_to_json(const ComparisonSummary& summary);
// `trainfit validate --published`: each expressible run's figures beside the plan's, the errors,
// and what the others use that no setting describes.
nlohmann::json published_comparison_to_json(const PublishedSummary& summary);

}  // namespace trainfit
