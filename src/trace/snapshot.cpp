// A memory snapshot's JSON rendering (trainfit.snapshot/1, written by
// python/trainfit_runner/snapshot_json.py from torch.cuda.memory._dump_snapshot's pickle): the
// allocator's state when it was dumped (segments and their blocks) and its history of events. The
// peak is found by walking the history backwards from the dumped state, the way PyTorch's own
// memory viewer reconstructs it: an allocation undone lowers the total, a free undone raises it.
#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <unordered_map>

#include "trainfit/error.hpp"
#include "trainfit/trace.hpp"

namespace trainfit::trace {
namespace {

namespace dom = simdjson::dom;

enum class Action { alloc, free_requested, free_completed, segment_alloc, segment_free, other };

Action parse_action(std::string_view s) {
  if (s == "alloc") return Action::alloc;
  if (s == "free_requested") return Action::free_requested;
  if (s == "free_completed") return Action::free_completed;
  if (s == "segment_alloc" || s == "segment_map") return Action::segment_alloc;
  if (s == "segment_free" || s == "segment_unmap") return Action::segment_free;
  return Action::other;  // oom, snapshot: no change to the totals
}

struct HistoryEvent {
  Action action = Action::other;
  std::uint64_t address = 0;
  std::int64_t size = 0;
  std::int64_t stack = -1;
  double time_us = 0;
};

struct Block {
  std::int64_t size = 0;
  std::int64_t stack = -1;
};

struct Snapshot {
  std::vector<std::string> stacks;
  std::unordered_map<std::uint64_t, Block> live;  // allocated blocks at the dump
  std::vector<std::int64_t> free_blocks;          // inactive blocks at the dump
  std::int64_t reserved = 0;
  std::vector<HistoryEvent> history;
  std::optional<std::int64_t> allocator_peak;
};

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
    for (dom::element x : stacks) s.stacks.emplace_back(must(x.get_string(), source, "a stack must be a string"));
  const auto stack_of = [&](dom::element x) {
    const std::int64_t k = must(x.get_int64(), source, "a stack must be an integer index");
    if (k >= static_cast<std::int64_t>(s.stacks.size())) bad(source, "a stack index past the stacks");
    return k;
  };
  if (!root["segments"].get_array().get(segments)) {
    for (dom::element seg : segments) {
      dom::element total;
      if (!seg["total_size"].get(total)) s.reserved += size_of(total, source, "segment total_size");
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
        if (state.starts_with("active"))
          s.live[address] = b;
        else
          s.free_blocks.push_back(b.size);
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

SnapshotReport analyse(Snapshot s, const std::string& source, std::size_t top_stacks) {
  SnapshotReport r;
  r.source = source;
  r.allocator_peak_allocated_bytes = s.allocator_peak;
  r.history_events = s.history.size();
  std::int64_t allocated = 0;
  for (const auto& [address, b] : s.live) allocated += b.size;
  const std::int64_t end_allocated = allocated;

  // Backwards: the totals after each event, and the index of the highest allocated total.
  std::int64_t reserved = s.reserved;
  std::int64_t peak = allocated, peak_reserved = reserved;
  std::size_t peak_after = s.history.size();  // the state after this many events; all of them: the dump
  for (std::size_t k = s.history.size(); k-- > 0;) {
    const HistoryEvent& h = s.history[k];
    if (allocated >= peak) {  // >=: the earliest moment at the peak, the event that reached it
      peak = allocated;
      peak_reserved = reserved;
      peak_after = k + 1;
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
  r.peak_allocated_bytes = peak;
  r.reserved_at_peak_bytes = std::max(peak_reserved, peak);

  // The blocks alive at the peak: the dump's, with what happened after the peak undone. A block
  // freed after the peak gets the stack of its allocation, found forwards.
  std::vector<std::int64_t> alloc_stack_of_free(s.history.size(), -1);
  {
    std::unordered_map<std::uint64_t, std::int64_t> last_alloc;
    for (std::size_t k = 0; k < s.history.size(); ++k) {
      const HistoryEvent& h = s.history[k];
      if (h.action == Action::alloc) last_alloc[h.address] = h.stack;
      if (h.action == Action::free_completed) {
        const auto it = last_alloc.find(h.address);
        if (it != last_alloc.end()) alloc_stack_of_free[k] = it->second;
      }
    }
  }
  std::unordered_map<std::uint64_t, Block> live = s.live;
  for (std::size_t k = s.history.size(); k-- > peak_after;) {
    const HistoryEvent& h = s.history[k];
    if (h.action == Action::alloc) live.erase(h.address);
    if (h.action == Action::free_completed) live[h.address] = {h.size, alloc_stack_of_free[k]};
  }
  if (peak_after > 0 && peak_after <= s.history.size()) {
    const HistoryEvent& h = s.history[peak_after - 1];
    r.peak_time_s = (h.time_us - s.history.front().time_us) * 1e-6;
    // The event that reached the peak may carry no frames (a segment's allocation): the moment is
    // that of the nearest allocation before it that has them.
    for (std::size_t k = peak_after; k-- > 0;) {
      if (s.history[k].stack >= 0) {
        r.peak_moment = s.stacks[static_cast<std::size_t>(s.history[k].stack)];
        break;
      }
    }
    if (r.peak_moment.empty()) r.peak_moment = "an allocation without frames";
  } else {
    r.peak_moment = s.history.empty() ? "the dump" : "before the history began";
  }

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
  for (const auto& [category, bytes] : by_category) r.breakdown.push_back({category, bytes});
  std::sort(r.breakdown.begin(), r.breakdown.end(),
            [](const MemoryTerm& a, const MemoryTerm& b) { return a.bytes > b.bytes; });
  r.breakdown.push_back({"cached_free", r.reserved_at_peak_bytes - r.peak_allocated_bytes});

  for (auto& [stack, st] : by_stack) r.top_stacks.push_back(std::move(st));
  std::sort(r.top_stacks.begin(), r.top_stacks.end(), [](const AllocationStack& a, const AllocationStack& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.frames < b.frames;
  });
  if (r.top_stacks.size() > top_stacks) r.top_stacks.resize(top_stacks);

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

SnapshotReport analyse_snapshot_text(std::string_view json, const std::string& source, std::size_t top_stacks) {
  dom::parser parser;
  dom::element root;
  const simdjson::padded_string padded(json);
  if (const auto error = parser.parse(padded).get(root)) not_parsed(source, error);
  return analyse(parse(root, source), source, top_stacks);
}

SnapshotReport analyse_snapshot(const std::string& path, std::size_t top_stacks) {
  // A missing file is the user's to fix (exit 2); one that is there and cannot be read, a folder or
  // a file without read permission, is the machine's (exit 3), as docs/trace.md says.
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) throw InputError(fmt::format("no snapshot '{}': no such file", path));
  if (std::filesystem::is_directory(path, ec))
    throw SystemError(fmt::format("cannot read snapshot '{}': it is a folder", path));
  dom::parser parser;
  dom::element root;
  if (const auto error = parser.load(path).get(root)) {
    if (error == simdjson::IO_ERROR)
      throw SystemError(fmt::format("cannot read snapshot '{}': {}", path, std::strerror(errno != 0 ? errno : EIO)));
    not_parsed(path, error);
  }
  return analyse(parse(root, path), path, top_stacks);
}

}  // namespace trainfit::trace
