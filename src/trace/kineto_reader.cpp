// Reading a Kineto trace: the splitter (json_stream.hpp) cuts the stream into events, which are
// gathered into batches ("[e1,e2,...]" in one reused padded buffer) and parsed with simdjson, one
// document a batch. simdjson's DOM parser picks its SIMD kernels at run time (AVX-512, AVX2, SSE4.2);
// its on-demand API is compiled for the build's baseline, which on x86-64 is the scalar fallback.
// The DOM of one 256 KiB batch is small and reused. A batch with a malformed event is parsed again event by
// event, so only the bad event is skipped (and counted).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include <fmt/format.h>
#include <simdjson.h>

#include "trace/json_stream.hpp"
#include "trace/trace_data.hpp"
#include "trainfit/error.hpp"

namespace trainfit::trace {

std::string_view to_string(KernelCategory c) {
  switch (c) {
    case KernelCategory::matmul:
      return "matmul";
    case KernelCategory::attention:
      return "attention";
    case KernelCategory::elementwise:
      return "elementwise";
    case KernelCategory::optimizer:
      return "optimizer";
    case KernelCategory::communication:
      return "communication";
    case KernelCategory::copy_h2d:
      return "copy_h2d";
    case KernelCategory::copy_d2h:
      return "copy_d2h";
    case KernelCategory::copy_d2d:
      return "copy_d2d";
  }
  return "elementwise";
}

namespace {

bool contains_folded(std::string_view text, std::string_view lower_needle) {
  if (lower_needle.size() > text.size()) return false;
  for (std::size_t i = 0; i + lower_needle.size() <= text.size(); ++i) {
    std::size_t j = 0;
    while (j < lower_needle.size() &&
           static_cast<char>(std::tolower(static_cast<unsigned char>(text[i + j]))) == lower_needle[j])
      ++j;
    if (j == lower_needle.size()) return true;
  }
  return false;
}

bool contains_any(std::string_view text, std::initializer_list<std::string_view> needles) {
  return std::any_of(needles.begin(), needles.end(), [&](std::string_view n) { return contains_folded(text, n); });
}

}  // namespace

KernelCategory classify_activity(std::string_view name, std::string_view cat) {
  if (contains_folded(cat, "memcpy") || name.starts_with("Memcpy")) {
    if (contains_folded(name, "htod")) return KernelCategory::copy_h2d;
    if (contains_folded(name, "dtoh")) return KernelCategory::copy_d2h;
    return KernelCategory::copy_d2d;
  }
  if (contains_folded(cat, "memset") || name.starts_with("Memset")) return KernelCategory::copy_d2d;
  // Order matters: NCCL's kernels carry "reduce" and flash attention's carry "gemm"-like names.
  if (contains_any(name, {"nccl"})) return KernelCategory::communication;
  if (contains_any(name, {"flash", "fmha", "attention", "attn", "sdpa"})) return KernelCategory::attention;
  if (contains_any(name, {"multi_tensor_apply", "adam", "optimizer", "sgd_", "lamb"})) return KernelCategory::optimizer;
  if (contains_any(name, {"gemm", "xmma", "cutlass", "cublas", "nvjet", "matmul", "gemv", "wgmma", "splitk"}))
    return KernelCategory::matmul;
  return KernelCategory::elementwise;
}

namespace detail {

std::int64_t microseconds_to_ns(double us) { return static_cast<std::int64_t>(std::llround(us * 1000.0)); }

namespace {

namespace dom = simdjson::dom;

constexpr std::size_t kBatchBytes = 256 << 10;

// One event's fields, as views into the parser's buffers (valid until the next parse).
struct EventFields {
  std::string_view ph, cat, name;
  std::int64_t ts = 0, dur = -1;
  bool has_ts = false;
  std::int64_t pid = -1;
  std::int64_t device = -1;
};

bool is_gpu_category(std::string_view cat) {
  return cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset" || cat == "Kernel" || cat == "Memcpy" ||
         cat == "Memset";
}

bool is_launch(std::string_view name) {
  return name.starts_with("cudaLaunchKernel") || name.starts_with("cuLaunchKernel") ||
         name == "cudaLaunchCooperativeKernel" || name == "cudaGraphLaunch";
}

// Host calls that return only when the GPU (or one stream of it) has finished: an explicit
// synchronise, a blocking copy, or reading a GPU scalar on the host (`.item()`).
bool is_synchronisation(std::string_view name) {
  return name.find("Synchronize") != std::string_view::npos || name == "cudaMemcpy" || name == "aten::item" ||
         name == "aten::_local_scalar_dense";
}

// PyTorch's profiler names the data loader's fetch "enumerate(DataLoader)#_...Iter.__next__".
bool is_data_loader_wait(std::string_view name) {
  return name.starts_with("enumerate(DataLoader)") ||
         (name.find("DataLoader") != std::string_view::npos && name.find("__next__") != std::string_view::npos);
}

class EventReader {
 public:
  explicit EventReader(TraceData& data) : data_(data) { batch_.reserve(kBatchBytes + 64 * 1024); }

  void add(std::string_view event) {
    ++data_.counts.events;
    batch_ += batch_.empty() ? '[' : ',';
    offsets_.push_back(batch_.size());
    batch_.append(event);
    if (batch_.size() >= kBatchBytes) flush();
  }

  void flush() {
    if (batch_.empty()) return;
    batch_ += ']';
    if (!parse_batch()) parse_one_by_one();
    batch_.clear();
    offsets_.clear();
  }

  void member(std::string_view key, std::string_view value) {
    if (key != "distributedInfo" && key != "deviceProperties") return;
    std::string text(value);
    text.reserve(text.size() + simdjson::SIMDJSON_PADDING);
    dom::element doc;
    if (parser_.parse(text.data(), text.size(), false).get(doc)) return;
    if (key == "distributedInfo") {
      std::int64_t rank = -1;
      if (!doc["rank"].get_int64().get(rank) && rank >= 0 && rank < 1 << 20) data_.rank = static_cast<int>(rank);
      return;
    }
    dom::array devices;
    if (doc.get_array().get(devices)) return;
    for (dom::element device : devices) {
      std::int64_t id = -1;
      std::string_view name;
      if (device["id"].get_int64().get(id) || device["name"].get_string().get(name)) continue;
      if (id >= 0 && id < 1 << 16) data_.device_names[static_cast<int>(id)] = std::string(name);
    }
  }

 private:
  TraceData& data_;
  dom::parser parser_;
  std::string batch_;
  std::vector<std::size_t> offsets_;  // where each event of the batch starts in batch_
  std::vector<EventFields> parsed_;
  std::string single_;

  // A JSON number of microseconds as integer nanoseconds: exact for integers; a decimal goes
  // through a double (to within a quarter of a microsecond at epoch timestamps).
  static simdjson::error_code time_of(dom::element v, std::int64_t& ns) {
    std::int64_t whole = 0;
    if (v.is_int64() && !v.get_int64().get(whole) && whole < INT64_MAX / 1000 && whole > INT64_MIN / 1000) {
      ns = whole * 1000;
      return simdjson::SUCCESS;
    }
    double us = 0;
    if (auto e = v.get_double().get(us)) return e;
    if (!(std::fabs(us) < 9e15)) return simdjson::NUMBER_OUT_OF_RANGE;
    ns = microseconds_to_ns(us);
    return simdjson::SUCCESS;
  }

  static simdjson::error_code read_fields(dom::object object, EventFields& f) {
    for (const dom::key_value_pair field : object) {
      const std::string_view key = field.key;
      const dom::element v = field.value;
      if (key == "ph") {
        if (auto e = v.get_string().get(f.ph)) return e;
      } else if (key == "cat") {
        if (auto e = v.get_string().get(f.cat)) return e;
      } else if (key == "name") {
        if (auto e = v.get_string().get(f.name)) return e;
      } else if (key == "ts") {
        if (auto e = time_of(v, f.ts)) return e;
        f.has_ts = true;
      } else if (key == "dur") {
        if (auto e = time_of(v, f.dur)) return e;
      } else if (key == "pid") {
        std::int64_t pid = 0;
        if (!v.get_int64().get(pid)) f.pid = pid;  // a string pid names a host process: not a device
      } else if (key == "args") {
        dom::object args;
        if (v.get_object().get(args)) continue;  // args of another shape carry nothing trace reads
        std::int64_t device = -1;
        if (!args["device"].get_int64().get(device)) f.device = device;
      }
    }
    return simdjson::SUCCESS;
  }

  // Every event of the batch, or false (and nothing recorded) when any of them is malformed.
  bool parse_batch() {
    parsed_.clear();
    batch_.reserve(batch_.size() + simdjson::SIMDJSON_PADDING);
    dom::element doc;
    if (parser_.parse(batch_.data(), batch_.size(), false).get(doc)) return false;
    dom::array events;
    if (doc.get_array().get(events)) return false;
    for (dom::element event : events) {
      dom::object object;
      if (event.get_object().get(object)) return false;
      EventFields f;
      if (read_fields(object, f)) return false;
      parsed_.push_back(f);
    }
    for (const EventFields& f : parsed_)
      if (!record(f)) ++data_.counts.malformed;
    return true;
  }

  void parse_one_by_one() {
    for (std::size_t k = 0; k < offsets_.size(); ++k) {
      const std::size_t begin = offsets_[k];
      const std::size_t end = k + 1 < offsets_.size() ? offsets_[k + 1] - 1 : batch_.size() - 1;
      single_.assign(batch_, begin, end - begin);
      single_.reserve(single_.size() + simdjson::SIMDJSON_PADDING);
      dom::element doc;
      dom::object object;
      EventFields f;
      if (parser_.parse(single_.data(), single_.size(), false).get(doc) || doc.get_object().get(object) ||
          read_fields(object, f) || !record(f))
        ++data_.counts.malformed;
    }
  }

  // Keeps what the analysis needs of one event; false when its fields contradict each other.
  bool record(const EventFields& f) {
    if (f.ph != "X") {
      if (f.ph == "M" || f.ph == "i" || f.ph == "I" || f.ph == "s" || f.ph == "f" || f.ph == "t" || f.ph == "R") {
        ++data_.other_phases;
      } else {
        ++data_.counts.unsupported;
        if (data_.unsupported_example.empty()) data_.unsupported_example = f.ph.empty() ? "(none)" : std::string(f.ph.substr(0, 16));
      }
      return true;
    }
    if (!f.has_ts || f.dur < 0 || f.ts > INT64_MAX - f.dur) return false;
    const Interval span{f.ts, f.ts + f.dur};
    data_.first_ns = std::min(data_.first_ns, span.begin);
    data_.last_ns = std::max(data_.last_ns, span.end);
    if (is_gpu_category(f.cat)) {
      ++data_.counts.gpu_activities;
      const KernelCategory category = classify_activity(f.name, f.cat);
      const std::int64_t device = f.device >= 0 ? f.device : f.pid;
      data_.gpu.push_back({span.begin, span.end, static_cast<std::int32_t>(std::clamp<std::int64_t>(device, -1, 1 << 16)),
                           category, f.cat == "kernel" || f.cat == "Kernel"});
      auto it = data_.kernels.find(std::string(f.name));  // the common case: a name seen before
      if (it == data_.kernels.end()) {
        const std::string key = data_.kernels.size() < kMaxKernelNames ? std::string(f.name) : "(other kernels)";
        it = data_.kernels.try_emplace(key, KernelTotal{category, 0, 0}).first;
      }
      ++it->second.count;
      it->second.total_ns += f.dur;
      return true;
    }
    if (f.cat == "gpu_user_annotation") return true;  // the GPU's copy of host annotations
    if (f.name.starts_with("ProfilerStep#")) {
      data_.steps.push_back({std::string(f.name), span});
    } else if (is_launch(f.name)) {
      data_.launches.push_back(span.begin);
    } else if (is_synchronisation(f.name)) {
      data_.synchronise.push_back(span);
    } else if (is_data_loader_wait(f.name)) {
      data_.data_loader.push_back(span);
    }
    return true;
  }
};

void read_stream(TraceData& data, const std::string& source, const std::function<std::string_view()>& next_chunk,
                 const std::function<bool()>& gzip_truncated) {
  EventReader reader(data);
  TraceSplitter splitter([&](std::string_view event) { reader.add(event); },
                         [&](std::string_view key, std::string_view value) { reader.member(key, value); });
  try {
    for (std::string_view chunk = next_chunk(); !chunk.empty(); chunk = next_chunk()) splitter.feed(chunk);
  } catch (const InputError& e) {
    // What came before the fault is kept when there was any: a partial answer that says so.
    if (data.counts.events == 0) throw InputError(fmt::format("trace '{}': {}", source, e.what()));
    data.truncated = true;
    data.warnings.push_back(fmt::format("{}; the analysis covers the events before it", e.what()));
  }
  reader.flush();
  data.counts.bytes = splitter.bytes();
  if (!splitter.saw_events())
    throw InputError(fmt::format("trace '{}' has no traceEvents array (not a PyTorch profiler trace?)", source));
  if (!splitter.complete() && !data.truncated) {
    data.truncated = true;
    data.warnings.push_back(fmt::format("the file ends inside its traceEvents{}: the analysis covers the {} events read",
                                        gzip_truncated() ? " (the gzip stream is cut short)" : "", data.counts.events));
  }
  if (splitter.skipped_members() > 0)
    data.warnings.push_back(fmt::format("{} top-level members over 64 MiB skipped", splitter.skipped_members()));
}

}  // namespace

TraceData read_trace_file(const std::string& path) {
  TraceData data;
  ChunkReader reader(path);
  read_stream(data, path, [&] { return reader.next(); }, [&] { return reader.truncated(); });
  return data;
}

TraceData read_trace_text(std::string_view json, const std::string& source) {
  TraceData data;
  // In chunks as a file would come, so the splitter's carrying of pieces across chunks is the
  // same code in tests as on real files.
  constexpr std::size_t kChunk = 1 << 16;
  std::size_t at = 0;
  read_stream(
      data, source,
      [&] {
        const std::string_view chunk = json.substr(std::min(at, json.size()), kChunk);
        at += chunk.size();
        return chunk;
      },
      [] { return false; });
  return data;
}

}  // namespace detail
}  // namespace trainfit::trace
