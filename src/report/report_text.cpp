// The shared wording of the renderers (report_text.hpp).
#include "report/report_text.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "trainfit/report.hpp"
#include "trainfit/units.hpp"

namespace trainfit::detail {
namespace {

std::string targets_text(const std::vector<std::string>& t) { return fmt::format("{}", fmt::join(t, ",")); }

}  // namespace

std::string gib(std::int64_t bytes) {
  if (bytes == kMostBytes) return format_bytes(bytes);  // a figure held at the top: "more than 8 EiB"
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / static_cast<double>(kGiB));
}
std::string pct(double fraction) {
  return fmt::format("{:.0f}%", 100.0 * fraction);
}

std::string params_text(std::int64_t n) {
  const auto d = static_cast<double>(n);
  if (d >= 1e9) return fmt::format("{:.2f}B", d / 1e9);
  if (d >= 1e6) return fmt::format("{:.1f}M", d / 1e6);
  return fmt::format("{}", n);
}

namespace {
// The layout of several GPUs as people name it: "DDP", "ZeRO-3, optimizer offloaded", "FSDP, tp 2, pp 2".
std::string layout_text(const TrainingSetup& s) {
  std::string out;
  out = data_parallel_scheme(s.parallel).title;
  if (s.offload != Offload::none) {
    out += ", ";
    out += to_string(s.offload);
    out += " offloaded";
  }
  if (s.tp > 1) out += fmt::format(", tp {}", s.tp);
  if (s.pp > 1) out += fmt::format(", pp {} x {} micro-batches", s.pp, s.microbatches);
  if (s.cp > 1) out += fmt::format(", cp {}", s.cp);
  if (s.nodes > 1) out += fmt::format(", {} nodes", s.nodes);
  return out;
}
}  // namespace

std::string setup_text(const TrainingSetup& s) {
  std::string method;
  switch (s.method) {
    case Method::full:
      method = s.amp ? fmt::format("full fine-tuning, fp32 weights under {} autocast", to_string(*s.amp))
                     : fmt::format("full fine-tuning, {} weights", to_string(s.weights));
      break;
    case Method::lora:
      method = fmt::format("LoRA r{} ({}) over {} base weights", s.lora.rank, targets_text(s.lora.targets), to_string(s.weights));
      break;
    case Method::qlora:
      method = fmt::format("QLoRA r{} ({}) over {} base weights{}", s.lora.rank, targets_text(s.lora.targets),
                           to_string(s.weights),
                           s.quant.double_quant && s.weights != DType::int8 ? " (double-quantised)" : "");
      break;
  }
  // Whose trainer runs it and how its SFT loss runs the output layer, where they are not the defaults.
  std::string trainer;
  if (s.trainer == Trainer::trl) trainer = ", TRL's trainer";
  if (s.kernels == Kernels::liger) trainer += ", Liger's kernels";
  if (s.objective == Objective::sft && s.loss == Loss::chunked) trainer += ", the chunked loss";
  if (s.objective == Objective::sft && s.loss == Loss::fused) trainer += ", Liger's fused loss";
  if (s.activation_offloading) trainer += ", activations offloaded to the host";
  return fmt::format("{}, {}, seq {}{} x batch {}{}{}, {}, {} attention{}{}", method, to_string(s.optimizer), s.seq,
                     s.images > 0 ? fmt::format(" ({} image{})", s.images, s.images > 1 ? "s" : "") : "", s.batch,
                     s.grad_accum > 1 ? fmt::format(" x accum {}", s.grad_accum) : "",
                     s.packing && s.objective == Objective::sft ? " packed (one sequence a micro-batch)" : "",
                     s.grad_ckpt ? "gradient checkpointing" : "no checkpointing", to_string(s.attention), trainer,
                     s.gpus > 1 ? fmt::format(", {} GPUs with {} (memory per GPU)", s.gpus, layout_text(s)) : "");
}

std::string model_text(const Plan& p) {
  const std::int64_t experts = p.memory.untargeted_expert_adapter_parameters;
  if (experts > 0) {
    // LoRA whose targets leave the routed experts out (all-linear cannot wrap fused 3-D expert tensors).
    return fmt::format("{} ({} parameters, {} trainable without the routed experts, {} with adapters on them too)",
                       p.model.name, params_text(p.memory.total_parameters), params_text(p.memory.trainable_parameters),
                       params_text(p.memory.trainable_parameters + experts));
  }
  return fmt::format("{} ({} parameters, {} trainable)", p.model.name, params_text(p.memory.total_parameters),
                     params_text(p.memory.trainable_parameters));
}

std::string seconds_text(double s) {
  if (s >= 10) return fmt::format("{:.1f} s", s);
  if (s >= 0.1) return fmt::format("{:.3f} s", s);
  return fmt::format("{:.1f} ms", s * 1e3);
}

// plan_command for the terminal: at `indent`, broken between arguments with the shell's line
// continuation so that every line fits kTextColumns and the lines still paste as one command.
// A flag and its value stay on one line.
std::string plan_command_lines(const std::vector<std::string>& args, std::string_view indent) {
  std::vector<std::string> parts{"trainfit plan"};
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string part = shell_word(args[i]);
    if (args[i].rfind("--", 0) == 0 && i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0)
      part += " " + shell_word(args[++i]);
    parts.push_back(std::move(part));
  }
  std::string out(indent);
  std::size_t column = indent.size();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0 && column + 1 + parts[i].size() + 2 > kTextColumns) {
      out += fmt::format(" \\\n{}    ", indent);
      column = indent.size() + 4;
    } else if (i > 0) {
      out += ' ';
      ++column;
    }
    out += parts[i];
    column += parts[i].size();
  }
  return out;
}

std::string aligned_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& left,
                          std::string_view indent) {
  std::vector<std::size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line(indent);
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (width[c] == 0) continue;
      if (line.size() > indent.size()) line += "  ";
      line += c < left.size() && left[c] ? fmt::format("{:<{}}", row[c], width[c]) : fmt::format("{:>{}}", row[c], width[c]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + '\n';
  }
  return out;
}

}  // namespace trainfit::detail
