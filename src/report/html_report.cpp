// HTML reports: one self-contained page per report, drawn by web/charts.js (the page of `trainfit
// serve` draws with the same code), with the report's data inlined as JSON.
#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "common/text.hpp"
#include "report/report_text.hpp"
#include "trainfit/error.hpp"
#include "trainfit/report.hpp"
#include "trainfit/settings.hpp"
#include "trainfit/units.hpp"

namespace trainfit {
namespace detail {
// Generated from web/* by cmake/embed_data_files.cmake (src/serve/CMakeLists.txt).
const std::vector<std::pair<std::string_view, std::string_view>>& embedded_web_files();
}  // namespace detail

namespace {

using json = nlohmann::json;

// JSON that can sit inside a <script> element: '<' only occurs inside JSON strings, where \u003c
// means the same character, so no "</script>" or "<!--" in the data can end the element early.
std::string script_safe_json(const json& data) {
  const std::string text = data.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '<')
      out += "\\u003c";
    else
      out += c;
  }
  return out;
}

// The points of a curve: the usual powers of two around the setup, and the setup's own value.
std::vector<std::int64_t> curve_values(std::vector<std::int64_t> values, std::int64_t own) {
  values.push_back(own);
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

json curve(const Plan& plan, const char* key, const std::vector<std::int64_t>& values) {
  PlanOptions options;
  options.suggest = false;
  options.profile = plan.profile;
  json points = json::array();
  json largest_fitting = nullptr;
  for (const std::int64_t v : values) {
    TrainingSetup s = plan.setup;
    (std::string_view(key) == "seq" ? s.seq : s.batch) = v;
    try {
      validate(s);
      const Plan p = make_plan(plan.model, s, plan.gpu, options);
      points.push_back({{"value", v},
                        {"peak_allocated_bytes", p.memory.peak_allocated_bytes},
                        {"device_used_bytes", p.memory.device_used_bytes},
                        {"verdict", to_string(p.verdict)}});
      if (p.verdict == Verdict::fits || p.verdict == Verdict::tight) largest_fitting = v;
    } catch (const InputError&) {
      // A value the setup cannot take (past the micro-batch's token limit): no point.
    }
  }
  return {{"setting", key}, {"points", points}, {"largest_fitting", largest_fitting}};
}

std::string figure_html(std::string_view what, std::string_view value, std::string_view id, std::string_view cls = "") {
  return fmt::format("<div class=\"figure\"><div class=\"value{}{}\" id=\"{}\">{}</div><div class=\"what\">{}</div></div>",
                     cls.empty() ? "" : " ", cls, id, detail::html_escaped(value), detail::html_escaped(what));
}

// A plan's step time as the summary shows it: none for a setup that does not run.
std::string step_figure(const json& plan) {
  if (plan.at("verdict") == "oom") return "does not run";
  if (plan.at("time").is_null()) return "unknown";
  return detail::seconds_text(plan.at("time").at("step_seconds").get<double>());
}

// Several plans (the seed's question) as the table the report draws, without scripts.
std::string plans_summary_html(const json& doc) {
  std::string out = "<table><thead><tr><th>model</th><th>checkpointing</th><th>peak allocated</th><th>verdict</th>"
                    "<th>step</th></tr></thead><tbody>";
  for (const json& p : doc.at("plans"))
    out += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"verdict-{}\">{}</td><td>{}</td></tr>",
                       detail::html_escaped(p.at("model").at("name").get<std::string>()),
                       p.at("setup").value("grad_ckpt", false) ? "on" : "off",
                       detail::gib(p.at("memory").at("peak_allocated_bytes").get<std::int64_t>()),
                       p.at("verdict").get<std::string>(), p.at("verdict").get<std::string>(), step_figure(p));
  return out + "</tbody></table>";
}

}  // namespace

std::string plan_summary_html(const nlohmann::json& plan) {
  const json& m = plan.at("memory");
  const std::string verdict = plan.at("verdict").get<std::string>();
  const json& time = plan.at("time");
  const bool runs = verdict != "oom" && !time.is_null();
  std::string out = "<div class=\"summary\">";
  out += figure_html("peak allocated (torch.cuda.max_memory_allocated)", detail::gib(m.at("peak_allocated_bytes").get<std::int64_t>()),
                     "peak-allocated");
  out += figure_html("verdict", verdict, "verdict", "verdict-" + verdict);
  out += figure_html("device used (nvidia-smi)", detail::gib(m.at("device_used_bytes").get<std::int64_t>()), "device-used");
  out += figure_html("card",
                     fmt::format("{} ({})", plan.at("device").at("name").get<std::string>(),
                                 detail::gib(plan.at("device").at("capacity_bytes").get<std::int64_t>())),
                     "card");
  out += figure_html("step time", step_figure(plan), "step-time");
  out += figure_html("tokens/s", runs ? fmt::format("{:.0f}", time.at("tokens_per_second").get<double>()) : "-",
                     "tokens-per-second");
  out += "</div>\n<p class=\"words\" id=\"verdict-words\">" + detail::html_escaped(plan.at("summary").get<std::string>()) + "</p>\n";
  return out;
}

std::string web_words_script() { return "const TrainfitWords = " + script_safe_json(report_words()) + ";\n"; }

Format parse_report_format(std::string_view s) {
  if (s == "html") return Format::html;
  try {
    return parse_format(s);
  } catch (const InputError&) {
    throw InputError(fmt::format("unknown format '{}'; expected table, json, markdown or html", s));
  }
}

std::string_view web_asset(std::string_view name) {
  for (const auto& [file, text] : detail::embedded_web_files())
    if (file == name) return text;
  return {};
}

std::vector<std::string> web_asset_names() {
  std::vector<std::string> names;
  for (const auto& entry : detail::embedded_web_files()) names.emplace_back(entry.first);
  std::sort(names.begin(), names.end());
  return names;
}

std::string render_html_report(std::string_view kind, std::string_view title, const nlohmann::json& data) {
  std::string out = "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>";
  out += detail::html_escaped(title);
  out += "</title>\n<style>\n";
  out += web_asset("style.css");
  out += "</style>\n</head>\n<body class=\"report\">\n<header><h1>";
  out += detail::html_escaped(title);
  out +=
      "</h1><p class=\"note\">A trainfit report: self-contained, opens offline. Every figure is defined in "
      "trainfit's docs (docs/serve.md lists where).</p></header>\n<main id=\"report\">";
  // What reads without scripts (the charts draw over it): a plan's figures and words, the plans' table.
  if (kind == "plan" && data.contains("plan")) out += plan_summary_html(data.at("plan"));
  if (kind == "plans" && data.contains("plans")) out += plans_summary_html(data);
  out += "<noscript><p class=\"note\">The charts of this report are drawn by its script; the same figures as "
         "text: the command with --format table.</p></noscript></main>\n";
  out += "<script type=\"application/json\" id=\"trainfit-data\">";
  out += script_safe_json(data);
  out += "</script>\n<script>\n";
  out += web_words_script();
  out += web_asset("charts.js");
  out += "</script>\n<script>\nTrainfitCharts.renderReport(";
  out += json(std::string(kind)).dump();
  out +=
      ", JSON.parse(document.getElementById(\"trainfit-data\").textContent), document.getElementById(\"report\"));\n";
  out += "</script>\n</body>\n</html>\n";
  return out;
}

json plan_curves(const Plan& plan) {
  return {{"capacity_bytes", plan.gpu.memory_bytes},
          {"headroom", plan.setup.headroom},
          {"seq", curve(plan, "seq", curve_values({256, 512, 1024, 2048, 4096, 8192, 16384, 32768}, plan.setup.seq))},
          {"batch", curve(plan, "batch", curve_values({1, 2, 4, 8, 16, 32, 64}, plan.setup.batch))}};
}

json plan_report_data(const Plan& plan) {
  return {{"plan", plan_to_json(plan)}, {"curves", plan_curves(plan)}};
}

json comparison_to_json(const ComparisonSummary& summary) {
  json rows = json::array();
  for (const auto& c : summary.rows) {
    const Measurement& m = c.measured.measured;
    rows.push_back({{"line", c.measured.line},
                    {"model", c.measured.setup.model},
                    {"measured_peak_allocated_mib", *m.peak_allocated_mib},
                    {"predicted_peak_allocated_mib", to_mib(c.predicted_allocated)},
                    {"error", c.allocated_error},
                    {"predicted_peak", c.predicted_peak_phase},
                    {"measured_step_seconds", m.step_seconds ? json(*m.step_seconds) : json(nullptr)},
                    {"predicted_step_seconds", c.predicted_step_seconds},
                    {"step_error", c.step_error},
                    {"predicted_bottleneck", c.predicted_bottleneck},
                    {"host_seconds_per_op", c.host_seconds_per_op},
                    {"host_from_row", c.host_from_row}});
  }
  return {{"rows", rows},
          {"median_abs_error", summary.median_abs_error},
          {"max_abs_error", summary.max_abs_error},
          {"median_abs_reserved_error", summary.median_abs_reserved_error},
          {"max_abs_reserved_error", summary.max_abs_reserved_error},
          {"median_abs_step_error", summary.median_abs_step_error},
          {"max_abs_step_error", summary.max_abs_step_error},
          {"rows_with_own_host", summary.rows_with_own_host}};
}

json published_comparison_to_json(const PublishedSummary& summary) {
  const auto optional = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  json rows = json::array();
  for (const auto& c : summary.rows) {
    const PublishedRun& r = *c.run;
    rows.push_back(
        {{"id", r.id},
         {"line", r.line},
         {"framework", r.framework},
         {"source", r.url},
         {"setup", setup_to_json(*r.setup)},
         {"published_tokens_per_second_per_gpu", optional(r.tokens_per_second_per_gpu)},
         {"predicted_tokens_per_second_per_gpu",
          c.predicted_tokens_per_second_per_gpu > 0 ? json(c.predicted_tokens_per_second_per_gpu) : json(nullptr)},
         {"tokens_error", optional(c.tokens_error)},
         {"memory_kind", r.memory_kind.empty() ? json(nullptr) : json(r.memory_kind)},
         {"published_memory_gib", r.memory_bytes ? json(*r.memory_bytes / static_cast<double>(kGiB)) : json(nullptr)},
         {"predicted_memory_gib",
          r.memory_bytes ? json(c.predicted_memory_bytes / static_cast<double>(kGiB)) : json(nullptr)},
         {"memory_error", optional(c.memory_error)},
         {"verdict", c.verdict},
         {"time_profile_measured_on", c.time_profile_card}});
  }
  json blocked = json::array();
  for (const auto& [what, n] : summary.blocked_by) blocked.push_back({{"setting", what}, {"runs", n}});
  return {{"rows", rows},
          {"runs", summary.runs},
          {"expressed", summary.rows.size()},
          {"not_expressed_by", blocked},
          {"throughput_rows", summary.throughput_rows},
          {"median_abs_tokens_error", summary.median_abs_tokens_error},
          {"max_abs_tokens_error", summary.max_abs_tokens_error},
          {"memory_rows", summary.memory_rows},
          {"median_abs_memory_error", summary.median_abs_memory_error},
          {"max_abs_memory_error", summary.max_abs_memory_error},
          {"planned_out_of_memory", summary.planned_out_of_memory}};
}

}  // namespace trainfit
