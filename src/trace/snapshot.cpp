// A memory snapshot: the pickle torch.cuda.memory._dump_snapshot writes (plain or gzipped, read
// by pickle_reader.cpp without Python), or its JSON rendering (trainfit.snapshot/1, written by
// python/trainfit_runner/snapshot_json.py): the allocator's state when it was dumped (segments and
// their blocks) and its history of events. Both become one Snapshot; the pickle's frames are
// turned into stacks by the rules snapshot_json.py applies, so that either file gives the same
// answer. The peak, and the moment of an out-of-memory error, are found by walking the history
// backwards from the dumped state, the way PyTorch's own memory viewer reconstructs it: an
// allocation undone lowers the total, a free undone raises it.
#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <unordered_map>

#include "common/text.hpp"
#include "common/threshold_search.hpp"
#include "memory/caching_allocator.hpp"
#include "trace/json_stream.hpp"
#include "trace/pickle_reader.hpp"
#include "trainfit/error.hpp"
#include "trainfit/trace.hpp"

namespace trainfit::trace {
namespace {

namespace dom = simdjson::dom;
using trainfit::detail::CachingAllocatorModel;

enum class Action { alloc, free_requested, free_completed, segment_alloc, segment_free, oom, other };

Action parse_action(std::string_view s) {
  if (s == "alloc") return Action::alloc;
  if (s == "free_requested") return Action::free_requested;
  if (s == "free_completed") return Action::free_completed;
  if (s == "segment_alloc" || s == "segment_map") return Action::segment_alloc;
  if (s == "segment_free" || s == "segment_unmap") return Action::segment_free;
  if (s == "oom") return Action::oom;
  return Action::other;  // snapshot: no change to the totals
}

struct HistoryEvent {
  Action action = Action::other;
  std::uint64_t address = 0;  // an oom has none: the pickle's device_free is kept below
  std::int64_t size = 0;      // an oom's: the request that failed, rounded as the allocator rounds it
  std::int64_t stack = -1;
  double time_us = 0;
  std::int64_t device_free = -1;  // an oom's: what cudaMemGetInfo called free on the card
};

// The caching allocator's two pools (c10/cuda/CUDACachingAllocator.cpp): requests up to 1 MiB are
// served from 2 MiB segments of their own, larger ones from segments of 20 MiB or more.
constexpr std::int64_t kSmallRequestBytes = std::int64_t{1} << 20;
constexpr std::int64_t kSmallSegmentBytes = std::int64_t{2} << 20;

struct SegmentBlocks {
  std::uint64_t address = 0;
  std::int64_t size = 0;
  bool small_pool = false;
  std::map<std::uint64_t, std::int64_t> allocated;  // address -> size of the blocks in use
};

struct Block {
  std::int64_t size = 0;
  std::int64_t stack = -1;
};

struct Snapshot {
  std::vector<std::string> stacks;
  std::unordered_map<std::uint64_t, Block> live;  // allocated blocks at the dump
  std::vector<std::int64_t> free_blocks;          // inactive blocks at the dump
  std::vector<SegmentBlocks> segments;            // the dump's segments, for the free blocks at an OOM
  std::int64_t reserved = 0;
  std::vector<HistoryEvent> history;
  std::optional<std::int64_t> allocator_peak;
};

// A snapshot file of more than this, uncompressed, is refused: the largest a long history writes
// (PyTorch's docs warn of "the GB range") fits, a gzip bomb does not get to fill memory.
constexpr std::size_t kMaxSnapshotBytes = std::size_t{8} << 30;

[[noreturn]] void bad(const std::string& source, std::string_view what) {
  throw InputError(fmt::format("snapshot '{}': {}", source, what));
}

template <class T>
T must(simdjson::simdjson_result<T> r, const std::string& source, std::string_view what) {
  T value{};
  if (std::move(r).get(value)) bad(source, what);
  return value;
}

std::int64_t size_of(dom::element v, const std::string& source, std::string_view what) {
  const std::int64_t n = must(v.get_int64(), source, what);
  if (n < 0 || n > (std::int64_t{1} << 50)) bad(source, fmt::format("{} out of range ({})", what, n));
  return n;
}

std::uint64_t address_of(dom::element v, const std::string& source) {
  return must(v.get_uint64(), source, "an address must be a non-negative integer");
}

// The snapshot's JSON, whole (snapshots are megabytes, not the gigabytes of traces).
Snapshot parse(dom::element root_element, const std::string& source) {
  Snapshot s;
  const dom::object root = must(root_element.get_object(), source, "not a JSON object");
  std::string_view schema;
  if (root["schema"].get_string().get(schema) || schema != "trainfit.snapshot/1")
    bad(source, "no \"schema\": \"trainfit.snapshot/1\" (write it with python -m trainfit_runner.snapshot_json)");
  dom::object allocator;
  if (!root["allocator"].get_object().get(allocator)) {
    dom::element peak;
    if (!allocator["max_memory_allocated"].get(peak))
      s.allocator_peak = size_of(peak, source, "allocator.max_memory_allocated");
  }
  dom::array stacks, segments, history;
  if (!root["stacks"].get_array().get(stacks))
    for (dom::element x : stacks)  // printable, as the pickle's (a frame may carry a control character)
      s.stacks.emplace_back(trainfit::detail::printable(must(x.get_string(), source, "a stack must be a string")));
  const auto stack_of = [&](dom::element x) {
    const std::int64_t k = must(x.get_int64(), source, "a stack must be an integer index");
    if (k >= static_cast<std::int64_t>(s.stacks.size())) bad(source, "a stack index past the stacks");
    return k;
  };
  if (!root["segments"].get_array().get(segments)) {
    for (dom::element seg : segments) {
      SegmentBlocks& in_segment = s.segments.emplace_back();
      dom::element total;
      if (!seg["total_size"].get(total)) in_segment.size = size_of(total, source, "segment total_size");
      s.reserved += in_segment.size;
      in_segment.small_pool = in_segment.size == kSmallSegmentBytes;
      if (!seg["address"].get(total)) in_segment.address = address_of(total, source);
      dom::array blocks;
      if (seg["blocks"].get_array().get(blocks)) continue;
      for (dom::element block : blocks) {
        Block b;
        b.size = size_of(must(block["size"], source, "a block without size"), source, "block size");
        dom::element x;
        const std::uint64_t address = block["address"].get(x) ? 0 : address_of(x, source);
        if (!block["stack"].get(x)) b.stack = stack_of(x);
        std::string_view state;
        if (!block["state"].get(x)) state = must(x.get_string(), source, "a block state must be a string");
        if (state.starts_with("active")) {
          s.live[address] = b;
          in_segment.allocated[address] = b.size;
        } else {
          s.free_blocks.push_back(b.size);
        }
      }
    }
  }
  if (!root["history"].get_array().get(history)) {
    for (dom::element entry : history) {
      const dom::array e = must(entry.get_array(), source, "a history entry must be an array");
      if (e.size() < 3) bad(source, "a history entry needs at least action, address and size");
      HistoryEvent h;
      h.action = parse_action(must(e.at(0).get_string(), source, "a history action must be a string"));
      h.address = address_of(e.at(1).value_unsafe(), source);
      h.size = size_of(e.at(2).value_unsafe(), source, "history size");
      if (e.size() > 3) h.stack = stack_of(e.at(3).value_unsafe());
      if (e.size() > 4) h.time_us = must(e.at(4).get_double(), source, "a history time must be a number");
      s.history.push_back(h);
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// The pickle: torch.cuda.memory._snapshot()'s dict, as PyTorch documents it in torch/cuda/memory.py
// (segments with their blocks and frames, device_traces: one list of events per device). Its
// frames become stack texts by the rules of python/trainfit_runner/snapshot_json.py (the Python
// frames, the C++ frames that name what allocated, and for the backward's threads, which have no
// Python frames, the C++ frames that name an operator), so that the pickle and its JSON rendering
// give the same stacks, the same categories and the same report.

using detail::PickleTree;

constexpr std::array<std::string_view, 4> kKeepNative{"AccumulateGrad", "cublas", "Workspace", "workspace"};
constexpr std::array<std::string_view, 6> kOperatorNative{"Backward",     "autograd::generated", "at::native::",
                                                          "at::_ops::", "AccumulateGrad",      "autograd::Engine"};
constexpr std::size_t kMaxFrames = 12, kMaxNativeFrames = 4;

bool contains_any(std::string_view s, const auto& needles) {
  return std::any_of(needles.begin(), needles.end(), [&](std::string_view n) { return s.find(n) != s.npos; });
}

// A C++ frame's function without its parameter list (and `const`): what it is, in a line.
std::string_view short_native_name(std::string_view name) {
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.front()))) name.remove_prefix(1);
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.remove_suffix(1);
  if (name.ends_with(" const")) name.remove_suffix(6);
  if (!name.ends_with(")")) return name;
  int depth = 0;
  for (std::size_t k = name.size(); k-- > 0;) {
    if (name[k] == ')') ++depth;
    if (name[k] == '(') --depth;
    if (depth == 0) return k > 0 ? name.substr(0, k) : name;
  }
  return name;
}

class PickleSnapshot {
 public:
  PickleSnapshot(const PickleTree& t, const std::string& source) : t_(t), source_(source) {}

  Snapshot convert() {
    const PickleTree::Id root = t_.root();
    if (t_.kind(root) != PickleTree::Kind::dict) bad(source_, "the pickle holds no dict (not a memory snapshot)");
    const PickleTree::Id segments = list_or_none(t_.get(root, "segments"), "segments");
    const PickleTree::Id traces = list_or_none(t_.get(root, "device_traces"), "device_traces");
    if (segments == PickleTree::kNoNode && traces == PickleTree::kNoNode)
      bad(source_, "a pickle without segments or device_traces (not torch.cuda.memory._snapshot())");
    // The device with the most reserved memory: a single-GPU job's only one.
    std::map<std::int64_t, std::int64_t> reserved_by_device;
    if (segments != PickleTree::kNoNode)
      for (const PickleTree::Id seg : t_.items(segments))
        reserved_by_device[integer_or(seg, "device", 0)] += size_or(seg, "total_size");
    std::int64_t device = 0;
    for (const auto& [d, bytes] : reserved_by_device)
      if (bytes > reserved_by_device[device]) device = d;

    Snapshot s;
    if (segments != PickleTree::kNoNode) {
      for (const PickleTree::Id seg : t_.items(segments)) {
        if (integer_or(seg, "device", 0) != device) continue;
        SegmentBlocks& in_segment = s.segments.emplace_back();
        in_segment.address = address_or(seg, "address");
        in_segment.size = size_or(seg, "total_size");
        const PickleTree::Id type = t_.get(seg, "segment_type");
        in_segment.small_pool = type != PickleTree::kNoNode && t_.kind(type) == PickleTree::Kind::string
                                    ? t_.string(type) == "small"
                                    : in_segment.size == kSmallSegmentBytes;
        s.reserved += in_segment.size;
        std::uint64_t address = in_segment.address;
        const PickleTree::Id blocks = list_or_none(t_.get(seg, "blocks"), "blocks");
        if (blocks == PickleTree::kNoNode) continue;
        for (const PickleTree::Id block : t_.items(blocks)) {
          Block b;
          b.size = size_or(block, "size");
          if (t_.get(block, "address") != PickleTree::kNoNode) address = address_or(block, "address");
          b.stack = stack_of(t_.get(block, "frames"), s);
          const PickleTree::Id state = t_.get(block, "state");
          if (state != PickleTree::kNoNode && t_.kind(state) == PickleTree::Kind::string &&
              t_.string(state).starts_with("active")) {
            s.live[address] = b;
            in_segment.allocated[address] = b.size;
          } else {
            s.free_blocks.push_back(b.size);
          }
          address += static_cast<std::uint64_t>(b.size);
        }
      }
    }
    if (traces != PickleTree::kNoNode && device >= 0 &&
        static_cast<std::size_t>(device) < t_.items(traces).size()) {
      const PickleTree::Id events = list_or_none(t_.items(traces)[static_cast<std::size_t>(device)], "a device trace");
      if (events != PickleTree::kNoNode) {
        s.history.reserve(t_.items(events).size());
        for (const PickleTree::Id e : t_.items(events)) {
          if (t_.kind(e) != PickleTree::Kind::dict) bad(source_, "a trace event that is not a dict");
          HistoryEvent h;
          const PickleTree::Id action = t_.get(e, "action");
          if (action == PickleTree::kNoNode || t_.kind(action) != PickleTree::Kind::string)
            bad(source_, "a trace event without an action");
          h.action = parse_action(t_.string(action));
          h.address = address_or(e, "addr");
          h.size = size_or(e, "size");
          h.stack = stack_of(t_.get(e, "frames"), s);
          h.time_us = static_cast<double>(integer_or(e, "time_us", 0));
          if (h.action == Action::oom) h.device_free = size_or(e, "device_free");
          s.history.push_back(h);
        }
      }
    }
    return s;
  }

 private:
  PickleTree::Id list_or_none(PickleTree::Id n, std::string_view what) const {
    if (n == PickleTree::kNoNode || t_.kind(n) == PickleTree::Kind::none) return PickleTree::kNoNode;
    if (t_.kind(n) != PickleTree::Kind::list && t_.kind(n) != PickleTree::Kind::tuple)
      bad(source_, fmt::format("{} must be a list", what));
    return n;
  }
  std::int64_t integer_or(PickleTree::Id dict, std::string_view key, std::int64_t otherwise) const {
    const PickleTree::Id n = t_.get(dict, key);
    if (n == PickleTree::kNoNode || t_.kind(n) == PickleTree::Kind::none) return otherwise;
    if (t_.kind(n) == PickleTree::Kind::integer || t_.kind(n) == PickleTree::Kind::boolean) return t_.integer(n);
    if (t_.kind(n) == PickleTree::Kind::real && std::isfinite(t_.real(n))) return static_cast<std::int64_t>(
        std::clamp(t_.real(n), -9.2e18, 9.2e18));
    bad(source_, fmt::format("'{}' must be an integer", key));
  }
  std::int64_t size_or(PickleTree::Id dict, std::string_view key) const {
    const std::int64_t n = integer_or(dict, key, 0);
    if (n < 0 || n > (std::int64_t{1} << 50)) bad(source_, fmt::format("{} out of range ({})", key, n));
    return n;
  }
  std::uint64_t address_or(PickleTree::Id dict, std::string_view key) const {
    const std::int64_t n = integer_or(dict, key, 0);
    if (n < 0) bad(source_, fmt::format("'{}' must be a non-negative integer", key));
    return static_cast<std::uint64_t>(n);
  }
  std::string_view string_or(PickleTree::Id dict, std::string_view key) const {
    const PickleTree::Id n = t_.get(dict, key);
    return n != PickleTree::kNoNode && t_.kind(n) == PickleTree::Kind::string ? t_.string(n) : std::string_view("?");
  }
  std::string frame_text(PickleTree::Id f) const {
    std::string path(string_or(f, "filename"));
    std::replace(path.begin(), path.end(), '\\', '/');
    // The last two parts of the path: the file and the folder it is in.
    std::string_view shown = path;
    if (const std::size_t last = shown.rfind('/'); last != shown.npos && last > 0) {
      const std::size_t before = shown.rfind('/', last - 1);
      if (before != shown.npos) shown.remove_prefix(before + 1);
    }
    std::string_view name = string_or(f, "name");
    if (!path.ends_with(".py")) name = short_native_name(name);
    const PickleTree::Id line = t_.get(f, "line");
    const std::string line_text = line != PickleTree::kNoNode && t_.kind(line) == PickleTree::Kind::integer
                                      ? std::to_string(t_.integer(line))
                                      : std::string("?");
    return fmt::format("{} ({}:{})", name, shown, line_text);
  }
  // The stack index of a frames list; the same list node (the pickle's memo shares them) is
  // turned into text once.
  std::int64_t stack_of(PickleTree::Id frames, Snapshot& s) {
    if (frames == PickleTree::kNoNode || t_.kind(frames) != PickleTree::Kind::list) return -1;
    if (const auto it = by_node_.find(frames); it != by_node_.end()) return it->second;
    std::vector<PickleTree::Id> kept;
    bool python = false;
    for (const PickleTree::Id f : t_.items(frames)) {
      if (t_.kind(f) != PickleTree::Kind::dict) continue;
      const bool py = string_or(f, "filename").ends_with(".py");
      if (py || contains_any(string_or(f, "name"), kKeepNative)) kept.push_back(f);
      python = python || py;
    }
    if (!python) {
      std::size_t added = 0;
      for (const PickleTree::Id f : t_.items(frames)) {
        if (added == kMaxNativeFrames) break;
        if (t_.kind(f) != PickleTree::Kind::dict || !contains_any(string_or(f, "name"), kOperatorNative)) continue;
        if (std::find(kept.begin(), kept.end(), f) != kept.end()) continue;
        kept.push_back(f);
        ++added;
      }
    }
    std::int64_t index = -1;
    if (!kept.empty()) {
      std::string text;
      for (std::size_t k = 0; k < kept.size() && k < kMaxFrames; ++k) {
        if (k > 0) text += " < ";
        text += frame_text(kept[k]);
      }
      // A pickle's strings are whatever bytes it holds: printable() makes them UTF-8 that JSON can
      // carry and a terminal cannot be steered by (fuzz_snapshot_pickle found a frame name that was
      // not UTF-8 taking --format json down).
      text = trainfit::detail::printable(text);
      const auto [it, added] = by_text_.try_emplace(text, static_cast<std::int64_t>(s.stacks.size()));
      if (added) s.stacks.push_back(std::move(text));
      index = it->second;
    }
    by_node_.emplace(frames, index);
    return index;
  }

  const PickleTree& t_;
  const std::string& source_;
  std::unordered_map<PickleTree::Id, std::int64_t> by_node_;
  std::unordered_map<std::string, std::int64_t> by_text_;
};

bool has(const std::string& lower, std::initializer_list<std::string_view> needles) {
  return std::any_of(needles.begin(), needles.end(),
                     [&](std::string_view n) { return lower.find(n) != std::string::npos; });
}

}  // namespace

// The planner's category of an allocation, from the frames that made it (docs/trace.md, "Memory
// snapshots"): the first rule that matches.
std::string snapshot_category(std::string_view frames) {
  if (frames.empty()) return "untracked";
  std::string lower(frames);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (has(lower, {"optim", "zero_grad"})) return "optimizer_states";
  if (has(lower, {"cublas", "workspace"})) return "cublas_workspace";
  if (has(lower, {"accumulategrad"})) return "gradients";
  // The loss's backward (autograd's threads have no Python frames; the operator's C++ frames say
  // what it is): the gradient of the logits, which the planner counts with the logits.
  if (has(lower, {"cross_entropy", "lm_head", "logits", "loss", "softmaxbackward", "softmax_backward"}))
    return "logits_and_loss";
  // Any other allocation of the backward pass: activation gradients on their way back, and the
  // weight gradients that AccumulateGrad adopts without a copy (the frames cannot tell them apart).
  if (has(lower, {"backward", "autograd"})) return "backward_buffers";
  if (has(lower, {"forward"})) return "activations";
  if (has(lower, {"lora", "get_peft_model"})) return "adapters";
  if (has(lower, {"__init__", "from_config", "from_pretrained", "load_state_dict", "_apply", "reset_parameters",
                  "build_model"}))
    return "weights";
  return "transient";
}

namespace {

// For each free_completed event, the stack of the allocation it frees (found forwards).
std::vector<std::int64_t> stacks_of_frees(const Snapshot& s) {
  std::vector<std::int64_t> out(s.history.size(), -1);
  std::unordered_map<std::uint64_t, std::int64_t> last_alloc;
  for (std::size_t k = 0; k < s.history.size(); ++k) {
    const HistoryEvent& h = s.history[k];
    if (h.action == Action::alloc) last_alloc[h.address] = h.stack;
    if (h.action == Action::free_completed) {
      const auto it = last_alloc.find(h.address);
      if (it != last_alloc.end()) out[k] = it->second;
    }
  }
  return out;
}

// The blocks alive after the first `after` events: the dump's, with what happened since undone.
std::unordered_map<std::uint64_t, Block> live_after(const Snapshot& s, std::size_t after,
                                                    const std::vector<std::int64_t>& free_stacks) {
  std::unordered_map<std::uint64_t, Block> live = s.live;
  for (std::size_t k = s.history.size(); k-- > after;) {
    const HistoryEvent& h = s.history[k];
    if (h.action == Action::alloc) live.erase(h.address);
    if (h.action == Action::free_completed) live[h.address] = {h.size, free_stacks[k]};
  }
  return live;
}

// What was alive, by the planner's categories and by stack, largest first.
void describe_live(const Snapshot& s, const std::unordered_map<std::uint64_t, Block>& live, std::size_t top_stacks,
                   std::vector<MemoryTerm>& breakdown, std::vector<AllocationStack>& stacks) {
  std::map<std::string, std::int64_t> by_category;
  std::unordered_map<std::int64_t, AllocationStack> by_stack;
  for (const auto& [address, b] : live) {
    const std::string frames = b.stack >= 0 ? s.stacks[static_cast<std::size_t>(b.stack)] : std::string();
    const std::string category = snapshot_category(frames);
    by_category[category] += b.size;
    AllocationStack& st = by_stack[b.stack];
    st.frames = frames.empty() ? "(allocated before the history began)" : frames;
    st.category = category;
    st.bytes += b.size;
    ++st.blocks;
  }
  for (const auto& [category, bytes] : by_category) breakdown.push_back({category, bytes});
  std::sort(breakdown.begin(), breakdown.end(),
            [](const MemoryTerm& a, const MemoryTerm& b) { return a.bytes > b.bytes; });
  for (auto& [stack, st] : by_stack) stacks.push_back(std::move(st));
  std::sort(stacks.begin(), stacks.end(), [](const AllocationStack& a, const AllocationStack& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.frames < b.frames;
  });
  if (stacks.size() > top_stacks) stacks.resize(top_stacks);
}

// The frames of the event at index k, or of the nearest one before it that has frames (a segment's
// allocation carries none).
std::string moment_of(const Snapshot& s, std::size_t k) {
  for (std::size_t j = k + 1; j-- > 0;)
    if (s.history[j].stack >= 0) return s.stacks[static_cast<std::size_t>(s.history[j].stack)];
  return "an allocation without frames";
}

// The largest free block of each pool after the first `after` events: the dump's segments with
// what happened since undone (a segment freed since comes back whole and free, one allocated since
// goes), each segment's free space the gaps between its blocks in use, which the allocator merges.
// Returns {small pool, large pool}; `consistent` is cleared when an event names memory outside
// every segment (events lost from the ring buffer).
std::pair<std::int64_t, std::int64_t> largest_free_blocks(const Snapshot& s, std::size_t after, bool& consistent) {
  std::map<std::uint64_t, SegmentBlocks> segments;
  for (const SegmentBlocks& seg : s.segments) segments[seg.address] = seg;
  const auto segment_of = [&](std::uint64_t address) -> SegmentBlocks* {
    auto it = segments.upper_bound(address);
    if (it == segments.begin()) return nullptr;
    --it;
    return address < it->first + static_cast<std::uint64_t>(it->second.size) ? &it->second : nullptr;
  };
  for (std::size_t k = s.history.size(); k-- > after;) {
    const HistoryEvent& h = s.history[k];
    if (h.action == Action::segment_alloc) {
      segments.erase(h.address);
    } else if (h.action == Action::segment_free) {
      segments[h.address] = {h.address, h.size, h.size == kSmallSegmentBytes, {}};
    } else if (h.action == Action::alloc || h.action == Action::free_completed) {
      SegmentBlocks* seg = segment_of(h.address);
      if (seg == nullptr) {
        consistent = false;
        continue;
      }
      if (h.action == Action::alloc)
        seg->allocated.erase(h.address);
      else
        seg->allocated[h.address] = h.size;
    }
  }
  std::pair<std::int64_t, std::int64_t> largest{0, 0};
  for (const auto& [address, seg] : segments) {
    std::uint64_t at = seg.address;
    const std::uint64_t end = seg.address + static_cast<std::uint64_t>(seg.size);
    std::int64_t best = 0;
    for (const auto& [block, size] : seg.allocated) {
      if (block > at) best = std::max(best, static_cast<std::int64_t>(block - at));
      at = std::max(at, block + static_cast<std::uint64_t>(size));
    }
    if (end > at) best = std::max(best, static_cast<std::int64_t>(end - at));
    std::int64_t& pool = seg.small_pool ? largest.first : largest.second;
    pool = std::max(pool, best);
  }
  return largest;
}

// The history's requests up to and including event `through` (an alloc, or the request an oom
// event names) replayed through the caching allocator's rules under `limit`: whether each is
// served. An earlier oom event's request is left out: it was not served then either.
bool replay_serves(const Snapshot& s, std::size_t through, std::int64_t limit) {
  CachingAllocatorModel model(limit);
  std::unordered_map<std::uint64_t, CachingAllocatorModel::Handle> live;
  for (std::size_t k = 0; k <= through && k < s.history.size(); ++k) {
    const HistoryEvent& h = s.history[k];
    if (h.action == Action::alloc || (h.action == Action::oom && k == through)) {
      const std::optional<CachingAllocatorModel::Handle> block = model.allocate(h.size);
      if (!block) return false;
      if (h.action == Action::alloc) live[h.address] = *block;
    } else if (h.action == Action::free_completed) {
      if (const auto it = live.find(h.address); it != live.end()) {
        model.free(it->second);
        live.erase(it);
      }
    }
  }
  return true;
}

// The smallest allocator limit (a multiple of 2 MiB: segments are) under which the replay serves
// the request of event `oom_at`; at least `at_least`, the bytes in use plus the request. None past
// a petabyte (a history no GPU could have written).
std::optional<std::int64_t> limit_needed(const Snapshot& s, std::size_t oom_at, std::int64_t at_least) {
  constexpr std::int64_t kGrain = std::int64_t{2} << 20;
  constexpr std::int64_t kMost = std::int64_t{1} << 50;
  if (at_least < 0 || at_least > kMost) return std::nullopt;
  std::int64_t lo = at_least / kGrain * kGrain;  // may not serve it
  std::int64_t hi = lo + kGrain;
  while (!replay_serves(s, oom_at, hi)) {  // a history needs at most what it ever reserved, plus the request
    if (hi > kMost) return std::nullopt;
    lo = hi;
    hi = lo + std::max(kGrain, (hi - at_least) * 2 / kGrain * kGrain);
  }
  // The last limit that does not serve it, then one grain more.
  return trainfit::detail::last_holding(
             lo, hi, [&](std::int64_t limit) { return !replay_serves(s, oom_at, limit); }, kGrain) +
         kGrain;
}

SnapshotReport analyse(Snapshot s, const std::string& source, std::size_t top_stacks) {
  SnapshotReport r;
  r.source = source;
  r.allocator_peak_allocated_bytes = s.allocator_peak;
  r.history_events = s.history.size();
  std::int64_t allocated = 0;
  for (const auto& [address, b] : s.live) allocated += b.size;
  const std::int64_t end_allocated = allocated;

  // Backwards: the totals after each event, the index of the highest allocated total, and the
  // totals at the last out-of-memory event (the one the run died of; the allocator records it
  // after it has freed its unused cached segments and failed once more, and before anything frees).
  std::int64_t reserved = s.reserved;
  std::int64_t peak = allocated, peak_reserved = reserved;
  std::size_t peak_after = s.history.size();  // the state after this many events; all of them: the dump
  std::optional<std::size_t> oom_at;
  std::int64_t oom_allocated = 0, oom_reserved = 0;
  std::size_t oom_events = 0;
  for (std::size_t k = s.history.size(); k-- > 0;) {
    const HistoryEvent& h = s.history[k];
    if (allocated >= peak) {  // >=: the earliest moment at the peak, the event that reached it
      peak = allocated;
      peak_reserved = reserved;
      peak_after = k + 1;
    }
    if (h.action == Action::oom) {
      ++oom_events;
      if (!oom_at) {
        oom_at = k;
        oom_allocated = allocated;
        oom_reserved = reserved;
      }
    }
    if (h.action == Action::alloc) allocated -= h.size;
    if (h.action == Action::free_completed) allocated += h.size;
    if (h.action == Action::segment_alloc) reserved -= h.size;
    if (h.action == Action::segment_free) reserved += h.size;
  }
  if (allocated > peak) {  // before the first event of the history
    peak = allocated;
    peak_reserved = reserved;
    peak_after = 0;
  }
  if (allocated < 0 || reserved < 0)
    r.warnings.push_back("the history does not add up to the dumped state (events lost from the ring buffer?)");
  const bool history_complete = reserved == 0 && !s.history.empty();  // every segment made in it
  r.peak_allocated_bytes = peak;
  r.reserved_at_peak_bytes = std::max(peak_reserved, peak);

  const std::vector<std::int64_t> free_stacks = stacks_of_frees(s);
  if (peak_after > 0 && peak_after <= s.history.size()) {
    r.peak_time_s = (s.history[peak_after - 1].time_us - s.history.front().time_us) * 1e-6;
    r.peak_moment = moment_of(s, peak_after - 1);
  } else {
    r.peak_moment = s.history.empty() ? "the dump" : "before the history began";
  }
  describe_live(s, live_after(s, peak_after, free_stacks), top_stacks, r.breakdown, r.top_stacks);
  r.breakdown.push_back({"cached_free", r.reserved_at_peak_bytes - r.peak_allocated_bytes});

  if (oom_at) {
    const HistoryEvent& h = s.history[*oom_at];
    SnapshotOom& o = r.oom.emplace();
    o.requested_bytes = h.size;
    // CUDACachingAllocator's get_allocation_size: kSmallBuffer, kLargeBuffer below kMinLargeAlloc,
    // else rounded up to kRoundLarge.
    o.segment_request_bytes = CachingAllocatorModel::segment_size(CachingAllocatorModel::block_size(h.size));
    o.allocated_bytes = oom_allocated;
    o.reserved_bytes = std::max(oom_reserved, oom_allocated);
    o.cached_free_bytes = o.reserved_bytes - o.allocated_bytes;
    if (h.device_free >= 0) o.device_free_bytes = h.device_free;
    o.time_s = (h.time_us - s.history.front().time_us) * 1e-6;
    o.moment = moment_of(s, *oom_at);
    o.oom_events = oom_events;
    bool consistent = true;
    const auto [small, large] = largest_free_blocks(s, *oom_at, consistent);
    o.largest_free_block_bytes = h.size <= kSmallRequestBytes ? small : large;
    o.fragmentation = o.cached_free_bytes >= o.requested_bytes;
    describe_live(s, live_after(s, *oom_at, free_stacks), top_stacks, o.breakdown, o.top_stacks);
    o.breakdown.push_back({"cached_free", o.cached_free_bytes});
    o.unstranded_need_bytes = add_bytes(o.allocated_bytes, o.requested_bytes);
    // Replayed only when the history reaches back to the process's first allocation (nothing was
    // reserved before it): otherwise the segments made before it are unknown.
    if (history_complete && consistent) o.limit_needed_bytes = limit_needed(s, *oom_at, o.unstranded_need_bytes);
    if (!consistent)
      r.warnings.push_back(
          "an event of the history names memory outside every segment: the free blocks at the out-of-memory "
          "error may be off (events lost from the ring buffer?)");
    if (oom_events > 1)
      r.warnings.push_back(fmt::format("{} out-of-memory errors in the history: the last is shown", oom_events));
  }

  r.free_cached_bytes = s.reserved - end_allocated;
  for (const std::int64_t f : s.free_blocks) r.largest_free_block_bytes = std::max(r.largest_free_block_bytes, f);
  std::int64_t free_total = 0;
  for (const std::int64_t f : s.free_blocks) free_total += f;
  r.fragmentation =
      free_total > 0 ? 1.0 - static_cast<double>(r.largest_free_block_bytes) / static_cast<double>(free_total) : 0;
  if (s.history.empty()) r.warnings.push_back("no allocation history: the peak is the state at the dump");
  return r;
}

}  // namespace

// Why simdjson did not parse a snapshot, in its words, and the depth named when that was it (a
// snapshot nests about ten levels; simdjson's DOM parser stops at 1,024).
[[noreturn]] void not_parsed(const std::string& source, simdjson::error_code error) {
  if (error == simdjson::DEPTH_ERROR)
    bad(source,
        fmt::format("JSON nested deeper than {} levels (a snapshot nests about 10)", simdjson::DEFAULT_MAX_DEPTH));
  bad(source, fmt::format("not JSON ({})", simdjson::error_message(error)));
}

namespace {

// A snapshot of either kind from its bytes: a pickle by its PROTO opcode, else JSON.
SnapshotReport analyse_bytes(std::string_view bytes, std::size_t padded_capacity, const std::string& source,
                             std::size_t top_stacks) {
  if (detail::looks_like_pickle(bytes)) {
    const PickleTree tree = detail::read_pickle(bytes, source);
    return analyse(PickleSnapshot(tree, source).convert(), source, top_stacks);
  }
  if (!bytes.empty() && static_cast<unsigned char>(bytes.front()) == 0x80)
    bad(source, "a pickle of protocol 0 or 1 (torch.cuda.memory._dump_snapshot writes protocol 2 or later)");
  dom::parser parser;
  dom::element root;
  simdjson::error_code error{};
  if (padded_capacity >= bytes.size() + simdjson::SIMDJSON_PADDING) {
    error = parser.parse(bytes.data(), bytes.size(), false).get(root);
  } else {
    const simdjson::padded_string padded(bytes);
    error = parser.parse(padded).get(root);
  }
  if (error) not_parsed(source, error);
  return analyse(parse(root, source), source, top_stacks);
}

}  // namespace

SnapshotReport analyse_snapshot_text(std::string_view text, const std::string& source, std::size_t top_stacks) {
  return analyse_bytes(text, 0, source, top_stacks);
}

SnapshotReport analyse_snapshot(const std::string& path, std::size_t top_stacks) {
  // A missing file is the user's to fix (exit 2); one that is there and cannot be read, a folder or
  // a file without read permission, is the machine's (exit 3), as docs/trace.md says.
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) throw InputError(fmt::format("no snapshot '{}': no such file", path));
  if (std::filesystem::is_directory(path, ec))
    throw SystemError(fmt::format("cannot read snapshot '{}': it is a folder", path));
  // The whole file, inflated when it is gzip (detected by its magic bytes): a snapshot is read as
  // one piece, and one past kMaxSnapshotBytes is refused before it takes the machine's memory.
  detail::ChunkReader reader(path, std::size_t{4} << 20, detail::ChunkReader::Prefetch::off);
  std::string bytes;
  if (!reader.gzip()) bytes.reserve(std::min<std::uint64_t>(reader.file_bytes(), kMaxSnapshotBytes) + 64);
  for (std::string_view chunk = reader.next(); !chunk.empty(); chunk = reader.next()) {
    if (bytes.size() + chunk.size() > kMaxSnapshotBytes)
      bad(path, fmt::format("more than {} GiB{}: larger than any snapshot this reads", kMaxSnapshotBytes >> 30,
                            reader.gzip() ? " once inflated" : ""));
    bytes.append(chunk);
  }
  if (reader.truncated()) bad(path, "the gzip stream ends early (a file cut short)");
  const std::size_t size = bytes.size();
  bytes.resize(size + simdjson::SIMDJSON_PADDING);  // simdjson reads up to its padding past the end
  return analyse_bytes(std::string_view(bytes.data(), size), bytes.size(), path, top_stacks);
}

}  // namespace trainfit::trace
