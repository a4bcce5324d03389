// libFuzzer target for price files (TOML, `gpus --for --prices`): any input either yields prices
// within the documented limits, each keyed by a catalogue id, or an InputError, never a crash.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "trainfit/error.hpp"
#include "trainfit/hardware.hpp"
#include "trainfit/prices.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const trainfit::PriceTable t = trainfit::parse_prices(text, "fuzz.toml");
    for (const trainfit::GpuPrice& p : t.prices) {
      if (!std::isfinite(p.usd_per_hour) || p.usd_per_hour <= 0 || p.usd_per_hour > trainfit::kMaxUsdPerGpuHour)
        __builtin_trap();
      if (trainfit::find_gpu(p.gpu).id != p.gpu || p.source.empty()) __builtin_trap();
    }
    const trainfit::PriceTable merged = trainfit::merge_prices(trainfit::builtin_prices(), t);
    for (const trainfit::GpuPrice& p : t.prices)
      if (merged.find(p.gpu) == nullptr || merged.find(p.gpu)->usd_per_hour != p.usd_per_hour) __builtin_trap();
  } catch (const trainfit::InputError&) {
  }
  return 0;
}
