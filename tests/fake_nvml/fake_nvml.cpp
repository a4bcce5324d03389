// A fake libnvidia-ml for the tests: the same C entry points, answering from a script so that the
// real dlopen path of src/telemetry/nvml.cpp can be driven through driver errors, unsupported
// metrics and the old process struct. Its declarations are written from nvml.h independently of
// trainfit's, so a layout mistake there shows up here as garbled values.
//
// $FAKE_NVML_SCRIPT names a file of "key value..." lines ('#' starts a comment):
//   init 9                      nvmlInit_v2's return code (9: NVML_ERROR_DRIVER_NOT_LOADED)
//   count 2                     GPUs (default 1)
//   gpu0.util_gpu 10 90         a value list answers successive calls in turn, cycling
//   gpu0.error.nvmlDeviceGetPowerUsage 3   that entry point returns this code (3: NOT_SUPPORTED)
// Per-GPU keys: name memory_total memory_used memory_reserved util_gpu util_memory pcie_rx_rate
// pcie_tx_rate (bytes/s, as cumulative counters 100 ms apart) pcie_fields (code for the counters)
// pcie_throughput_rx pcie_throughput_tx (KB/s) nvlink_rx_rate nvlink_tx_rate sm_clock mem_clock
// sm_clock_max mem_clock_max power_mw power_limit_mw power_default_limit_mw temperature throttle
// procs ("pid:bytes" or "pid:NA" items; pid "child": the caller's first child process, the job a
// watch started) procs_many (that many processes).
// Built twice: fake_nvml (a current driver) and, with FAKE_NVML_OLD, fake_nvml_old: no _v2/_v3
// process entry points (16-byte struct), no GetMemoryInfo_v2, no field values, the old name of the
// clock-reasons call.
#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using nvmlReturn_t = int;
enum : int {
  SUCCESS = 0,
  UNINITIALIZED = 1,
  INVALID_ARGUMENT = 2,
  NOT_SUPPORTED = 3,
  INSUFFICIENT_SIZE = 7,
  ARGUMENT_VERSION_MISMATCH = 25
};

struct Script {
  std::map<std::string, std::vector<std::string>> values;
  std::map<std::string, std::size_t> calls;
  std::mutex mutex;
  bool initialised = false;

  // (Re)reads the script: each nvmlInit_v2 starts from its beginning.
  void load() {
    values.clear();
    calls.clear();
    const char* path = std::getenv("FAKE_NVML_SCRIPT");
    if (!path) return;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
      std::istringstream words(line);
      std::string key, w;
      if (!(words >> key)) continue;
      std::vector<std::string> list;
      while (words >> w) list.push_back(w);
      if (key.size() > 5 && key.compare(key.size() - 5, 5, ".name") == 0) {  // names keep their spaces
        std::string joined;
        for (const auto& x : list) joined += (joined.empty() ? "" : " ") + x;
        list = {joined};
      }
      values[key] = list;
    }
  }
  bool has(const std::string& key) const { return values.count(key) != 0; }
  // The next value of `key` (cycling), or `fallback`.
  std::string next(const std::string& key, const std::string& fallback) {
    const auto it = values.find(key);
    if (it == values.end() || it->second.empty()) return fallback;
    const std::size_t n = calls[key]++;
    return it->second[n % it->second.size()];
  }
  unsigned long long num(const std::string& key, unsigned long long fallback) {
    const std::string v = next(key, "");
    return v.empty() ? fallback : std::strtoull(v.c_str(), nullptr, 0);
  }
};

Script& script() {
  static Script s;
  return s;
}

struct nvmlDevice_st {
  unsigned int index;
};
nvmlDevice_st g_devices[16] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}};

std::string key(nvmlDevice_st* d, const char* what) {
  return "gpu" + std::to_string(d->index) + "." + what;
}

// The scripted error of an entry point, if any; also refuses calls before init.
int scripted_error(nvmlDevice_st* d, const char* function) {
  Script& s = script();
  if (!s.initialised) return UNINITIALIZED;
  if (d && d->index >= 16) return INVALID_ARGUMENT;
  const std::string k = d ? key(d, "error.") + function : std::string("error.") + function;
  return static_cast<int>(s.num(k, SUCCESS));
}

#define GUARD(device, fn)               \
  std::lock_guard lock(script().mutex); \
  if (int e = scripted_error(device, fn); e != SUCCESS) return e

struct Memory {
  unsigned long long total, free, used;
};
struct Memory_v2 {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
struct Utilization {
  unsigned int gpu, memory;
};
struct ProcessInfo_v1 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct ProcessInfo_v2 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};
union Value {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  long long sllVal;
};
struct FieldValue {
  unsigned int fieldId, scopeId;
  long long timestamp, latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  Value value;
};

void memory_of(nvmlDevice_st* d, unsigned long long& total, unsigned long long& used, unsigned long long& reserved) {
  total = script().num(key(d, "memory_total"), 80ULL << 30);
  used = script().num(key(d, "memory_used"), 1ULL << 30);
  reserved = script().num(key(d, "memory_reserved"), 0);
}

// The first child process of the caller (the job `trainfit watch -- CMD` started), from /proc; 0: none.
unsigned int first_child() {
  const std::string self = std::to_string(getpid());
  DIR* dir = opendir("/proc");
  if (!dir) return 0;
  unsigned int found = 0;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state, parent;
    if (rest >> state >> parent && parent == self) {
      found = static_cast<unsigned int>(std::strtoul(e->d_name, nullptr, 10));
      break;
    }
  }
  closedir(dir);
  return found;
}

template <typename Info>
nvmlReturn_t processes(nvmlDevice_st* d, unsigned int* count, Info* infos) {
  Script& s = script();
  std::vector<Info> list;
  if (const auto many = s.num(key(d, "procs_many"), 0))
    for (unsigned int i = 0; i < many; ++i) list.push_back(Info{1000 + i, 1ULL << 20});
  if (s.has(key(d, "procs")))
    for (const std::string& item : s.values[key(d, "procs")]) {
      const auto colon = item.find(':');
      Info info{};
      const std::string pid = item.substr(0, colon);
      info.pid = pid == "child" ? first_child() : static_cast<unsigned int>(std::strtoul(pid.c_str(), nullptr, 10));
      if (info.pid == 0) continue;  // "child" before the caller has one
      const std::string mem = item.substr(colon + 1);
      info.usedGpuMemory = mem == "NA" ? ~0ULL : std::strtoull(mem.c_str(), nullptr, 10);
      list.push_back(info);
    }
  if (*count < list.size()) {
    *count = static_cast<unsigned int>(list.size());
    return INSUFFICIENT_SIZE;
  }
  *count = static_cast<unsigned int>(list.size());
  if (!list.empty()) std::memcpy(infos, list.data(), list.size() * sizeof(Info));
  return SUCCESS;
}

}  // namespace

FAKE_EXPORT nvmlReturn_t nvmlInit_v2() {
  Script& s = script();
  std::lock_guard lock(s.mutex);
  s.load();
  const auto r = static_cast<nvmlReturn_t>(s.num("init", SUCCESS));
  s.initialised = r == SUCCESS;
  return r;
}
FAKE_EXPORT nvmlReturn_t nvmlShutdown() {
  script().initialised = false;
  return SUCCESS;
}
FAKE_EXPORT const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case SUCCESS:
      return "Success";
    case UNINITIALIZED:
      return "Uninitialized";
    case NOT_SUPPORTED:
      return "Not Supported";
    case 9:
      return "Driver Not Loaded";
    case ARGUMENT_VERSION_MISMATCH:
      return "Argument Version Mismatch";
    default:
      return "Unknown Error";
  }
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* n) {
  GUARD(nullptr, "nvmlDeviceGetCount_v2");
  *n = static_cast<unsigned int>(script().num("count", 1));
  return SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_st** d) {
  GUARD(nullptr, "nvmlDeviceGetHandleByIndex_v2");
  if (i >= 16) return INVALID_ARGUMENT;
  *d = &g_devices[i];
  return static_cast<nvmlReturn_t>(script().num(key(*d, "handle"), SUCCESS));
}
FAKE_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* out, unsigned int n) {
  GUARD(nullptr, "nvmlSystemGetDriverVersion");
  std::strncpy(out, script().next("driver", "999.99-fake").c_str(), n - 1);
  return SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_st* d, char* out, unsigned int n) {
  GUARD(d, "nvmlDeviceGetName");
  std::strncpy(out, script().next(key(d, "name"), "Fake GPU").c_str(), n - 1);
  return SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_st* d, Memory* m) {
  GUARD(d, "nvmlDeviceGetMemoryInfo");
  unsigned long long total, used, reserved;
  memory_of(d, total, used, reserved);
  *m = {total, total - used - reserved, used + reserved};  // v1: used includes the reservation
  return SUCCESS;
}
#ifndef FAKE_NVML_OLD
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_st* d, Memory_v2* m) {
  GUARD(d, "nvmlDeviceGetMemoryInfo_v2");
  if (m->version != (static_cast<unsigned int>(sizeof(Memory_v2)) | (2U << 24))) return ARGUMENT_VERSION_MISMATCH;
  unsigned long long total, used, reserved;
  memory_of(d, total, used, reserved);
  m->total = total;
  m->reserved = reserved;
  m->used = used;
  m->free = total - used - reserved;
  return SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_st* d, int n, FieldValue* values) {
  GUARD(d, "nvmlDeviceGetFieldValues");
  Script& s = script();
  const std::size_t call = s.calls[key(d, "fields")]++;
  for (int i = 0; i < n; ++i) {
    FieldValue& f = values[i];
    f.timestamp = static_cast<long long>(call + 1) * 100000;  // 100 ms apart: rates are exact
    f.valueType = 3;                                          // unsigned long long
    const char* rate = nullptr;
    double unit = 1;
    switch (f.fieldId) {
      case 198:
        rate = "pcie_rx_rate";
        break;
      case 197:
        rate = "pcie_tx_rate";
        break;
      case 139:
        rate = "nvlink_rx_rate";
        unit = 1024;
        break;
      case 138:
        rate = "nvlink_tx_rate";
        unit = 1024;
        break;
      default:
        break;
    }
    const bool pcie = f.fieldId == 197 || f.fieldId == 198;
    if (!rate || (!pcie && !s.has(key(d, rate)))) {
      f.nvmlReturn = NOT_SUPPORTED;
      continue;
    }
    if (pcie && (f.nvmlReturn = static_cast<int>(s.num(key(d, "pcie_fields"), SUCCESS))) != SUCCESS) continue;
    if (!pcie && f.scopeId != 0xFFFFFFFFU) {  // the sum over links is what trainfit asks for
      f.nvmlReturn = INVALID_ARGUMENT;
      continue;
    }
    f.nvmlReturn = SUCCESS;
    const double per_s = static_cast<double>(s.num(key(d, rate), 0));
    f.value.ullVal = static_cast<unsigned long long>(per_s * 0.1 * static_cast<double>(call) / unit);
  }
  return SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_st* d, unsigned int* n, ProcessInfo_v2* p) {
  GUARD(d, "nvmlDeviceGetComputeRunningProcesses_v3");
  return processes(d, n, p);
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_st* d, unsigned long long* r) {
  GUARD(d, "nvmlDeviceGetCurrentClocksEventReasons");
  *r = script().num(key(d, "throttle"), 0);
  return SUCCESS;
}
#else
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_st* d, unsigned int* n, ProcessInfo_v1* p) {
  GUARD(d, "nvmlDeviceGetComputeRunningProcesses");
  return processes(d, n, p);
}
#endif
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_st* d, unsigned long long* r) {
  GUARD(d, "nvmlDeviceGetCurrentClocksThrottleReasons");
  *r = script().num(key(d, "throttle"), 0);
  return SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_st* d, Utilization* u) {
  GUARD(d, "nvmlDeviceGetUtilizationRates");
  u->gpu = static_cast<unsigned int>(script().num(key(d, "util_gpu"), 0));
  u->memory = static_cast<unsigned int>(script().num(key(d, "util_memory"), 0));
  return SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_st* d, int counter, unsigned int* v) {
  GUARD(d, "nvmlDeviceGetPcieThroughput");
  *v = static_cast<unsigned int>(script().num(key(d, counter == 1 ? "pcie_throughput_rx" : "pcie_throughput_tx"), 0));
  return SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_st* d, int type, unsigned int* mhz) {
  GUARD(d, "nvmlDeviceGetClockInfo");
  if (type != 1 && type != 2) return INVALID_ARGUMENT;
  *mhz = static_cast<unsigned int>(script().num(key(d, type == 1 ? "sm_clock" : "mem_clock"), type == 1 ? 1980 : 3201));
  return SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_st* d, int type, unsigned int* mhz) {
  GUARD(d, "nvmlDeviceGetMaxClockInfo");
  if (type != 1 && type != 2) return INVALID_ARGUMENT;
  *mhz = static_cast<unsigned int>(
      script().num(key(d, type == 1 ? "sm_clock_max" : "mem_clock_max"), type == 1 ? 1980 : 3201));
  return SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_st* d, unsigned int* mw) {
  GUARD(d, "nvmlDeviceGetPowerUsage");
  *mw = static_cast<unsigned int>(script().num(key(d, "power_mw"), 100000));
  return SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_st* d, unsigned int* mw) {
  GUARD(d, "nvmlDeviceGetEnforcedPowerLimit");
  *mw = static_cast<unsigned int>(script().num(key(d, "power_limit_mw"), 700000));
  return SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_st* d, unsigned int* mw) {
  GUARD(d, "nvmlDeviceGetPowerManagementDefaultLimit");
  *mw = static_cast<unsigned int>(script().num(key(d, "power_default_limit_mw"), 700000));
  return SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_st* d, int sensor, unsigned int* c) {
  GUARD(d, "nvmlDeviceGetTemperature");
  if (sensor != 0) return INVALID_ARGUMENT;
  *c = static_cast<unsigned int>(script().num(key(d, "temperature"), 40));
  return SUCCESS;
}
