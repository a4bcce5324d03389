// Writes the plan golden set (tests/golden/plan_setups.jsonl.gz, gzipped): every setup the repository holds
// (bench plans' matrices, measured rows of data/, `trainfit plan` lines of the README and docs)
// and a generated set that covers every method, objective, layout and model family, each with the
// plan `trainfit plan --format json` gives for it (or the error it gives). The golden test
// (tests/golden/plan_setups_test.cpp) plans each setup again and wants the same JSON, to the bit.
//
// Run it only when a change is meant to move numbers, and say in the commit which and why:
//   build/default/tests/trainfit_capture_plan_setups | gzip -9n > tests/golden/plan_setups.jsonl.gz
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "trainfit/bench.hpp"
#include "trainfit/trainfit.hpp"

namespace fs = std::filesystem;
using namespace trainfit;
using namespace trainfit::bench;

namespace {

const fs::path kSource = TRAINFIT_SOURCE_DIR;

struct Entry {
  std::string source;
  TrainingSetup setup;
};

// splitmix64: a fixed sequence on every machine and compiler (std's distributions are not).
struct Draw {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[next() % v.size()];
  }
  bool chance(int percent) { return static_cast<int>(next() % 100) < percent; }
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A setup through the same path a config file or the API takes: its JSON, read back.
TrainingSetup settled(const TrainingSetup& s) {
  return setup_from_json(setup_to_json(s));
}

void from_bench_plans(std::vector<Entry>& out) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(kSource / "plans"))
    if (e.path().extension() == ".toml") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    try {
      for (const BenchConfig& c : expand_matrix(load_experiment_plan(f.string())))
        out.push_back({fs::relative(f, kSource).string(), c.setup});
    } catch (const std::exception& e) {
      std::cerr << "skipped " << f << ": " << e.what() << "\n";
    }
  }
}

void from_data_rows(std::vector<Entry>& out) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(kSource / "data"))
    if (e.path().extension() == ".jsonl") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    const std::string rel = fs::relative(f, kSource).string();
    std::istringstream lines(read_file(f));
    std::string line;
    int n = 0;
    while (std::getline(lines, line)) {
      ++n;
      if (line.empty()) continue;
      try {
        const auto j = nlohmann::json::parse(line);
        TrainingSetup s;
        if (j.contains("config")) {
          s = config_from_json(j.at("config")).setup;
        } else {
          const auto steps = parse_measurements(line, rel);
          if (steps.empty()) continue;
          s = steps.front().setup;
        }
        // A row's model may be a path relative to its file or the repository: only built-ins are kept.
        load_builtin_model(s.model);
        out.push_back({fmt::format("{}:{}", rel, n), s});
      } catch (const std::exception&) {
        // Rows of other kinds (watch samples, trace summaries) hold no setup.
      }
    }
  }
}

// `trainfit plan ...` lines of the README and the docs, their flags read by the settings table.
void from_docs(std::vector<Entry>& out) {
  std::vector<fs::path> files = {kSource / "README.md"};
  for (const auto& e : fs::directory_iterator(kSource / "docs"))
    if (e.path().extension() == ".md") files.push_back(e.path());
  std::sort(files.begin() + 1, files.end());
  const std::regex line_re(R"(trainfit plan ([^#`\n|>]*))");
  for (const auto& f : files) {
    // A command the docs break over lines with the shell's continuation is one command.
    const std::string text = std::regex_replace(read_file(f), std::regex(R"(\\\n\s*)"), " ");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), line_re); it != std::sregex_iterator(); ++it) {
      std::istringstream words((*it)[1].str());
      std::vector<std::string> args;
      for (std::string w; words >> w;) args.push_back(w);
      std::vector<GivenSetting> given;
      bool ok = !args.empty();
      for (std::size_t i = 0; ok && i < args.size(); ++i) {
        const Setting* s = find_setting_by_flag(args[i]);
        if (s == nullptr) {
          ok = false;
          break;
        }
        if (s->type == SettingType::boolean) {
          // Set in place: GCC 12 warns falsely about a variant holding a vector built as a temporary.
          GivenSetting& g = given.emplace_back();
          g.setting = s;
          g.value = args[i].rfind("--no-", 0) != 0;
        } else if (i + 1 < args.size()) {
          try {
            GivenSetting& g = given.emplace_back();
            g.setting = s;
            g.value = parse_setting_text(*s, args[++i]);
          } catch (const std::exception&) {
            ok = false;
          }
        } else {
          ok = false;
        }
      }
      if (!ok) continue;
      try {
        TrainingSetup s = resolve_setup(given);
        if (s.model.empty()) continue;
        load_builtin_model(s.model);
        out.push_back({fs::relative(f, kSource).string(), s});
      } catch (const std::exception&) {
      }
    }
  }
}

// FNV-1a of a model's name: each model's draws are seeded by its name alone, so that adding a
// built-in adds its own lines to the golden set and leaves every other model's as they were.
std::uint64_t name_seed(std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

// The generated set: each model's draws walk the layouts, the methods and the objectives by
// strides of 1 (their lengths are coprime), so that every family meets every layout, method and
// objective, and the other settings vary at random. A draw that the settings' own rules refuse is
// kept once in ten with its error (refusals are output too).
void generated(std::vector<Entry>& out, int draws_per_model) {
  const std::vector<std::string> models = builtin_model_names();
  const std::vector<std::string> cards = {"h200",     "h100-sxm",    "a100-80gb", "a100-40gb",
                                          "rtx-4090", "rtx-5070-ti", "l40s",      "mi300x"};
  struct LayoutDraw {
    const char* name;
    std::int64_t gpus, tp, pp, cp, nodes;
    Parallel parallel;
    Offload offload;
  };
  const std::vector<LayoutDraw> layouts = {
      {"one", 1, 1, 1, 1, 1, Parallel::ddp, Offload::none},
      {"ddp2", 2, 1, 1, 1, 1, Parallel::ddp, Offload::none},
      {"ddp8", 8, 1, 1, 1, 1, Parallel::ddp, Offload::none},
      {"fsdp2", 2, 1, 1, 1, 1, Parallel::fsdp, Offload::none},
      {"fsdp8", 8, 1, 1, 1, 1, Parallel::fsdp, Offload::none},
      {"fsdp-grad-op", 4, 1, 1, 1, 1, Parallel::fsdp_grad_op, Offload::none},
      {"hsdp", 16, 1, 1, 1, 2, Parallel::hsdp, Offload::none},
      {"zero1", 8, 1, 1, 1, 1, Parallel::zero1, Offload::none},
      {"zero2", 8, 1, 1, 1, 1, Parallel::zero2, Offload::none},
      {"zero3", 8, 1, 1, 1, 1, Parallel::zero3, Offload::none},
      {"zero2-offload", 4, 1, 1, 1, 1, Parallel::zero2, Offload::optimizer},
      {"zero3-offload", 8, 1, 1, 1, 1, Parallel::zero3, Offload::optimizer_params},
      {"fsdp-offload", 8, 1, 1, 1, 1, Parallel::fsdp, Offload::optimizer_params},
      {"tp2", 2, 2, 1, 1, 1, Parallel::ddp, Offload::none},
      {"tp8", 8, 8, 1, 1, 1, Parallel::ddp, Offload::none},
      {"tp2-fsdp", 8, 2, 1, 1, 1, Parallel::fsdp, Offload::none},
      {"pp2", 2, 1, 2, 1, 1, Parallel::ddp, Offload::none},
      {"pp4", 4, 1, 4, 1, 1, Parallel::ddp, Offload::none},
      {"tp2-pp2", 8, 2, 2, 1, 1, Parallel::ddp, Offload::none},
      {"cp2", 2, 1, 1, 2, 1, Parallel::ddp, Offload::none},
      {"cp2-fsdp", 8, 1, 1, 2, 1, Parallel::fsdp, Offload::none},
      {"nodes8-zero1", 64, 2, 1, 1, 8, Parallel::zero1, Offload::none},
      {"nodes4-fsdp-tp", 32, 4, 2, 1, 4, Parallel::fsdp, Offload::none},
  };
  const std::vector<Method> methods = {Method::full, Method::lora, Method::qlora};
  const std::vector<Objective> objectives = {Objective::sft,    Objective::dpo, Objective::orpo, Objective::kto,
                                             Objective::reward, Objective::ppo, Objective::grpo};
  const std::vector<std::int64_t> seqs = {256, 512, 1024, 2048, 4096, 8192, 32768};
  const std::vector<std::int64_t> batches = {1, 2, 4, 8};
  const std::vector<std::int64_t> accums = {1, 2, 4};
  const std::vector<std::int64_t> ranks = {8, 16, 64};
  const std::vector<std::int64_t> microbatches = {1, 2, 4, 8};
  const std::vector<std::string> targets = {"all-linear", "q,k,v,o", "q,v", "all-linear"};
  const std::vector<Attention> attentions = {Attention::sdpa, Attention::sdpa, Attention::eager, Attention::flash};
  const std::vector<Optimizer> optimizers = {Optimizer::adamw, Optimizer::adamw,        Optimizer::adamw_8bit,
                                             Optimizer::sgd,   Optimizer::sgd_momentum, Optimizer::adafactor};
  for (const std::string& model : models) {
    Draw d{20261204 ^ name_seed(model)};
   const bool multimodal = !load_model(model).vision.type.empty();
    for (std::size_t i = 0; i < static_cast<std::size_t>(draws_per_model); ++i) {
      const LayoutDraw& l = layouts[i % layouts.size()];
      TrainingSetup s;
      s.model = model;
      s.gpu = d.pick(cards);
      s.method = methods[i % methods.size()];
      s.objective = objectives[i % objectives.size()];
      if (s.method == Method::qlora)
        s.weights = DType::nf4;
      else if (d.chance(15)) {
        s.weights = DType::fp32;
        s.amp = DType::bf16;
      } else if (d.chance(5))
        s.weights = DType::fp16;
      if (s.method != Method::full) {
        s.lora.rank = d.pick(ranks);
        s.lora.targets = parse_lora_targets(d.pick(targets));
        if (d.chance(20)) s.lora.dropout = 0;
      }
      s.optimizer = d.pick(optimizers);
      s.seq = d.pick(seqs);
      s.batch = d.pick(batches);
      s.grad_accum = d.pick(accums);
      s.grad_ckpt = d.chance(50);
      s.attention = d.pick(attentions);
      s.gpus = l.gpus;
      s.tp = l.tp;
      s.pp = l.pp;
      s.cp = l.cp;
      s.nodes = l.nodes;
      s.parallel = l.parallel;
      s.offload = l.offload;
      if (l.pp > 1) s.microbatches = d.pick(microbatches);
      if ((l.parallel == Parallel::fsdp || l.parallel == Parallel::hsdp) && s.weights == DType::fp32 && d.chance(50)) {
        s.amp.reset();
        s.fsdp_param_dtype = DType::bf16;
        if (d.chance(50)) s.fsdp_reduce_dtype = DType::fp32;
      }
      s.reference = default_reference(s.objective, s.method);
      if (has_reference_setting(s.objective) && d.chance(20)) s.reference = Reference::precomputed;
      if (s.objective == Objective::ppo || s.objective == Objective::grpo) s.completion_len = s.seq / 2;
      if (s.objective == Objective::grpo) {
        s.generations = 4;
        s.batch = 4;
        s.grad_accum = 1;
      }
      if (s.objective == Objective::kto && s.batch < 2) s.batch = 2;
      if (d.chance(10)) s.platform = Platform::on_windows;
    // A multimodal model runs images through its tower in a third of its draws (drawn for those
    // models alone, so that the others' draws stay as they were).
    if (multimodal && d.chance(33)) s.images = 1 + static_cast<std::int64_t>(d.next() % 2);
      const std::string source = fmt::format("generated:{}:{}:{}", model, i, l.name);
      try {
        out.push_back({source, settled(s)});
      } catch (const std::exception&) {
        // Refused before planning (the settings' own rules): kept once in a while as a refusal.
        if (i % 10 == 0) out.push_back({source, s});
      }
    }
  }
}

// TRL's trainer (--trainer trl: checkpointing, the chunked loss under SFT) on every family and
// method, on one GPU and the layouts a chunk runs under (tensor parallelism is refused).
void generated_trl(std::vector<Entry>& out) {
  struct LayoutDraw {
    const char* name;
    std::int64_t gpus, tp, pp;
    Parallel parallel;
  };
  const std::vector<LayoutDraw> layouts = {{"one", 1, 1, 1, Parallel::ddp},
                                           {"fsdp2", 2, 1, 1, Parallel::fsdp},
                                           {"pp2", 2, 1, 2, Parallel::ddp},
                                           {"tp2", 2, 2, 1, Parallel::ddp}};
  const std::vector<Objective> objectives = {Objective::sft, Objective::sft, Objective::dpo};
  std::size_t i = 0;
  for (const std::string& model : builtin_model_names()) {
    for (const Method method : {Method::full, Method::lora, Method::qlora}) {
      const LayoutDraw& l = layouts[i % layouts.size()];
      TrainingSetup s;
      s.model = model;
      s.gpu = i % 2 == 0 ? "h100-sxm" : "rtx-4090";
      s.method = method;
      if (method == Method::qlora) s.weights = DType::nf4;
      s.trainer = Trainer::trl;
      s.grad_ckpt = i % 5 != 0;
      s.objective = objectives[i % objectives.size()];
      s.reference = default_reference(s.objective, s.method);
      s.loss = s.objective == Objective::sft && i % 7 != 3 ? Loss::chunked : Loss::whole;
      s.seq = 2048;
      s.batch = 2;
      s.gpus = l.gpus;
      s.tp = l.tp;
      s.pp = l.pp;
      s.parallel = l.parallel;
      if (l.pp > 1) s.microbatches = 2;
      try {
        out.push_back({fmt::format("generated-trl:{}:{}", i, l.name), settled(s)});
      } catch (const std::exception&) {
        out.push_back({fmt::format("generated-trl:{}:{}", i, l.name), s});
      }
      ++i;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int draws_per_model = argc > 1 ? std::stoi(argv[1]) : 200;
  std::vector<Entry> entries;
  from_bench_plans(entries);
  from_data_rows(entries);
  from_docs(entries);
  generated(entries, draws_per_model);
  generated_trl(entries);
  int planned = 0, refused = 0;
  for (const Entry& e : entries) {
    nlohmann::json line = {{"source", e.source}, {"setup", setup_to_json(e.setup)}};
    try {
      const TrainingSetup s = settled(e.setup);
      const Plan p = make_plan(load_model(s.model), s, resolve_card(s, "h200"));
      line["plan"] = plan_to_json(p);
      ++planned;
    } catch (const std::exception& err) {
      line["error"] = err.what();
      ++refused;
    }
    std::cout << line.dump() << "\n";
  }
  std::cerr << planned << " planned, " << refused << " refused\n";
  return 0;
}
