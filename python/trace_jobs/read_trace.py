"""An independent reading of a PyTorch profiler (Kineto) trace, the way Holistic Trace Analysis works:
the whole file through json.load, the events into a pandas DataFrame, then grouped (plain Python
grouping when pandas is not installed; the output says which).

    python3 python/trace_jobs/read_trace.py TRACE.json[.gz] [-o expected.json]

It shares no code with trainfit. Per ProfilerStep#N (the host annotation's window; the whole trace
when there is none) it finds: wall_s (the annotation's duration), gpu_busy_s (the union of kernel,
memcpy and memset intervals of the busiest device, clipped to the window), idle_s, input_wait_s
(idle time inside the data loader's __next__ annotations), communication_s (the union of NCCL
kernels in the window), device_wall_s (the span of the step's copy on the busiest device, its
gpu_user_annotation, when the trace has one); the run's top kernels by total time; and the process
that wrote the file (distributedInfo's rank, the pid of its host steps). These are the figures
`trainfit trace` must reproduce (docs/trace.md).
"""
import argparse
import gzip
import json
import sys
import time

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}


def load(path):
    with open(path, "rb") as f:
        head = f.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def union(spans, lo, hi):
    """Sorted disjoint pieces of the spans (begin, end) clipped to [lo, hi)."""
    out = []
    for b, e in sorted((max(b, lo), min(e, hi)) for b, e in spans if e > lo and b < hi):
        if out and b <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([b, e])
    return out


def length(pieces):
    return sum(e - b for b, e in pieces)


def intersect(a, b):
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def frames(events):
    """GPU activities (ts, end, name), host steps (name, ts, end, pid), the busiest device's copies of the
    steps {name: (ts, end)}, loader (ts, end), top kernels, how: via pandas or not."""
    try:
        import pandas as pd
    except ImportError:
        pd = None
    xs = [e for e in events if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e and "dur" in e]
    if pd is not None:
        df = pd.DataFrame(xs, columns=["cat", "name", "ts", "dur", "pid", "args"])
        df["name"] = df["name"].fillna("").astype(str)
        df["ts"] = df["ts"].astype("float64")
        df["end"] = df["ts"] + df["dur"].astype("float64")
        gpu_df = df[df["cat"].isin(GPU_CATS)].copy()
        gpu_df["device"] = [a.get("device", p) if isinstance(a, dict) else p for a, p in zip(gpu_df["args"], gpu_df["pid"])]
        host = df[~df["cat"].isin(GPU_CATS) & (df["cat"] != "gpu_user_annotation")]
        steps_df = host[host["name"].str.startswith("ProfilerStep#")]
        loader_df = host[host["name"].str.startswith("enumerate(DataLoader)") |
                         (host["name"].str.contains("DataLoader", regex=False) &
                          host["name"].str.contains("__next__", regex=False))]
        busiest = gpu_df.groupby("device")["dur"].sum().idxmax() if len(gpu_df) else None
        gpu_df = gpu_df[gpu_df["device"] == busiest]
        top = gpu_df.groupby("name")["dur"].agg(["sum", "count"]).sort_values("sum", ascending=False).head(10)
        gpu = list(zip(gpu_df["ts"], gpu_df["end"], gpu_df["name"]))
        steps = list(zip(steps_df["name"], steps_df["ts"], steps_df["end"], steps_df["pid"]))
        on_device = df[(df["cat"] == "gpu_user_annotation") & df["name"].str.startswith("ProfilerStep#") &
                       (df["pid"] == busiest)]
        device_steps = {}
        for n, b, e in zip(on_device["name"], on_device["ts"], on_device["end"]):
            device_steps.setdefault(n, (b, e))
        loader = list(zip(loader_df["ts"], loader_df["end"]))
        top_kernels = [{"name": n, "total_s": s * 1e-6, "count": int(c)} for n, s, c in
                       zip(top.index, top["sum"], top["count"])]
        return gpu, steps, device_steps, loader, top_kernels, "json.load + pandas %s" % pd.__version__
    gpu_all, steps, loader, by_device, copies = [], [], [], {}, []
    for e in xs:
        cat, name = e.get("cat", ""), e.get("name", "")
        ts, end = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        if cat in GPU_CATS:
            args = e.get("args") if isinstance(e.get("args"), dict) else {}
            device = args.get("device", e.get("pid"))
            gpu_all.append((ts, end, name, device))
            by_device[device] = by_device.get(device, 0.0) + float(e["dur"])
        elif cat == "gpu_user_annotation":
            if name.startswith("ProfilerStep#"):
                copies.append((name, ts, end, e.get("pid")))
        else:
            if name.startswith("ProfilerStep#"):
                steps.append((name, ts, end, e.get("pid")))
            elif name.startswith("enumerate(DataLoader)") or ("DataLoader" in name and "__next__" in name):
                loader.append((ts, end))
    busiest = max(by_device, key=by_device.get) if by_device else None
    gpu = [(b, e, n) for b, e, n, d in gpu_all if d == busiest]
    totals = {}
    for b, e, n in gpu:
        t = totals.setdefault(n, [0.0, 0])
        t[0] += e - b
        t[1] += 1
    top = sorted(totals.items(), key=lambda kv: -kv[1][0])[:10]
    top_kernels = [{"name": n, "total_s": s * 1e-6, "count": c} for n, (s, c) in top]
    device_steps = {}
    for n, b, e, pid in copies:
        if pid == busiest:
            device_steps.setdefault(n, (b, e))
    return gpu, steps, device_steps, loader, top_kernels, "json.load + plain Python grouping (pandas not installed)"


def read(path):
    t0 = time.perf_counter()
    trace = load(path)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    gpu, steps, device_steps, loader, top_kernels, how = frames(events)
    annotated = bool(steps)
    info = trace.get("distributedInfo") if isinstance(trace, dict) else None
    rank = info.get("rank") if isinstance(info, dict) else None
    pids = [int(p) for _, _, _, p in steps if isinstance(p, (int, float)) and p == p]
    process = {"rank": rank, "pid": pids[0] if pids else None}
    if not steps:
        xs = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
              if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e and "dur" in e]
        steps = [("whole trace", min(b for b, _ in xs), max(e for _, e in xs), None)]
    steps.sort(key=lambda s: s[1])
    spans = [(b, e) for b, e, _ in gpu]
    comm = [(b, e) for b, e, n in gpu if "nccl" in n.lower()]
    out = []
    for name, lo, hi, _pid in steps:
        busy = union(spans, lo, hi)
        idle = [[b, e] for b, e in zip([lo] + [p[1] for p in busy], [p[0] for p in busy] + [hi]) if e > b]
        out.append({"name": name, "wall_s": (hi - lo) * 1e-6, "gpu_busy_s": length(busy) * 1e-6,
                    "idle_s": (hi - lo - length(busy)) * 1e-6,
                    "input_wait_s": intersect(idle, union(loader, lo, hi)) * 1e-6,
                    "communication_s": length(union(comm, lo, hi)) * 1e-6})
        if name in device_steps:
            out[-1]["device_wall_s"] = (device_steps[name][1] - device_steps[name][0]) * 1e-6
    return {"reader": how, "file": path, "step_annotations": annotated, "process": process, "steps": out,
            "kernels_top": top_kernels, "seconds": time.perf_counter() - t0}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("-o", "--out", help="write the figures here (JSON) instead of standard output")
    a = ap.parse_args(argv)
    result = read(a.trace)
    text = json.dumps(result, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
