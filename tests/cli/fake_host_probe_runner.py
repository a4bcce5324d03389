#!/usr/bin/env python3
"""A fake host-probe runner for the CLI tests (no GPU, no torch): it speaks the runner's
--host-probe protocol (python/trainfit_runner/host_probe.py) and writes a record whose every step
took exactly $FAKE_STEP_SECONDS (default 0.05), with the request echoed as the real runner does.

$FAKE_PROBE picks what happens: "ok" (default), "no-cuda" and "no-torch" (the real runner's
errors), "busy" (the GPU busy 90% of each step: not host-bound), "unchecked" (no busy time
measured), "cpu" (measured on the CPU), "silent" (exit 1 without a record).
"""
import json
import os
import sys


def main(argv):
    args = dict(zip(argv[1::2], argv[2::2]))
    request = json.load(open(args["--host-probe"]))
    what = os.environ.get("FAKE_PROBE", "ok")
    step = float(os.environ.get("FAKE_STEP_SECONDS", "0.05"))
    if what == "silent":
        print("fake runner: exiting without a record", file=sys.stderr)
        return 1
    rec = {"schema": "trainfit.host_probe/1", "status": "ok", "request": request, "device": "cuda",
           "gpu": "NVIDIA H200", "cpu": "Fake CPU 9000", "torch": "2.11.0+cu130", "transformers": "5.17.0",
           "peft": "0.21.0", "python": "3.12.3", "measured_at": "2026-12-01T12:00:00Z", "seconds": 4.2}
    if what == "no-cuda":
        rec.update(status="error", error="no CUDA device: torch 2.11.0 (built for CUDA 13.0) sees no GPU")
    elif what == "no-torch":
        rec.update(status="error", error="torch is not installed for /usr/bin/python3 (No module named 'torch')")
    else:
        if what == "cpu":
            rec.update(device="cpu", gpu=None)
        runs = []
        for r in request["runs"]:
            run = {"name": r["name"], "step_seconds": [step] * (request["warmup"] + request["steps"]),
                   "warmup": request["warmup"]}
            if what in ("ok", "busy"):
                run["gpu_busy_seconds"] = step * (0.9 if what == "busy" else 0.1)
                run["gpu_kernels"] = 1234.0
            if what == "unchecked":
                run["busy_error"] = "RuntimeError: CUPTI is not available"
            runs.append(run)
        rec["runs"] = runs
    with open(args["--out"], "w") as f:
        json.dump(rec, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
