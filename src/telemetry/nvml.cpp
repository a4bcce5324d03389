// NVML through dlopen. Only the few declarations trainfit uses are written here, transcribed from
// nvml.h (values checked against public copies of the header): building needs no CUDA toolkit, and a
// machine without the driver fails with a message instead of a missing-library error at start.
#include <dlfcn.h>
#include <fmt/format.h>

#include <array>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "trainfit/telemetry.hpp"

namespace trainfit::telemetry {
namespace {

// ---- nvml.h, the subset used ------------------------------------------------------------------
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE

struct nvmlMemory_t {  // nvmlDeviceGetMemoryInfo (v1): used includes the driver's reservation
  unsigned long long total, free, used;
};
struct nvmlMemory_v2_t {  // nvmlDeviceGetMemoryInfo_v2: `version` must be nvmlMemory_v2
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
// NVML_STRUCT_VERSION(Memory, 2): the struct's size in the low bits, the version in the top byte.
constexpr unsigned int kMemoryV2Version = static_cast<unsigned int>(sizeof(nvmlMemory_v2_t)) | (2U << 24U);
struct nvmlUtilization_t {
  unsigned int gpu, memory;
};
// The running-process struct grew across drivers: v1 {pid, usedGpuMemory} is 16 bytes; v2 and v3
// (the _v2/_v3 entry points) add the MIG instance ids, 24 bytes. Reading one with the other's size
// garbles every entry after the first, so each entry point gets its own struct.
struct nvmlProcessInfo_v1_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct nvmlProcessInfo_v2_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};
constexpr unsigned long long kValueNotAvailable = ~0ULL;  // NVML_VALUE_NOT_AVAILABLE
union nvmlValue_t {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
  unsigned short usVal;
};
struct nvmlFieldValue_t {
  unsigned int fieldId, scopeId;
  long long timestamp;  // microseconds since 1970
  long long latencyUsec;
  int valueType;  // nvmlValueType_t
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
};
static_assert(sizeof(nvmlMemory_v2_t) == 40 && sizeof(nvmlProcessInfo_v1_t) == 16 &&
              sizeof(nvmlProcessInfo_v2_t) == 24 && sizeof(nvmlFieldValue_t) == 40);

enum : int { kClockSm = 1, kClockMem = 2 };       // nvmlClockType_t
enum : int { kTemperatureGpu = 0 };               // nvmlTemperatureSensors_t
enum : int { kPcieUtilTx = 0, kPcieUtilRx = 1 };  // nvmlPcieUtilCounter_t, KB/s
// Field ids (nvmlDeviceGetFieldValues). The PCIe byte counters (driver 550+) are cumulative and cost
// well under a millisecond; nvmlDeviceGetPcieThroughput, the fallback, blocks ~20 ms per direction.
constexpr unsigned int kFiPcieTxBytes = 197, kFiPcieRxBytes = 198;
constexpr unsigned int kFiNvlinkDataTxKiB = 138, kFiNvlinkDataRxKiB = 139;  // cumulative KiB
constexpr unsigned int kFiNvlinkXmitBytes = 202, kFiNvlinkRcvBytes = 204;   // NVLink5 counters, bytes
constexpr unsigned int kAllLinks = UINT_MAX;                                // scopeId: the sum over links

// ---- the loaded library ------------------------------------------------------------------------
template <typename F>
F symbol(void* lib, const char* name) {
  // POSIX guarantees a data pointer from dlsym converts to a function pointer.
  return reinterpret_cast<F>(dlsym(lib, name));
}

struct Api {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*count)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned int) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*memory_v2)(nvmlDevice_t, nvmlMemory_v2_t*) = nullptr;
  nvmlReturn_t (*memory_v1)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*pcie_throughput)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*field_values)(nvmlDevice_t, int, nvmlFieldValue_t*) = nullptr;
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*max_clock)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*power_limit)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*power_default_limit)(nvmlDevice_t, unsigned int*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*clock_reasons)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*procs_v2)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_v2_t*) = nullptr;  // _v3 or _v2
  nvmlReturn_t (*procs_v1)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_v1_t*) = nullptr;

  void load(void* lib) {
    init = symbol<decltype(init)>(lib, "nvmlInit_v2");
    shutdown = symbol<decltype(shutdown)>(lib, "nvmlShutdown");
    error_string = symbol<decltype(error_string)>(lib, "nvmlErrorString");
    count = symbol<decltype(count)>(lib, "nvmlDeviceGetCount_v2");
    handle = symbol<decltype(handle)>(lib, "nvmlDeviceGetHandleByIndex_v2");
    driver_version = symbol<decltype(driver_version)>(lib, "nvmlSystemGetDriverVersion");
    name = symbol<decltype(name)>(lib, "nvmlDeviceGetName");
    memory_v2 = symbol<decltype(memory_v2)>(lib, "nvmlDeviceGetMemoryInfo_v2");
    memory_v1 = symbol<decltype(memory_v1)>(lib, "nvmlDeviceGetMemoryInfo");
    utilization = symbol<decltype(utilization)>(lib, "nvmlDeviceGetUtilizationRates");
    pcie_throughput = symbol<decltype(pcie_throughput)>(lib, "nvmlDeviceGetPcieThroughput");
    field_values = symbol<decltype(field_values)>(lib, "nvmlDeviceGetFieldValues");
    clock = symbol<decltype(clock)>(lib, "nvmlDeviceGetClockInfo");
    max_clock = symbol<decltype(max_clock)>(lib, "nvmlDeviceGetMaxClockInfo");
    power = symbol<decltype(power)>(lib, "nvmlDeviceGetPowerUsage");
    power_limit = symbol<decltype(power_limit)>(lib, "nvmlDeviceGetEnforcedPowerLimit");
    power_default_limit = symbol<decltype(power_default_limit)>(lib, "nvmlDeviceGetPowerManagementDefaultLimit");
    temperature = symbol<decltype(temperature)>(lib, "nvmlDeviceGetTemperature");
    // Renamed in driver 535; the old name stays exported for a while, newer drivers may drop it.
    clock_reasons = symbol<decltype(clock_reasons)>(lib, "nvmlDeviceGetCurrentClocksEventReasons");
    if (!clock_reasons)
      clock_reasons = symbol<decltype(clock_reasons)>(lib, "nvmlDeviceGetCurrentClocksThrottleReasons");
    procs_v2 = symbol<decltype(procs_v2)>(lib, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!procs_v2) procs_v2 = symbol<decltype(procs_v2)>(lib, "nvmlDeviceGetComputeRunningProcesses_v2");
    if (!procs_v2) procs_v1 = symbol<decltype(procs_v1)>(lib, "nvmlDeviceGetComputeRunningProcesses");
  }
};

// When the driver stamped the value (microseconds since 1970), its time; else the caller's clock.
double field_time(const nvmlFieldValue_t& f, double fallback) {
  return f.timestamp > 0 ? static_cast<double>(f.timestamp) * 1e-6 : fallback;
}

std::optional<double> field_number(const nvmlFieldValue_t& f) {
  if (f.nvmlReturn != kSuccess) return std::nullopt;
  switch (f.valueType) {  // nvmlValueType_t
    case 0:
      return f.value.dVal;
    case 1:
      return static_cast<double>(f.value.uiVal);
    case 2:
      return static_cast<double>(f.value.ulVal);
    case 3:
      return static_cast<double>(f.value.ullVal);
    case 4:
      return static_cast<double>(f.value.sllVal);
    case 5:
      return static_cast<double>(f.value.siVal);
    case 6:
      return static_cast<double>(f.value.usVal);
    default:
      return std::nullopt;
  }
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A cumulative counter turned into a rate between two reads; unknown on the first read and when the
// counter goes backwards (driver reset or wrap).
struct Counter {
  std::optional<double> value, time;
  std::optional<double> rate(std::optional<double> v, double t) {
    std::optional<double> r;
    if (v && value && time && t > *time && *v >= *value) r = (*v - *value) / (t - *time);
    value = v;
    time = t;
    return r;
  }
};

struct Device {
  nvmlDevice_t handle = nullptr;
  GpuInfo info;
  // Once a query answers "not supported", it is not asked again: it costs a driver call per tick.
  bool memory_v2_ok = true, pcie_fields_ok = true, nvlink_ok = true, nvlink5 = false;
  Counter pcie_rx, pcie_tx, nvlink_rx, nvlink_tx;
  std::mutex mutex;  // reads of one device (counters) from one thread at a time
};

}  // namespace

struct Nvml::Impl {
  void* lib = nullptr;
  Api api;
  std::vector<std::unique_ptr<Device>> devices;
  std::vector<GpuInfo> infos;
  std::string driver;

  ~Impl() {
    if (api.shutdown) api.shutdown();
    if (lib) dlclose(lib);
  }
  std::string error(nvmlReturn_t r) const {
    const char* s = api.error_string ? api.error_string(r) : nullptr;
    return s ? fmt::format("{} (NVML error {})", s, r) : fmt::format("NVML error {}", r);
  }
};

namespace {

template <typename T, typename F, typename... A>
std::optional<T> ask(F fn, A... args) {
  if (!fn) return std::nullopt;
  T value{};
  if (fn(args..., &value) != kSuccess) return std::nullopt;
  return value;
}

std::optional<double> mhz(nvmlReturn_t (*fn)(nvmlDevice_t, int, unsigned int*), nvmlDevice_t d, int type) {
  auto v = ask<unsigned int>(fn, d, type);
  return v ? std::optional<double>(*v) : std::nullopt;
}

std::optional<double> watts(nvmlReturn_t (*fn)(nvmlDevice_t, unsigned int*), nvmlDevice_t d) {
  auto mw = ask<unsigned int>(fn, d);
  return mw ? std::optional<double>(*mw / 1000.0) : std::nullopt;
}

template <typename Info, typename F>
std::optional<std::vector<ProcessMemory>> processes(F fn, nvmlDevice_t d) {
  std::vector<Info> buf(64);
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto n = static_cast<unsigned int>(buf.size());
    const nvmlReturn_t r = fn(d, &n, buf.data());
    if (r == kInsufficientSize) {  // n now holds the count needed; processes may start in between
      buf.resize(n + 16);
      continue;
    }
    if (r != kSuccess) return std::nullopt;
    std::vector<ProcessMemory> out;
    for (unsigned int i = 0; i < n && i < buf.size(); ++i) {
      ProcessMemory p{buf[i].pid, std::nullopt};
      if (buf[i].usedGpuMemory != kValueNotAvailable) p.used_bytes = static_cast<std::int64_t>(buf[i].usedGpuMemory);
      out.push_back(p);
    }
    return out;
  }
  return std::nullopt;
}

}  // namespace

std::unique_ptr<Nvml> Nvml::open(const std::string& library) {
  std::string path = library;
  if (path.empty()) {
    const char* env = std::getenv("TRAINFIT_NVML_LIBRARY");
    path = env && *env ? env : "libnvidia-ml.so.1";
  }
  auto impl = std::make_unique<Impl>();
  impl->lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!impl->lib) {
    const char* why = dlerror();
    throw TelemetryUnavailable(
        fmt::format("no NVIDIA driver found: cannot load {} ({}). trainfit watch needs an NVIDIA GPU and its driver",
                    path, why ? why : "unknown reason"));
  }
  Api& api = impl->api;
  api.load(impl->lib);
  if (!api.init || !api.shutdown || !api.count || !api.handle)
    throw TelemetryUnavailable(fmt::format("{} is not a usable NVML library (nvmlInit_v2 missing)", path));
  if (const nvmlReturn_t r = api.init(); r != kSuccess) {
    api.shutdown = nullptr;  // nothing to shut down
    throw TelemetryUnavailable("the NVIDIA driver did not answer: " + impl->error(r));
  }
  unsigned int count = 0;
  if (const nvmlReturn_t r = api.count(&count); r != kSuccess)
    throw TelemetryUnavailable("NVML could not count the GPUs: " + impl->error(r));
  for (unsigned int i = 0; i < count; ++i) {
    auto dev = std::make_unique<Device>();
    if (api.handle(i, &dev->handle) != kSuccess) continue;  // e.g. no permission on that GPU: skip it
    GpuInfo& info = dev->info;
    info.index = static_cast<int>(i);
    std::array<char, 96> name{};  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
    info.name = api.name && api.name(dev->handle, name.data(), name.size()) == kSuccess ? name.data() : "unknown GPU";
    info.sm_clock_max_mhz = mhz(api.max_clock, dev->handle, kClockSm);
    info.memory_clock_max_mhz = mhz(api.max_clock, dev->handle, kClockMem);
    info.power_default_limit_watts = watts(api.power_default_limit, dev->handle);
    impl->devices.push_back(std::move(dev));
  }
  if (impl->devices.empty())
    throw TelemetryUnavailable(count == 0 ? "the NVIDIA driver reports no GPU" : "no GPU could be opened through NVML");
  std::array<char, 80> driver{};  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE
  if (api.driver_version && api.driver_version(driver.data(), driver.size()) == kSuccess) impl->driver = driver.data();
  auto nvml = std::unique_ptr<Nvml>(new Nvml(std::move(impl)));
  for (std::size_t i = 0; i < nvml->impl_->devices.size(); ++i) {  // memory total comes with a reading
    auto r = nvml->read(i, read_set::kAll);
    nvml->impl_->devices[i]->info.memory_total_bytes = r.memory_total_bytes;
    nvml->impl_->infos.push_back(nvml->impl_->devices[i]->info);
  }
  return nvml;
}

Nvml::Nvml(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Nvml::~Nvml() = default;
const std::vector<GpuInfo>& Nvml::gpus() const {
  return impl_->infos;
}
std::string Nvml::driver_version() const {
  return impl_->driver;
}

GpuReading Nvml::read(std::size_t position, unsigned sets) {
  const Api& api = impl_->api;
  Device& dev = *impl_->devices.at(position);
  const std::lock_guard lock(dev.mutex);
  const nvmlDevice_t d = dev.handle;
  GpuReading g;
  g.index = dev.info.index;

  if (sets & read_set::kActivity) {
    if (auto u = ask<nvmlUtilization_t>(api.utilization, d)) {
      g.gpu_util_percent = u->gpu;
      g.memory_util_percent = u->memory;
    }
    g.power_watts = watts(api.power, d);
  }
  if (sets & read_set::kMemory) {
    if (dev.memory_v2_ok && api.memory_v2) {
      nvmlMemory_v2_t m{};
      m.version = kMemoryV2Version;
      if (api.memory_v2(d, &m) == kSuccess) {
        g.memory_total_bytes = static_cast<std::int64_t>(m.total);
        g.memory_free_bytes = static_cast<std::int64_t>(m.free);
        g.memory_used_bytes = static_cast<std::int64_t>(m.used);  // excludes the driver's reservation
      } else {
        dev.memory_v2_ok = false;  // an older driver: v1 from now on
      }
    }
    if (!g.memory_total_bytes && api.memory_v1) {
      if (auto m = ask<nvmlMemory_t>(api.memory_v1, d)) {
        g.memory_total_bytes = static_cast<std::int64_t>(m->total);
        g.memory_free_bytes = static_cast<std::int64_t>(m->free);
        g.memory_used_bytes = static_cast<std::int64_t>(m->used);
      }
    }
  }
  if (sets & read_set::kState) {
    g.sm_clock_mhz = mhz(api.clock, d, kClockSm);
    g.memory_clock_mhz = mhz(api.clock, d, kClockMem);
    g.throttle_reasons = ask<unsigned long long>(api.clock_reasons, d);
    g.power_limit_watts = watts(api.power_limit, d);
    if (auto t = ask<unsigned int>(api.temperature, d, kTemperatureGpu)) g.temperature_c = *t;
  }
  if (!(sets & (read_set::kCounters | read_set::kLinks))) return g;

  const double t = now_seconds();
  // PCIe and NVLink: their cumulative counters in one driver call when both are due (each field
  // answers on its own); PCIe falls back to the blocking throughput query, NVLink from the KiB
  // throughput counters summed over links to the NVLink5 byte counters.
  const bool counters = (sets & read_set::kCounters) != 0;
  const bool ask_pcie = counters && dev.pcie_fields_ok && api.field_values;
  const bool ask_nvlink = (sets & read_set::kLinks) && dev.nvlink_ok && api.field_values;
  if (ask_pcie || ask_nvlink) {
    std::array<nvmlFieldValue_t, 4> f{};
    int n = 0;
    const int pcie_at = ask_pcie ? n : -1;
    if (ask_pcie) {
      f[static_cast<std::size_t>(n++)].fieldId = kFiPcieRxBytes;
      f[static_cast<std::size_t>(n++)].fieldId = kFiPcieTxBytes;
    }
    const int nvlink_at = ask_nvlink ? n : -1;
    if (ask_nvlink) {
      nvmlFieldValue_t& rx = f[static_cast<std::size_t>(n++)];
      nvmlFieldValue_t& tx = f[static_cast<std::size_t>(n++)];
      rx.fieldId = dev.nvlink5 ? kFiNvlinkRcvBytes : kFiNvlinkDataRxKiB;
      tx.fieldId = dev.nvlink5 ? kFiNvlinkXmitBytes : kFiNvlinkDataTxKiB;
      rx.scopeId = tx.scopeId = kAllLinks;
    }
    const bool called = api.field_values(d, n, f.data()) == kSuccess;
    const auto pair_ok = [&](int at) {
      return called && f[static_cast<std::size_t>(at)].nvmlReturn == kSuccess &&
             f[static_cast<std::size_t>(at) + 1].nvmlReturn == kSuccess;
    };
    if (pcie_at >= 0) {
      const nvmlFieldValue_t &rx = f[static_cast<std::size_t>(pcie_at)], &tx = f[static_cast<std::size_t>(pcie_at) + 1];
      if (pair_ok(pcie_at)) {
        g.pcie_rx_bytes_per_s = dev.pcie_rx.rate(field_number(rx), field_time(rx, t));
        g.pcie_tx_bytes_per_s = dev.pcie_tx.rate(field_number(tx), field_time(tx, t));
      } else {
        dev.pcie_fields_ok = false;
      }
    }
    if (nvlink_at >= 0) {
      const nvmlFieldValue_t &rx = f[static_cast<std::size_t>(nvlink_at)],
                             &tx = f[static_cast<std::size_t>(nvlink_at) + 1];
      if (pair_ok(nvlink_at)) {
        const double unit = dev.nvlink5 ? 1.0 : 1024.0;
        auto rx_v = field_number(rx), tx_v = field_number(tx);
        g.nvlink_rx_bytes_per_s =
            dev.nvlink_rx.rate(rx_v ? std::optional(*rx_v * unit) : std::nullopt, field_time(rx, t));
        g.nvlink_tx_bytes_per_s =
            dev.nvlink_tx.rate(tx_v ? std::optional(*tx_v * unit) : std::nullopt, field_time(tx, t));
      } else if (!dev.nvlink5) {
        dev.nvlink5 = true;  // try the newer counters next time
      } else {
        dev.nvlink_ok = false;  // no NVLink here
      }
    }
  }
  if (!counters) return g;
  if ((!dev.pcie_fields_ok || !api.field_values) && api.pcie_throughput) {
    // NVML's KB is 1024 bytes; each call samples for ~20 ms.
    if (auto rx = ask<unsigned int>(api.pcie_throughput, d, kPcieUtilRx)) g.pcie_rx_bytes_per_s = *rx * 1024.0;
    if (auto tx = ask<unsigned int>(api.pcie_throughput, d, kPcieUtilTx)) g.pcie_tx_bytes_per_s = *tx * 1024.0;
  }
  if (api.procs_v2)
    g.processes = processes<nvmlProcessInfo_v2_t>(api.procs_v2, d);
  else if (api.procs_v1)
    g.processes = processes<nvmlProcessInfo_v1_t>(api.procs_v1, d);
  return g;
}

void carry_unread(unsigned sets_read, const GpuReading& previous, GpuReading& reading) {
  if (!(sets_read & read_set::kActivity)) {
    reading.gpu_util_percent = previous.gpu_util_percent;
    reading.memory_util_percent = previous.memory_util_percent;
    reading.power_watts = previous.power_watts;
  }
  if (!(sets_read & read_set::kMemory)) {
    reading.memory_total_bytes = previous.memory_total_bytes;
    reading.memory_used_bytes = previous.memory_used_bytes;
    reading.memory_free_bytes = previous.memory_free_bytes;
  }
  if (!(sets_read & read_set::kState)) {
    reading.sm_clock_mhz = previous.sm_clock_mhz;
    reading.memory_clock_mhz = previous.memory_clock_mhz;
    reading.throttle_reasons = previous.throttle_reasons;
    reading.power_limit_watts = previous.power_limit_watts;
    reading.temperature_c = previous.temperature_c;
  }
  if (!(sets_read & read_set::kCounters)) {
    reading.pcie_rx_bytes_per_s = previous.pcie_rx_bytes_per_s;
    reading.pcie_tx_bytes_per_s = previous.pcie_tx_bytes_per_s;
    reading.processes = previous.processes;
  }
  if (!(sets_read & read_set::kLinks)) {
    reading.nvlink_rx_bytes_per_s = previous.nvlink_rx_bytes_per_s;
    reading.nvlink_tx_bytes_per_s = previous.nvlink_tx_bytes_per_s;
  }
}

std::string describe_throttle(std::uint64_t bits) {
  static constexpr std::array<std::pair<std::uint64_t, const char*>, 9> kNames{{
      {throttle::kGpuIdle, "idle"},
      {throttle::kApplicationsClocks, "app-clocks"},
      {throttle::kSwPowerCap, "power-cap"},
      {throttle::kHwSlowdown, "hw-slowdown"},
      {throttle::kSyncBoost, "sync-boost"},
      {throttle::kSwThermal, "sw-thermal"},
      {throttle::kHwThermal, "hw-thermal"},
      {throttle::kHwPowerBrake, "power-brake"},
      {throttle::kDisplayClock, "display-clock"},
  }};
  std::string out;
  for (const auto& [bit, name] : kNames)
    if (bits & bit) {
      if (!out.empty()) out += '+';
      out += name;
    }
  return out.empty() ? "none" : out;
}

}  // namespace trainfit::telemetry
