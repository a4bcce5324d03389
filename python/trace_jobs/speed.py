"""Times `trainfit trace` against the independent Python reading (read_trace.py) on the same file, in
one run, and prints the ratio (docs/trace.md, "Speed"). Also checks that both read the same steps.

    python3 python/trace_jobs/speed.py --trainfit build/release/app/trainfit FILE.json
    python3 python/trace_jobs/speed.py --trainfit ... --gen build/release/bench/trainfit_trace_gen --megabytes 1024

Each program runs in its own process; its wall time and CPU time come from wait4. So does the
Python reading's peak resident memory; wait4's peak for a child counts the pages of the Python
process that spawned it (10 MiB: the child's own before its exec), which is most of trainfit's
figure, so trainfit's comes from one more run under GNU time (/usr/bin/time, Debian's `time`) when
there is one. Each runs --repeat times (default 3), the two taking turns, and the medians are compared:
single runs of a 30 ms program and a 2 s one on a shared machine scatter by a third either way
(docs/trace.md, "Speed"), and the median of each is what a user waits most often.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import compare  # beside this file: the per-step comparison of the two readings

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


def own_peak_mib(cmd):
    """The peak resident memory of cmd alone, in MiB, from GNU time; None without it."""
    gnu_time = "/usr/bin/time"
    if not os.access(gnu_time, os.X_OK):
        return None
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        subprocess.run([gnu_time, "-f", "%M", "-o", rss.name] + cmd, stdout=subprocess.DEVNULL, check=True)
        return int(rss.read().split()[-1]) / 1024.0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", nargs="?", help="a trace file (default: generate one with --gen)")
    ap.add_argument("--trainfit", required=True)
    ap.add_argument("--gen", help="trainfit_trace_gen, to write a synthetic trace")
    ap.add_argument("--megabytes", type=float, default=1024)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each program, taking turns (default 3)")
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
    ours_runs, theirs_runs = [], []
    for _ in range(max(a.repeat, 1)):
        with open(ours_json, "w") as out:
            ours_runs.append(timed([a.trainfit, "trace", path, "--format", "json"], out))
        theirs_runs.append(timed([sys.executable, os.path.join(HERE, "read_trace.py"), path, "-o", theirs_json],
                                 subprocess.DEVNULL))
    ours_s, ours_cpu, ours_rss = (statistics.median(r[k] for r in ours_runs) for k in range(3))
    theirs_s, theirs_cpu, theirs_rss = (statistics.median(r[k] for r in theirs_runs) for k in range(3))
    pair_ratios = sorted(t[0] / o[0] for o, t in zip(ours_runs, theirs_runs))
    own_rss = own_peak_mib([a.trainfit, "trace", path, "--format", "json"])
    if own_rss is None:
        rss_note = " (wait4: with the spawning Python's pages; install Debian's time for its own)"
    else:
        ours_rss, rss_note = own_rss, " (GNU time)"
    with open(ours_json) as f:
        ours = json.load(f)
    with open(theirs_json) as f:
        theirs = json.load(f)
    if len(ours["steps"]) != len(theirs["steps"]):
        sys.exit("the readings disagree on the steps: %d against %d" % (len(ours["steps"]), len(theirs["steps"])))
    worst = max(compare.largest_differences(ours["steps"], theirs["steps"]).values())
    uncompressed_mb = ours["counts"]["bytes"] / 1e6
    print("file: %s, %.0f MB (%.0f MB of JSON), %d steps, %d events" % (path, size_mb, uncompressed_mb,
                                                                        len(ours["steps"]), ours["counts"]["events"]))
    print("medians of %d runs of each, taking turns" % len(ours_runs))
    print("trainfit trace: %.3f s wall, %.3f s CPU, %.0f MB/s of JSON (CPU), peak resident %.1f MiB%s (%.1f%% of the "
          "JSON)" % (ours_s, ours_cpu, uncompressed_mb / ours_cpu, ours_rss, rss_note,
                     100 * ours_rss * 1.048576 / uncompressed_mb))
    print("python (%s): %.2f s wall, %.2f s CPU, peak resident %.0f MiB" % (theirs["reader"], theirs_s, theirs_cpu,
                                                                            theirs_rss))
    print("ratio: trainfit is %.1fx faster in wall time, %.1fx in CPU time (single runs' wall: %.1fx to %.1fx); "
          "per-step wall and GPU busy agree within %.4f%%" % (theirs_s / ours_s, theirs_cpu / ours_cpu,
                                                             pair_ratios[0], pair_ratios[-1], 100 * worst))
    return 0


if __name__ == "__main__":
    sys.exit(main())
