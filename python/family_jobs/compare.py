"""The family runs against the predictions written before them.

    python3 python/family_jobs/compare.py RESULTS_DIR [--gpu h200|h100-sxm]

RESULTS_DIR holds what device_job.sh brought back (rows/CASE.json, the runner's rows); the
predictions are data/bench/families-2026-12-07/predictions.jsonl, the plan of each case on the
card the rows ran on. Prints, per case, the peak allocated memory and the median step time,
predicted and measured, and their errors; then the medians and the largest memory error.
"""
import argparse
import json
import statistics
from pathlib import Path

PREDICTIONS = Path(__file__).resolve().parents[2] / "data" / "bench" / "families-2026-12-07" / "predictions.jsonl"


def predictions(gpu, path=PREDICTIONS):
    """The latest prediction of each case on `gpu` (a case planned again later replaces the first)."""
    out = {}
    for line in Path(path).read_text().splitlines():
        p = json.loads(line)
        if p["gpu"] == gpu:
            out[p["case"]] = p
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--gpu", default="h200", help="the card the rows ran on (h200 or h100-sxm)")
    ap.add_argument("--predictions", default=PREDICTIONS, help="the predictions file (default: %(default)s)")
    args = ap.parse_args()
    planned = predictions(args.gpu, args.predictions)
    mem, step = [], []
    print("%-30s %10s %10s %7s %8s %8s %7s" % ("case", "pred MiB", "meas MiB", "err", "pred s", "meas s", "err"))
    for row_path in sorted(Path(args.results, "rows").glob("*.json")):
        case = row_path.stem
        m = json.loads(row_path.read_text())["measured"]
        p = planned.get(case)
        if m.get("status") != "ok" or p is None or "peak_allocated_mib" not in p:
            print("%-30s %s" % (case, m.get("error") or m.get("status") if p else "no prediction"))
            continue
        e_mem = p["peak_allocated_mib"] / m["peak_allocated_mib"] - 1
        e_step = p["step_seconds"] / m["step_seconds_median"] - 1
        mem.append(abs(e_mem))
        step.append(abs(e_step))
        print("%-30s %10.1f %10.1f %+6.1f%% %8.4f %8.4f %+6.1f%%" % (
            case, p["peak_allocated_mib"], m["peak_allocated_mib"], 100 * e_mem, p["step_seconds"],
            m["step_seconds_median"], 100 * e_step))
    if mem:
        print("peak allocated: median %.1f%%, max %.1f%% over %d rows; step time: median %.1f%%"
              % (100 * statistics.median(mem), 100 * max(mem), len(mem), 100 * statistics.median(step)))


if __name__ == "__main__":
    main()
