"""trainfit's boundary beside the measured one, setup by setup (issue 35).

    python3 python/boundary_jobs/compare.py BOUNDARY_JSONL [--trainfit PATH] [--json]

For each setup a scan measured (boundary.jsonl, written by scan.py), runs `trainfit plan --largest`
and `trainfit advise --goal largest-batch|longest-seq` with every other setting pinned to the
scan's config, and prints the measured largest value that ran (any allocator retries allowed) and
the smallest that failed beside trainfit's largest that runs at all, the largest that runs without
the allocator under pressure, and advise's answer. A sequence scan steps by 128 tokens, so trainfit's
answer is right when it lies in [largest that ran, smallest that failed).

A scan caps the allocator at vram_bytes less the CUDA context it measured or was given
(x_context_bytes); trainfit's own context figure is 1382 MiB (kCudaContextBytes). trainfit is asked
about the card whose allocator limit is the scan's: vram_bytes - x_context_bytes + 1382 MiB, so
that both judge the same bytes.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TRAINFIT = os.path.join(HERE, "..", "..", "build", "default", "app", "trainfit")
# advise leaves these free unless they are given; the scan's runner uses these values.
PINNED = {"optimizer": "adamw", "attn": "sdpa", "gpus": 1, "grad_accum": 1, "grad_ckpt": False}
TRAINFIT_CONTEXT_BYTES = 1382 * 1024 * 1024


def flags(config, scan):
    cfg = dict(PINNED)
    cfg.update(config)
    out = []
    for key, value in cfg.items():
        if key == scan:
            continue
        if key == "vram_bytes":
            out += ["--vram", "%dB" % value]
        elif isinstance(value, bool):
            out.append("--" + ("" if value else "no-") + key.replace("_", "-"))
        else:
            out += ["--" + key.replace("_", "-"), str(value)]
    return out


def trainfit_json(binary, args):
    p = subprocess.run([binary] + args + ["--format", "json"], capture_output=True, text=True)
    if p.returncode not in (0, 2):
        raise SystemExit("trainfit %s failed: %s" % (" ".join(args), p.stderr.strip()))
    return json.loads(p.stdout)


def compare(row, binary):
    scan = row["scan"]
    config = dict(row["config"])
    if row.get("x_context_bytes") is not None:
        config["vram_bytes"] += TRAINFIT_CONTEXT_BYTES - row["x_context_bytes"]
    base = flags(config, scan)
    plan = trainfit_json(binary, ["plan"] + base + ["--largest", scan, "--no-suggest"])["boundary"]
    goal = "largest-batch" if scan == "batch" else "longest-seq"
    advise = trainfit_json(binary, ["advise"] + base + ["--goal", goal]).get("boundary") or {}
    ran, failed = row["largest_runs"] or 0, row["smallest_fails"]
    at_all = plan["largest_at_all"] or 0
    return {"setup": row["setup"], "scan": scan, "measured_runs": ran, "measured_fails": failed,
            "trainfit_at_all": at_all, "trainfit_runs": plan["largest_runs"], "trainfit_fits": plan["largest_fits"],
            "advise_at_all": advise.get("largest_at_all"),
            "right": ran <= at_all < failed, "names_an_oom": at_all >= failed}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("boundary")
    ap.add_argument("--trainfit", default=DEFAULT_TRAINFIT)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    with open(a.boundary) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    res = [compare(r, a.trainfit) for r in rows if r.get("complete")]
    if a.json:
        for r in res:
            print(json.dumps(r))
    else:
        print("%-26s %-5s %8s %8s | %9s %9s %9s %9s" % ("setup", "scan", "ran", "failed", "trainfit", "no-retry",
                                                        "policy", "advise"))
        for r in res:
            print("%-26s %-5s %8s %8s | %9s %9s %9s %9s %s" % (
                r["setup"], r["scan"], r["measured_runs"], r["measured_fails"], r["trainfit_at_all"],
                r["trainfit_runs"], r["trainfit_fits"], r["advise_at_all"],
                "right" if r["right"] else ("NAMES AN OOM" if r["names_an_oom"] else "low")))
        right = sum(r["right"] for r in res)
        print("right %d of %d; named a value that ran out of memory: %d" % (
            right, len(res), sum(r["names_an_oom"] for r in res)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
