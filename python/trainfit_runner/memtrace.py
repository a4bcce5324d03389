"""What was alive on the GPU at its peak, from PyTorch's allocator history (no torch needed).

torch.cuda.memory._record_memory_history() makes the caching allocator log every allocation and
free with its stack; torch.cuda.memory._snapshot() returns that log per device
("device_traces": a list of events {action, addr, size, stream, frames}). Replaying the log gives
the allocated bytes after each event: their maximum is what max_memory_allocated() reports (the
allocator counts a block as allocated from `alloc` until `free_requested`), and the blocks alive
at that moment, grouped by where they were allocated, say what the peak is made of.
python/scale_jobs/ddp_busiest_rank.py uses this to compare the ranks of a DDP run.
"""
from collections import defaultdict

MIB = 1 << 20

# Python frames that only forward a call (module __call__ machinery, autograd plumbing): a stack
# trimmed of them starts at the code that asked for the memory.
WRAPPER_FRAMES = ("torch/nn/modules/module.py", "torch/autograd/graph.py", "torch/_tensor.py",
                  "torch/autograd/__init__.py", "torch/utils/_contextlib.py", "torch/optim/optimizer.py")
# C++ frames of the allocator and the unwinder itself, below anything informative.
CPP_NOISE = ("CUDACachingAllocator", "c10::cuda::", "torch::unwind", "torch::CapturedTraceback",
             "gather_with_cpp", "c10::GatheredContext", "c10::Allocator", "at::empty", "at::detail::empty")


def _frame_text(frame):
    return "%s:%s %s" % (frame.get("filename", "?"), frame.get("line", "?"), frame.get("name", "?"))


def trim_frames(frames, python=8, cpp=4):
    """(python frames, C++ frames) of an event's stack, innermost first, wrappers and allocator
    internals dropped, as "file:line function" texts."""
    py, cc = [], []
    for f in frames or ():
        name = str(f.get("filename", ""))
        if name.endswith(".py"):
            if len(py) < python and not any(w in name for w in WRAPPER_FRAMES):
                py.append(_frame_text(f))
        elif len(cc) < cpp and not any(n in str(f.get("name", "")) for n in CPP_NOISE):
            cc.append(_frame_text(f))
    return py, cc


def replay(events):
    """(peak bytes, index of the event that reached it, final bytes) of an allocator log."""
    live = {}
    total = peak = 0
    peak_index = -1
    for i, e in enumerate(events):
        action, addr = e.get("action"), e.get("addr")
        if action == "alloc":
            size = int(e.get("size", 0))
            live[addr] = size
            total += size
            if total > peak:
                peak, peak_index = total, i
        elif action in ("free_requested", "free_completed") and addr in live:
            total -= live.pop(addr)
    return peak, peak_index, total


def alive_at(events, index):
    """{addr: alloc event} of the blocks allocated and not yet freed after event `index`."""
    live = {}
    for e in events[:index + 1]:
        action, addr = e.get("action"), e.get("addr")
        if action == "alloc":
            live[addr] = e
        elif action in ("free_requested", "free_completed"):
            live.pop(addr, None)
    return live


def group_key(event):
    """Where a block was allocated, for grouping: its two innermost informative Python frames."""
    py, cpp = trim_frames(event.get("frames"), python=2, cpp=1)
    return " <- ".join(py) if py else (cpp[0] if cpp else "(no stack)")


def peak_report(events, top=10, python=8, cpp=4):
    """The peak of an allocator log and what was alive at it: the `top` largest blocks with their
    trimmed stacks, and the `top` largest groups of blocks by allocation site (bytes and count)."""
    peak, index, final = replay(events)
    live = alive_at(events, index) if index >= 0 else {}
    blocks = sorted(live.values(), key=lambda e: int(e.get("size", 0)), reverse=True)
    largest = []
    for e in blocks[:top]:
        py, cc = trim_frames(e.get("frames"), python, cpp)
        largest.append({"mib": round(int(e["size"]) / MIB, 1), "python": py, "cpp": cc})
    groups = defaultdict(lambda: [0, 0])
    for e in blocks:
        g = groups[group_key(e)]
        g[0] += int(e.get("size", 0))
        g[1] += 1
    by_site = sorted(({"site": k, "mib": round(v[0] / MIB, 1), "blocks": v[1]} for k, v in groups.items()),
                     key=lambda g: g["mib"], reverse=True)
    return {"peak_mib": round(peak / MIB, 1), "peak_event": index, "events": len(events),
            "final_mib": round(final / MIB, 1), "alive_blocks": len(live), "largest": largest,
            "by_site": by_site[:top], "by_site_all": {g["site"]: g["mib"] for g in by_site}}


def site_differences(report_a, report_b, top=10):
    """The allocation sites whose bytes alive at the peak differ most between two reports
    (b minus a, MiB): what one rank holds at its peak that the other does not."""
    a, b = report_a.get("by_site_all", {}), report_b.get("by_site_all", {})
    diffs = [{"site": s, "mib": round(b.get(s, 0.0) - a.get(s, 0.0), 1)} for s in set(a) | set(b)]
    diffs = [d for d in diffs if d["mib"] != 0]
    return sorted(diffs, key=lambda d: abs(d["mib"]), reverse=True)[:top]
