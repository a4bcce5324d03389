"""Capped-allocator boundary scans (issue 35): the largest batch or sequence length that runs.

    python3 python/boundary_jobs/scan.py setups.json OUT_DIR [--deadline EPOCH_SECONDS] [--snapshots N | --snapshot-every]
                                         [--gpu-bytes BYTES [--context-bytes BYTES]] [--starts BOUNDARY_JSONL]

Each setup of setups.json names a config (the runner's, docs/bench.md), the setting to scan
("batch": every integer; "seq": multiples of 128) and where to start (trainfit's own boundary at the
commit that wrote the file, so that the search spends its trials near the answer).  Every trial is
a fresh `python -m trainfit_runner` process on an emulated card (vram_bytes: the allocator capped at
the card minus this process's CUDA context, overflow "oom"), three steps: the first optimizer step
allocates the states, so a boundary set by the second step's layout is found too.  A value "runs"
when every step ran; it runs "under pressure" when the allocator had to free its cache and retry.
The search gallops from the start value and then bisects, assuming that what runs at a value runs
at every smaller one.

OUT_DIR/trials.jsonl gets one line per trial, OUT_DIR/boundary.jsonl one per setup (largest value
that ran, smallest that failed, whether the search finished before the deadline); with --snapshots N
the first N failing trials also leave the allocator's snapshot at the OOM (the pickle
torch.cuda.memory._dump_snapshot writes) in OUT_DIR/snapshots/; with --snapshot-every every trial
does, one that ran at its end (the allocator's whole history on both sides of a boundary).  Setups already in boundary.jsonl
are skipped and trials already in trials.jsonl are not run again, so a second call goes on where the
first stopped.

--gpu-bytes BYTES scans several setups at once on one GPU, as many as their emulated cards fit in
BYTES (largest first). The cap is then set from a CUDA context measured once, by a trial run alone
(x_context_bytes, docs/bench.md): NVML's device-wide figure would count the other processes.
--context-bytes gives that context instead (issue 35 caps at the card minus trainfit's own CUDA
context figure, kCudaContextBytes, 1382 MiB). --starts starts each setup at the largest value an
earlier scan found.
Setups never share memory (each process has its own cap), so what runs alone runs beside them.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

STEP = {"batch": 1, "seq": 128}
TRIAL_SECONDS = 90  # a trial that could not finish before the deadline is not started


LOCK = threading.Lock()  # trials.jsonl, boundary.jsonl, stdout and the snapshot count


def trial(setup, value, out_dir, snapshot, log, context=None):
    cfg = {"device": "cuda", "overflow": "oom", "steps": 3, "warmup": 1, "batch": 1, "seq": 512}
    cfg.update(setup["config"])
    if context is not None:
        cfg["x_context_bytes"] = context
    cfg[setup["scan"]] = value
    tag = "%s-%s%d" % (setup["name"], setup["scan"], value)
    row_path = os.path.join(out_dir, "rows", tag + ".json")
    env = dict(os.environ)
    snap_path = None
    if snapshot:
        snap_path = os.path.join(out_dir, "snapshots", tag + ".pickle")
        env["TRAINFIT_OOM_SNAPSHOT"] = snap_path
        if snapshot == "every":
            env["TRAINFIT_SNAPSHOT_AT_END"] = "1"  # a run that fits keeps its history too
    t0 = time.time()
    with open(os.path.join(out_dir, "rows", tag + ".log"), "w") as lf:
        subprocess.call([sys.executable, "-m", "trainfit_runner", "--config", json.dumps(cfg), "--out", row_path],
                        env=env, stdout=lf, stderr=subprocess.STDOUT, timeout=600)
    try:
        with open(row_path) as f:
            m = json.load(f)["measured"]
    except (OSError, ValueError) as e:
        m = {"status": "error", "error": "no row: %s" % e}
    steps = [s for s in m.get("steps", []) if "seconds" in s]
    rec = {"setup": setup["name"], "scan": setup["scan"], "value": value, "status": m.get("status"),
           "peak_allocated_mib": m.get("peak_allocated_mib"), "peak_reserved_mib": m.get("peak_reserved_mib"),
           "alloc_retries": max([s.get("alloc_retries", 0) for s in steps] or [0]),
           "ooms": max([s.get("ooms", 0) for s in steps] or [0]),
           "oom_at_step": m.get("oom_at_step"), "max_allocated_at_oom_mib": m.get("max_allocated_at_oom_mib"),
           "allocator_limit_mib": m.get("allocator_limit_mib"), "context_at_cap_mib": m.get("context_at_cap_mib"),
           "error": (m.get("error") or "")[:1000] or None, "wall_seconds": round(time.time() - t0, 1)}
    if snap_path and os.path.exists(snap_path):
        if rec["status"] == "oom" or snapshot == "every":
            rec["snapshot"] = os.path.basename(snap_path)
        else:
            os.remove(snap_path)
    with LOCK:
        log.write(json.dumps(rec) + "\n")
        log.flush()
        print("%-28s %s=%-6d %-5s peak %s MiB, retries %s (%.0f s)" % (
            setup["name"], setup["scan"], value, rec["status"], rec["peak_allocated_mib"], rec["alloc_retries"],
            rec["wall_seconds"]), flush=True)
    return rec


def scan(setup, out_dir, deadline, snapshots, log, earlier, context=None):
    step = STEP[setup["scan"]]
    runs = dict(earlier)  # value -> ran, from an earlier call's trials.jsonl

    def ok(v):
        if v not in runs:
            if time.time() + TRIAL_SECONDS > deadline:
                raise TimeoutError
            with LOCK:
                want_snapshot = "every" if snapshots[0] == "every" else snapshots[0] > 0
                if want_snapshot is True:
                    snapshots[0] -= 1
            rec = trial(setup, v, out_dir, want_snapshot, log, context)
            if want_snapshot is True and not rec.get("snapshot"):
                with LOCK:
                    snapshots[0] += 1
            runs[v] = rec["status"] == "ok"
        return runs[v]

    lo, hi = 0, None  # lo ran (0: nothing ran yet), hi failed
    start = max(step, setup["start"] // step * step)
    try:
        if ok(start):
            lo, jump = start, step
            while hi is None:
                if ok(lo + jump):
                    lo += jump
                    jump *= 2
                else:
                    hi = lo + jump
        else:
            hi, jump = start, step
            while lo == 0 and hi > step:
                v = max(step, hi - jump)
                if ok(v):
                    lo = v
                else:
                    hi = v
                jump *= 2
        while hi - lo > step:
            mid = lo + (hi - lo) // step // 2 * step
            if ok(mid):
                lo = mid
            else:
                hi = mid
        complete = True
    except TimeoutError:
        complete = False
    return {"setup": setup["name"], "scan": setup["scan"], "config": setup["config"], "start": setup["start"],
            "largest_runs": lo or None, "smallest_fails": hi, "complete": complete,
            "trials": len(runs), "x_context_bytes": context}


def earlier_trials(out_dir):
    """setup -> {value: ran} from trials.jsonl; only trials that ran or ran out of memory count
    (an error, e.g. a killed process, is tried again)."""
    seen = {}
    path = os.path.join(out_dir, "trials.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r.get("status") in ("ok", "oom"):
                    seen.setdefault(r["setup"], {})[r["value"]] = r["status"] == "ok"
    return seen


def measure_context(setups, out_dir, log):
    """The CUDA context of one trial run alone (the smallest card's setup at its start value)."""
    s = min(setups, key=lambda s: s["config"]["vram_bytes"])
    rec = trial(dict(s, name=s["name"] + "-alone"), s["start"], out_dir, False, log)
    mib = rec.get("context_at_cap_mib")
    if mib is None:
        raise SystemExit("the context could not be measured: %s" % rec.get("error"))
    return int(mib) * 1024 * 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("setups")
    ap.add_argument("out_dir")
    ap.add_argument("--deadline", type=float, default=float("inf"))
    ap.add_argument("--snapshots", type=int, default=0)
    ap.add_argument("--gpu-bytes", type=int, default=0)
    ap.add_argument("--context-bytes", type=int, default=None)
    ap.add_argument("--starts", default=None)
    ap.add_argument("--snapshot-every", action="store_true")
    a = ap.parse_args()
    for d in ("rows", "snapshots"):
        os.makedirs(os.path.join(a.out_dir, d), exist_ok=True)
    with open(a.setups) as f:
        setups = json.load(f)
    if a.starts:
        with open(a.starts) as f:
            found = {r["setup"]: r["largest_runs"] for r in map(json.loads, f) if r.get("largest_runs")}
        setups = [dict(s, start=found.get(s["name"], s["start"])) for s in setups]
    done_path = os.path.join(a.out_dir, "boundary.jsonl")
    done = set()
    if os.path.exists(done_path):
        with open(done_path) as f:
            done = {json.loads(line)["setup"] for line in f if line.strip() and json.loads(line)["complete"]}
    snapshots = ["every" if a.snapshot_every else a.snapshots]
    earlier = earlier_trials(a.out_dir)
    todo = [s for s in setups if s["name"] not in done]
    with open(os.path.join(a.out_dir, "trials.jsonl"), "a") as log, open(done_path, "a") as out:

        def one(s, context):
            res = scan(s, a.out_dir, a.deadline, snapshots, log, earlier.get(s["name"], {}), context)
            with LOCK:
                out.write(json.dumps(res) + "\n")
                out.flush()
                print("%s: largest %s that runs %s, smallest that fails %s%s" % (
                    s["name"], s["scan"], res["largest_runs"], res["smallest_fails"],
                    "" if res["complete"] else " (stopped at the deadline)"), flush=True)

        if not a.gpu_bytes:
            for s in todo:
                one(s, None)
            return 0
        context = a.context_bytes
        if context is None and todo:
            context = measure_context(todo, a.out_dir, log)
        todo.sort(key=lambda s: -s["config"]["vram_bytes"])
        running = {}  # thread -> bytes
        while todo or running:
            for t in [t for t in running if not t.is_alive()]:
                del running[t]
            free = a.gpu_bytes - sum(running.values())
            fits = [s for s in todo if s["config"]["vram_bytes"] <= free]
            if fits and time.time() + TRIAL_SECONDS <= a.deadline:
                s = fits[0]
                todo.remove(s)
                t = threading.Thread(target=one, args=(s, context))
                running[t] = s["config"]["vram_bytes"]
                t.start()
            elif not running and (not fits or time.time() + TRIAL_SECONDS > a.deadline):
                if todo:
                    print("not started before the deadline: %s" % ", ".join(s["name"] for s in todo), flush=True)
                break
            else:
                time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
