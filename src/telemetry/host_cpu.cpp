// The job's processes from /proc: per-thread CPU time, so that a GPU left idle by one Python thread
// that cannot launch kernels fast enough (host/launch overhead) is told from one left idle by a slow
// data pipeline (workers busy, the main thread waiting). docs/watch.md, "Host readings".
#include <dirent.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "trainfit/telemetry.hpp"

namespace trainfit::telemetry {
namespace {

struct StatFields {
  char state = '?';
  std::uint32_t parent = 0;
  std::uint64_t cpu_ticks = 0;  // utime + stime
};

// /proc/PID/stat or /proc/PID/task/TID/stat. The command name (field 2) may hold spaces and
// parentheses, so the fields are counted from the last ')'.
std::optional<StatFields> read_stat(const char* path) {
  std::FILE* f = std::fopen(path, "re");
  if (!f) return std::nullopt;
  std::array<char, 1024> buf{};
  const std::size_t n = std::fread(buf.data(), 1, buf.size() - 1, f);
  std::fclose(f);
  const std::string_view line(buf.data(), n);
  const auto close = line.rfind(')');
  if (close == std::string_view::npos) return std::nullopt;
  // After ")": state(3) ppid(4) pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime(14) stime(15)
  std::string_view rest = line.substr(close + 1);
  std::array<std::string_view, 13> fields{};
  for (auto& field : fields) {
    const auto b = rest.find_first_not_of(' ');
    if (b == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(b);
    const auto e = rest.find(' ');
    field = rest.substr(0, e);
    rest.remove_prefix(e == std::string_view::npos ? rest.size() : e);
  }
  StatFields s;
  s.state = fields[0].empty() ? '?' : fields[0][0];
  const auto number = [](std::string_view v, auto& out) {
    return std::from_chars(v.data(), v.data() + v.size(), out).ec == std::errc();
  };
  std::uint64_t utime = 0, stime = 0;
  if (!number(fields[1], s.parent) || !number(fields[11], utime) || !number(fields[12], stime)) return std::nullopt;
  s.cpu_ticks = utime + stime;
  return s;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string_view to_string(HostRole r) {
  switch (r) {
    case HostRole::training:
      return "training";
    case HostRole::worker:
      return "worker";
    case HostRole::other:
      return "other";
  }
  return "other";
}

struct HostCpuReader::State {
  double ticks_per_second = static_cast<double>(sysconf(_SC_CLK_TCK));
  double last_time = 0;
  // Cumulative ticks at the previous reading: of each process (all its threads, also those that
  // ended) and of each thread (by id).
  std::unordered_map<std::uint32_t, std::uint64_t> process_ticks, thread_ticks;
};

HostCpuReader::HostCpuReader() : state_(std::make_unique<State>()) {}
HostCpuReader::~HostCpuReader() = default;

HostSample HostCpuReader::read(double time, std::span<const std::uint32_t> tree,
                               const std::vector<std::pair<std::uint32_t, int>>& gpu_of) {
  State& st = *state_;
  const double now = steady_seconds();
  const double elapsed = st.last_time > 0 ? now - st.last_time : 0;
  st.last_time = now;
  // Shares of a core since the previous reading; 0 for what has no previous reading. To 1/1000 of a
  // core (finer than /proc's 10 ms ticks over a second), as the recording keeps them: a replay then
  // sees the very figures the live verdict saw.
  const auto share = [&](std::uint64_t ticks, std::uint64_t before) {
    if (!(elapsed > 0) || ticks < before) return 0.0;
    return std::round(static_cast<double>(ticks - before) / st.ticks_per_second / elapsed * 1000) / 1000;
  };
  std::unordered_map<std::uint32_t, std::uint64_t> process_ticks, thread_ticks;
  HostSample sample;
  sample.time = time;
  std::array<char, 64> path{};
  for (const std::uint32_t pid : tree) {
    std::snprintf(path.data(), path.size(), "/proc/%u/stat", pid);
    const auto stat = read_stat(path.data());
    if (!stat) continue;  // ended since the tree was read
    HostProcess p;
    p.pid = pid;
    p.parent = stat->parent;
    p.main_thread_state = stat->state;
    process_ticks[pid] = stat->cpu_ticks;
    if (const auto it = st.process_ticks.find(pid); it != st.process_ticks.end())
      p.cpu_cores = share(stat->cpu_ticks, it->second);
    for (const auto& [gpu_pid, gpu] : gpu_of)
      if (gpu_pid == pid && std::find(p.gpus.begin(), p.gpus.end(), gpu) == p.gpus.end()) p.gpus.push_back(gpu);
    std::snprintf(path.data(), path.size(), "/proc/%u/task", pid);
    if (DIR* dir = opendir(path.data())) {
      while (const dirent* entry = readdir(dir)) {
        std::uint32_t tid = 0;
        const std::string_view name = entry->d_name;
        if (std::from_chars(name.data(), name.data() + name.size(), tid).ptr != name.data() + name.size()) continue;
        std::snprintf(path.data(), path.size(), "/proc/%u/task/%u/stat", pid, tid);
        const auto thread = read_stat(path.data());
        if (!thread) continue;
        thread_ticks[tid] = thread->cpu_ticks;
        const auto it = st.thread_ticks.find(tid);
        const double cores = it == st.thread_ticks.end() ? 0.0 : share(thread->cpu_ticks, it->second);
        if (tid == pid)
          p.main_thread_cores = cores;
        else
          p.busiest_other_cores = std::max(p.busiest_other_cores, cores);
      }
      closedir(dir);
    }
    sample.processes.push_back(std::move(p));
  }
  st.process_ticks = std::move(process_ticks);
  st.thread_ticks = std::move(thread_ticks);

  // Roles: the processes on a GPU train; without any (a container whose NVML reports host process
  // ids, or no process list), the job's root does. Their descendants are workers.
  const bool any_on_gpu = std::any_of(sample.processes.begin(), sample.processes.end(),
                                      [](const HostProcess& p) { return !p.gpus.empty(); });
  for (HostProcess& p : sample.processes)
    if (any_on_gpu ? !p.gpus.empty() : (!tree.empty() && p.pid == tree.front())) p.role = HostRole::training;
  // The tree lists parents before children, so one pass finds every descendant.
  for (HostProcess& p : sample.processes) {
    if (p.role == HostRole::training) continue;
    const auto parent = std::find_if(sample.processes.begin(), sample.processes.end(),
                                     [&](const HostProcess& q) { return q.pid == p.parent; });
    if (parent != sample.processes.end() && parent->role != HostRole::other) p.role = HostRole::worker;
  }
  return sample;
}

}  // namespace trainfit::telemetry
