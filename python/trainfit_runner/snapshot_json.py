"""A memory snapshot (torch.cuda.memory._dump_snapshot's pickle) as the JSON `trainfit trace --snapshot` reads.

    python -m trainfit_runner.snapshot_json peak.pickle peak.json [--device 0] [--max-allocated BYTES]

The pickle is read here, in Python, so that trainfit never unpickles anything. The JSON (schema
"trainfit.snapshot/1", docs/trace.md) keeps what the analysis needs and no more:

    {"schema": "trainfit.snapshot/1", "device": 0,
     "allocator": {"max_memory_allocated": ...},           # when known (the probe writes it)
     "stacks": ["fn (dir/file.py:12) < caller (...)", ...],  # each distinct stack once
     "segments": [{"address": A, "total_size": N,
                   "blocks": [{"address": A, "size": N, "state": "active_allocated", "stack": i}]}],
     "history": [["alloc", address, size, stack, time_us], ...]}   # oldest first

A stack is the allocation's frames, innermost first: the Python frames, and of the C++ frames only
those that name what allocated (autograd's AccumulateGrad, cuBLAS workspaces); -1 when none. The
backward pass runs on autograd's own threads, which have no Python frames: for an allocation made
there the stack is its C++ frames that name an operator (an autograd node such as
`LogSoftmaxBackward0`, an `at::native::` kernel), so that it can still be told apart.
"""
import argparse
import json
import pickle
import sys

KEEP_NATIVE = ("AccumulateGrad", "cublas", "Workspace", "workspace")
# C++ frames that name the operator that allocated, for allocations without Python frames.
OPERATOR_NATIVE = ("Backward", "autograd::generated", "at::native::", "at::_ops::", "AccumulateGrad",
                   "autograd::Engine")
MAX_FRAMES = 12
MAX_NATIVE_FRAMES = 4


def short_native_name(name):
    """A C++ frame's function without its parameter list (and `const`): what it is, in a line."""
    name = name.strip()
    if name.endswith(" const"):
        name = name[: -len(" const")]
    if name.endswith(")"):
        depth = 0
        for k in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[k], 0)
            if depth == 0:
                return name[:k] if k > 0 else name
    return name


def _frame_text(f):
    path = str(f.get("filename", "?")).replace("\\", "/")
    short = "/".join(path.split("/")[-2:])
    name = str(f.get("name", "?"))
    if not path.endswith(".py"):
        name = short_native_name(name)
    return "%s (%s:%s)" % (name, short, f.get("line", "?"))


class _Stacks:
    def __init__(self):
        self.index = {}
        self.texts = []

    def of(self, frames):
        kept = [f for f in frames or []
                if str(f.get("filename", "")).endswith(".py") or any(k in str(f.get("name", "")) for k in KEEP_NATIVE)]
        if not any(str(f.get("filename", "")).endswith(".py") for f in kept):
            native = [f for f in frames or [] if any(k in str(f.get("name", "")) for k in OPERATOR_NATIVE)]
            kept = kept + [f for f in native if f not in kept][:MAX_NATIVE_FRAMES]
        if not kept:
            return -1
        text = " < ".join(_frame_text(f) for f in kept[:MAX_FRAMES])
        if text not in self.index:
            self.index[text] = len(self.texts)
            self.texts.append(text)
        return self.index[text]


def convert(snapshot, device=None, max_allocated=None):
    """The trainfit.snapshot/1 dict of a snapshot dict (torch.cuda.memory._snapshot())."""
    segments = snapshot.get("segments", [])
    traces = snapshot.get("device_traces", [])
    if device is None:
        # The device with the most reserved memory: a single-GPU job's only one.
        sizes = {}
        for s in segments:
            sizes[s.get("device", 0)] = sizes.get(s.get("device", 0), 0) + s.get("total_size", 0)
        device = max(sizes, key=sizes.get) if sizes else 0
    stacks = _Stacks()
    out_segments = []
    for s in segments:
        if s.get("device", 0) != device:
            continue
        address = s.get("address", 0)
        blocks = []
        for b in s.get("blocks", []):
            blocks.append({"address": b.get("address", address), "size": b.get("size", 0),
                           "state": b.get("state", "inactive"), "stack": stacks.of(b.get("frames"))})
            address += b.get("size", 0)
        out_segments.append({"address": s.get("address", 0), "total_size": s.get("total_size", 0), "blocks": blocks})
    history = []
    if device < len(traces):
        for e in traces[device]:
            history.append([e.get("action", "?"), e.get("addr", 0), e.get("size", 0), stacks.of(e.get("frames")),
                            e.get("time_us", 0)])
    out = {"schema": "trainfit.snapshot/1", "device": device, "stacks": stacks.texts, "segments": out_segments,
           "history": history}
    if max_allocated is not None:
        out["allocator"] = {"max_memory_allocated": int(max_allocated)}
    return out


def write(snapshot, path, device=None, max_allocated=None):
    with open(path, "w") as f:
        json.dump(convert(snapshot, device, max_allocated), f)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m trainfit_runner.snapshot_json", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("snapshot", help="the pickle torch.cuda.memory._dump_snapshot wrote")
    ap.add_argument("out", help="where to write the JSON")
    ap.add_argument("--device", type=int, help="the device to render (default: the one with the most memory)")
    ap.add_argument("--max-allocated", type=int, help="torch.cuda.max_memory_allocated() of the run, to compare")
    a = ap.parse_args(argv)
    # A pickle runs code when loaded: only read snapshots you made yourself.
    with open(a.snapshot, "rb") as f:
        snapshot = pickle.load(f)
    write(snapshot, a.out, a.device, a.max_allocated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
