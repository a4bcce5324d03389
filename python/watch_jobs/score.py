#!/usr/bin/env python3
"""How often `trainfit watch` named each recorded job right: for every `--jsonl` recording in a folder
(record.sh's), the share of the job's steady windows (between its "steady" marker, which says what
it expects, and the next marker) whose verdict was the expected one, live (the verdict lines watch
wrote while the job ran) and on replay (`trainfit watch --replay FILE --score`: the same recording
through the diagnoser again). A memory-growing or straggling job is right when the window carries that warning.

    python/watch_jobs/score.py OUT_DIR_OR_RECORDING... [--trainfit PATH] [--min 0.9]

Prints one line a phase and exits 1 when any phase is under --min live or on replay."""
import argparse
import glob
import json
import os
import subprocess
import sys

# What a phase marker's "expect" may say, as the verdict watch prints.
NAMES = {"compute": "compute-bound", "input": "input-pipeline-bound", "input-pipeline": "input-pipeline-bound",
         "communication": "communication-bound", "capacity": "capacity-bound", "host": "host-bound"}


def verdict_name(expect):
    return NAMES.get(expect, expect)


def live_scores(path):
    phases, verdicts = [], []
    with open(path) as f:
        for line in f:
            try:
                o = json.loads(line)
            except ValueError:
                continue
            if o.get("type") == "event" and "phase" in o:
                phases.append(o)
            elif o.get("type") == "verdict":
                verdicts.append(o)
    phases.sort(key=lambda p: p["t"])
    end_of_run = max((v["end"] for v in verdicts), default=0)
    scores = []
    for i, p in enumerate(phases):
        if p.get("phase") != "steady" or not p.get("expect"):
            continue
        begin, end = p["t"], phases[i + 1]["t"] if i + 1 < len(phases) else end_of_run
        expected = verdict_name(p["expect"])
        windows = right = 0
        wrong = {}
        for v in verdicts:
            if v["begin"] < begin or v["end"] > end:
                continue
            windows += 1
            named = [v["verdict"]] + [a["verdict"] for a in v.get("also", [])]
            # The warnings (memory-growing, straggler) count when carried; the bottlenecks when first.
            ok = expected in named if expected in ("memory-growing", "straggler") else v["verdict"] == expected
            right += ok
            if not ok:
                wrong[v["verdict"]] = wrong.get(v["verdict"], 0) + 1
        scores.append({"label": p.get("label", ""), "expect": expected, "windows": windows, "right": right,
                       "wrong": wrong})
    return scores


def replay_scores(trainfit, path):
    out = subprocess.run([trainfit, "watch", "--replay", path, "--score"], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{path}: trainfit watch --replay --score failed: {out.stderr.strip()}")
    return json.loads(out.stdout)["phases"]


def share(s):
    return s["right"] / s["windows"] if s["windows"] else 0.0


def describe(s):
    wrong = ", ".join(f"{k} x{v}" for k, v in sorted(s["wrong"].items()))
    return f"{s['right']}/{s['windows']} ({100 * share(s):.0f}%)" + (f" [wrong: {wrong}]" if wrong else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="folders of recordings (their *.jsonl) or recordings")
    ap.add_argument("--trainfit", default=os.environ.get("TRAINFIT", "trainfit"))
    ap.add_argument("--min", type=float, default=0.9)
    args = ap.parse_args()
    files = []
    for path in args.paths:
        files += sorted(glob.glob(os.path.join(path, "*.jsonl"))) if os.path.isdir(path) else [path]
    if not files:
        raise SystemExit(f"no .jsonl recordings in {' '.join(args.paths)}")
    failed = False
    for path in files:
        live = live_scores(path)
        replay = replay_scores(args.trainfit, path)
        name = os.path.basename(path)
        if not live and not replay:
            print(f"{name}: no steady phase with an expected verdict")
            continue
        for i, s in enumerate(live or replay):
            r = replay[i] if i < len(replay) else {"right": 0, "windows": 0, "wrong": {}}
            ok = s["windows"] > 0 and share(s) >= args.min and r["windows"] > 0 and share(r) >= args.min
            failed |= not ok
            print(f"{'PASS' if ok else 'FAIL'} {name}: {s['expect']} \"{s['label']}\": "
                  f"live {describe(s)}, replay {describe(r)}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
