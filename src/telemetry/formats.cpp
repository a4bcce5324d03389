// What watch writes and reads: JSON lines (schema trainfit.watch/1), the probe's events, the
// Prometheus text format, listen addresses, and the process tree of a job.
#include <dirent.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "common/text.hpp"
#include "telemetry/watch_text.hpp"
#include "trainfit/telemetry.hpp"
#include "trainfit/units.hpp"

namespace trainfit::telemetry {
namespace {

using nlohmann::json;

template <typename T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// A number field: absent or null is unknown; anything else must be a finite number.
std::optional<double> number(const json& o, const char* key) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_number() || !std::isfinite(it->get<double>()))
    throw InputError(fmt::format("field \"{}\" must be a number", key));
  return it->get<double>();
}
std::optional<std::int64_t> integer(const json& o, const char* key) {
  auto v = number(o, key);
  if (!v) return std::nullopt;
  if (std::abs(*v) > 9e18) throw InputError(fmt::format("field \"{}\" is out of range", key));
  return static_cast<std::int64_t>(std::llround(*v));
}
std::string text(const json& o, const char* key) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return "";
  if (!it->is_string()) throw InputError(fmt::format("field \"{}\" must be a string", key));
  return it->get<std::string>();
}

// Seconds since the Unix epoch, within reason: a replay walks the span between samples.
double epoch_seconds(const json& o) {
  const auto t = number(o, "t");
  if (!t || *t < 0 || *t > 1e11) throw InputError("\"t\" must be seconds since the Unix epoch");
  return *t;
}

GpuReading reading_from(const json& g) {
  GpuReading r;
  r.index = static_cast<int>(integer(g, "gpu").value_or(0));
  r.memory_total_bytes = integer(g, "mem_total");
  r.memory_used_bytes = integer(g, "mem_used");
  r.memory_free_bytes = integer(g, "mem_free");
  r.gpu_util_percent = number(g, "util");
  r.memory_util_percent = number(g, "mem_util");
  r.pcie_rx_bytes_per_s = number(g, "pcie_rx");
  r.pcie_tx_bytes_per_s = number(g, "pcie_tx");
  r.nvlink_rx_bytes_per_s = number(g, "nvlink_rx");
  r.nvlink_tx_bytes_per_s = number(g, "nvlink_tx");
  r.sm_clock_mhz = number(g, "sm_mhz");
  r.memory_clock_mhz = number(g, "mem_mhz");
  r.power_watts = number(g, "power_w");
  r.power_limit_watts = number(g, "power_limit_w");
  r.temperature_c = number(g, "temp_c");
  if (auto t = integer(g, "throttle")) r.throttle_reasons = static_cast<std::uint64_t>(std::max<std::int64_t>(*t, 0));
  if (const auto p = g.find("procs"); p != g.end() && p->is_array()) {
    r.processes.emplace();
    for (const json& e : *p)
      r.processes->push_back({static_cast<std::uint32_t>(integer(e, "pid").value_or(0)), integer(e, "mem")});
  }
  return r;
}

std::string escape_label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

json header_to_json(std::span<const GpuInfo> gpus, std::string_view driver, std::string_view command) {
  json list = json::array();
  for (const GpuInfo& g : gpus)
    list.push_back({{"gpu", g.index},
                    {"name", g.name},
                    {"mem_total", opt(g.memory_total_bytes)},
                    {"sm_mhz_max", opt(g.sm_clock_max_mhz)},
                    {"mem_mhz_max", opt(g.memory_clock_max_mhz)},
                    {"power_default_limit_w", opt(g.power_default_limit_watts)}});
  return {{"type", "header"}, {"schema", "trainfit.watch/1"}, {"driver", driver}, {"command", command}, {"gpus", list}};
}

json sample_to_json(const Sample& s) {
  json gpus = json::array();
  for (const GpuReading& g : s.gpus) {
    json procs = nullptr;
    if (g.processes) {
      procs = json::array();
      for (const ProcessMemory& p : *g.processes) procs.push_back({{"pid", p.pid}, {"mem", opt(p.used_bytes)}});
    }
    gpus.push_back({{"gpu", g.index},
                    {"mem_used", opt(g.memory_used_bytes)},
                    {"mem_free", opt(g.memory_free_bytes)},
                    {"mem_total", opt(g.memory_total_bytes)},
                    {"util", opt(g.gpu_util_percent)},
                    {"mem_util", opt(g.memory_util_percent)},
                    {"pcie_rx", opt(g.pcie_rx_bytes_per_s)},
                    {"pcie_tx", opt(g.pcie_tx_bytes_per_s)},
                    {"nvlink_rx", opt(g.nvlink_rx_bytes_per_s)},
                    {"nvlink_tx", opt(g.nvlink_tx_bytes_per_s)},
                    {"sm_mhz", opt(g.sm_clock_mhz)},
                    {"mem_mhz", opt(g.memory_clock_mhz)},
                    {"power_w", opt(g.power_watts)},
                    {"power_limit_w", opt(g.power_limit_watts)},
                    {"temp_c", opt(g.temperature_c)},
                    {"throttle", opt(g.throttle_reasons)},
                    {"procs", procs}});
  }
  return {{"type", "sample"}, {"t", s.time}, {"gpus", gpus}};
}

json diagnosis_to_json(const Diagnosis& d) {
  json also = json::array();
  for (std::size_t i = 1; i < d.verdicts.size(); ++i)
    also.push_back({{"verdict", watch_verdict(d.verdicts[i].kind)}, {"evidence", d.verdicts[i].evidence}});
  return {{"type", "verdict"},
          {"gpu", d.gpu},
          {"begin", d.begin},
          {"end", d.end},
          {"verdict", watch_verdict(d.primary().kind)},
          {"evidence", d.primary().evidence},
          {"advice", d.primary().advice},
          {"also", also}};
}

json host_to_json(const HostSample& h) {
  json procs = json::array();
  // Shares of a core to 1/1000: finer than /proc's 10 ms ticks over a second.
  const auto cores = [](double v) { return std::round(v * 1000) / 1000; };
  for (const HostProcess& p : h.processes)
    procs.push_back({{"pid", p.pid},
                     {"ppid", p.parent},
                     {"role", to_string(p.role)},
                     {"gpus", p.gpus},
                     {"cpu", cores(p.cpu_cores)},
                     {"main", cores(p.main_thread_cores)},
                     {"other", cores(p.busiest_other_cores)},
                     {"state", std::string(1, p.main_thread_state)}});
  return {{"type", "host"}, {"t", h.time}, {"procs", procs}};
}

namespace {

HostRole parse_role(const std::string& role) {
  if (role == "training") return HostRole::training;
  if (role == "worker") return HostRole::worker;
  if (role == "other" || role.empty()) return HostRole::other;
  throw InputError(fmt::format("unknown process role '{}'", role));
}

// An element of a list of GPU indexes.
int gpu_index(const json& v) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 1 << 20)
    throw InputError("a GPU index must be a whole number from 0");
  return static_cast<int>(v.get<std::int64_t>());
}

// A share of a core: finite, not negative, at most a machine's worth.
double cores(const json& o, const char* key) {
  const double v = number(o, key).value_or(0);
  if (v < 0 || v > 1e4) throw InputError(fmt::format("field \"{}\" must be a share of cores (0 to 10000)", key));
  return v;
}

// Event lines are flat objects. Deeper nesting is refused before parsing: watch copies each event
// into its recording with json::dump, which recurses once per level, and a line of 64 KiB of '['
// would overflow the stack.
constexpr std::size_t kMaxEventDepth = 16;

void check_event_depth(std::string_view line) {
  if (trainfit::detail::json_nesting_depth(line) > kMaxEventDepth)
    throw InputError(fmt::format("an event is nested more than {} levels deep", kMaxEventDepth));
}

}  // namespace

void parse_event_line(std::string_view line, std::vector<StepEvent>& steps, std::vector<PhaseMarker>& phases) {
  check_event_depth(line);
  const json o = json::parse(line);  // throws json::parse_error
  if (!o.is_object()) throw InputError("an event must be a JSON object");
  const double t = epoch_seconds(o);
  if (o.contains("phase")) {
    phases.push_back({t, text(o, "phase"), text(o, "expect"), text(o, "label")});
    return;
  }
  StepEvent e;
  e.time = t;
  e.step = integer(o, "step");
  e.step_seconds = number(o, "step_seconds");
  e.data_seconds = number(o, "data_seconds");
  e.alloc_retries = integer(o, "alloc_retries");
  e.ooms = integer(o, "ooms");
  e.allocated_bytes = integer(o, "allocated_bytes");
  e.reserved_bytes = integer(o, "reserved_bytes");
  e.limit_bytes = integer(o, "limit_bytes");
  // GPU indexes and ranks are small; anything else is no device (NVML hosts have a few dozen GPUs).
  const auto small = [&](const char* key) -> std::optional<int> {
    const auto v = integer(o, key);
    if (v && (*v < 0 || *v > 1 << 20)) throw InputError(fmt::format("field \"{}\" is out of range", key));
    return v ? std::optional<int>(static_cast<int>(*v)) : std::nullopt;
  };
  e.rank = small("rank");
  e.device = small("device");
  if (e.step || e.step_seconds || e.alloc_retries || e.allocated_bytes || e.reserved_bytes) steps.push_back(e);
}

namespace {

// Builds a Recording one line at a time, counting what it holds against the limits: what the
// parsed recording takes in memory, not its text ("{}" is 2 bytes of text and a whole GpuReading).
class RecordingReader {
 public:
  RecordingReader(std::string_view source, const RecordingLimits& limits) : source_(source), limits_(limits) {}

  void add(std::string_view line, std::size_t line_no) {
    line_no_ = line_no;
    if (line.size() > limits_.max_line_bytes)
      throw InputError(trainfit::detail::line_too_long(trainfit::detail::printable(source_), static_cast<int>(line_no),
                                                       limits_.max_line_bytes));
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return;
    try {
      const json o = json::parse(line);
      const std::string type = o.is_object() ? text(o, "type") : "";
      if (type == "header") {
        for (const json& g : gpu_list(o, "the header")) {
          GpuInfo info;
          info.index = static_cast<int>(integer(g, "gpu").value_or(0));
          info.name = text(g, "name");
          info.memory_total_bytes = integer(g, "mem_total");
          info.sm_clock_max_mhz = number(g, "sm_mhz_max");
          info.memory_clock_max_mhz = number(g, "mem_mhz_max");
          info.power_default_limit_watts = number(g, "power_default_limit_w");
          hold(sizeof(GpuInfo) + info.name.capacity());
          r_.gpus.push_back(std::move(info));
        }
        if (r_.gpus.size() > limits_.max_gpus)  // several headers add up
          fail(fmt::format("the headers list {} GPUs; a recording may list at most {}", r_.gpus.size(),
                           limits_.max_gpus));
      } else if (type == "sample") {
        Sample s;
        s.time = epoch_seconds(o);
        const json& gpus = gpu_list(o, "a sample");
        s.gpus.reserve(gpus.size());
        hold(sizeof(Sample) + gpus.size() * sizeof(GpuReading));
        for (const json& g : gpus) {
          s.gpus.push_back(reading_from(g));
          if (s.gpus.back().processes) hold(s.gpus.back().processes->size() * sizeof(ProcessMemory));
        }
        r_.samples.push_back(std::move(s));
      } else if (type == "event") {
        const std::size_t phases = r_.phases.size();
        parse_event_line(line, r_.steps, r_.phases);
        hold(sizeof(StepEvent));
        if (r_.phases.size() > phases) {
          const PhaseMarker& p = r_.phases.back();
          hold(sizeof(PhaseMarker) + p.phase.capacity() + p.expect.capacity() + p.label.capacity());
        }
      } else if (type == "host") {
        HostSample h;
        h.time = epoch_seconds(o);
        const json& procs = o.at("procs");
        if (!procs.is_array()) throw InputError("\"procs\" must be an array");
        hold(sizeof(HostSample) + procs.size() * sizeof(HostProcess));
        for (const json& q : procs) {
          HostProcess p;
          p.pid = static_cast<std::uint32_t>(std::clamp<std::int64_t>(integer(q, "pid").value_or(0), 0, UINT32_MAX));
          p.parent =
              static_cast<std::uint32_t>(std::clamp<std::int64_t>(integer(q, "ppid").value_or(0), 0, UINT32_MAX));
          p.role = parse_role(text(q, "role"));
          if (const auto g = q.find("gpus"); g != q.end() && g->is_array()) {
            if (g->size() > limits_.max_gpus) fail("a process lists more GPUs than a recording may hold");
            for (const json& i : *g) p.gpus.push_back(gpu_index(i));
            hold(p.gpus.size() * sizeof(int));
          }
          p.cpu_cores = cores(q, "cpu");
          p.main_thread_cores = cores(q, "main");
          p.busiest_other_cores = cores(q, "other");
          const std::string state = text(q, "state");
          p.main_thread_state = state.size() == 1 ? state[0] : '?';
          h.processes.push_back(std::move(p));
        }
        r_.host.push_back(std::move(h));
      } else if (type == "summary") {
        if (const auto g = o.find("gpus"); g != o.end() && g->is_array()) {
          if (g->size() > limits_.max_gpus) fail("the summary lists more GPUs than a recording may hold");
          r_.job_gpus.clear();
          for (const json& i : *g) r_.job_gpus.push_back(gpu_index(i));
        }
      } else if (type != "verdict") {
        throw InputError("unknown line type '" + type + "'");
      }
    } catch (const json::exception& e) {
      fail(e.what());
    } catch (const InputError& e) {
      if (failed_) throw;  // already named its line
      fail(e.what());
    }
  }

  Recording finish() {
    if (r_.gpus.empty() && !r_.samples.empty())  // no header: the GPUs of the first sample, totals from it
      for (const GpuReading& g : r_.samples.front().gpus)
        r_.gpus.push_back({g.index, "", g.memory_total_bytes, {}, {}, {}});
    const auto by_time = [](const auto& a, const auto& b) { return a.time < b.time; };
    std::stable_sort(r_.samples.begin(), r_.samples.end(), by_time);
    std::stable_sort(r_.steps.begin(), r_.steps.end(), by_time);
    std::stable_sort(r_.phases.begin(), r_.phases.end(), by_time);
    std::stable_sort(r_.host.begin(), r_.host.end(), by_time);
    return std::move(r_);
  }

  // "<source>:<line>: <why>", control characters escaped: the source's name and the text quoted from
  // the line may hold anything, and the message goes to a terminal.
  [[noreturn]] void fail(std::string_view why) {
    failed_ = true;
    throw InputError(
        fmt::format("{}:{}: {}", trainfit::detail::printable(source_), line_no_, trainfit::detail::printable(why)));
  }

 private:
  // The GPUs of a header or a sample: an array of at most max_gpus, counted before any is read.
  const json& gpu_list(const json& o, std::string_view what) {
    const json& gpus = o.at("gpus");
    if (!gpus.is_array()) throw InputError("\"gpus\" must be an array");
    if (gpus.size() > limits_.max_gpus)
      fail(fmt::format("{} lists {} GPUs; a recording may list at most {}", what, gpus.size(), limits_.max_gpus));
    return gpus;
  }

  void hold(std::size_t bytes) {
    held_ += bytes;
    if (held_ > limits_.max_held_bytes)
      fail(fmt::format("the recording holds more than {} of samples and events once read; replay a part of it",
                       format_bytes(static_cast<std::int64_t>(limits_.max_held_bytes))));
  }

  std::string_view source_;
  const RecordingLimits& limits_;
  Recording r_;
  std::size_t held_ = 0;
  std::size_t line_no_ = 0;
  bool failed_ = false;
};

}  // namespace

Recording parse_recording(std::string_view jsonl, std::string_view source_name, const RecordingLimits& limits) {
  RecordingReader reader(source_name, limits);
  std::size_t pos = 0, line_no = 0;
  while (pos < jsonl.size()) {
    std::size_t end = jsonl.find('\n', pos);
    if (end == std::string_view::npos) end = jsonl.size();
    reader.add(jsonl.substr(pos, end - pos), ++line_no);
    pos = end + 1;
  }
  return reader.finish();
}

Recording load_recording(const std::string& path, const RecordingLimits& limits) {
  RecordingReader reader(path, limits);
  // Read line by line: a line past max_line_bytes (/dev/zero's one endless line) is refused by the
  // reader before it is held whole, with the same words as any other file of rows.
  trainfit::detail::for_each_line(
      path, "recording", {limits.max_line_bytes, limits.max_file_bytes},
      [&](int number, std::string_view line) { reader.add(line, static_cast<std::size_t>(number)); });
  return reader.finish();
}

std::string render_prometheus(std::span<const GpuInfo> gpus, const Sample& latest,
                              std::span<const Diagnosis> verdicts) {
  using Get = std::optional<double> (*)(const GpuReading&);
  struct Metric {
    const char* name;
    const char* help;
    Get get;
  };
  static const Metric kMetrics[] = {
      {"trainfit_gpu_memory_used_bytes", "GPU memory in use (nvmlDeviceGetMemoryInfo)",
       [](const GpuReading& g) {
         return g.memory_used_bytes ? std::optional(static_cast<double>(*g.memory_used_bytes)) : std::nullopt;
       }},
      {"trainfit_gpu_memory_total_bytes", "GPU memory on the card",
       [](const GpuReading& g) {
         return g.memory_total_bytes ? std::optional(static_cast<double>(*g.memory_total_bytes)) : std::nullopt;
       }},
      {"trainfit_gpu_utilization_ratio", "Share of time a kernel ran (nvmlDeviceGetUtilizationRates)",
       [](const GpuReading& g) {
         return g.gpu_util_percent ? std::optional(*g.gpu_util_percent / 100) : std::nullopt;
       }},
      {"trainfit_gpu_memory_utilization_ratio", "Share of time device memory was read or written",
       [](const GpuReading& g) {
         return g.memory_util_percent ? std::optional(*g.memory_util_percent / 100) : std::nullopt;
       }},
      {"trainfit_gpu_pcie_rx_bytes_per_second", "PCIe traffic into the GPU",
       [](const GpuReading& g) { return g.pcie_rx_bytes_per_s; }},
      {"trainfit_gpu_pcie_tx_bytes_per_second", "PCIe traffic out of the GPU",
       [](const GpuReading& g) { return g.pcie_tx_bytes_per_s; }},
      {"trainfit_gpu_nvlink_rx_bytes_per_second", "NVLink traffic into the GPU, all links",
       [](const GpuReading& g) { return g.nvlink_rx_bytes_per_s; }},
      {"trainfit_gpu_nvlink_tx_bytes_per_second", "NVLink traffic out of the GPU, all links",
       [](const GpuReading& g) { return g.nvlink_tx_bytes_per_s; }},
      {"trainfit_gpu_sm_clock_hertz", "SM clock",
       [](const GpuReading& g) { return g.sm_clock_mhz ? std::optional(*g.sm_clock_mhz * 1e6) : std::nullopt; }},
      {"trainfit_gpu_memory_clock_hertz", "Memory clock",
       [](const GpuReading& g) {
         return g.memory_clock_mhz ? std::optional(*g.memory_clock_mhz * 1e6) : std::nullopt;
       }},
      {"trainfit_gpu_power_watts", "Board power draw", [](const GpuReading& g) { return g.power_watts; }},
      {"trainfit_gpu_power_limit_watts", "Enforced power limit",
       [](const GpuReading& g) { return g.power_limit_watts; }},
      {"trainfit_gpu_temperature_celsius", "GPU temperature", [](const GpuReading& g) { return g.temperature_c; }},
      {"trainfit_gpu_throttle_reasons", "Bit mask of nvmlClocksEventReason values",
       [](const GpuReading& g) {
         return g.throttle_reasons ? std::optional(static_cast<double>(*g.throttle_reasons)) : std::nullopt;
       }},
  };
  std::map<int, std::string> names;
  for (const GpuInfo& g : gpus) names[g.index] = g.name;
  std::string out;
  // Unknown values are left out, as Prometheus expects of a series it cannot read, never written as 0.
  for (const Metric& m : kMetrics) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", m.name, m.help, m.name);
    for (const GpuReading& g : latest.gpus)
      if (auto v = m.get(g))
        out += fmt::format("{}{{gpu=\"{}\",name=\"{}\"}} {}\n", m.name, g.index, escape_label(names[g.index]), *v);
  }
  out +=
      "# HELP trainfit_process_gpu_memory_bytes GPU memory of each compute process\n"
      "# TYPE trainfit_process_gpu_memory_bytes gauge\n";
  for (const GpuReading& g : latest.gpus)
    if (g.processes)
      for (const ProcessMemory& p : *g.processes)
        if (p.used_bytes)
          out += fmt::format("trainfit_process_gpu_memory_bytes{{gpu=\"{}\",pid=\"{}\"}} {}\n", g.index, p.pid,
                             *p.used_bytes);
  out +=
      "# HELP trainfit_bottleneck The verdict of the latest window (1 for the named verdict)\n"
      "# TYPE trainfit_bottleneck gauge\n";
  for (const Diagnosis& d : verdicts)
    out += fmt::format("trainfit_bottleneck{{gpu=\"{}\",verdict=\"{}\"}} 1\n", d.gpu, watch_verdict(d.primary().kind));
  return out;
}

Endpoint parse_endpoint(std::string_view text) {
  Endpoint e;
  std::string_view port = text;
  if (!text.empty() && text.front() == '[') {  // [v6 address]:port
    const auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':')
      throw InputError(fmt::format("invalid address '{}': expected [HOST]:PORT", text));
    e.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else if (const auto colon = text.rfind(':'); colon != std::string_view::npos) {
    if (colon > 0) e.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  }
  int value = -1;
  const auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || ptr != port.data() + port.size() || value < 0 || value > 65535 ||
      e.host.empty())
    throw InputError(fmt::format("invalid address '{}': expected HOST:PORT, :PORT or PORT (port 0-65535)", text));
  e.port = value;
  return e;
}

std::vector<std::uint32_t> process_tree(std::uint32_t root) {
  std::multimap<std::uint32_t, std::uint32_t> children;
  if (DIR* dir = opendir("/proc")) {
    while (const dirent* entry = readdir(dir)) {
      std::uint32_t pid = 0;
      const std::string_view name = entry->d_name;
      if (std::from_chars(name.data(), name.data() + name.size(), pid).ptr != name.data() + name.size()) continue;
      std::ifstream stat(fmt::format("/proc/{}/stat", pid));
      std::string line;
      std::getline(stat, line);
      const auto close = line.rfind(')');  // the command name may hold spaces and parentheses
      if (close == std::string::npos) continue;
      std::istringstream rest(line.substr(close + 1));
      std::string state;
      std::uint32_t ppid = 0;
      if (rest >> state >> ppid) children.emplace(ppid, pid);
    }
    closedir(dir);
  }
  std::vector<std::uint32_t> out{root};
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto [b, e] = children.equal_range(out[i]);
    for (auto it = b; it != e; ++it) out.push_back(it->second);
  }
  return out;
}

}  // namespace trainfit::telemetry
