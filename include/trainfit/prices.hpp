#pragma once
// STUB until helper-p's prices land (same API).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainfit {
struct GpuPrice {
  std::string gpu;
  double usd_per_hour = 0;
  std::string provider, source, date;
};
struct PriceTable {
  std::vector<GpuPrice> prices;
  std::string origin;
  const GpuPrice* find(std::string_view gpu_id) const {
    for (const auto& p : prices)
      if (p.gpu == gpu_id) return &p;
    return nullptr;
  }
};
struct RunCost {
  double hours = 0;
  std::optional<double> usd;
};
inline RunCost run_cost(double tokens_per_second, std::int64_t gpus, double tokens, const GpuPrice* price) {
  RunCost c;
  c.hours = tokens / tokens_per_second / 3600.0;
  if (price) c.usd = c.hours * static_cast<double>(gpus) * price->usd_per_hour;
  return c;
}
}  // namespace trainfit
