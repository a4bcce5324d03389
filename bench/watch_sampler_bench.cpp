// What watching costs: the sampling thread's CPU time at 10 Hz as a share of one core (docs/watch.md,
// "Cost"), with the fake driver at 1, 2 and 8 GPUs (the thread's own work: wake-ups, the calls, the
// samples it queues) and, on a GPU machine with TRAINFIT_BENCH_REAL_NVML=1, against the real driver.
// Each run samples for a few seconds of wall time; the counter core_pct is what the summary prints.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "trainfit/telemetry.hpp"

namespace {

using namespace trainfit::telemetry;

// A driver answering for `gpus` busy GPUs with NVLink, PCIe counters and two processes each.
std::string fake_script(int gpus) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("trainfit-bench-nvml-" + std::to_string(getpid()) + "-" + std::to_string(gpus) + ".txt");
  std::ofstream out(path);
  out << "count " << gpus << "\n";
  for (int i = 0; i < gpus; ++i)
    out << "gpu" << i << ".name NVIDIA H200\ngpu" << i << ".util_gpu 90 95 100\ngpu" << i
        << ".memory_used 60000000000\ngpu" << i << ".pcie_rx_rate 1000000000\ngpu" << i
        << ".nvlink_rx_rate 20000000000\ngpu" << i << ".nvlink_tx_rate 20000000000\ngpu" << i << ".power_mw 650000\ngpu"
        << i << ".procs " << 4000 + 2 * i << ":30000000000 " << 4001 + 2 * i << ":1000000\n";
  return path.string();
}

void run_sampler(benchmark::State& state, Nvml& nvml, double seconds) {
  SamplerCost cost;
  for (auto _ : state) {
    Sampler sampler(nvml, std::chrono::milliseconds(100));
    sampler.start();
    // The watch takes the samples every tick; so does this.
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      benchmark::DoNotOptimize(sampler.take());
    }
    sampler.stop();
    cost = sampler.cost();
  }
  state.counters["gpus"] = static_cast<double>(nvml.gpus().size());
  state.counters["samples"] = static_cast<double>(cost.samples);
  state.counters["core_pct"] = 100 * cost.core_fraction();
  state.counters["cpu_us_per_sample"] =
      cost.samples > 0 ? 1e6 * cost.cpu_seconds / static_cast<double>(cost.samples) : 0;
}

void BM_SamplerFakeDriver(benchmark::State& state) {
#ifdef TRAINFIT_FAKE_NVML
  const std::string script = fake_script(static_cast<int>(state.range(0)));
  setenv("FAKE_NVML_SCRIPT", script.c_str(), 1);
  // The fake driver is a build artefact: a copied benchmark binary may not find it, and says so.
  try {
    auto nvml = Nvml::open(TRAINFIT_FAKE_NVML);
    run_sampler(state, *nvml, 5);
  } catch (const trainfit::telemetry::TelemetryUnavailable& e) {
    state.SkipWithError(e.what());
  }
  std::filesystem::remove(script);
#else
  state.SkipWithError("built without the tests' fake NVML (TRAINFIT_BUILD_TESTS=OFF)");
#endif
}
BENCHMARK(BM_SamplerFakeDriver)->ArgName("gpus")->Arg(1)->Arg(2)->Arg(8)->Iterations(1)->Unit(benchmark::kSecond);

void BM_SamplerRealDriver(benchmark::State& state) {
  if (!std::getenv("TRAINFIT_BENCH_REAL_NVML")) {
    state.SkipWithError("set TRAINFIT_BENCH_REAL_NVML=1 on a machine with NVIDIA GPUs");
    return;
  }
  try {
    auto nvml = Nvml::open();
    run_sampler(state, *nvml, 20);
  } catch (const trainfit::telemetry::TelemetryUnavailable& e) {
    state.SkipWithError(e.what());
  }
}
BENCHMARK(BM_SamplerRealDriver)->Iterations(1)->Unit(benchmark::kSecond);

}  // namespace
