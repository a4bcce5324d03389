// The diagnoser on scripted sample streams: one stream per verdict, each built from the readings
// that define it (docs/watch.md), plus the cases that must not trigger a verdict.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>

#include "trainfit/telemetry.hpp"

namespace {

using namespace trainfit::telemetry;

constexpr std::int64_t kGiB = 1LL << 30;
constexpr double kT0 = 1.8e9;  // seconds since the epoch, like real samples

GpuInfo h200() {
  GpuInfo g;
  g.index = 0;
  g.name = "NVIDIA H200";
  g.memory_total_bytes = 140 * kGiB;
  g.sm_clock_max_mhz = 1980;
  g.memory_clock_max_mhz = 3201;
  g.power_default_limit_watts = 700;
  return g;
}

// 5 s at 10 Hz of a quiet, healthy GPU; `edit(reading, i)` makes it say something.
std::vector<Sample> stream(const std::function<void(GpuReading&, int)>& edit, int n = 50) {
  std::vector<Sample> out;
  for (int i = 0; i < n; ++i) {
    GpuReading g;
    g.memory_total_bytes = 140 * kGiB;
    g.memory_used_bytes = 20 * kGiB;
    g.memory_free_bytes = 120 * kGiB;
    g.gpu_util_percent = 0;
    g.memory_util_percent = 0;
    g.pcie_rx_bytes_per_s = 0.1e9;
    g.pcie_tx_bytes_per_s = 0.05e9;
    g.sm_clock_mhz = 1980;
    g.memory_clock_mhz = 3201;
    g.power_watts = 120;
    g.power_limit_watts = 700;
    g.temperature_c = 45;
    g.throttle_reasons = 0;
    g.processes = std::vector<ProcessMemory>{{1234, 19 * kGiB}};
    edit(g, i);
    out.push_back({kT0 + 0.1 * i, {g}});
  }
  return out;
}

void fill_memory(GpuReading& g, double fraction) {
  g.memory_used_bytes = static_cast<std::int64_t>(fraction * 140 * kGiB);
  g.memory_free_bytes = 140 * kGiB - *g.memory_used_bytes;
}

std::vector<StepEvent> steps(int n, double seconds, std::function<void(StepEvent&, int)> edit = {}) {
  std::vector<StepEvent> out;
  for (int i = 0; i < n; ++i) {
    StepEvent e;
    e.time = kT0 + 0.05 + seconds * i;
    e.step = i;
    e.step_seconds = seconds;
    e.alloc_retries = 0;
    e.ooms = 0;
    if (edit) edit(e, i);
    out.push_back(e);
  }
  return out;
}

Diagnosis run(const std::vector<Sample>& s, const std::vector<StepEvent>& e = {}) {
  return diagnose(s, e, h200());
}

bool has(const Diagnosis& d, Bottleneck b) {
  for (const Verdict& v : d.verdicts)
    if (v.kind == b) return true;
  return false;
}

TEST(Diagnose, IdleWhenNoKernelRuns) {
  const auto d = run(stream([](GpuReading&, int) {}));
  EXPECT_EQ(d.primary().kind, Bottleneck::idle);
  EXPECT_NE(d.primary().evidence.find("util 0% mean"), std::string::npos) << d.primary().evidence;
}

TEST(Diagnose, ComputeBoundAtFullClocks) {
  const auto d = run(stream([](GpuReading& g, int i) {
    g.gpu_util_percent = 97 + i % 3;
    g.power_watts = 560;
  }));
  EXPECT_EQ(d.primary().kind, Bottleneck::compute);
  EXPECT_NE(d.primary().evidence.find("util 98% mean"), std::string::npos) << d.primary().evidence;
  EXPECT_NE(d.primary().evidence.find("SM clock 1980 of 1980 MHz"), std::string::npos) << d.primary().evidence;
  EXPECT_NE(d.primary().advice.find("more or faster GPUs"), std::string::npos);
  EXPECT_EQ(d.verdicts.size(), 1u);
}

// The H200 in data/watch/ ran its matrix job at 693 of 700 W, clocks at 76%: the normal envelope.
TEST(Diagnose, PowerCapAtTheDefaultLimitIsStillComputeBound) {
  const auto d = run(stream([](GpuReading& g, int) {
    g.gpu_util_percent = 98;
    g.sm_clock_mhz = 1500;
    g.power_watts = 693;
    g.throttle_reasons = throttle::kSwPowerCap;
  }));
  EXPECT_EQ(d.primary().kind, Bottleneck::compute);
  EXPECT_NE(d.primary().evidence.find("at the power limit"), std::string::npos) << d.primary().evidence;
}

TEST(Diagnose, ThrottledByHeat) {
  const auto d = run(stream([](GpuReading& g, int) {
    g.gpu_util_percent = 99;
    g.sm_clock_mhz = 1100;
    g.temperature_c = 91;
    g.throttle_reasons = throttle::kHwThermal | throttle::kSwThermal;
  }));
  EXPECT_EQ(d.primary().kind, Bottleneck::throttled);
  EXPECT_NE(d.primary().evidence.find("thermal"), std::string::npos) << d.primary().evidence;
  EXPECT_NE(d.primary().evidence.find("91 °C"), std::string::npos) << d.primary().evidence;
}

TEST(Diagnose, ThrottledByALoweredPowerLimit) {
  const auto d = run(stream([](GpuReading& g, int) {
    g.gpu_util_percent = 99;
    g.sm_clock_mhz = 1300;
    g.power_watts = 398;
    g.power_limit_watts = 400;
    g.throttle_reasons = throttle::kSwPowerCap;
  }));
  EXPECT_EQ(d.primary().kind, Bottleneck::throttled);
  EXPECT_NE(d.primary().evidence.find("limit lowered from 700 W"), std::string::npos) << d.primary().evidence;
}

TEST(Diagnose, ABlipOfThrottlingDoesNotCount) {
  const auto d = run(stream([](GpuReading& g, int i) {
    g.gpu_util_percent = 98;
    g.throttle_reasons = i < 5 ? throttle::kHwThermal : 0;  // 10% of the samples
  }));
  EXPECT_EQ(d.primary().kind, Bottleneck::compute);
}

TEST(Diagnose, InputPipelineBoundInBursts) {
  // The seed's picture: utilisation low in bursts, memory to spare, little traffic.
  const auto d = run(stream([](GpuReading& g, int i) { g.gpu_util_percent = i % 8 < 3 ? 100 : 0; }));
  EXPECT_EQ(d.primary().kind, Bottleneck::input_pipeline);
  const std::string& e = d.primary().evidence;
  EXPECT_NE(e.find("util 40% mean (0-100%, bursts 0→100% every 0.8 s)"), std::string::npos) << e;
  EXPECT_NE(e.find("memory 14% of card"), std::string::npos) << e;
  EXPECT_NE(e.find("PCIe rx 0.1 GB/s"), std::string::npos) << e;
  EXPECT_NE(d.primary().advice.find("num_workers"), std::string::npos);
}

TEST(Diagnose, InputPipelineWithTheProbeSeeingDataWaits) {
  const auto d = run(stream([](GpuReading& g, int) { g.gpu_util_percent = 18; }),
                     steps(100, 0.05, [](StepEvent& e, int) { e.data_seconds = 0.04; }));
  EXPECT_EQ(d.primary().kind, Bottleneck::input_pipeline);
  EXPECT_NE(d.primary().evidence.find("waiting for data 80% of step time"), std::string::npos) << d.primary().evidence;
  EXPECT_NE(d.primary().advice.find("num_workers"), std::string::npos);
}

TEST(Diagnose, HostOverheadWhenTheProbeSeesNoDataWait) {
  const auto d = run(stream([](GpuReading& g, int) { g.gpu_util_percent = 60; }),
                     steps(100, 0.05, [](StepEvent& e, int) { e.data_seconds = 0.0005; }));
  EXPECT_EQ(d.primary().kind, Bottleneck::launch_overhead);
  EXPECT_NE(d.primary().advice.find("CUDA graphs"), std::string::npos) << d.primary().advice;
  EXPECT_NE(d.primary().advice.find("DataLoader workers will not help"), std::string::npos) << d.primary().advice;
}

// One /proc reading a second over the 5 s window: a training process (on GPU 0 unless `gpus` says
// otherwise) with its main and busiest other thread, and `workers` worker processes under it.
std::vector<HostSample> host_readings(double main, double other, int workers, double worker_cores,
                                      std::vector<int> gpus = {0}) {
  std::vector<HostSample> out;
  for (int i = 1; i <= 5; ++i) {
    HostSample h;
    h.time = kT0 + i - 0.5;
    HostProcess train;
    train.pid = 100;
    train.parent = 1;
    train.role = HostRole::training;
    train.gpus = gpus;
    train.main_thread_cores = main;
    train.busiest_other_cores = other;
    train.cpu_cores = main + other + 0.05;
    h.processes.push_back(train);
    for (int w = 0; w < workers; ++w) {
      HostProcess worker;
      worker.pid = static_cast<std::uint32_t>(200 + w);
      worker.parent = 100;
      worker.role = HostRole::worker;
      worker.cpu_cores = worker_cores;
      h.processes.push_back(worker);
    }
    out.push_back(h);
  }
  return out;
}

TEST(Diagnose, HostBoundWhenTheTrainingThreadRunsFlatOutWhileTheGpuIdles) {
  // The small LoRA: GPU idle ~88%, no loader, no data waits reported; the main thread and
  // PyTorch's autograd thread together near a full core.
  const auto samples = stream([](GpuReading& g, int i) { g.gpu_util_percent = i % 4 == 0 ? 30 : 8; });
  const auto d = diagnose(samples, steps(100, 0.05), h200(), host_readings(0.55, 0.4, 0, 0));
  EXPECT_EQ(d.primary().kind, Bottleneck::launch_overhead);
  const std::string& e = d.primary().evidence;
  EXPECT_NE(e.find("main thread 0.55 core, with its busiest other thread 0.95"), std::string::npos) << e;
  EXPECT_NE(d.primary().advice.find("torch.compile"), std::string::npos);
  EXPECT_EQ(d.stats.host_samples, 5);
}

TEST(Diagnose, InputBoundWhenWorkersAreBusyAndTheMainThreadWaits) {
  const auto samples = stream([](GpuReading& g, int) { g.gpu_util_percent = 25; });
  const auto d = diagnose(samples, {}, h200(), host_readings(0.1, 0.05, 4, 0.9));
  EXPECT_EQ(d.primary().kind, Bottleneck::input_pipeline);
  EXPECT_NE(d.primary().evidence.find("4 worker processes 3.60 cores"), std::string::npos) << d.primary().evidence;
  EXPECT_NE(d.primary().advice.find("num_workers"), std::string::npos);
}

TEST(Diagnose, DataWaitsDecideOverTheHostReadings) {
  // The main thread busy (collating in the loop) but the probe sees the step wait for its batch.
  const auto samples = stream([](GpuReading& g, int) { g.gpu_util_percent = 30; });
  const auto d = diagnose(samples, steps(100, 0.05, [](StepEvent& e, int) { e.data_seconds = 0.03; }), h200(),
                          host_readings(0.95, 0.0, 0, 0));
  EXPECT_EQ(d.primary().kind, Bottleneck::input_pipeline);
}

TEST(Diagnose, HostReadingsOfAnotherGpusProcessDoNotCount) {
  const auto samples = stream([](GpuReading& g, int) { g.gpu_util_percent = 30; });
  const auto d = diagnose(samples, {}, h200(), host_readings(0.6, 0.4, 0, 0, {1}));
  EXPECT_EQ(d.primary().kind, Bottleneck::input_pipeline);
  EXPECT_EQ(d.stats.host_samples, 0);
}

TEST(Diagnose, ABusyGpuIsComputeBoundWhateverTheHost) {
  const auto samples = stream([](GpuReading& g, int) { g.gpu_util_percent = 97; });
  EXPECT_EQ(diagnose(samples, {}, h200(), host_readings(0.6, 0.4, 0, 0)).primary().kind, Bottleneck::compute);
}

TEST(Diagnose, EachGpuJudgedOnItsOwnSteps) {
  auto tagged = steps(100, 0.05, [](StepEvent& e, int i) {
    e.device = i % 2;
    e.data_seconds = i % 2 == 0 ? 0.04 : 0.0;  // GPU 0's rank waits for data, GPU 1's does not
  });
  const auto samples = stream([](GpuReading& g, int) { g.gpu_util_percent = 30; });
  EXPECT_EQ(steps_of_gpu(tagged, 0).size(), 50U);
  EXPECT_EQ(diagnose(samples, steps_of_gpu(tagged, 0), h200()).primary().kind, Bottleneck::input_pipeline);
  EXPECT_EQ(diagnose(samples, steps_of_gpu(tagged, 1), h200()).primary().kind, Bottleneck::launch_overhead);
  tagged[0].device.reset();  // a step without a device belongs to every GPU
  EXPECT_EQ(steps_of_gpu(tagged, 1).size(), 51U);
}

// Data parallelism on three GPUs where GPU 0's rank waits for its data 60% of each step: every
// GPU's diagnosis carries the straggler warning naming GPU 0. Ranks that all wait alike are an
// input-bound job, not a straggler.
TEST(Diagnose, ARankThatWaitsForItsDataFarLongerIsTheStraggler) {
  const auto samples = stream([](GpuReading& g, int) { g.gpu_util_percent = 45; });
  const auto judge = [&](double data0, double data_others) {
    auto tagged = steps(150, 0.1, [&](StepEvent& e, int i) {
      e.device = i % 3;
      e.data_seconds = (i % 3 == 0 ? data0 : data_others) * 0.1;
    });
    std::vector<Diagnosis> same_window;
    for (int gpu = 0; gpu < 3; ++gpu) {
      GpuInfo g = h200();
      g.index = gpu;
      same_window.push_back(diagnose(samples, steps_of_gpu(tagged, gpu), g));
    }
    judge_ranks(same_window);
    return same_window;
  };
  const auto straggling = judge(0.6, 0.05);
  for (const Diagnosis& d : straggling) {
    ASSERT_TRUE(has(d, Bottleneck::straggler)) << d.gpu;
    const auto& w = *std::find_if(d.verdicts.begin(), d.verdicts.end(),
                                  [](const Verdict& v) { return v.kind == Bottleneck::straggler; });
    EXPECT_NE(w.evidence.find(d.gpu == 0 ? "this GPU's rank waits for its data 60%" : "GPU 0's rank"), std::string::npos)
        << w.evidence;
  }
  for (const Diagnosis& d : judge(0.6, 0.55)) EXPECT_FALSE(has(d, Bottleneck::straggler)) << d.gpu;  // all alike
  for (const Diagnosis& d : judge(0.25, 0.02)) EXPECT_FALSE(has(d, Bottleneck::straggler)) << d.gpu;  // not input-bound
}

// Two GPUs of one job at 94% utilisation and a quarter of their power limit, with link counters
// that under-read: NCCL's kernels spinning in the collectives, not compute. One such GPU alone, or
// two at full power, stay compute-bound.
TEST(Diagnose, TheJobsGpusBusyAtLowPowerAreWaitingInTheCollectives) {
  // Each sample holds every GPU's reading, as the sampler's do.
  const auto busy_at = [](double watts, int gpus) {
    auto samples = stream([watts](GpuReading& g, int) {
      g.gpu_util_percent = 94;
      g.power_watts = watts;
    });
    for (Sample& sample : samples)
      for (int gpu = 1; gpu < gpus; ++gpu) {
        GpuReading other = sample.gpus.front();
        other.index = gpu;
        sample.gpus.push_back(other);
      }
    return samples;
  };
  const auto judged = [&](double watts, int gpus) {
    std::vector<Diagnosis> same_window;
    const auto samples = busy_at(watts, gpus);
    for (int gpu = 0; gpu < gpus; ++gpu) {
      GpuInfo g = h200();
      g.index = gpu;
      same_window.push_back(diagnose(samples, {}, g));
      EXPECT_EQ(same_window.back().primary().kind, Bottleneck::compute);  // each alone
    }
    judge_ranks(same_window);
    return same_window;
  };
  for (const Diagnosis& d : judged(177, 2)) {
    EXPECT_EQ(d.primary().kind, Bottleneck::communication) << d.gpu;
    EXPECT_NE(d.primary().evidence.find("power 25% of limit"), std::string::npos) << d.primary().evidence;
  }
  EXPECT_EQ(judged(177, 1).front().primary().kind, Bottleneck::compute);
  for (const Diagnosis& d : judged(650, 2)) EXPECT_EQ(d.primary().kind, Bottleneck::compute) << d.gpu;
}

TEST(Diagnose, WarningsAreKeptOverTimeWithTheirRate) {
  VerdictTimeline timeline;
  const auto growing = [](int offset) {
    return stream([offset](GpuReading& g, int i) {
      g.gpu_util_percent = 96;
      g.memory_used_bytes = 20 * kGiB + (offset + i) * (kGiB / 10);  // 1 GiB/s
      g.memory_free_bytes = 140 * kGiB - *g.memory_used_bytes;
    });
  };
  const auto flat = stream([](GpuReading& g, int) { g.gpu_util_percent = 96; });
  timeline.add(run(growing(0)));
  timeline.add(run(growing(10)), 3);
  timeline.add(run(flat));
  timeline.add(run(growing(0)));
  const auto& w = timeline.warnings();
  ASSERT_EQ(w.size(), 2U);  // two spans: the flat window ended the first
  EXPECT_EQ(w[0].kind, Bottleneck::memory_growth);
  EXPECT_EQ(w[0].windows, 4);
  EXPECT_NEAR(w[0].growth_rate_mean() / kGiB, 1.0, 0.01);
  EXPECT_NEAR(w[0].growth_rate_max / kGiB, 1.0, 0.01);
  EXPECT_EQ(w[1].windows, 1);
  ASSERT_EQ(timeline.spans().size(), 1U);  // compute-bound throughout
}

TEST(Diagnose, CapacityBoundWhenMemoryIsFullAndUtilisationLow) {
  const auto d = run(stream([](GpuReading& g, int i) {
    fill_memory(g, 0.97);
    g.gpu_util_percent = i % 4 == 0 ? 90 : 20;
  }));
  EXPECT_EQ(d.primary().kind, Bottleneck::capacity);
  EXPECT_NE(d.primary().evidence.find("memory 97% of card"), std::string::npos) << d.primary().evidence;
  EXPECT_NE(d.primary().advice.find("gradient checkpointing"), std::string::npos);
  EXPECT_NE(d.primary().advice.find("quantise"), std::string::npos);
}

TEST(Diagnose, CapacityBoundWhenTheAllocatorRetries) {
  // Memory looks spare to NVML (the allocator is capped) and the GPU is busy: only the probe knows.
  const auto d =
      run(stream([](GpuReading& g, int) { g.gpu_util_percent = 95; }), steps(50, 0.1, [](StepEvent& e, int i) {
            e.alloc_retries = i / 10;
            e.reserved_bytes = 19 * kGiB;
            e.limit_bytes = 19 * kGiB;
          }));
  EXPECT_EQ(d.primary().kind, Bottleneck::capacity);
  EXPECT_NE(d.primary().evidence.find("allocator retried 4 times"), std::string::npos) << d.primary().evidence;
  EXPECT_NE(d.primary().evidence.find("reserved 100% of its cap"), std::string::npos) << d.primary().evidence;
}

TEST(Diagnose, RetriesEarlierInTheLastHalfMinuteCountWhileAtTheCap) {
  auto e = steps(400, 0.1, [](StepEvent& s, int i) {
    s.time = kT0 - 35 + 0.1 * i;        // 35 s of history before the window
    s.alloc_retries = i < 200 ? 0 : 3;  // a burst 15 s before the window, none inside it
    s.reserved_bytes = 19 * kGiB;
    s.limit_bytes = 19 * kGiB;
  });
  const auto busy = stream([](GpuReading& g, int) { g.gpu_util_percent = 97; });
  EXPECT_EQ(run(busy, e).primary().kind, Bottleneck::capacity);
  EXPECT_NE(run(busy, e).primary().evidence.find("in the last 30 s"), std::string::npos);
  for (auto& s : e) s.limit_bytes = 100 * kGiB;  // far from the cap: old retries no longer say capacity
  EXPECT_EQ(run(busy, e).primary().kind, Bottleneck::compute);
}

TEST(Diagnose, HostSpillWhenMemoryIsFullAndPcieBusy) {
  const auto d = run(stream([](GpuReading& g, int) {
    fill_memory(g, 0.98);
    g.gpu_util_percent = 25;
    g.pcie_rx_bytes_per_s = 11e9;
    g.pcie_tx_bytes_per_s = 9e9;
  }));
  EXPECT_EQ(d.primary().kind, Bottleneck::host_link_spill);
  EXPECT_NE(d.primary().evidence.find("PCIe rx 11.0 GB/s tx 9.0 GB/s"), std::string::npos) << d.primary().evidence;
  EXPECT_NE(d.primary().advice.find("offload"), std::string::npos);
}

TEST(Diagnose, HostSpillWhenStepsSlowDownAsMemoryFills) {
  auto e = steps(45, 0.4, [](StepEvent& s, int i) {  // the run's earlier steps, before the window
    s.time = kT0 - 20 + 0.4 * i;
    s.step_seconds = 0.4;
  });
  for (int i = 0; i < 3; ++i) {
    StepEvent s;
    s.time = kT0 + 1.5 * (i + 1);
    s.step_seconds = 1.6;
    e.push_back(s);
  }
  const auto d = run(stream([](GpuReading& g, int) {
                       fill_memory(g, 0.99);
                       g.gpu_util_percent = 40;
                     }),
                     e);
  EXPECT_EQ(d.primary().kind, Bottleneck::host_link_spill);
  EXPECT_NE(d.primary().evidence.find("4.0x slower"), std::string::npos) << d.primary().evidence;
}

TEST(Diagnose, CommunicationBoundWhenNvlinkIsBusyAndComputeIdles) {
  const auto d = run(stream([](GpuReading& g, int i) {
    g.gpu_util_percent = i % 5 == 0 ? 80 : 20;
    g.nvlink_rx_bytes_per_s = 120e9;
    g.nvlink_tx_bytes_per_s = 120e9;
  }));
  EXPECT_EQ(d.primary().kind, Bottleneck::communication);
  EXPECT_NE(d.primary().evidence.find("NVLink rx 120.0 GB/s"), std::string::npos) << d.primary().evidence;
  EXPECT_NE(d.primary().advice.find("NVLink"), std::string::npos);
}

TEST(Diagnose, CommunicationBoundWhenCollectivesSpinAtLowPower) {
  // NCCL kernels count as utilisation; the power draw gives them away.
  const auto d = run(stream([](GpuReading& g, int) {
    g.gpu_util_percent = 100;
    g.power_watts = 180;
    g.nvlink_rx_bytes_per_s = 200e9;
    g.nvlink_tx_bytes_per_s = 200e9;
  }));
  EXPECT_EQ(d.primary().kind, Bottleneck::communication);
  EXPECT_NE(d.primary().evidence.find("power 26% of limit"), std::string::npos) << d.primary().evidence;
}

TEST(Diagnose, CommunicationOverPcieWithMemoryToSpare) {
  const auto d = run(stream([](GpuReading& g, int) {
    g.gpu_util_percent = 30;
    g.pcie_rx_bytes_per_s = 6e9;
    g.pcie_tx_bytes_per_s = 6e9;
  }));
  EXPECT_EQ(d.primary().kind, Bottleneck::communication);
}

TEST(Diagnose, MemoryGrowingStepOverStep) {
  const auto d = run(stream([](GpuReading& g, int i) {
    g.gpu_util_percent = 96;
    g.memory_used_bytes = 20 * kGiB + i * (kGiB / 10);  // 100 MiB every 0.1 s
    g.memory_free_bytes = 140 * kGiB - *g.memory_used_bytes;
  }));
  EXPECT_EQ(d.primary().kind, Bottleneck::compute);
  ASSERT_TRUE(has(d, Bottleneck::memory_growth));
  EXPECT_NE(d.verdicts[1].evidence.find("rose 4.9 GiB in 4.9 s"), std::string::npos) << d.verdicts[1].evidence;
  EXPECT_NE(d.verdicts[1].advice.find("out-of-memory"), std::string::npos);
}

TEST(Diagnose, OneJumpInMemoryIsNotALeak) {
  const auto d = run(stream([](GpuReading& g, int i) {
    g.gpu_util_percent = 96;
    g.memory_used_bytes = (i < 20 ? 20 : 30) * kGiB;  // a new tensor, or the cache warming up
    g.memory_free_bytes = 140 * kGiB - *g.memory_used_bytes;
  }));
  EXPECT_FALSE(has(d, Bottleneck::memory_growth));
}

TEST(Diagnose, FullMemoryOnABusyGpuIsComputeWithAWarning) {
  const auto d = run(stream([](GpuReading& g, int) {
    fill_memory(g, 0.95);
    g.gpu_util_percent = 99;
  }));
  EXPECT_EQ(d.primary().kind, Bottleneck::compute);
  EXPECT_TRUE(has(d, Bottleneck::capacity));
}

TEST(Diagnose, UnknownMetricsAreNamedUnknownNeverZero) {
  const auto d = run(stream([](GpuReading& g, int) {
    g.gpu_util_percent = 40;
    g.pcie_rx_bytes_per_s.reset();
    g.pcie_tx_bytes_per_s.reset();
    g.memory_free_bytes.reset();
    g.memory_used_bytes.reset();
  }));
  EXPECT_NE(d.primary().evidence.find("PCIe rx unknown tx unknown"), std::string::npos) << d.primary().evidence;
  EXPECT_NE(d.primary().evidence.find("memory unknown"), std::string::npos) << d.primary().evidence;
  EXPECT_FALSE(d.stats.pcie_rx_mean);
  const auto none = run(stream([](GpuReading& g, int) { g.gpu_util_percent.reset(); }));
  EXPECT_EQ(none.primary().kind, Bottleneck::unknown);
}

TEST(Diagnose, OnlyTheGpuAskedFor) {
  auto s = stream([](GpuReading& g, int) { g.gpu_util_percent = 99; });
  for (auto& sample : s) {
    GpuReading other = sample.gpus[0];
    other.index = 1;
    other.gpu_util_percent = 0;
    sample.gpus.push_back(other);
  }
  GpuInfo second = h200();
  second.index = 1;
  EXPECT_EQ(diagnose(s, {}, h200()).primary().kind, Bottleneck::compute);
  EXPECT_EQ(diagnose(s, {}, second).primary().kind, Bottleneck::idle);
  EXPECT_EQ(diagnose(s, {}, second).gpu, 1);
}

TEST(Diagnose, TimelineMergesConsecutiveWindowsPerGpu) {
  std::vector<Diagnosis> ds;
  auto add = [&](int gpu, double t, Bottleneck b) {
    Diagnosis d;
    d.gpu = gpu;
    d.begin = t - 5;
    d.end = t;
    d.verdicts.push_back({b, "e", "a"});
    ds.push_back(d);
  };
  add(0, 5, Bottleneck::idle);
  add(1, 5, Bottleneck::idle);
  add(0, 6, Bottleneck::compute);
  add(1, 6, Bottleneck::idle);
  add(0, 7, Bottleneck::compute);
  add(0, 8, Bottleneck::idle);
  const auto t = verdict_timeline(ds);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[1].gpu, 1);
  EXPECT_EQ(t[1].windows, 2);
  EXPECT_EQ(t[2].verdict.kind, Bottleneck::compute);
  EXPECT_EQ(t[2].windows, 2);
  EXPECT_DOUBLE_EQ(t[2].end, 7);
}

TEST(Diagnose, VerdictNamesRoundTrip) {
  using trainfit::parse_bottleneck;
  for (const Bottleneck b : trainfit::kBottlenecks) EXPECT_EQ(parse_bottleneck(watch_verdict(b)), b);
  EXPECT_EQ(parse_bottleneck("host"), Bottleneck::launch_overhead);
  EXPECT_EQ(parse_bottleneck("compute"), Bottleneck::compute);
  EXPECT_EQ(parse_bottleneck("input-pipeline"), Bottleneck::input_pipeline);
  EXPECT_THROW(parse_bottleneck("slow"), trainfit::InputError);
}

TEST(Diagnose, ReplayWalksWindowsEverySecond) {
  Recording r;
  r.gpus = {h200()};
  r.samples = stream([](GpuReading& g, int i) { g.gpu_util_percent = i < 100 ? 0 : 99; }, 200);  // 20 s
  const auto ds = diagnose_recording(r, 5, 1);
  ASSERT_EQ(ds.size(), 15u);  // windows ending at 5, 6, ... 19 s
  EXPECT_EQ(ds.front().primary().kind, Bottleneck::idle);
  EXPECT_EQ(ds.back().primary().kind, Bottleneck::compute);
}

// The hop-by-hop walk diagnose_recording made before it skipped hops that see the same samples:
// the reference its windows must match, one for one.
std::vector<Diagnosis> walk_every_hop(const Recording& r, double window_seconds, double hop_seconds) {
  std::vector<Diagnosis> out;
  const auto at_or_before = [&](double t) {
    return std::upper_bound(r.samples.begin(), r.samples.end(), t,
                            [](double x, const Sample& s) { return x < s.time; });
  };
  const double first = r.samples.front().time + window_seconds;
  for (std::int64_t k = 0;; ++k) {
    const double t = first + static_cast<double>(k) * hop_seconds;
    if (t > r.samples.back().time + 1e-9) break;
    const auto b = at_or_before(t - window_seconds), e = at_or_before(t);
    if (e - b < 3) {
      if (e != r.samples.end())
        k = std::max(k, static_cast<std::int64_t>(std::floor((e->time - first) / hop_seconds)) - 1);
      continue;
    }
    const std::span<const Sample> window(&*b, static_cast<std::size_t>(e - b));
    for (const GpuInfo& gpu : r.gpus) out.push_back(diagnose(window, r.steps, gpu));
  }
  return out;
}

// Samples in bursts with gaps of several windows and of less than one, on two GPUs, with steps.
Recording bursty_recording() {
  Recording r;
  GpuInfo second = h200();
  second.index = 1;
  r.gpus = {h200(), second};
  double t = kT0;
  for (int burst = 0; burst < 12; ++burst) {
    const int n = 3 + burst % 5;
    for (int i = 0; i < n; ++i) {
      Sample s;
      s.time = t;
      for (int g = 0; g < 2; ++g) {
        GpuReading reading;
        reading.index = g;
        reading.gpu_util_percent = (burst + g) % 3 == 0 ? 99 : 20;
        reading.memory_total_bytes = 140 * kGiB;
        s.gpus.push_back(reading);
      }
      r.samples.push_back(s);
      t += 0.37;
    }
    t += burst % 2 == 0 ? 0.8 : 13.3;
  }
  r.steps = steps(40, 0.5);
  return r;
}

TEST(Diagnose, ReplaySkipsNoWindowTheHopByHopWalkMade) {
  for (const double window : {1.0, 5.0, 30.0}) {
    const Recording r = bursty_recording();
    const auto expected = walk_every_hop(r, window, 1);
    const auto got = diagnose_recording(r, window, 1);
    ASSERT_EQ(got.size(), expected.size()) << window;
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].gpu, expected[i].gpu) << i;
      EXPECT_EQ(got[i].begin, expected[i].begin) << i;
      EXPECT_EQ(got[i].end, expected[i].end) << i;
      EXPECT_EQ(got[i].primary().kind, expected[i].primary().kind) << i;
      EXPECT_EQ(got[i].primary().evidence, expected[i].primary().evidence) << i;
    }
  }
}

TEST(Diagnose, ASparseRecordingCostsItsSamplesNotItsSpan) {
  // 64 GPUs and a sample every 200 s: a 600 s window saw three samples at every one of ~200,000
  // hops, and the replay made a diagnosis per GPU per hop (over 12 million, many GB).
  Recording r;
  for (int g = 0; g < 64; ++g) {
    GpuInfo info = h200();
    info.index = g;
    r.gpus.push_back(info);
  }
  for (int i = 0; i < 1000; ++i) {
    GpuReading g;
    g.gpu_util_percent = i % 2 == 0 ? 99 : 0;
    r.samples.push_back({kT0 + 200.0 * i, {g}});
  }
  std::int64_t calls = 0, windows = 0;
  VerdictTimeline timeline;
  for_each_recording_window(r, 600, 1, [&](std::span<const Diagnosis> per_gpu, int n) {
    ++calls;
    windows += n;
    EXPECT_EQ(per_gpu.size(), 64u);
    for (const Diagnosis& d : per_gpu) timeline.add(d, n);
  });
  EXPECT_LT(calls, 3000);      // a call per distinct window
  EXPECT_GT(windows, 190000);  // standing for every hop
  EXPECT_EQ(render_replay(r, "sparse", 600).rfind("sparse: 1000 samples, 0 probe steps\n", 0), 0u);
}

}  // namespace
