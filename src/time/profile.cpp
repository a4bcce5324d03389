// Time profiles: the shipped default, and reading/writing profile files (TOML).
#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "common/text.hpp"
#include "trainfit/error.hpp"
#include "trainfit/time.hpp"

namespace trainfit {

TimeProfile default_profile(const GpuSpec& gpu) {
  // Rates measured on the H200 by python/trainfit_runner/measure_rates.py
  // (data/measurements/h200-rates-2026-11-30.json, torch 2.11 + CUDA 13): bf16 GEMMs at training
  // shapes 760-825 of 989 TFLOP/s; causal cuDNN attention forward + backward 196-501 (median 422);
  // fp32 GEMM 51 of 67; elementwise 4.21 of 4.8 TB/s; a tiny kernel 0.85 us. Host dispatch per
  // operation and the elementwise bandwidth fraction are fitted to whole steps (`trainfit calibrate
  // data/reference/h200-hf-peft-calibration.jsonl`; tests/golden/time_test.cpp refits them). Other cards use the same fractions of their own
  // datasheet peaks until measured: the fractions describe the kernels, and dispatch is the CPU's.
  TimeProfile p;
  p.name = "h200-hf-peft";
  p.source = "H200 rates measured 2026-11-30; host dispatch fitted to data/reference/h200-hf-peft-calibration.jsonl";
  // In a training step GEMMs run below the micro-benchmark (backward layouts, mixed shapes): the
  // profile of a Qwen2.5-14B LoRA step (data/measurements/h200-step-profiles-2026-11-30.json)
  // spends 0.99 s in bf16 tensor GEMMs for 675 TFLOP: 0.69 of peak.
  p.matmul_efficiency = 0.69;
  p.attention_efficiency = 0.43;
  p.fp32_efficiency = 0.76;
  // Fitted: the mix of training's elementwise kernels (strided RoPE slices, reductions, casts)
  // reaches 0.63 of the bandwidth a streaming kernel does (0.88, measured).
  p.bandwidth_efficiency = 0.63;
  p.kernel_floor_seconds = 0.85e-6;
  p.host_seconds_per_op = 32.8e-6;
  // Fitted to the seed's one spilling measurement (Qwen2.5-14B, 4-bit, no checkpointing, 21.7 s
  // on an RTX 5070 Ti under Windows): the only system-memory-fallback step measured so far.
  p.spill_efficiency = 0.063;
  // NCCL 2.28.9 between two NVLinked H200s (NV18, 450 GB/s a direction), 1 GiB messages: all-reduce
  // 325 GB/s bus bandwidth, all-gather 267, reduce-scatter 259 (data/measurements/h200x2-collectives-2026-11-30.json).
  p.all_reduce_efficiency = 0.72;
  p.all_gather_efficiency = 0.59;
  if (gpu.id != "h200") p.source += "; used as is for " + (gpu.id.empty() ? std::string("this card") : gpu.id);
  return p;
}

namespace {

double fraction(const toml::table& t, const char* key, double fallback, std::string_view src, double max) {
  const auto* node = t.get(key);
  if (!node) return fallback;
  const auto v = node->value<double>();
  if (!v || !(*v > 0.0) || *v > max)
    throw InputError(fmt::format("{}: field \"{}\" must be a number in (0, {}]", src, key, max));
  return *v;
}

}  // namespace

TimeProfile parse_profile(std::string_view text, std::string_view src) {
  toml::table t;
  try {
    t = toml::parse(text, src);
  } catch (const toml::parse_error& e) {
    throw InputError(fmt::format("{}:{}: {}", src, e.source().begin.line, e.description()));
  }
  TimeProfile p;
  if (const auto name = t["name"].value<std::string>()) p.name = *name;
  if (const auto source = t["source"].value<std::string>()) p.source = *source;
  p.matmul_efficiency = fraction(t, "matmul_efficiency", p.matmul_efficiency, src, 1.0);
  p.attention_efficiency = fraction(t, "attention_efficiency", p.attention_efficiency, src, 1.0);
  p.fp32_efficiency = fraction(t, "fp32_efficiency", p.fp32_efficiency, src, 1.0);
  p.bandwidth_efficiency = fraction(t, "bandwidth_efficiency", p.bandwidth_efficiency, src, 1.0);
  p.host_seconds_per_op = fraction(t, "host_seconds_per_op", p.host_seconds_per_op, src, 1.0);
  p.kernel_floor_seconds = fraction(t, "kernel_floor_seconds", p.kernel_floor_seconds, src, 1.0);
  p.spill_efficiency = fraction(t, "spill_efficiency", p.spill_efficiency, src, 1.0);
  p.all_reduce_efficiency = fraction(t, "all_reduce_efficiency", p.all_reduce_efficiency, src, 1.0);
  p.all_gather_efficiency = fraction(t, "all_gather_efficiency", p.all_gather_efficiency, src, 1.0);
  for (const auto& [key, value] : t) {
    static constexpr std::string_view known[] = {"name", "source", "matmul_efficiency", "attention_efficiency",
                                                 "fp32_efficiency", "bandwidth_efficiency", "host_seconds_per_op",
                                                 "kernel_floor_seconds", "spill_efficiency", "all_reduce_efficiency",
                                                 "all_gather_efficiency"};
    if (std::find(std::begin(known), std::end(known), key.str()) == std::end(known))
      throw InputError(fmt::format("{}: unknown field \"{}\"", src, key.str()));
  }
  return p;
}

TimeProfile load_profile(std::string_view path) {
  return parse_profile(detail::read_text_file(path, "profile"), path);
}

std::string profile_to_toml(const TimeProfile& p) {
  toml::table t{{"name", p.name},
                {"source", p.source},
                {"matmul_efficiency", p.matmul_efficiency},
                {"attention_efficiency", p.attention_efficiency},
                {"fp32_efficiency", p.fp32_efficiency},
                {"bandwidth_efficiency", p.bandwidth_efficiency},
                {"host_seconds_per_op", p.host_seconds_per_op},
                {"kernel_floor_seconds", p.kernel_floor_seconds},
                {"spill_efficiency", p.spill_efficiency},
                {"all_reduce_efficiency", p.all_reduce_efficiency},
                {"all_gather_efficiency", p.all_gather_efficiency}};
  std::ostringstream out;
  out << "# trainfit time profile (docs/model.md, \"The time model\")\n" << t << "\n";
  return out.str();
}

}  // namespace trainfit
