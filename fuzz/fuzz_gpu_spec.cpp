// libFuzzer target for GPU spec files (TOML) and GPU name lookup: any input either
// yields a spec within the documented limits or an InputError, never a crash.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/units.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    (void)trainfit::find_gpu(text);
  } catch (const trainfit::InputError&) {
  }
  try {
    const trainfit::GpuSpec g = trainfit::parse_gpu_spec(text, "fuzz.toml");
    if (g.memory_bytes <= 0 || g.memory_bytes > 16 * 1024 * trainfit::kGiB) __builtin_trap();
    for (double v : {g.memory_bandwidth_bytes_per_s, g.fp32_flops, g.tf32_flops, g.bf16_flops, g.fp16_flops,
                     g.fp8_flops, g.int8_ops, g.host_link_bytes_per_s, g.gpu_link_bytes_per_s}) {
      if (!std::isfinite(v) || v < 0) __builtin_trap();
    }
    if (g.id.empty() || g.name.empty() || g.gpu_link.empty()) __builtin_trap();
  } catch (const trainfit::InputError&) {
  }
  return 0;
}
