// The trainfit command line: a thin client of the library. It parses flags, calls the library,
// prints what the library renders, and maps errors to exit codes (2 for bad input).
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "trainfit/trainfit.hpp"

namespace {

using namespace trainfit;

constexpr int kExitBadInput = 2;

// Flag values as typed; turned into library types only after parsing, so every bad value
// gets the library's message.
struct SetupFlags {
  std::string method = "lora", weights, optimizer = "adamw", amp, attn = "sdpa", targets = "all-linear";
  std::string adapter_dtype = "fp32", compute_dtype = "bf16";
  std::int64_t rank = 16, seq = 512, batch = 1, grad_accum = 1;
  std::optional<double> lora_alpha;
  double lora_dropout = 0.05, headroom = 0.2;
  bool grad_ckpt = false, no_double_quant = false, kbit_prepare = false;
  std::string gpu, vram, gpu_spec, platform = "linux", format = "table";
  std::string model;
  bool no_suggest = false;
};

void add_setup_flags(CLI::App& cmd, SetupFlags& f) {
  cmd.add_option("--model", f.model, "Built-in model name (see `trainfit models`), or a path to a config.json or a folder holding one");
  cmd.add_option("--gpu", f.gpu, "Catalogue GPU (see `trainfit gpus`)");
  cmd.add_option("--vram", f.vram, "Memory of a card not in the catalogue, e.g. 16GiB, 24GB, 16303MiB");
  cmd.add_option("--gpu-spec", f.gpu_spec, "TOML file describing a GPU (docs/gpus.md)");
  cmd.add_option("--method", f.method, "full | lora | qlora")->capture_default_str();
  cmd.add_option("--weights", f.weights, "fp32 | bf16 | fp16 | int8 | nf4 | fp4 (default bf16; nf4 for qlora)");
  cmd.add_option("--rank", f.rank, "LoRA rank")->capture_default_str();
  cmd.add_option("--lora-alpha", f.lora_alpha, "LoRA alpha (default 2 x rank; does not change memory)");
  cmd.add_option("--lora-dropout", f.lora_dropout, "LoRA dropout probability")->capture_default_str();
  cmd.add_option("--lora-targets", f.targets, "all-linear, or modules: q,k,v,o,gate,up,down or q_proj,v_proj...")->capture_default_str();
  cmd.add_option("--adapter-dtype", f.adapter_dtype, "dtype of LoRA weights (PEFT keeps them fp32)")->capture_default_str();
  cmd.add_option("--compute-dtype", f.compute_dtype, "QLoRA compute dtype (bnb_4bit_compute_dtype)")->capture_default_str();
  cmd.add_flag("--no-double-quant", f.no_double_quant, "QLoRA without double quantisation of the block constants");
  cmd.add_flag("--kbit-prepare", f.kbit_prepare, "QLoRA after peft.prepare_model_for_kbit_training (fp32 non-quantised weights)");
  cmd.add_option("--optimizer", f.optimizer, "adamw | adamw-8bit | sgd | sgd-momentum | adafactor")->capture_default_str();
  cmd.add_option("--amp", f.amp, "autocast dtype over fp32 master weights: bf16 | fp16 (full fine-tuning with --weights fp32)");
  cmd.add_option("--seq", f.seq, "sequence length in tokens")->capture_default_str();
  cmd.add_option("--batch", f.batch, "micro-batch size")->capture_default_str();
  cmd.add_option("--grad-accum", f.grad_accum, "gradient accumulation steps")->capture_default_str();
  cmd.add_flag("--grad-ckpt,!--no-grad-ckpt", f.grad_ckpt, "gradient checkpointing on (off by default)");
  cmd.add_option("--attn", f.attn, "sdpa | eager | flash")->capture_default_str();
  cmd.add_option("--headroom", f.headroom, "fraction of the card to keep free")->capture_default_str();
  cmd.add_option("--platform", f.platform, "linux (over capacity = OOM) | windows (driver spills into system memory)")->capture_default_str();
  cmd.add_option("--format", f.format, "table | json | markdown")->capture_default_str();
  cmd.add_flag("--no-suggest", f.no_suggest, "do not search for changes that make the setup fit");
}

TrainingSetup to_setup(const SetupFlags& f) {
  TrainingSetup s;
  s.method = parse_method(f.method);
  s.weights = parse_dtype(!f.weights.empty() ? f.weights : (s.method == Method::qlora ? "nf4" : "bf16"));
  if (!f.amp.empty()) s.amp = parse_dtype(f.amp);
  s.optimizer = parse_optimizer(f.optimizer);
  s.attention = parse_attention(f.attn);
  s.lora.rank = f.rank;
  s.lora.alpha = f.lora_alpha.value_or(2.0 * static_cast<double>(f.rank));
  s.lora.dropout = f.lora_dropout;
  s.lora.targets = parse_lora_targets(f.targets);
  s.lora.adapter_dtype = parse_dtype(f.adapter_dtype);
  s.quant.compute_dtype = parse_dtype(f.compute_dtype);
  s.quant.double_quant = !f.no_double_quant;
  s.quant.kbit_prepare = f.kbit_prepare;
  s.seq = f.seq;
  s.batch = f.batch;
  s.grad_accum = f.grad_accum;
  s.grad_ckpt = f.grad_ckpt;
  s.headroom = f.headroom;
  validate(s);
  return s;
}

GpuSpec to_gpu(const SetupFlags& f, const std::string& fallback) {
  const int given = (f.gpu.empty() ? 0 : 1) + (f.vram.empty() ? 0 : 1) + (f.gpu_spec.empty() ? 0 : 1);
  if (given > 1) throw InputError("give one of --gpu, --vram and --gpu-spec");
  if (!f.gpu_spec.empty()) return load_gpu_spec_file(f.gpu_spec);
  if (!f.vram.empty()) return gpu_with_vram(parse_bytes(f.vram));
  if (!f.gpu.empty()) return find_gpu(f.gpu);
  if (!fallback.empty()) return find_gpu(fallback);
  throw InputError("name the card: --gpu NAME (see `trainfit gpus`), --vram SIZE or --gpu-spec FILE");
}

PlanOptions to_options(const SetupFlags& f) {
  PlanOptions o;
  if (f.platform == "windows") o.sysmem_fallback = true;
  else if (f.platform != "linux") throw InputError(fmt::format("unknown --platform '{}'; expected linux or windows", f.platform));
  o.suggest = !f.no_suggest;
  return o;
}

// The seed experiment (a 16 GB RTX 5070 Ti on Windows, Qwen2.5 with a 4-bit base and LoRA rank 16,
// 512 tokens, batch 1, checkpointing off and on): which sizes fit, which spill, by how much.
// Stack settings the seed does not state are the ones docs/model.md ("The seed scenario") gives.
int run_seed_scenario(SetupFlags f, const CLI::App& cmd) {
  // The seed ran on Windows (allocations past the card spill into system memory), with a
  // 4-bit base whose measured footprint is 1.0 byte per base weight (the size of an 8-bit
  // base; see docs/model.md) and PEFT's default LoRA targets for Qwen2 (q_proj, v_proj).
  if (cmd.count("--method") == 0) f.method = "qlora";
  if (cmd.count("--weights") == 0) f.weights = "int8";
  if (cmd.count("--lora-targets") == 0) f.targets = "q,v";
  if (cmd.count("--platform") == 0) f.platform = "windows";
  TrainingSetup base = to_setup(f);
  const GpuSpec gpu = to_gpu(f, "rtx-5070-ti");
  PlanOptions options = to_options(f);
  options.suggest = false;
  std::vector<Plan> plans;
  for (const char* name : {"qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b"}) {
    for (const bool ckpt : {false, true}) {
      TrainingSetup s = base;
      s.grad_ckpt = ckpt;
      plans.push_back(make_plan(load_model(name), s, gpu, options));
    }
  }
  std::cout << render_plan_comparison(plans, parse_format(f.format),
                                      "Which Qwen2.5 sizes can be fine-tuned on this card? (trainfit plan with no --model; "
                                      "pass --model for one plan)");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainfit: will this training run fit on this GPU, and why?"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("trainfit 0.1.0"));

  SetupFlags plan_flags;
  auto* plan = app.add_subcommand("plan", "Predict the peak GPU memory of one training step and judge it against a card.\n"
                                          "Without --model: the seed's 16 GB question for Qwen2.5 1.5B-14B.");
  add_setup_flags(*plan, plan_flags);

  std::string list_format = "table";
  auto* gpus = app.add_subcommand("gpus", "List the GPU catalogue");
  gpus->add_option("--format", list_format, "table | json | markdown");
  auto* models = app.add_subcommand("models", "List the built-in models");
  models->add_option("--format", list_format, "table | json | markdown");

  std::string measurements_path;
  auto* validate_cmd = app.add_subcommand("validate", "Put the planner's prediction beside measured steps (JSON lines, the format of data/)");
  validate_cmd->add_option("file", measurements_path, "measurements file")->required();
  validate_cmd->add_option("--format", list_format, "table | json");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "trainfit: " << e.what() << " (see --help)\n";
    return kExitBadInput;
  }

  try {
    if (*plan) {
      if (plan_flags.model.empty()) return run_seed_scenario(plan_flags, *plan);
      const TrainingSetup setup = to_setup(plan_flags);
      const Plan p = make_plan(load_model(plan_flags.model), setup, to_gpu(plan_flags, ""), to_options(plan_flags));
      std::cout << render_plan(p, parse_format(plan_flags.format));
      return 0;
    }
    if (*gpus) {
      std::cout << render_gpu_catalog(gpu_catalog(), parse_format(list_format));
      return 0;
    }
    if (*models) {
      std::cout << render_model_catalog(parse_format(list_format));
      return 0;
    }
    if (*validate_cmd) {
      const auto summary = compare_with_measurements(load_measurements(measurements_path));
      const Format fmt_kind = parse_format(list_format);
      if (fmt_kind == Format::json) {
        nlohmann::json rows = nlohmann::json::array();
        for (const auto& c : summary.rows)
          rows.push_back({{"line", c.measured.line}, {"model", c.measured.model},
                          {"measured_peak_allocated_mib", *c.measured.peak_allocated_mib},
                          {"predicted_peak_allocated_mib", to_mib(c.predicted_allocated)},
                          {"error", c.allocated_error}, {"predicted_peak", c.predicted_peak_phase}});
        std::cout << nlohmann::json{{"rows", rows}, {"median_abs_error", summary.median_abs_error},
                                    {"max_abs_error", summary.max_abs_error}}.dump(2) << "\n";
        return 0;
      }
      std::cout << fmt::format("{:>5}  {:<14}{:<7}{:<6}{:>6}{:>6}{:>5}{:>6}  {:>11}{:>11}{:>8}  {}\n", "line", "model", "method",
                               "wts", "seq", "batch", "rank", "ckpt", "measured", "predicted", "error", "predicted peak");
      for (const auto& c : summary.rows) {
        const auto& s = c.measured.setup;
        std::cout << fmt::format("{:>5}  {:<14}{:<7}{:<6}{:>6}{:>6}{:>5}{:>6}  {:>11.1f}{:>11.1f}{:>+7.1f}%  {}\n", c.measured.line,
                                 c.measured.model, to_string(s.method), s.amp ? "amp" : to_string(s.weights), s.seq, s.batch,
                                 s.method == Method::full ? 0 : s.lora.rank, s.grad_ckpt ? "on" : "off",
                                 *c.measured.peak_allocated_mib, to_mib(c.predicted_allocated), 100.0 * c.allocated_error,
                                 c.predicted_peak_phase);
      }
      std::cout << fmt::format("\n{} rows: median |error| {:.1f}%, max |error| {:.1f}%\n", summary.rows.size(),
                               100.0 * summary.median_abs_error, 100.0 * summary.max_abs_error);
      return 0;
    }
  } catch (const InputError& e) {
    std::cerr << "trainfit: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "trainfit: internal error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
