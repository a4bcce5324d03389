"""Times `trainfit trace` against the independent Python reading (read_trace.py) on the same file, in
one run, and prints the ratio (docs/trace.md, "Speed"). Also checks that both read the same steps.

    python3 python/trace_jobs/speed.py --trainfit build/release/app/trainfit FILE.json
    python3 python/trace_jobs/speed.py --trainfit ... --gen build/release/bench/trainfit_trace_gen --megabytes 1024

Each program runs in its own process; its wall time and peak resident memory come from wait4.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def timed(cmd, stdout):
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=stdout)
    _, status, usage = os.wait4(p.pid, 0)
    seconds = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit("%s failed with exit code %d" % (cmd[0], code))
    # Wall time, CPU time (user + system: what a shared machine's load does not inflate), peak RSS in MiB.
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", help="a trace file (default: generate one with --gen)")
    ap.add_argument("--trainfit", required=True)
    ap.add_argument("--gen", help="trainfit_trace_gen, to write a synthetic trace")
    ap.add_argument("--megabytes", type=float, default=1024)
    a = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="trainfit-trace-speed-")
    try:
        return measure(a, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # a generated trace is as big as asked: not left behind


def measure(a, work):
    path = a.trace
    if not path:
        if not a.gen:
            sys.exit("give a trace file or --gen")
        path = os.path.join(work, "synthetic.json")
        subprocess.run([a.gen, path, str(a.megabytes)], check=True)
    size_mb = os.path.getsize(path) / 1e6
    ours_json = os.path.join(work, "trainfit.json")
    theirs_json = os.path.join(work, "python.json")
    with open(ours_json, "w") as out:
        ours_s, ours_cpu, ours_rss = timed([a.trainfit, "trace", path, "--format", "json"], out)
    theirs_s, theirs_cpu, theirs_rss = timed([sys.executable, os.path.join(HERE, "read_trace.py"), path, "-o", theirs_json],
                                 subprocess.DEVNULL)
    with open(ours_json) as f:
        ours = json.load(f)
    with open(theirs_json) as f:
        theirs = json.load(f)
    worst = 0.0
    if len(ours["steps"]) != len(theirs["steps"]):
        sys.exit("the readings disagree on the steps: %d against %d" % (len(ours["steps"]), len(theirs["steps"])))
    for o, t in zip(ours["steps"], theirs["steps"]):
        for key in ("wall_s", "gpu_busy_s"):
            if t[key] > 0:
                worst = max(worst, abs(o[key] - t[key]) / t[key])
    uncompressed_mb = ours["counts"]["bytes"] / 1e6
    print("file: %s, %.0f MB (%.0f MB of JSON), %d steps, %d events" % (path, size_mb, uncompressed_mb,
                                                                        len(ours["steps"]), ours["counts"]["events"]))
    print("trainfit trace: %.2f s wall, %.2f s CPU, %.0f MB/s of JSON (CPU), peak resident %.0f MiB (%.1f%% of the JSON)"
          % (ours_s, ours_cpu, uncompressed_mb / ours_cpu, ours_rss, 100 * ours_rss * 1.048576 / uncompressed_mb))
    print("python (%s): %.2f s wall, %.2f s CPU, peak resident %.0f MiB" % (theirs["reader"], theirs_s, theirs_cpu,
                                                                            theirs_rss))
    print("ratio: trainfit is %.1fx faster in wall time, %.1fx in CPU time; per-step wall and GPU busy agree within "
          "%.4f%%" % (theirs_s / ours_s, theirs_cpu / ours_cpu, 100 * worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
