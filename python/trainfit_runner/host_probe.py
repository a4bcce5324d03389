"""The host's dispatch time per operation, measured in trainfit's own units (docs/model.md, "Host dispatch").

    python -m trainfit_runner --host-probe request.json --out probe.json    # as `trainfit calibrate --host` runs it

A step of a tiny model is host-bound: each kernel ends long before the host has dispatched the next
one, so the step's wall time is the host's dispatch work alone. trainfit counts the operations of
that step from the same description of it that `trainfit plan` uses and divides; this module only
runs and times the steps. It counts nothing.

The request, written by trainfit (`trainfit calibrate --host`, `trainfit bench --host-probe`, or the
packaged host_probe_request.json that `trainfit calibrate --host --print-request` writes):

- "model": the tiny model's config.json (a real family's, shrunk: Qwen2 with hidden size 64);
- "runs": [{"name", "config"}]: the setups to time, in trainfit's vocabulary (`trainfit schema`);
- "steps", "warmup": timed steps after the warm-up ones; "device": "cuda" (or "cpu", by request only);
- "busy_check": whether to measure the GPU's busy time (below).

Each run builds the model with the runner's own build_model (models.py; random weights, on the
device) and times its steps with the runner's own run_steps (steps.py): the loop a bench row's
step_seconds comes from, torch.cuda.synchronize() around each step. Then, on a GPU, two more steps
run under torch.profiler, and the union of their kernels' (and copies') intervals is the GPU's busy
time: it must be a small part of the step's wall time for the step to be host-bound (trainfit
refuses the measurement when it is not). On the CPU there is no such check: operations run as they
are dispatched, and the figure is the CPU's time per operation, not a GPU's dispatch cost (trainfit
says so).

The record (one JSON object): "status" ("ok" or "error" with "error"), the request as received,
"device", "gpu", "cpu" (/proc/cpuinfo's model name), "torch", "transformers", "peft", "python",
"measured_at" (UTC), "seconds" (the probe's wall time), and per run "step_seconds" (every step,
warm-up included), "warmup", "gpu_busy_seconds" (per step), "gpu_kernels" (per step), "model_class".
"""
import datetime
import gc
import importlib
import json
import os
import platform
import sys
import tempfile
import time
import traceback

SCHEMA = "trainfit.host_probe/1"
# Steps timed under the profiler for the busy check (after the timed ones: a first step of a new
# optimizer, then a steady one).
BUSY_STEPS = 2


def cpu_model():
    """The CPU's model name, as /proc/cpuinfo gives it ("AMD EPYC 9654 96-Core Processor"), else
    what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


def _version(name):
    try:
        return importlib.import_module(name).__version__
    except Exception:
        return None


def _failed(rec, message):
    rec["status"] = "error"
    rec["error"] = message
    return rec


# What ran on the GPU in a Kineto trace: kernels, copies and sets (not the GPU-side mirrors of
# record_function ranges, "gpu_user_annotation", which span the kernels of a range and its gaps).
GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def busy_of_trace(events):
    """(busy seconds, kernels) of a Kineto trace's events (the chrome trace's "traceEvents"): the
    union of the intervals of what ran on the GPU, so that overlapping ones count once, and how
    many of them were kernels."""
    intervals = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events
                       if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES)
    busy, end = 0.0, None
    for a, b in intervals:
        if end is None or a > end:
            busy += b - a
            end = b
        elif b > end:
            busy += b - end
            end = b
    kernels = sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == "kernel")
    return busy * 1e-6, kernels  # the trace's times are microseconds


def busy_seconds(prof):
    """busy_of_trace of a finished torch.profiler run, through its chrome trace (the format
    `trainfit trace` reads; stable across torch versions)."""
    with tempfile.TemporaryDirectory(prefix="trainfit-host-probe-trace-") as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    return busy_of_trace(trace["traceEvents"] if isinstance(trace, dict) else trace)


def measure_run(torch, device, run, model_path, request):
    """One setup of the request: built, warmed up, timed; on a GPU, its busy time."""
    from . import setup_schema
    from .models import build_model
    from .steps import run_steps
    warmup, steps = int(request.get("warmup", 3)), int(request.get("steps", 15))
    cfg = setup_schema.complete(dict(run["config"], model=str(model_path), steps=warmup + steps, warmup=warmup,
                                     device=device.type))
    res = {}
    model, vocab = build_model(torch, cfg, device, res)
    run_steps(torch, model, cfg, device, vocab, (None, None), res, None)
    out = {"name": run["name"], "step_seconds": [s["seconds"] for s in res["steps"]], "warmup": warmup,
           "model_class": res.get("model_class"),
           "params_trainable": sum(p.numel() for p in model.parameters() if p.requires_grad)}
    if device.type == "cuda" and request.get("busy_check", True):
        try:
            from torch.profiler import ProfilerActivity, profile
            busy_res = {}
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                run_steps(torch, model, dict(cfg, steps=BUSY_STEPS, warmup=0), device, vocab, (None, None),
                          busy_res, None)
            busy, kernels = busy_seconds(prof)
            if kernels == 0:
                raise RuntimeError("the profiler saw no kernel run on the GPU")
            out["gpu_busy_seconds"] = round(busy / BUSY_STEPS, 7)
            out["gpu_kernels"] = round(kernels / BUSY_STEPS, 1)
            out["busy_steps"] = BUSY_STEPS
        except Exception as e:  # trainfit refuses an unchecked measurement and says why
            out["busy_error"] = "%s: %s" % (type(e).__name__, str(e)[:500])
    del model
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
    return out


def measure(request, device=None):
    """Runs the request's steps and returns the record. `device`: a torch.device to run on (the
    bench runner's own); by default the request's ("cuda": the current CUDA device)."""
    t0 = time.time()
    rec = {"schema": SCHEMA, "status": "running", "request": request,
           "measured_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "cpu": cpu_model(), "python": sys.version.split()[0]}
    try:
        import torch
    except ImportError as e:
        return _failed(rec, "torch is not installed for %s (%s): the host probe runs PyTorch steps" % (sys.executable, e))
    rec["torch"] = torch.__version__
    want = request.get("device", "cuda")
    if device is None:
        if want == "cuda":
            if not torch.cuda.is_available():
                return _failed(rec, "no CUDA device: torch %s (built for CUDA %s) sees no GPU; the dispatch cost "
                                    "of a GPU is measured on one" % (torch.__version__, torch.version.cuda))
            device = torch.device("cuda", torch.cuda.current_device())
        elif want == "cpu":
            device = torch.device("cpu")
        else:
            return _failed(rec, "unknown device %r (cuda or cpu)" % want)
    rec["device"] = device.type
    rec["gpu"] = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    for name in ("transformers", "peft"):
        rec[name] = _version(name)
    # The runner's torch-only toy (x_toy, for testing the pipeline) needs neither.
    real = [r for r in request["runs"] if not r["config"].get("x_toy")]
    if real and rec["transformers"] is None:
        return _failed(rec, "transformers is not installed for %s: the probe builds its tiny model with it, as "
                            "bench builds every model" % sys.executable)
    lora = any(r["config"].get("method", "lora") != "full" for r in real)
    if lora and rec["peft"] is None:
        return _failed(rec, "peft is not installed for %s: the probe's LoRA step needs it" % sys.executable)
    try:
        with tempfile.TemporaryDirectory(prefix="trainfit-host-probe-") as tmp:
            model_path = os.path.join(tmp, "config.json")
            with open(model_path, "w") as f:
                json.dump(request["model"], f)
            torch.manual_seed(0)
            rec["runs"] = [measure_run(torch, device, run, model_path, request) for run in request["runs"]]
        rec["status"] = "ok"
    except Exception as e:
        oom = isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ())) or "out of memory" in str(e)
        _failed(rec, "%s%s: %s" % ("out of memory: " if oom else "", type(e).__name__, str(e)[:1500]))
        rec["traceback"] = traceback.format_exc()[-3000:]
    rec["seconds"] = round(time.time() - t0, 2)
    return rec


def request_from_environment():
    """The request `trainfit bench --host-probe` hands its runners ($TRAINFIT_HOST_PROBE names the
    file), or None."""
    path = os.environ.get("TRAINFIT_HOST_PROBE")
    if not path:
        return None
    with open(path) as f:
        return json.load(f)


def packaged_request():
    """The request packaged beside this module (`trainfit calibrate --host --print-request`): what
    the probe for your own code (probe.py) runs when it is not given one."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "host_probe_request.json")) as f:
        return json.load(f)


def main(request_path, out_path):
    """`python -m trainfit_runner --host-probe REQUEST --out OUT`: the record to OUT."""
    from .rows import write_row
    with open(request_path) as f:
        request = json.load(f)
    write_row(out_path, measure(request))
    return 0
