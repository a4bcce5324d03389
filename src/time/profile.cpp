// Time profiles: the shipped default, and reading/writing profile files (TOML).
#include <sstream>

#include <toml++/toml.h>

#include "common/text.hpp"
#include "common/toml_reader.hpp"
#include "trainfit/error.hpp"
#include "trainfit/time.hpp"

namespace trainfit {

TimeProfile default_profile(const GpuSpec& gpu) {
  // The rates are TimeProfile's own initialisers (include/trainfit/time.hpp, where each says
  // where it was measured or fitted), so that a profile file leaving a field out gets the same
  // value as no profile at all. Other cards use the same fractions of their own datasheet peaks
  // until measured: the fractions describe the kernels, and dispatch is the CPU's.
  TimeProfile p;
  p.name = "h200-hf-peft";
  p.source = "H200 rates measured 2026-11-30; host dispatch fitted to data/reference/h200-hf-peft-calibration.jsonl";
  if (gpu.id != "h200") p.source += "; used as is for " + (gpu.id.empty() ? std::string("this card") : gpu.id);
  return p;
}

namespace {

// A profile is a few hundred bytes; past this the path names something else.
constexpr std::size_t kMaxProfileBytes = std::size_t{1} << 20;

}  // namespace

TimeProfile parse_profile(std::string_view text, std::string_view src) {
  const toml::table t = detail::parse_toml(text, src);
  const detail::TomlReader r(src);
  r.reject_unknown(t, "",
                   {"name", "source", "measured_on", "matmul_efficiency", "attention_efficiency", "fp32_efficiency",
                    "bandwidth_efficiency", "broadcast_ops_per_element", "host_seconds_per_op", "kernel_floor_seconds",
                    "spill_efficiency", "all_reduce_efficiency", "all_gather_efficiency", "dtensor_seconds_per_op",
                    "collective_launch_seconds", "collective_latency_seconds", "decode_seconds_per_op",
                    "decode_adapter_seconds", "decode_loop_seconds"});
  // Every field left out keeps TimeProfile's value: the shipped (H200) one.
  TimeProfile p;
  if (const auto* n = t.get("name")) p.name = r.text(*n, "name");
  if (const auto* n = t.get("source")) p.source = r.text(*n, "source");
  if (const auto* n = t.get("measured_on")) p.measured_on = r.text(*n, "measured_on");
  // Every rate in (kProfileRateAbove, kProfileRateAtMost]: the range calibrate() checks its fit
  // against too (include/trainfit/time.hpp says why).
  auto rate = [&](const char* key, double& field) {
    if (const auto* n = t.get(key)) field = r.number_above(*n, key, kProfileRateAbove, kProfileRateAtMost);
  };
  rate("matmul_efficiency", p.matmul_efficiency);
  rate("attention_efficiency", p.attention_efficiency);
  rate("fp32_efficiency", p.fp32_efficiency);
  rate("bandwidth_efficiency", p.bandwidth_efficiency);
  rate("host_seconds_per_op", p.host_seconds_per_op);
  rate("kernel_floor_seconds", p.kernel_floor_seconds);
  rate("spill_efficiency", p.spill_efficiency);
  rate("all_reduce_efficiency", p.all_reduce_efficiency);
  rate("all_gather_efficiency", p.all_gather_efficiency);
  rate("dtensor_seconds_per_op", p.dtensor_seconds_per_op);
  rate("collective_launch_seconds", p.collective_launch_seconds);
  rate("collective_latency_seconds", p.collective_latency_seconds);
  rate("decode_seconds_per_op", p.decode_seconds_per_op);
  rate("decode_adapter_seconds", p.decode_adapter_seconds);
  rate("decode_loop_seconds", p.decode_loop_seconds);
  // Operations an element, not a fraction: at least one, and well short of a kernel's worth.
  if (const auto* n = t.get("broadcast_ops_per_element"))
    p.broadcast_ops_per_element = r.number_above(*n, "broadcast_ops_per_element", 1.0, 1e5);
  return p;
}

TimeProfile load_profile(std::string_view path) {
  return parse_profile(detail::read_text_file(path, "profile", kMaxProfileBytes), path);
}

std::string profile_to_toml(const TimeProfile& p) {
  toml::table t{{"name", p.name},
                {"source", p.source},
                {"measured_on", p.measured_on},
                {"matmul_efficiency", p.matmul_efficiency},
                {"attention_efficiency", p.attention_efficiency},
                {"fp32_efficiency", p.fp32_efficiency},
                {"bandwidth_efficiency", p.bandwidth_efficiency},
                {"broadcast_ops_per_element", p.broadcast_ops_per_element},
                {"host_seconds_per_op", p.host_seconds_per_op},
                {"kernel_floor_seconds", p.kernel_floor_seconds},
                {"spill_efficiency", p.spill_efficiency},
                {"all_reduce_efficiency", p.all_reduce_efficiency},
                {"all_gather_efficiency", p.all_gather_efficiency},
                {"dtensor_seconds_per_op", p.dtensor_seconds_per_op},
                {"collective_launch_seconds", p.collective_launch_seconds},
                {"collective_latency_seconds", p.collective_latency_seconds},
                {"decode_seconds_per_op", p.decode_seconds_per_op},
                {"decode_adapter_seconds", p.decode_adapter_seconds},
                {"decode_loop_seconds", p.decode_loop_seconds}};
  std::ostringstream out;
  out << "# trainfit time profile (docs/model.md, \"The time model\")\n" << t << "\n";
  return out.str();
}

void save_profile(const TimeProfile& profile, const std::string& path) {
  detail::write_text_file(path, profile_to_toml(profile));
}

}  // namespace trainfit
