// The NVML layer through the real dlopen path, against the fake libnvidia-ml the tests build
// (tests/fake_nvml/): scripted answers, driver errors, refused metrics, the old process struct.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>

#include "trainfit/telemetry.hpp"

namespace {

using namespace trainfit::telemetry;

// Points the fake at a script for the life of the object.
class Script {
 public:
  explicit Script(const std::string& text)
      // ctest runs each test in its own process, in parallel: the process id keeps their scripts apart.
      : path_(testing::TempDir() + "/fake_nvml_" + std::to_string(::getpid()) + "_" + std::to_string(++counter_) +
              ".txt") {
    std::ofstream(path_) << text;
    setenv("FAKE_NVML_SCRIPT", path_.c_str(), 1);
  }
  ~Script() { unsetenv("FAKE_NVML_SCRIPT"); }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

const char* const kFull = R"(
count 2
driver 580.1-fake
gpu0.name NVIDIA H200
gpu0.memory_total 150000000000
gpu0.memory_used 30000000000
gpu0.memory_reserved 500000000
gpu0.util_gpu 34 90
gpu0.util_memory 12
gpu0.pcie_rx_rate 2000000000
gpu0.pcie_tx_rate 500000000
gpu0.nvlink_rx_rate 100000000000
gpu0.nvlink_tx_rate 50000000000
gpu0.sm_clock 1755
gpu0.sm_clock_max 1980
gpu0.mem_clock 3201
gpu0.power_mw 512000
gpu0.power_limit_mw 700000
gpu0.temperature 54
gpu0.throttle 0x44
gpu0.procs 4242:20000000000 77:NA 9000:1048576
gpu1.name Second GPU
)";

TEST(Nvml, MissingLibraryIsAPlainMessage) {
  try {
    Nvml::open("/nonexistent/libnvidia-ml.so.1");
    FAIL() << "expected TelemetryUnavailable";
  } catch (const TelemetryUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("no NVIDIA driver found"), std::string::npos) << e.what();
  }
  // A failure of the machine, not of the input: the CLI's exit code 3.
  EXPECT_THROW(Nvml::open("/nonexistent/libnvidia-ml.so.1"), trainfit::SystemError);
}

TEST(Nvml, DriverNotLoaded) {
  Script s("init 9\n");
  try {
    Nvml::open(TRAINFIT_FAKE_NVML);
    FAIL();
  } catch (const TelemetryUnavailable& e) {
    EXPECT_NE(std::string(e.what()).find("Driver Not Loaded"), std::string::npos) << e.what();
  }
}

TEST(Nvml, NoGpu) {
  Script s("count 0\n");
  EXPECT_THROW(
      {
        try {
          Nvml::open(TRAINFIT_FAKE_NVML);
        } catch (const TelemetryUnavailable& e) {
          EXPECT_NE(std::string(e.what()).find("reports no GPU"), std::string::npos);
          throw;
        }
      },
      TelemetryUnavailable);
}

TEST(Nvml, AGpuThatCannotBeOpenedIsSkipped) {
  Script s("count 2\ngpu0.handle 4\ngpu1.name Only\n");
  auto nvml = Nvml::open(TRAINFIT_FAKE_NVML);
  ASSERT_EQ(nvml->gpus().size(), 1u);
  EXPECT_EQ(nvml->gpus()[0].index, 1);
  EXPECT_EQ(nvml->read(0).index, 1);
}

TEST(Nvml, ReadsEveryMetric) {
  Script s(kFull);
  auto nvml = Nvml::open(TRAINFIT_FAKE_NVML);
  EXPECT_EQ(nvml->driver_version(), "580.1-fake");
  ASSERT_EQ(nvml->gpus().size(), 2u);
  const GpuInfo& info = nvml->gpus()[0];
  EXPECT_EQ(info.name, "NVIDIA H200");
  EXPECT_EQ(info.memory_total_bytes, 150000000000);
  EXPECT_EQ(info.sm_clock_max_mhz, 1980);
  EXPECT_EQ(info.power_default_limit_watts, 700);
  EXPECT_EQ(nvml->gpus()[1].name, "Second GPU");

  const GpuReading g = nvml->read(0);  // Nvml::open read once already: counters have a previous value
  EXPECT_EQ(g.memory_total_bytes, 150000000000);
  EXPECT_EQ(g.memory_used_bytes, 30000000000);  // v2: without the driver's reservation
  EXPECT_EQ(g.memory_free_bytes, 150000000000 - 30000000000 - 500000000);
  EXPECT_EQ(g.gpu_util_percent, 90);  // the script's second value: one read was open()'s
  EXPECT_EQ(g.memory_util_percent, 12);
  ASSERT_TRUE(g.pcie_rx_bytes_per_s && g.pcie_tx_bytes_per_s);
  EXPECT_NEAR(*g.pcie_rx_bytes_per_s, 2e9, 1e3);
  EXPECT_NEAR(*g.pcie_tx_bytes_per_s, 5e8, 1e3);
  ASSERT_TRUE(g.nvlink_rx_bytes_per_s);
  EXPECT_NEAR(*g.nvlink_rx_bytes_per_s, 1e11, 1e4);
  EXPECT_NEAR(*g.nvlink_tx_bytes_per_s, 5e10, 1e4);
  EXPECT_EQ(g.sm_clock_mhz, 1755);
  EXPECT_EQ(g.memory_clock_mhz, 3201);
  EXPECT_EQ(g.power_watts, 512);
  EXPECT_EQ(g.power_limit_watts, 700);
  EXPECT_EQ(g.temperature_c, 54);
  EXPECT_EQ(g.throttle_reasons, throttle::kHwThermal | throttle::kSwPowerCap);
  EXPECT_EQ(describe_throttle(*g.throttle_reasons), "power-cap+hw-thermal");
  // The 24-byte process struct of the _v3 entry point: every entry intact.
  ASSERT_TRUE(g.processes);
  ASSERT_EQ(g.processes->size(), 3u);
  EXPECT_EQ((*g.processes)[0].pid, 4242u);
  EXPECT_EQ((*g.processes)[0].used_bytes, 20000000000);
  EXPECT_EQ((*g.processes)[1].pid, 77u);
  EXPECT_FALSE((*g.processes)[1].used_bytes);  // NVML_VALUE_NOT_AVAILABLE: unknown, not 2^64-1
  EXPECT_EQ((*g.processes)[2].pid, 9000u);
  EXPECT_EQ((*g.processes)[2].used_bytes, 1048576);
}

TEST(Nvml, EachSetReadsOnlyItsMetrics) {
  Script s(kFull);
  auto nvml = Nvml::open(TRAINFIT_FAKE_NVML);
  const GpuReading activity = nvml->read(0, read_set::kActivity);
  EXPECT_TRUE(activity.gpu_util_percent && activity.memory_util_percent && activity.power_watts);
  EXPECT_FALSE(activity.memory_used_bytes || activity.sm_clock_mhz || activity.throttle_reasons ||
               activity.temperature_c || activity.power_limit_watts || activity.pcie_rx_bytes_per_s ||
               activity.processes);
  const GpuReading memory = nvml->read(0, read_set::kMemory);
  EXPECT_TRUE(memory.memory_used_bytes && memory.memory_free_bytes && memory.memory_total_bytes);
  EXPECT_FALSE(memory.gpu_util_percent || memory.power_watts || memory.sm_clock_mhz || memory.processes);
  const GpuReading state = nvml->read(0, read_set::kState);
  EXPECT_TRUE(state.sm_clock_mhz && state.memory_clock_mhz && state.throttle_reasons && state.temperature_c &&
              state.power_limit_watts);
  EXPECT_FALSE(state.gpu_util_percent || state.memory_used_bytes || state.pcie_rx_bytes_per_s || state.processes);
  const GpuReading counters = nvml->read(0, read_set::kCounters);
  EXPECT_TRUE(counters.pcie_rx_bytes_per_s && counters.processes);
  EXPECT_FALSE(counters.gpu_util_percent || counters.memory_used_bytes || counters.sm_clock_mhz ||
               counters.nvlink_rx_bytes_per_s);
  const GpuReading links = nvml->read(0, read_set::kLinks);
  EXPECT_TRUE(links.nvlink_rx_bytes_per_s && links.nvlink_tx_bytes_per_s);
  EXPECT_FALSE(links.pcie_rx_bytes_per_s || links.processes || links.gpu_util_percent);
}

TEST(Nvml, UnreadSetsCarryThePreviousValues) {
  GpuReading previous;
  previous.gpu_util_percent = 50;
  previous.memory_used_bytes = 7;
  previous.temperature_c = 60;
  previous.pcie_rx_bytes_per_s = 1e9;
  previous.processes = std::vector<ProcessMemory>{{42, 1}};
  GpuReading now;
  now.gpu_util_percent = 90;
  now.memory_used_bytes = 8;
  carry_unread(read_set::kActivity | read_set::kMemory, previous, now);
  EXPECT_EQ(now.gpu_util_percent, 90);  // read now: kept
  EXPECT_EQ(now.memory_used_bytes, 8);
  EXPECT_EQ(now.temperature_c, 60);  // not read: the last value read
  EXPECT_EQ(now.pcie_rx_bytes_per_s, 1e9);
  ASSERT_TRUE(now.processes);
  EXPECT_EQ(now.processes->front().pid, 42u);
}

// NVLink's counters have their own set (they cost the driver several times the PCIe counters): a
// read of the counters set keeps its PCIe rate and carries the NVLink rate read before, and back.
TEST(Nvml, TheLinkCountersAreCarriedApartFromThePcieCounters) {
  GpuReading previous;
  previous.pcie_rx_bytes_per_s = 1e9;
  previous.nvlink_rx_bytes_per_s = 5e10;
  GpuReading counters;
  counters.pcie_rx_bytes_per_s = 2e9;
  carry_unread(read_set::kActivity | read_set::kCounters, previous, counters);
  EXPECT_EQ(counters.pcie_rx_bytes_per_s, 2e9);
  EXPECT_EQ(counters.nvlink_rx_bytes_per_s, 5e10);
  GpuReading links;
  links.nvlink_rx_bytes_per_s = 6e10;
  carry_unread(read_set::kActivity | read_set::kLinks, previous, links);
  EXPECT_EQ(links.nvlink_rx_bytes_per_s, 6e10);
  EXPECT_EQ(links.pcie_rx_bytes_per_s, 1e9);
}

TEST(Nvml, RefusedMetricsAreUnknownNotZero) {
  Script s(R"(
gpu0.error.nvmlDeviceGetPowerUsage 3
gpu0.error.nvmlDeviceGetTemperature 3
gpu0.error.nvmlDeviceGetUtilizationRates 4
gpu0.error.nvmlDeviceGetCurrentClocksEventReasons 3
gpu0.error.nvmlDeviceGetComputeRunningProcesses_v3 4
gpu0.error.nvmlDeviceGetPcieThroughput 3
gpu0.pcie_fields 3
)");
  auto nvml = Nvml::open(TRAINFIT_FAKE_NVML);
  nvml->read(0);
  const GpuReading g = nvml->read(0);
  EXPECT_FALSE(g.power_watts);
  EXPECT_FALSE(g.temperature_c);
  EXPECT_FALSE(g.gpu_util_percent);
  EXPECT_FALSE(g.memory_util_percent);
  EXPECT_FALSE(g.throttle_reasons);
  EXPECT_FALSE(g.processes);
  EXPECT_FALSE(g.pcie_rx_bytes_per_s);
  EXPECT_FALSE(g.nvlink_rx_bytes_per_s);  // no NVLink on this card
  EXPECT_TRUE(g.memory_used_bytes);       // the rest still reads
  EXPECT_TRUE(g.sm_clock_mhz);
}

TEST(Nvml, MemoryFallsBackToVersion1) {
  Script s(
      "gpu0.memory_total 1000\ngpu0.memory_used 300\ngpu0.memory_reserved 100\n"
      "gpu0.error.nvmlDeviceGetMemoryInfo_v2 25\n");
  auto nvml = Nvml::open(TRAINFIT_FAKE_NVML);
  const GpuReading g = nvml->read(0);
  EXPECT_EQ(g.memory_total_bytes, 1000);
  EXPECT_EQ(g.memory_used_bytes, 400);  // v1 counts the reservation as used
  EXPECT_EQ(g.memory_free_bytes, 600);
}

TEST(Nvml, PcieFallsBackToTheThroughputQuery) {
  Script s("gpu0.pcie_fields 3\ngpu0.pcie_throughput_rx 1000\ngpu0.pcie_throughput_tx 250\n");
  auto nvml = Nvml::open(TRAINFIT_FAKE_NVML);
  const GpuReading g = nvml->read(0);
  EXPECT_EQ(g.pcie_rx_bytes_per_s, 1000 * 1024.0);  // NVML's KB/s are KiB/s
  EXPECT_EQ(g.pcie_tx_bytes_per_s, 250 * 1024.0);
}

TEST(Nvml, MoreProcessesThanTheFirstBuffer) {
  Script s("gpu0.procs_many 70\n");
  auto nvml = Nvml::open(TRAINFIT_FAKE_NVML);
  const GpuReading g = nvml->read(0);
  ASSERT_TRUE(g.processes);
  ASSERT_EQ(g.processes->size(), 70u);
  EXPECT_EQ(g.processes->back().pid, 1069u);
}

TEST(Nvml, AnOldDriverWithTheSixteenByteProcessStruct) {
  Script s(
      "gpu0.procs 11:100 22:200 33:NA\ngpu0.throttle 4\ngpu0.memory_total 1000\ngpu0.memory_used 300\n"
      "gpu0.pcie_throughput_rx 8\n");
  auto nvml = Nvml::open(TRAINFIT_FAKE_NVML_OLD);
  const GpuReading g = nvml->read(0);
  ASSERT_TRUE(g.processes);
  ASSERT_EQ(g.processes->size(), 3u);
  EXPECT_EQ((*g.processes)[1].pid, 22u);
  EXPECT_EQ((*g.processes)[1].used_bytes, 200);
  EXPECT_FALSE((*g.processes)[2].used_bytes);
  EXPECT_EQ(g.throttle_reasons, throttle::kSwPowerCap);  // nvmlDeviceGetCurrentClocksThrottleReasons
  EXPECT_EQ(g.memory_used_bytes, 300);                   // nvmlDeviceGetMemoryInfo (v1)
  EXPECT_EQ(g.pcie_rx_bytes_per_s, 8 * 1024.0);          // no field values: the throughput query
  EXPECT_FALSE(g.nvlink_rx_bytes_per_s);
}

TEST(Sampler, SamplesAtTheRateAndCostsLittle) {
  Script s(kFull);
  auto nvml = Nvml::open(TRAINFIT_FAKE_NVML);
  Sampler sampler(*nvml, std::chrono::milliseconds(100));
  sampler.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(2050));
  sampler.stop();
  const auto samples = sampler.take();
  EXPECT_GE(samples.size(), 15u);
  EXPECT_LE(samples.size(), 22u);
  for (const Sample& x : samples) {
    ASSERT_EQ(x.gpus.size(), 2u);
    EXPECT_TRUE(x.gpus[0].temperature_c) << "slow metrics are carried between slow reads";
    EXPECT_TRUE(x.gpus[0].processes);
  }
  for (std::size_t i = 1; i < samples.size(); ++i) EXPECT_GT(samples[i].time, samples[i - 1].time);
  EXPECT_TRUE(sampler.take().empty());
  const SamplerCost c = sampler.cost();
  EXPECT_EQ(c.samples, static_cast<std::int64_t>(samples.size()));
  EXPECT_GT(c.wall_seconds, 1.9);
  std::cout << "sampler against the fake NVML at 10 Hz: " << 100 * c.core_fraction() << "% of a core\n";
  EXPECT_LT(c.core_fraction(), 0.01);
}

}  // namespace

// Each set is asked for at its own period; a counter that answers each call with the next number
// shows how many calls the sampler made.
TEST(Sampler, ReadsEachSetAtItsPeriod) {
  std::string numbers;
  for (int i = 1; i <= 200; ++i) numbers += " " + std::to_string(i);
  Script s("gpu0.util_gpu" + numbers + "\ngpu0.memory_used" + numbers + "\ngpu0.temperature" + numbers +
           "\ngpu0.procs_many 3\n");
  auto nvml = Nvml::open(TRAINFIT_FAKE_NVML);  // reads every set once
  Sampler sampler(*nvml, std::chrono::milliseconds(100),
                  ReadPeriods{std::chrono::milliseconds(500), std::chrono::seconds(1), std::chrono::seconds(5)});
  sampler.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(2050));
  sampler.stop();
  const auto samples = sampler.take();
  ASSERT_GE(samples.size(), 18u);
  std::set<double> util, memory, temperature;
  for (const Sample& x : samples) {
    util.insert(x.gpus[0].gpu_util_percent.value_or(-1));
    memory.insert(static_cast<double>(x.gpus[0].memory_used_bytes.value_or(-1)));
    temperature.insert(x.gpus[0].temperature_c.value_or(-1));
    ASSERT_TRUE(x.gpus[0].processes);  // read on the first tick, carried after
  }
  EXPECT_EQ(util.size(), samples.size());  // every tick
  EXPECT_GE(memory.size(), 4u);            // at 0, 0.5, 1, 1.5 and 2 s
  EXPECT_LE(memory.size(), 5u);
  EXPECT_GE(temperature.size(), 2u);  // at 0, 1 and 2 s
  EXPECT_LE(temperature.size(), 3u);
  EXPECT_FALSE(util.count(-1) || memory.count(-1) || temperature.count(-1));
}
