// Plans as a terminal table, JSON (schema trainfit.plan/1) and Markdown.
#include "trainfit/report.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "memory/memory_model.hpp"
#include "report/report_text.hpp"
#include "trainfit/error.hpp"
#include "trainfit/settings.hpp"
#include "trainfit/units.hpp"

namespace trainfit {
namespace {

using nlohmann::json;
using detail::gib;
using detail::model_text;
using detail::params_text;
using detail::pct;
using detail::seconds_text;
using detail::setup_text;

std::string mib(std::int64_t bytes) {
  if (bytes == kMostBytes) return format_bytes(bytes);  // a figure held at the top: "more than 8 EiB"
  return fmt::format("{:.0f} MiB", to_mib(bytes));
}

// Human names for the breakdown keys, in display order.
const std::vector<std::pair<std::string, std::string>>& category_names() {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"weights", "weights"},
      {"master_weights", "fp32 master weights"},
      {"quant_constants", "quantisation constants"},
      {"adapters", "LoRA adapters"},
      {"gradients", "gradients"},
      {"optimizer_states", "optimizer states"},
      {"activations", "saved activations"},
      {"logits_and_loss", "logits and loss"},
      {"transient", "transient buffers"},
      {"cublas_workspace", "cuBLAS workspaces"},
      {"gradient_buckets", "gradient buckets"},
      {"gathered_weights", "gathered weights"},
      {"reference_weights", "reference model weights"},
      {"reward_weights", "reward model weights"},
      {"value_weights", "value model weights"},
  };
  return names;
}

// `plan --largest batch|seq`: where each state ends (docs/model.md, "The boundary").
std::string boundary_lines(const Boundary& b, bool md) {
  const std::string name = b.setting == "batch" ? "micro-batch" : "sequence";
  const auto value = [&](std::int64_t v) {
    return v == 0 ? std::string("none") : v == b.searched_up_to ? fmt::format("{} (the most it takes)", v)
                                                                 : fmt::format("{}", v);
  };
  std::string out = fmt::format("\n{}The largest {} (all else as given):\n{}", md ? "### " : "", name, md ? "\n" : "");
  const char* item = md ? "- " : "  ";
  out += fmt::format("{}{:<8} runs with its cache as planned\n", item, value(b.largest_runs));
  if (b.largest_at_all > b.largest_runs)
    out += fmt::format("{}{:<8} {}\n", item, value(b.largest_at_all),
                       detail::wrapped_at(fmt::format("the boundary: from {} on it runs only with the allocator freeing "
                                                      "its cache and retrying (slower); {} fails",
                                                      b.largest_runs + 1, b.largest_at_all + 1),
                                          std::string_view(item).size() + 9));
  else if (b.largest_at_all > 0)
    out += fmt::format("{}{:<8} the boundary: {} fails\n", item, value(b.largest_at_all), b.largest_at_all + 1);
  out += fmt::format("{}{:<8} the largest the headroom policy keeps (what advise recommends)\n", item,
                     value(b.largest_fits));
  if (!b.args.empty()) out += (md ? item + plan_command(b.args) : detail::plan_command_lines(b.args, item)) + "\n";
  return out;
}

// Whether the plan needs more for its later steps' logits segment than for its peak and its cache
// (MemoryEstimate::later_logits_segment_bytes): then that is why it does not fit.
bool stranded_logits(const Plan& p) {
  const MemoryEstimate& m = p.memory;
  return detail::later_step_need_bytes(m.busiest_peak_allocated_bytes, m.later_logits_segment_bytes,
                                       m.cuda_context_bytes) >
         std::max(m.busiest_peak_allocated_bytes, m.busiest_device_used_bytes);
}

std::string verdict_line(const Plan& p) {
  const auto cap = p.gpu.memory_bytes;
  switch (p.verdict) {
    case Verdict::fits:
      return fmt::format("FITS: peak {} of {} ({} free, policy keeps {})", gib(p.memory.busiest_peak_allocated_bytes), gib(cap),
                         pct(p.headroom_fraction), pct(p.setup.headroom));
    case Verdict::tight:
      return fmt::format("TIGHT: fits in {} but leaves only {} free, under the {} headroom policy", gib(cap),
                         pct(p.headroom_fraction), pct(p.setup.headroom));
    case Verdict::spills:
      return fmt::format("SPILLS: needs {} on a {} card, {} over; the driver's system-memory fallback will run it, very slowly",
                         gib(add_bytes(cap, p.over_capacity_bytes)), gib(cap), gib(p.over_capacity_bytes));
    case Verdict::oom:
      return fmt::format("OOM: needs {} on a {} card, {} over: CUDA out of memory{}{}",
                         gib(add_bytes(cap, p.over_capacity_bytes)), gib(cap), gib(p.over_capacity_bytes),
                         stranded_logits(p)
                             ? fmt::format(" in the second step: the first optimizer step leaves states in the first "
                                           "step's fp32 logits segment, so the next logits need {} more of their own",
                                           gib(p.memory.later_logits_segment_bytes))
                             : std::string(),
                         p.run_state == RunState::under_pressure
                             ? fmt::format(", unless the allocator, short, frees its cache and retries: the tensors "
                                           "at the peak and the CUDA context take {}, which fit (it then runs, slower)",
                                           gib(add_bytes(p.memory.busiest_peak_allocated_bytes,
                                                         p.memory.cuda_context_bytes)))
                             : std::string());
  }
  return "";
}

// The objective: what it trains on, and what its other models cost (docs/model.md, "Objectives").
json objective_to_json(const Plan& p) {
  const ObjectiveMemory& o = p.memory.objective;
  const TrainingSetup& s = p.setup;
  json j = {{"name", to_string(s.objective)},
            {"trained_sequences_per_micro_batch", o.trained_sequences},
            {"sequences_per_step", o.trained_sequences * s.grad_accum},
            {"no_grad_sequences_per_micro_batch", o.no_grad_sequences}};
  if (s.objective == Objective::sft) return j;
  j["reference"] = has_reference_setting(s.objective) ? json(to_string(s.reference)) : json(nullptr);
  j["reference_weights_bytes"] = o.reference_weights_bytes;
  if (s.objective == Objective::ppo) {
    j["reward_weights_bytes"] = o.reward_weights_bytes;
    j["value_model"] = {{"parameters", o.value_parameters},
                        {"weights_bytes", o.value_weights_bytes},
                        {"gradients_bytes", o.value_gradients_bytes},
                        {"optimizer_states_bytes", o.value_optimizer_states_bytes}};
  }
  if (s.objective == Objective::grpo) j["generations"] = s.generations;
  if (s.objective == Objective::ppo || s.objective == Objective::grpo) {
    j["completion_len"] = s.completion_len;
    j["excluded"] = "generation (and PPO's rollout scoring): planned separately";
  }
  return j;
}

// The objective in words (not for sft, whose plan reads as before).
std::string objective_line(const Plan& p, bool md) {
  const TrainingSetup& s = p.setup;
  const ObjectiveMemory& o = p.memory.objective;
  if (s.objective == Objective::sft) return "";
  std::string reference;
  if (has_reference_setting(s.objective)) {
    switch (s.reference) {
      case Reference::copy: reference = fmt::format(", reference: a frozen copy ({})", mib(o.reference_weights_bytes)); break;
      case Reference::adapter_off: reference = ", reference: the base with its adapters disabled (no weights)"; break;
      case Reference::precomputed: reference = ", reference: precomputed log-probabilities"; break;
      case Reference::none: reference = ", no reference"; break;
    }
  }
  std::string models;
  if (s.objective == Objective::ppo)
    models = fmt::format("; value model {} weights + {} optimizer states + {} gradients, reward model {}",
                         mib(o.value_weights_bytes), mib(o.value_optimizer_states_bytes), mib(o.value_gradients_bytes),
                         mib(o.reward_weights_bytes));
  std::string extra;
  if (s.objective == Objective::grpo) extra = fmt::format("; {} completions per prompt", s.generations);
  if (s.objective == Objective::ppo || s.objective == Objective::grpo)
    extra += fmt::format("; completion {} of {} tokens", s.completion_len, s.seq);
  if (s.objective == Objective::ppo) extra += "; rollout not planned";
  if (s.objective == Objective::grpo)
    extra += s.generation == Generation::generate
                 ? fmt::format("; generate() makes {} completions once every {} micro-batches",
                               s.batch * generation_steps(s), generation_steps(s) * s.iterations)
                 : std::string("; generation not planned (--generation none)");
  const std::string per_step =
      s.grad_accum > 1 ? fmt::format(" ({} a step)", o.trained_sequences * s.grad_accum) : std::string();
  const std::string text =
      fmt::format("{}: {} sequences a micro-batch with gradients{}, {} without{}{}{}", to_string(s.objective),
                  o.trained_sequences, per_step, o.no_grad_sequences, reference, models, extra);
  if (md) return "- **Objective:** " + text + "\n";
  return "Objective " + detail::wrapped(text, detail::kTextColumns - 10, "          ") + "\n";
}

// The card the plan's time profile was measured on, when it is not the planned card ("" when it is,
// or when the profile does not say): the plan's step time is then extrapolated.
std::string extrapolated_from(const Plan& p) {
  return p.profile.measured_on != p.gpu.id ? p.profile.measured_on : std::string();
}

json time_to_json(const Plan& p) {
  const auto& t = p.time;
  if (!t.predicted) return nullptr;
  json breakdown = json::object();
  for (const auto& term : t.breakdown) breakdown[term.name] = term.seconds;
  json critical_path = json::object();
  for (const auto& term : t.critical_path) critical_path[term.name] = term.seconds;
  return {{"step_seconds", t.step_seconds},
          {"tokens_per_second", t.tokens_per_second},
          {"mfu", t.mfu},
          {"bottleneck", to_string(t.bottleneck)},
          {"gpu_seconds", t.gpu_seconds},
          {"host_seconds", t.host_seconds},
          {"spill_seconds", t.spill_seconds},
          {"spill_slowdown", t.spill_slowdown},
          {"profile", p.profile.name},
          // The card the profile's rates were measured on, when it is not this one (null: measured here).
          {"extrapolated_from", extrapolated_from(p).empty() ? json(nullptr) : json(extrapolated_from(p))},
          {"breakdown", breakdown},
          {"critical_path", critical_path}};
}

// The time terms whose words are not their JSON key with spaces for its underscores.
const std::vector<std::pair<std::string, std::string>>& time_term_names() {
  static const std::vector<std::pair<std::string, std::string>> names = {{"adapters_fp32", "fp32 adapter matmuls"},
                                                                         {"matmul", "matmuls"}};
  return names;
}

// A time term's JSON key in words, for the text ("memory_traffic": "memory traffic").
std::string time_term_words(std::string_view key) {
  for (const auto& [name, words] : time_term_names())
    if (name == key) return words;
  std::string words(key);
  std::replace(words.begin(), words.end(), '_', ' ');
  return words;
}

std::string time_lines(const Plan& p, bool md) {
  const auto& t = p.time;
  if (!t.predicted)
    return "Time: unknown (the card's throughput is not known: use --gpu or a --gpu-spec with throughput)\n";
  std::string out = fmt::format("{}Time{}  {} a step, {:.0f} tokens/s, model FLOP utilisation {:.0f}%; bottleneck: {}\n",
                                md ? "**" : "", md ? "**" : "    ", seconds_text(t.step_seconds), t.tokens_per_second,
                                100.0 * t.mfu, to_string(t.bottleneck));
  if (t.spill_seconds > 0)
    out += fmt::format("{}Spilling over the host link makes the step {:.0f}x slower than the same step fitting in memory\n",
                       md ? "" : "        ", t.spill_slowdown);
  std::vector<std::string> terms;
  for (const auto& term : t.breakdown)
    if (term.seconds > 0) terms.push_back(fmt::format("{} {}", time_term_words(term.name), seconds_text(term.seconds)));
  const std::string indent = md ? "" : "        ";
  // The host's dispatch overlaps the GPU's work: a micro-batch takes the longer of the two, not their
  // sum (time_model.cpp; a pipeline's schedule and the optimizer step are priced on top).
  const std::string terms_line = fmt::format("GPU {}, host {} (they overlap: each micro-batch takes the longer of its two): {}",
                                             seconds_text(t.gpu_seconds), seconds_text(t.host_seconds),
                                             fmt::join(terms, ", "));
  const auto line = [&](const std::string& text) {
    return indent + (md ? text : detail::wrapped(text, detail::kTextColumns - indent.size(), indent)) + "\n";
  };
  out += line(terms_line);
  if (const std::string measured_on = extrapolated_from(p); !measured_on.empty())
    out += line(fmt::format(
        "Extrapolated: the rates were measured on the {} (profile {}) and are applied to this card's datasheet peaks",
        find_gpu(measured_on).name, p.profile.name));
  return out;
}

// The plan in a few sentences: the verdict line the text starts with, where the peak comes and,
// for a setup that runs, its step. The page and the HTML report show it as their summary (JSON
// "summary"), drawn by the server, so that it reads without scripts.
std::string plan_summary(const Plan& p) {
  std::string out = verdict_line(p) + ".";
  out += fmt::format(" The peak comes in the {} pass ({}).", to_string(p.memory.peak_phase), p.memory.peak_moment);
  if (p.verdict == Verdict::oom)
    out += " It does not run, so it has no step time.";
  else if (p.time.predicted)
    out += fmt::format(" A step takes {} ({:.0f} tokens/s); what holds it back: {}.", seconds_text(p.time.step_seconds),
                       p.time.tokens_per_second, to_string(p.time.bottleneck));
  return out;
}

}  // namespace

std::string shell_word(std::string_view word) {
  const bool plain = !word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                             "0123456789_./,:=+-@%") == std::string_view::npos;
  if (plain) return std::string(word);
  std::string out = "'";
  for (const char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string plan_command(const std::vector<std::string>& args) {
  std::string out = "trainfit plan";
  for (const auto& a : args) {
    out += ' ';
    out += shell_word(a);
  }
  return out;
}

Format parse_format(std::string_view s) {
  if (s == "table") return Format::table;
  if (s == "json") return Format::json;
  if (s == "markdown" || s == "md") return Format::markdown;
  throw InputError(fmt::format("unknown format '{}'; expected table, json or markdown", s));
}

json plan_to_json(const Plan& p) {
  json breakdown = json::object();
  for (const auto& t : p.memory.breakdown) breakdown[t.category] = t.bytes;
  json phases = json::object();
  for (const auto& ph : p.memory.phases)
    phases[to_string(ph.phase)] = {{"peak_allocated_bytes", ph.allocated_bytes}, {"moment", ph.moment}};
  json suggestions = json::array();
  for (const auto& s : p.suggestions)
    suggestions.push_back({{"change", s.change},
                           {"args", s.args},
                           {"command", plan_command(s.args)},
                           {"setup", setup_to_json(s.setup)},
                           {"step_seconds", s.step_seconds},
                           {"peak_allocated_bytes", s.peak_allocated_bytes},
                           {"device_used_bytes", s.device_used_bytes},
                           {"verdict", to_string(s.verdict)},
                           {"keeps_method", s.keeps_method}});
  const json setup = setup_to_json(p.setup);
  json out = {{"schema", "trainfit.plan/1"},
          {"model", {{"name", p.model.name},
                     {"model_type", p.model.model_type},
                     {"parameters", p.memory.total_parameters},
                     {"trainable_parameters", p.memory.trainable_parameters},
                     {"untargeted_expert_adapter_parameters", p.memory.untargeted_expert_adapter_parameters}}},
          {"setup", setup},
          {"memory", {{"peak_allocated_bytes", p.memory.peak_allocated_bytes},
                      {"peak_reserved_bytes", p.memory.peak_reserved_bytes},
                      {"device_used_bytes", p.memory.device_used_bytes},
                      {"cuda_context_bytes", p.memory.cuda_context_bytes},
                      {"weights_loaded_bytes", p.memory.weights_loaded_bytes},
                      {"peak_phase", to_string(p.memory.peak_phase)},
                      {"peak_moment", p.memory.peak_moment},
                      {"breakdown", breakdown},
                      {"phases", phases},
                      {"host_bytes", p.memory.host_bytes},
                      {"busiest_peak_allocated_bytes", p.memory.busiest_peak_allocated_bytes},
                      {"busiest_device_used_bytes", p.memory.busiest_device_used_bytes},
                      {"later_logits_segment_bytes", p.memory.later_logits_segment_bytes}}},
          {"device", {{"name", p.gpu.name}, {"id", p.gpu.id}, {"capacity_bytes", p.gpu.memory_bytes}}},
          {"objective", objective_to_json(p)},
          {"time", time_to_json(p)},
          {"verdict", to_string(p.verdict)},
          {"headroom_fraction", p.headroom_fraction},
          {"over_capacity_bytes", p.over_capacity_bytes},
          {"run_state", to_string(p.run_state)},
          {"summary", plan_summary(p)},
          {"suggestions", suggestions},
          {"warnings", p.warnings}};
  if (p.boundary) {
    const Boundary& b = *p.boundary;
    out["boundary"] = {{"setting", b.setting},
                       {"largest_runs", b.largest_runs},
                       {"largest_at_all", b.largest_at_all},
                       {"largest_fits", b.largest_fits},
                       {"searched_up_to", b.searched_up_to},
                       {"args", b.args},
                       {"command", b.args.empty() ? json(nullptr) : json(plan_command(b.args))}};
  }
  // With a pipeline, the figures are its busiest stage's.
  if (p.setup.gpus > 1 && p.setup.pp > 1) out["memory"]["pipeline_stage"] = p.memory.pipeline_stage;
  return out;
}

std::string render_plan(const Plan& p, Format format) {
  if (format == Format::json) return plan_to_json(p).dump(2) + "\n";
  if (format == Format::html)
    return render_html_report("plan", fmt::format("trainfit plan: {} on {}", p.model.name, p.gpu.name),
                              plan_report_data(p));
  const bool md = format == Format::markdown;
  std::string out;
  const auto& m = p.memory;
  if (md) {
    out += fmt::format("## trainfit plan: {}\n\n", p.model.name);
    out += fmt::format("- **Model:** {}\n- **Setup:** {}\n{}- **GPU:** {} ({})\n- **Verdict:** {}\n\n", model_text(p),
                       setup_text(p.setup), objective_line(p, true), p.gpu.name, mib(p.gpu.memory_bytes), verdict_line(p));
    for (const std::string& w : p.warnings) out += fmt::format("> **Warning:** {}.\n\n", w);
    out += fmt::format("Peak at **{}** ({}).\n\n| memory | bytes | MiB |\n|---|---:|---:|\n", to_string(m.peak_phase), m.peak_moment);
  } else {
    // The verdict and the warnings are sentences: wrapped to the 100 columns the tables keep.
    out += fmt::format("Model    {}\nSetup    {}\n{}GPU      {} ({})\n\n{}\n\n", detail::wrapped_at(model_text(p), 9),
                       detail::wrapped(setup_text(p.setup), detail::kTextColumns - 9, "         "),
                       objective_line(p, false), p.gpu.name, mib(p.gpu.memory_bytes),
                       detail::wrapped(verdict_line(p), detail::kTextColumns, "  "));
    for (const std::string& w : p.warnings)
      out += fmt::format("{}\n\n", detail::wrapped(fmt::format("Warning: {}.", w), detail::kTextColumns, "  "));
    out += fmt::format("Memory at the peak ({}: {})\n", to_string(m.peak_phase), m.peak_moment);
  }
  if (p.setup.gpus > 1 && p.setup.pp > 1)
    out += fmt::format("{}Per GPU of pipeline stage {} of {}, the busiest\n", md ? "" : "  ", m.pipeline_stage + 1,
                       p.setup.pp);
  // A figure held at the top (units.hpp, kMostBytes) reads "more than 8 EiB", not a count of MiB.
  auto row = [&](const std::string& name, std::int64_t bytes, const std::string& note) {
    const bool most = bytes == kMostBytes;
    if (md)
      out += fmt::format("| {} | {} | {} |\n", name + (note.empty() ? "" : " (" + note + ")"), bytes,
                         most ? format_bytes(bytes) : fmt::format("{:.1f}", to_mib(bytes)));
    else
      out += fmt::format("  {:<24}{:>12}  {}\n", name,
                         most ? format_bytes(bytes) : fmt::format("{:.1f} MiB", to_mib(bytes)), note);
  };
  for (const auto& [key, name] : category_names()) {
    for (const auto& t : m.breakdown)
      if (t.category == key && t.bytes > 0) row(name, t.bytes, "");
  }
  if (!md) out += "  " + std::string(48, '-') + "\n";
  row("peak allocated", m.peak_allocated_bytes, "torch.cuda.max_memory_allocated()");
  row("allocator reserve", m.peak_reserved_bytes - m.peak_allocated_bytes, "");
  row("peak reserved", m.peak_reserved_bytes, "torch.cuda.max_memory_reserved()");
  row("CUDA context", m.cuda_context_bytes, "");
  row("device used", m.device_used_bytes, "NVML / nvidia-smi");
  if (m.busiest_peak_allocated_bytes > m.peak_allocated_bytes)
    row("busiest GPU, whole run", m.busiest_peak_allocated_bytes, "DDP's second step: its first buckets too");
  if (m.host_bytes > 0)
    row("host memory", m.host_bytes,
        p.setup.activation_offloading ? "offloaded activations and states, per host" : "offloaded states, per host");
  out += md ? "\n" : "\n";
  std::vector<std::string> phases;
  for (const auto& ph : m.phases) phases.push_back(fmt::format("{} {}", to_string(ph.phase), mib(ph.allocated_bytes)));
  out += fmt::format("Phase peaks: {}\n\n", fmt::join(phases, ", "));
  out += time_lines(p, md);
  if (p.boundary) out += boundary_lines(*p.boundary, md);
  if (!p.suggestions.empty()) {
    const bool fit = p.suggestions.front().verdict == Verdict::fits;
    const std::string title = fit ? "To fit (each a whole setup: its command plans to these figures)"
                                  : "Nothing fits with up to three of these changes; the nearest";
    out += md ? fmt::format("\n### {}\n\n| change | command | peak allocated | device used | verdict | step |\n"
                            "|---|---|---:|---:|---|---:|\n",
                            title)
              : fmt::format("\n{}:\n", title);
    for (const auto& s : p.suggestions) {
      const std::string step = s.step_seconds > 0 ? seconds_text(s.step_seconds) : "-";
      const std::string command = plan_command(s.args);
      if (md) {
        out += fmt::format("| {} | `{}` | {} | {} | {} | {} |\n", s.change, command, mib(s.peak_allocated_bytes),
                           mib(s.device_used_bytes), to_string(s.verdict), step);
      } else {
        out += fmt::format("  {:<7}{:>10}{:>10}  {}\n", to_string(s.verdict), mib(s.peak_allocated_bytes), step, s.change);
        out += detail::plan_command_lines(s.args, "    ") + "\n";
      }
    }
  }
  return out;
}

std::string render_plan_comparison(const std::vector<Plan>& plans, Format format, const std::string& title) {
  if (format == Format::json || format == Format::html) {
    json arr = json::array();
    for (const auto& p : plans) arr.push_back(plan_to_json(p));
    const json doc{{"schema", "trainfit.plans/1"}, {"title", title}, {"plans", arr}};
    // The report draws the same document: each plan's memory against the card, and the table.
    if (format == Format::html) return render_html_report("plans", title, doc);
    return doc.dump(2) + "\n";
  }
  const bool md = format == Format::markdown;
  std::string out = md ? fmt::format("## {}\n\n", title) : detail::wrapped(title, detail::kTextColumns) + "\n\n";
  if (!plans.empty()) {
    const std::string line = fmt::format("GPU: {} ({}); {}", plans.front().gpu.name,
                                         mib(plans.front().gpu.memory_bytes), setup_text(plans.front().setup));
    out += (md ? line : detail::wrapped(line, detail::kTextColumns, "  ")) + "\n\n";
  }
  if (md) out += "| model | checkpointing | peak allocated | of card | device used | verdict | over by | step | bottleneck |\n|---|---|---:|---:|---:|---|---:|---:|---|\n";
  // 100 columns with the longest values ("qwen2.5-14b", "host-link/spill").
  else out += fmt::format("  {:<14}{:<6}{:>12}{:>8}{:>12}  {:<8}{:>10}{:>9}  {}\n", "model", "ckpt", "peak alloc", "of card", "device used", "verdict", "over by", "step", "bottleneck");
  for (const auto& p : plans) {
    const double share = static_cast<double>(p.memory.peak_allocated_bytes) / static_cast<double>(p.gpu.memory_bytes);
    const std::string over = p.over_capacity_bytes > 0 ? mib(p.over_capacity_bytes) : "-";
    const std::string step = p.time.predicted ? seconds_text(p.time.step_seconds) : "-";
    const std::string why = p.time.predicted ? to_string(p.time.bottleneck) : "-";
    if (md) out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", p.model.name, p.setup.grad_ckpt ? "on" : "off", mib(p.memory.peak_allocated_bytes), pct(share), mib(p.memory.device_used_bytes), to_string(p.verdict), over, step, why);
    else out += fmt::format("  {:<14}{:<6}{:>12}{:>8}{:>12}  {:<8}{:>10}{:>9}  {}\n", p.model.name, p.setup.grad_ckpt ? "on" : "off", mib(p.memory.peak_allocated_bytes), pct(share), mib(p.memory.device_used_bytes), to_string(p.verdict), over, step, why);
  }
  return out;
}

std::string render_gpu_catalog(const std::vector<GpuSpec>& gpus, Format format) {
  if (format == Format::json) {
    json arr = json::array();
    for (const auto& g : gpus)
      arr.push_back({{"id", g.id}, {"name", g.name}, {"architecture", g.architecture}, {"class", to_string(g.gpu_class)},
                     {"memory_bytes", g.memory_bytes}, {"memory_bandwidth_bytes_per_s", g.memory_bandwidth_bytes_per_s},
                     {"bf16_flops", g.bf16_flops}, {"fp16_flops", g.fp16_flops}, {"fp32_flops", g.fp32_flops},
                     {"tf32_flops", g.tf32_flops}, {"fp8_flops", g.fp8_flops}, {"int8_ops", g.int8_ops},
                     {"pcie_generation", g.pcie_generation}, {"pcie_lanes", g.pcie_lanes},
                     {"host_link_bytes_per_s", g.host_link_bytes_per_s}, {"gpu_link", g.gpu_link},
                     {"gpu_link_bytes_per_s", g.gpu_link_bytes_per_s}, {"source", g.source}});
    return arr.dump(2) + "\n";
  }
  const bool md = format == Format::markdown;
  std::vector<std::vector<std::string>> rows = {{"id", "name", "memory", "bandwidth", "bf16 dense", "host link", "GPU link"}};
  for (const auto& g : gpus) {
    const std::string mem = fmt::format("{:.1f} GiB", static_cast<double>(g.memory_bytes) / static_cast<double>(kGiB));
    const std::string bw = fmt::format("{:.0f} GB/s", g.memory_bandwidth_bytes_per_s / 1e9);
    const std::string bf = g.bf16_flops > 0 ? fmt::format("{:.0f} TFLOP/s", g.bf16_flops / 1e12) : "-";
    const std::string host = g.pcie_generation > 0 ? fmt::format("PCIe{} x{}", g.pcie_generation, g.pcie_lanes) : "-";
    const std::string link = g.gpu_link_bytes_per_s > 0 ? fmt::format("{} {:.0f} GB/s", g.gpu_link, g.gpu_link_bytes_per_s / 1e9) : g.gpu_link;
    // The table's name drops the brand words its id already implies ("NVIDIA GeForce "), so that a
    // row keeps to 100 columns; JSON and Markdown keep the whole name.
    std::string_view name = g.name;
    if (!md)
      for (const std::string_view brand : {"NVIDIA ", "GeForce ", "Tesla ", "AMD "})
        if (name.starts_with(brand)) name.remove_prefix(brand.size());
    rows.push_back({g.id, std::string(name), mem, bw, bf, host, link});
  }
  // The table leaves the host link out (JSON and Markdown have it): with it a row is 112 columns.
  if (!md)
    for (auto& row : rows) row[5].clear();
  std::string out;
  if (md) {
    out = "| id | name | memory | bandwidth | bf16 dense | host link | GPU link |\n|---|---|---:|---:|---:|---|---|\n";
    for (std::size_t r = 1; r < rows.size(); ++r)
      out += fmt::format("| {} |\n", fmt::join(rows[r], " | "));
    return out;
  }
  // The figures (memory, bandwidth, bf16) right-aligned.
  return detail::aligned_table(rows, {true, true, false, false, false, true, true});
}

namespace {
// The decoder layers' linear modules by role, named as the model's family names them: what a LoRA
// target may name.
json layer_modules_json(const ModelSpec& m) {
  json modules = json::object();
  for (const LinearModule& mod : model_linear_modules(m)) modules[to_string(mod.role)] = mod.name;
  return modules;
}
}  // namespace

// One row of `trainfit models` in 100 columns: the longest name (18) and family (granitemoehybrid, 16).
constexpr std::string_view kCatalogRow = "{:<19}{:<17}{:>8}{:>10}{:>7}{:>7}{:>7}{:>7}{:>11}{:>7}\n";

std::string render_model_catalog(Format format) {
  const bool md = format == Format::markdown;
  json arr = json::array();
  // trainfit's count beside the publisher's (published_parameters), total and, for a mixture of
  // experts, what one token uses; blank where nothing is published or the model is dense.
  auto count = [](double n) { return n > 0 ? params_text(static_cast<std::int64_t>(n)) : std::string(); };
  std::string out =
      md ? "| name | family | parameters | published | active | published active | layers | hidden | heads (kv) | "
           "vocab |\n|---|---|---:|---:|---:|---:|---:|---:|---|---:|\n"
         : fmt::format(kCatalogRow, "name", "family", "params", "published", "active", "(pub.)", "layers", "hidden",
                       "heads (kv)", "vocab");
  for (const auto& name : builtin_model_names()) {
    const ModelSpec m = load_model(name);
    const ParameterCounts counts = count_parameters(m);
    const PublishedParameters published = published_parameters(name);
    // A multimodal model under its own model_type, not its text model's.
    const std::string& family = m.text_of_multimodal ? m.multimodal_type : m.model_type;
    if (format == Format::json) {
      json row = {{"name", name},
                  {"model_type", family},
                  {"parameters", counts.total},
                  {"layers", m.num_layers},
                  {"hidden_size", m.hidden_size},
                  {"heads", m.num_heads},
                  {"kv_heads", m.num_kv_heads},
                  {"vocab_size", m.vocab_size},
                  {"experts", m.num_experts},
                  {"modules", layer_modules_json(m)}};
      if (m.is_moe()) row["active_parameters"] = counts.activated;
      if (counts.vision > 0) row["vision_parameters"] = counts.vision;
      row["published_parameters"] = published.total > 0 ? json(published.total) : json(nullptr);
      row["published_active_parameters"] = published.active > 0 ? json(published.active) : json(nullptr);
      arr.push_back(std::move(row));
      continue;
    }
    const std::string heads = fmt::format("{} ({})", m.num_heads, m.num_kv_heads);
    const std::string active = m.is_moe() ? count(static_cast<double>(counts.activated)) : std::string();
    if (md)
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", name, family,
                         params_text(counts.total), count(published.total), active, count(published.active),
                         m.num_layers, m.hidden_size, heads, m.vocab_size);
    else
      out += fmt::format(kCatalogRow, name, family,
                         params_text(counts.total), count(published.total), active, count(published.active),
                         m.num_layers, m.hidden_size, heads, m.vocab_size);
  }
  return format == Format::json ? arr.dump(2) + "\n" : out;
}

json report_words() {
  json words = json::object();
  for (const auto& [key, name] : category_names()) words[key] = name;
  // Every other key reads as itself with spaces for its underscores, here and in web/charts.js.
  for (const auto& [key, name] : time_term_names()) words[key] = name;
  return words;
}

}  // namespace trainfit
