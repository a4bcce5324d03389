// The NVML layer on a real GPU and driver (label gpu: CI has none). Also measures what one reading
// costs and the sampler's CPU share at 10 Hz, printed as "MEASURED ..." lines for docs/watch.md.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "trainfit/telemetry.hpp"

namespace {

using namespace trainfit::telemetry;

TEST(GpuTelemetry, ReadsTheRealDriver) {
  auto nvml = Nvml::open();
  ASSERT_FALSE(nvml->gpus().empty());
  std::cout << "MEASURED driver " << nvml->driver_version() << "\n";
  for (std::size_t i = 0; i < nvml->gpus().size(); ++i) {
    const GpuInfo& info = nvml->gpus()[i];
    EXPECT_FALSE(info.name.empty());
    ASSERT_TRUE(info.memory_total_bytes);
    EXPECT_GT(*info.memory_total_bytes, 1LL << 30);
    nvml->read(i, true);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const GpuReading g = nvml->read(i, true);  // the second slow read has link rates
    EXPECT_TRUE(g.memory_used_bytes && g.memory_free_bytes);
    EXPECT_TRUE(g.gpu_util_percent);
    EXPECT_TRUE(g.sm_clock_mhz);
    EXPECT_TRUE(g.power_watts);
    EXPECT_TRUE(g.processes);
    std::cout << fmt::format(
        "MEASURED gpu {} {}: total {} used {} util {} sm {} / max {} MHz mem {} MHz power {} W limit {} W default {} W "
        "temp {} C throttle {} pcie rx {} tx {} B/s nvlink rx {} B/s processes {}\n",
        info.index, info.name, *info.memory_total_bytes, g.memory_used_bytes.value_or(-1),
        g.gpu_util_percent.value_or(-1), g.sm_clock_mhz.value_or(-1), info.sm_clock_max_mhz.value_or(-1),
        g.memory_clock_mhz.value_or(-1), g.power_watts.value_or(-1), g.power_limit_watts.value_or(-1),
        info.power_default_limit_watts.value_or(-1), g.temperature_c.value_or(-1),
        g.throttle_reasons ? describe_throttle(*g.throttle_reasons) : "unknown", g.pcie_rx_bytes_per_s.value_or(-1),
        g.pcie_tx_bytes_per_s.value_or(-1), g.nvlink_rx_bytes_per_s.value_or(-1),
        g.processes ? static_cast<long>(g.processes->size()) : -1L);
  }
}

TEST(GpuTelemetry, CostOfOneReading) {
  auto nvml = Nvml::open();
  for (bool slow : {false, true}) {
    constexpr int kReads = 200;
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    for (int i = 0; i < kReads; ++i) nvml->read(0, slow);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kReads;
    const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC / kReads;
    std::cout << fmt::format("MEASURED one {} reading of GPU 0: {:.1f} us wall, {:.1f} us CPU\n",
                             slow ? "full" : "fast", wall * 1e6, cpu * 1e6);
  }
}

TEST(GpuTelemetry, SamplerCostAt10HzIsUnderOnePercentOfACore) {
  auto nvml = Nvml::open();
  for (double slow : {0.5, 0.1}) {  // the default, and every metric on every tick
    Sampler sampler(*nvml, std::chrono::milliseconds(100), std::chrono::duration<double>(slow));
    sampler.start();
    std::this_thread::sleep_for(std::chrono::seconds(6));
    sampler.stop();
    const SamplerCost c = sampler.cost();
    std::cout << fmt::format(
        "MEASURED sampler 10 Hz, slow metrics every {} s, {} GPU(s): {} samples, {:.4f} s CPU over "
        "{:.2f} s = {:.3f}% of a core\n",
        slow, nvml->gpus().size(), c.samples, c.cpu_seconds, c.wall_seconds, 100 * c.core_fraction());
    EXPECT_GE(c.samples, 50);
    if (slow == 0.5) {
      EXPECT_LT(c.core_fraction(), 0.01);
    }
  }
}

}  // namespace
