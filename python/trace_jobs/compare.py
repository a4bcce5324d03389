"""Checks `trainfit trace` against the independent Python reading (read_trace.py) on traces of any
origin, step by step (docs/trace.md, "Held out: other people's traces"):

    python3 python/trace_jobs/compare.py --trainfit build/release/app/trainfit TRACE.json[.gz] ...

For each file: whether both readings find the same steps (by name, in order), the largest
difference of per-step wall time and GPU busy time relative to the Python reading's, and
trainfit's verdict for the run. Exit 1 when any file's steps differ or a figure is off by more than
--tolerance (2%, the issue's bar), 0 otherwise; a file that either reading rejects is reported, and
counts as a difference only when the other reading accepts it.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import read_trace  # noqa: E402  (beside this file)


def largest_differences(ours_steps, their_steps):
    """The largest relative difference of per-step wall and GPU-busy time, trainfit's against the
    Python reading's, over steps taken in order; infinite where the Python reading has none of a
    figure and trainfit has some."""
    worst = {"wall_s": 0.0, "gpu_busy_s": 0.0}
    for o, t in zip(ours_steps, their_steps):
        for key in worst:
            if t[key] > 0:
                worst[key] = max(worst[key], abs(o[key] - t[key]) / t[key])
            elif o[key] > 1e-9:
                worst[key] = float("inf")
    return worst


def compare(trainfit, path, tolerance):
    """One line about `path`, and whether the readings agree."""
    name = path
    try:
        theirs = read_trace.read(path)
    except Exception as e:  # noqa: BLE001  (whatever stops the Python reading is its answer for the file)
        theirs = None
        their_error = "%s: %s" % (type(e).__name__, e)
    run = subprocess.run([trainfit, "trace", path, "--format", "json"], capture_output=True, text=True)
    if run.returncode != 0:
        why = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else "exit %d" % run.returncode
        if theirs is None:
            return "%s: both reject it (trainfit: %s; Python: %s)" % (name, why, their_error), True
        return "%s: trainfit rejects it (%s), the Python reading does not" % (name, why), False
    if theirs is None:
        return "%s: the Python reading rejects it (%s), trainfit does not" % (name, their_error), False
    ours = json.loads(run.stdout)
    rank = ours["ranks"][0] if "ranks" in ours else ours
    ours_steps, their_steps = rank["steps"], theirs["steps"]
    if [s["name"] for s in ours_steps] != [s["name"] for s in their_steps]:
        return "%s: the steps differ: %d against the Python reading's %d" % (name, len(ours_steps),
                                                                             len(their_steps)), False
    worst = largest_differences(ours_steps, their_steps)
    agree = max(worst.values()) <= tolerance
    return "%s: %d steps, wall within %.4f%%, GPU busy within %.4f%%, verdict %s" % (
        name, len(ours_steps), 100 * worst["wall_s"], 100 * worst["gpu_busy_s"], rank.get("verdict") or "none"), agree


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--trainfit", required=True)
    ap.add_argument("--tolerance", type=float, default=0.02, help="largest relative difference (default 0.02)")
    a = ap.parse_args(argv)
    failed = 0
    for path in a.traces:
        line, agree = compare(a.trainfit, path, a.tolerance)
        print(line if agree else "DIFFERS " + line)
        failed += not agree
    print("%d of %d files agree" % (len(a.traces) - failed, len(a.traces)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
