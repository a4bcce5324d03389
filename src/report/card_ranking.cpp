// A setup ranked over the GPU catalogue (`trainfit gpus --for`) as a terminal table, JSON (schema
// trainfit.gpus-for/1) and Markdown. docs/prices.md defines every figure.
#include <string>
#include <vector>

#include <fmt/format.h>

#include <set>

#include "report/report_text.hpp"
#include "trainfit/report.hpp"
#include "trainfit/settings.hpp"

namespace trainfit {
namespace {

using nlohmann::json;
using detail::gib;
using detail::pct;
using detail::seconds_text;

// "1,000,000,000": a token count as people read one.
std::string grouped(double n) {
  const std::string digits = fmt::format("{:.0f}", n);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string hours_text(double h) {
  if (h >= 100) return fmt::format("{:.0f}", h);
  if (h >= 10) return fmt::format("{:.1f}", h);
  return fmt::format("{:.2f}", h);
}

std::string usd_text(double usd) { return fmt::format("${:.2f}", usd); }

// The step runs on the card: a time (fits, tight, spills), or none (oom, or a card whose
// throughput is unknown).
bool has_time(const CardRank& r) { return r.run.has_value(); }

std::string verdict_text(const CardRank& r) {
  const Plan& p = r.plan;
  if (p.over_capacity_bytes > 0) return fmt::format("{} +{}", to_string(p.verdict), gib(p.over_capacity_bytes));
  return to_string(p.verdict);
}

std::string share_of_card(const Plan& p) {
  return pct(static_cast<double>(p.memory.peak_allocated_bytes) / static_cast<double>(p.gpu.memory_bytes));
}

struct Cells {
  std::string card, peak, share, verdict, step, speed, hours, price, kind, cost;
};

// The kind of a price in the table's few letters (docs/prices.md).
std::string kind_words(PriceKind k) {
  switch (k) {
    case PriceKind::on_demand:
      return "on demand";
    case PriceKind::marketplace_floor:
      return "floor";
    case PriceKind::serverless:
      return "serverless";
    case PriceKind::given:
      break;
  }
  return "given";
}

Cells cells_of(const CardRank& r) {
  const Plan& p = r.plan;
  Cells c{p.gpu.id, gib(p.memory.peak_allocated_bytes), share_of_card(p), verdict_text(r), "-", "-", "-", "-", "", "-"};
  if (has_time(r)) {
    c.step = seconds_text(p.time.step_seconds);
    c.speed = fmt::format("{:.0f}", p.time.tokens_per_second);
    c.hours = hours_text(r.run->hours);
    if (r.run->usd) c.cost = usd_text(*r.run->usd);
  }
  if (r.price) {
    c.price = usd_text(r.price->usd_per_hour);
    c.kind = kind_words(r.price->kind);
  }
  return c;
}

std::string gpus_text(std::int64_t gpus) { return gpus == 1 ? "1 GPU" : fmt::format("{} GPUs", gpus); }

}  // namespace

json card_ranking_to_json(const std::vector<CardRank>& ranks, const TrainingSetup& setup, double tokens,
                          const PriceTable& prices) {
  json results = json::array();
  for (const CardRank& r : ranks) {
    const Plan& p = r.plan;
    const bool timed = has_time(r);
    results.push_back({{"gpu", p.gpu.id},
                       {"name", p.gpu.name},
                       {"verdict", to_string(p.verdict)},
                       {"peak_allocated_bytes", p.memory.peak_allocated_bytes},
                       {"device_used_bytes", p.memory.device_used_bytes},
                       {"capacity_bytes", p.gpu.memory_bytes},
                       {"headroom_fraction", p.headroom_fraction},
                       {"over_capacity_bytes", p.over_capacity_bytes},
                       {"step_seconds", timed ? json(p.time.step_seconds) : json(nullptr)},
                       {"tokens_per_second", timed ? json(p.time.tokens_per_second) : json(nullptr)},
                       {"bottleneck", timed ? json(to_string(p.time.bottleneck)) : json(nullptr)},
                       {"hours", timed ? json(r.run->hours) : json(nullptr)},
                       {"usd_per_hour", r.price ? json(r.price->usd_per_hour) : json(nullptr)},
                       {"price_kind", r.price ? json(to_string(r.price->kind)) : json(nullptr)},
                       {"cost", timed && r.run->usd ? json(*r.run->usd) : json(nullptr)},
                       {"price_provider", r.price ? json(r.price->provider) : json(nullptr)},
                       {"price_source", r.price ? json(r.price->source) : json(nullptr)},
                       {"price_date", r.price ? json(r.price->date) : json(nullptr)}});
  }
  TrainingSetup shown = setup;  // the setup as given: each result's card is its own
  shown.gpu.clear();
  shown.gpu_spec.clear();
  shown.vram_bytes.reset();
  return {{"schema", "trainfit.gpus-for/1"},
          {"model", ranks.empty() ? json(setup.model) : json(ranks.front().plan.model.name)},
          {"setup", setup_to_json(shown)},
          {"tokens", tokens},
          {"prices", prices.origin},
          {"results", results}};
}

std::string render_card_ranking(const std::vector<CardRank>& ranks, const TrainingSetup& setup, double tokens,
                                const PriceTable& prices, Format format) {
  if (format == Format::json) return card_ranking_to_json(ranks, setup, tokens, prices).dump(2) + "\n";
  const bool md = format == Format::markdown;
  const std::string model = ranks.empty() ? setup.model : detail::model_text(ranks.front().plan);
  const std::string tokens_line =
      fmt::format("{} tokens: hours at each card's predicted tokens/s, cost = hours x {} x $/GPU-hour", grouped(tokens),
                  gpus_text(setup.gpus));
  const std::string prices_line =
      fmt::format("{}: one GPU, USD an hour, of the kind each row names (docs/prices.md)", prices.origin);
  std::string out;
  if (md) {
    out += fmt::format("## trainfit gpus --for: {}\n\n", ranks.empty() ? setup.model : ranks.front().plan.model.name);
    out += fmt::format("- **Model:** {}\n- **Setup:** {}\n- **Tokens:** {}\n- **Prices:** {}\n\n", model,
                       detail::setup_text(setup), tokens_line, prices_line);
    out += "| card | peak allocated | of card | verdict | step | tokens/s | hours | $/GPU-hour | price kind | cost |\n"
           "|---|---:|---:|---|---:|---:|---:|---:|---|---:|\n";
  } else {
    const std::string_view indent = "         ";  // under the labels' values
    out += fmt::format("Model    {}\nSetup    {}\n{}\n{}\n\n", model, detail::wrapped_at(detail::setup_text(setup), 9),
                       "Tokens   " + detail::wrapped(tokens_line, detail::kTextColumns - indent.size(), indent),
                       "Prices   " + detail::wrapped(prices_line, detail::kTextColumns - indent.size(), indent));
  }
  // The table's columns are as wide as their widest cell, two spaces apart, so that a row keeps to
  // 100 columns; its short headers are the Markdown's: peak allocated, tokens/s, $/GPU-hour. The
  // step time is the Markdown's and the JSON's: here tokens/s and hours say the speed.
  std::vector<std::vector<std::string>> rows = {
      {"card", "peak", "of card", "verdict", "tokens/s", "hours", "$/hour, kind", "cost"}};
  std::set<PriceKind> kinds;
  for (const CardRank& r : ranks) {
    const Cells c = cells_of(r);
    if (r.price) kinds.insert(r.price->kind);
    if (md)
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", c.card, c.peak, c.share, c.verdict,
                         c.step, c.speed, c.hours, c.price, c.kind.empty() ? "-" : c.kind, c.cost);
    rows.push_back({c.card, c.peak, c.share, c.verdict, c.speed, c.hours, c.kind.empty() ? c.price : c.price + " " + c.kind,
                    c.cost});
  }
  // The card and the verdict left-aligned; the rest are figures.
  if (!md) out += detail::aligned_table(rows, {true, false, false, true, false, false, true}, "  ");
  out += "\n" + detail::wrapped("Cards that fit come first (fits, then tight): priced ones the cheapest first, the others "
                                "the fastest first. Cards that do not fit come last, with how far their device memory is "
                                "over the card; an oom card has no time, since its step cannot run. A card without a "
                                "price (-) has no cost: --prices FILE gives one.",
                                detail::kTextColumns) +
         "\n";
  // Prices of different kinds side by side: say so, and what each kind means.
  if (kinds.size() > 1)
    out += "\n" + detail::wrapped("The prices are of different kinds and compare only roughly: on demand is a provider's "
                                  "own list price; floor is a marketplace's cheapest listing (expect to pay more); "
                                  "serverless is billed by the second for the GPU alone; given is a price from your file.",
                                  detail::kTextColumns) +
           "\n";
  return out;
}

}  // namespace trainfit
