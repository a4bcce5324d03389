// `trainfit advise` output: the ranked setups as commands, the Pareto front, as text or JSON.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "report/report_text.hpp"
#include "trainfit/advise.hpp"
#include "trainfit/report.hpp"
#include "trainfit/settings.hpp"
#include "trainfit/units.hpp"

namespace trainfit {
namespace {

using nlohmann::json;

json advised_to_json(const AdvisedSetup& a) {
  json j = {{"args", a.args},
            {"command", plan_command(a.args)},
            {"setup", setup_to_json(a.setup)},
            {"gpu", a.gpu.id},
            {"verdict", to_string(a.verdict)},
            {"peak_allocated_bytes", a.peak_allocated_bytes},
            {"device_used_bytes", a.device_used_bytes},
            {"headroom_fraction", a.headroom_fraction},
            {"step_seconds", a.step_seconds},
            {"tokens_per_second", a.tokens_per_second},
            {"hours", a.hours > 0 ? json(a.hours) : json(nullptr)},  // unknown: no tokens, or no time
            {"cost", a.cost ? json(*a.cost) : json(nullptr)},
            {"usd_per_hour", a.usd_per_hour ? json(*a.usd_per_hour) : json(nullptr)}};
  if (!a.why.empty()) j["why"] = a.why;
  return j;
}

std::string figures(const AdvisedSetup& a, double tokens) {
  std::string out = fmt::format("{}, {:.0f} MiB peak ({:.0f}% of the card free)", to_string(a.verdict),
                                to_mib(a.peak_allocated_bytes), 100.0 * a.headroom_fraction);
  if (a.step_seconds > 0) out += fmt::format(", {:.3g} s a step, {:.0f} tokens/s", a.step_seconds, a.tokens_per_second);
  if (tokens > 0 && a.hours > 0) {
    out += fmt::format("; {:.3g} h for {:.3g} tokens", a.hours, tokens);
    if (a.cost) out += fmt::format(", ${:.2f} at ${:.2f}/h a GPU", *a.cost, a.usd_per_hour.value_or(0));
  }
  return out;
}

}  // namespace

nlohmann::json advice_to_json(const Advice& advice, const AdviseRequest& request) {
  json results = json::array(), pareto = json::array();
  for (const auto& a : advice.results) results.push_back(advised_to_json(a));
  for (const auto& a : advice.pareto) pareto.push_back(advised_to_json(a));
  return {{"schema", "trainfit.advise/1"},
          {"goal", to_string(request.goal)},
          {"free", request.free},
          {"tokens", request.tokens},
          {"tokens_per_step", request.tokens_per_step > 0 ? json(request.tokens_per_step) : json(nullptr)},
          {"tokens_per_step_implied", request.tokens_per_step_implied},
          {"results", results},
          {"pareto", pareto},
          {"nearest", advice.nearest ? advised_to_json(*advice.nearest) : json(nullptr)},
          {"nearest_over_bytes", advice.nearest ? json(advice.nearest_over_bytes) : json(nullptr)},
          {"refusal", advice.refusal.empty() ? json(nullptr) : json(advice.refusal)},
          {"boundary", advice.boundary ? json{{"setting", advice.boundary->setting},
                                              {"largest_runs", advice.boundary->largest_runs},
                                              {"largest_at_all", advice.boundary->largest_at_all},
                                              {"largest_fits", advice.boundary->largest_fits},
                                              {"command", advice.boundary->args.empty()
                                                              ? json(nullptr)
                                                              : json(plan_command(advice.boundary->args))}}
                                       : json(nullptr)},
          {"judged", advice.judged},
          {"searched", advice.searched},
          {"seconds", advice.seconds}};
}

std::string nothing_fits_message(const Advice& advice) {
  if (!advice.nearest)
    return advice.refusal.empty()
               ? "nothing to judge: no setup of the search is valid for this model"
               : "nothing to judge: no setup of the search is valid for this model: " + advice.refusal;
  const AdvisedSetup& n = *advice.nearest;
  const double cap = static_cast<double>(n.gpu.memory_bytes);
  const double line = cap * (1.0 - n.setup.headroom);
  return fmt::format(
      "nothing fits: the nearest, `{}`, needs {} of the {} card's {} ({} allowed with --headroom {:g}), {} over",
      plan_command(n.args), format_bytes(n.peak_allocated_bytes), n.gpu.id.empty() ? n.gpu.name : n.gpu.id,
      format_bytes(n.gpu.memory_bytes), format_bytes(count_of(line)), n.setup.headroom,
      format_bytes(advice.nearest_over_bytes));
}

std::string render_advice(const Advice& advice, const AdviseRequest& request, Format format, bool verbose) {
  if (format == Format::json) return advice_to_json(advice, request).dump(2) + "\n";
  if (format == Format::html)
    return render_html_report("advise", fmt::format("trainfit advise: {}", request.base.model),
                              {{"advice", advice_to_json(advice, request)}});
  const bool md = format == Format::markdown;
  std::string out;
  std::vector<std::string> free;
  for (const std::string& key : request.free)
    if (const Setting* s = find_setting(key)) free.push_back(s->flag);
  out += fmt::format("{}Goal: {}; free: {}\n", md ? "## trainfit advise\n\n" : "", to_string(request.goal),
                     free.empty() ? "nothing" : fmt::format("{}", fmt::join(free, " ")));
  if (request.tokens_per_step_implied)
    out += fmt::format("{}Tokens a step: {} (the setup's sequences a GPU on {} GPUs, held on fewer by accumulating; "
                       "--tokens-per-step sets it)\n",
                       md ? "\n" : "", request.tokens_per_step,
                       request.tokens_per_step / (request.base.seq * request.base.batch * request.base.grad_accum));
  out += "\n";
  for (std::size_t i = 0; i < advice.results.size(); ++i) {
    const AdvisedSetup& a = advice.results[i];
    if (md) {
      out +=
          fmt::format("{}. `{}`  \n   {}  \n   {}\n", i + 1, plan_command(a.args), figures(a, request.tokens), a.why);
    } else {
      const std::string number = fmt::format("{}. ", i + 1);
      out += number + detail::plan_command_lines(a.args, std::string(number.size(), ' ')).substr(number.size()) +
             fmt::format("\n   {}\n{}\n", detail::wrapped(figures(a, request.tokens), detail::kTextColumns - 3, "   "), "   " + detail::wrapped(a.why, detail::kTextColumns - 3, "   "));
    }
  }
  if (advice.boundary && advice.boundary->largest_at_all > 0) {
    const Boundary& b = *advice.boundary;
    const std::string name = b.setting == "batch" ? "micro-batch" : "sequence";
    const std::string sentence = fmt::format(
        "The boundary, all else as #1: the largest {} that runs is {} ({} with the cache as planned; past it the "
        "allocator frees its cache and retries, slower); {} fails:",
        name, b.largest_at_all, b.largest_runs, b.largest_at_all + 1);
    out += md ? fmt::format("\n{}\n`{}`\n", sentence, plan_command(b.args))
              : fmt::format("\n{}\n{}\n", detail::wrapped(sentence, detail::kTextColumns),
                            detail::plan_command_lines(b.args, "   "));
  }
  if (!advice.pareto.empty()) {
    out += fmt::format("\n{}Memory against speed: the {} setups no other beats on both\n", md ? "### " : "",
                       advice.pareto.size());
    if (md) out += "\n| peak allocated | tokens/s | command |\n|---:|---:|---|\n";
    for (const AdvisedSetup& a : advice.pareto) {
      if (md)
        out += fmt::format("| {:.0f} MiB | {:.0f} | `{}` |\n", to_mib(a.peak_allocated_bytes), a.tokens_per_second,
                           plan_command(a.args));
      else
        out += fmt::format("  {:>9.0f} MiB {:>10.0f} tokens/s\n{}\n", to_mib(a.peak_allocated_bytes),
                           a.tokens_per_second, detail::plan_command_lines(a.args, "    "));
    }
  }
  if (verbose)
    out +=
        fmt::format("\njudged {} setups ({} in the grid, the rest past a micro-batch that did not fit) in {:.1f} ms\n",
                    advice.judged, advice.searched, 1e3 * advice.seconds);
  return out;
}

}  // namespace trainfit
