#!/usr/bin/env python3
"""Where a family's step memory and time go, layer by layer (issue 15: the families the planner
under-predicts).

For each case, the model's published config (data/models/NAME.json) is cut to a few decoder layers
(two depths, so that what one layer costs and what the rest of the model costs come apart: measured
= a + b x layers), and each depth is run by the bench runner itself (`python -m trainfit_runner`,
one process per config, as `trainfit bench` runs it). At the smaller depth a second process also
records, on its first forward, every tensor autograd saves for backward, attributed to the module
that saved it (measure_memory.Tracer), and a memory snapshot at the peak step (probe.Probe), and a
third a Kineto trace of three steps (for `trainfit trace`).

The reduced configs are written to OUT/configs/, so `trainfit plan --model OUT/configs/X.json`
plans exactly what ran. Nothing is fitted here: the rows are measurements.

Usage (GPU machine, from python/):
    python -m trainfit_runner.measure_layer_sweep OUT [--only CASE,CASE] [--deadline-s 540] [--jobs 2]
    python -m trainfit_runner.measure_layer_sweep OUT --timing --jobs 1   (step time alone on the GPU)
"""
import argparse
import copy
import json
import os
import pathlib
import re
import subprocess
import sys
import time

from trainfit_runner.measure_memory import append_row  # one fsync'ed JSON line

HERE = pathlib.Path(__file__).resolve().parent
MODELS = HERE.parent.parent / "data" / "models"

# The cases: a bench config (setup keys) and the two depths. Gemma 3 alternates five sliding-window
# layers with one global one, so its depths are multiples of six.
BASE = {"seq": 1024, "batch": 1, "steps": 4, "warmup": 1, "gpu": "h200"}
CASES = {
    "qwen3moe-lora-qkvo": ({"model": "qwen3-30b-a3b", "method": "lora", "lora_targets": "q,k,v,o"}, (2, 4)),
    "phimoe-lora-qkvo": ({"model": "phi3.5-moe", "method": "lora", "lora_targets": "q,k,v,o"}, (2, 4)),
    "qwen3moe-full": ({"model": "qwen3-30b-a3b", "method": "full"}, (2, 4)),
    "phimoe-full": ({"model": "phi3.5-moe", "method": "full"}, (2, 4)),
    "qwen3moe-lora-all-d0": ({"model": "qwen3-30b-a3b", "method": "lora", "lora_targets": "all-linear",
                              "lora_dropout": 0.0}, (2, 4)),
    "dsv2lite-lora-all-d0": ({"model": "deepseek-v2-lite", "method": "lora", "lora_targets": "all-linear",
                              "lora_dropout": 0.0}, (2, 4)),
    "gemma3-1b-full": ({"model": "gemma3-1b", "method": "full"}, (6, 12)),
    "gemma3-4b-full": ({"model": "gemma3-4b", "method": "full"}, (6, 12)),
    # The second call (2026-12-02): the norms of OLMo 2 and Gemma 2 under full fine-tuning, Mixtral's
    # experts, and the expert adapters at the published depth.
    "olmo2-7b-full": ({"model": "olmo2-7b", "method": "full"}, (2, 4)),
    "gemma2-2b-full": ({"model": "gemma2-2b", "method": "full"}, (2, 4)),
    "mixtral-lora-qkvo": ({"model": "mixtral-8x7b", "method": "lora", "lora_targets": "q,k,v,o"}, (2, 4)),
    "mixtral-full": ({"model": "mixtral-8x7b", "method": "full"}, (2, 4)),
    "mixtral-lora-all-d0": ({"model": "mixtral-8x7b", "method": "lora", "lora_targets": "all-linear",
                             "lora_dropout": 0.0}, (2, 4)),
    "qwen3moe-lora-all-d0-published": ({"model": "qwen3-30b-a3b", "method": "lora", "lora_targets": "all-linear",
                                        "lora_dropout": 0.0}, (None,)),
    "dsv2lite-lora-all-d0-published": ({"model": "deepseek-v2-lite", "method": "lora", "lora_targets": "all-linear",
                                        "lora_dropout": 0.0}, (None,)),
}
# Step time per layer, each config alone on the GPU (--timing): the MoE families' host time.
TIMING = {
    "phimoe-lora-qkvo": (2, 8, None),
    "qwen3moe-lora-qkvo": (2, 8, None),
}


def cut_config(name, layers):
    """The published config with `layers` decoder layers (the text model's, for a multimodal one)."""
    d = json.loads((MODELS / (name + ".json")).read_text())
    d = copy.deepcopy(d)
    inner = d["text_config"] if "text_config" in d else d
    inner["num_hidden_layers"] = layers
    if isinstance(inner.get("layer_types"), list):
        inner["layer_types"] = inner["layer_types"][:layers]
    for k in ("mlp_only_layers",):
        if isinstance(inner.get(k), list):
            inner[k] = [i for i in inner[k] if i < layers]
    return d


def detail_child(case, model_path, out_dir):
    """In this process: the saved-tensor trace of one forward, then steps under the probe with a
    snapshot at the peak, then three profiled steps."""
    import torch
    from trainfit_runner import models, setup_schema, steps
    from trainfit_runner.measure_memory import Tracer
    from trainfit_runner.probe import Probe
    setup, _ = CASES[case]
    cfg = setup_schema.complete(dict(BASE, **dict(setup, model=str(model_path))))
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    torch.manual_seed(0)
    snap = os.path.join(out_dir, case + ".pickle")
    probe = Probe(os.path.join(out_dir, case + ".steps.jsonl"), config=dict(setup, seq=BASE["seq"], batch=1),
                  rows=os.path.join(out_dir, case + ".probe-row.jsonl"), snapshot=snap)
    model, vocab = models.build_model(torch, cfg, device, {})
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = steps.make_optimizer(torch, cfg["optimizer"], params, device)
    gen = torch.Generator(device="cpu").manual_seed(1234)
    ids = torch.randint(0, vocab, (cfg["batch"], cfg["seq"]), generator=gen).to(device)

    tracer = Tracer(torch, model, cfg)
    tracer.start()
    try:
        loss = model(input_ids=ids, labels=ids).loss
    finally:
        tracer.stop()
    tracer.walk_graph(loss)
    loss.backward()
    opt.zero_grad(set_to_none=True)
    del loss
    res = tracer.result(cfg["seq"], cfg["batch"])
    res["case"] = case
    res["trainable"] = sum(p.numel() for p in params)
    res["trainable_by_kind"] = {}
    for n, p in model.named_parameters():
        if p.requires_grad:
            k = re.sub(r"\.layers\.\d+\.", ".layers.N.", n)  # one entry a parameter of every layer
            res["trainable_by_kind"][k] = res["trainable_by_kind"].get(k, 0) + p.numel()
    with open(os.path.join(out_dir, case + ".saved.json"), "w") as f:
        json.dump(res, f, indent=1)

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        with probe.step():
            step()
    probe.close()
    torch.cuda.memory._record_memory_history(enabled=None)
    sched = torch.profiler.schedule(wait=0, warmup=1, active=3, repeat=1)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, schedule=sched) as prof:
        for _ in range(4):
            step()
            prof.step()
    prof.export_chrome_trace(os.path.join(out_dir, case + ".trace.json"))


def parent(args):
    out = pathlib.Path(args.out)
    (out / "configs").mkdir(parents=True, exist_ok=True)
    (out / "rows").mkdir(exist_ok=True)
    (out / "detail").mkdir(exist_ok=True)
    cases = [c for c in CASES if not args.only or c in args.only.split(",")]
    deadline = time.monotonic() + args.deadline_s
    env = dict(os.environ, PYTHONPATH=str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PYTHONUNBUFFERED="1")
    jobs = []  # (what, argv, log)

    def row_job(c, setup, L, tag=""):
        """A row at depth L (None: the published config, by its built-in name)."""
        if L is None:
            model, name = setup["model"], "%s%s" % (c, tag)
        else:
            p = out / "configs" / ("%s-L%d.json" % (setup["model"], L))
            p.write_text(json.dumps(cut_config(setup["model"], L), indent=1))
            model, name = str(p), "%s-L%d%s" % (c, L, tag)
        cfg = dict(BASE, **dict(setup, model=model))
        jobs.append(("row " + name, [sys.executable, "-m", "trainfit_runner", "--config", json.dumps(cfg),
                                     "--out", str(out / "rows" / (name + ".json"))], out / "rows" / (name + ".log")))

    if args.timing:
        for c, depths in TIMING.items():
            for L in depths:
                row_job(c, CASES[c][0], L, "-alone")
    for c in ([] if args.timing else cases):
        setup, depths = CASES[c]
        for L in depths:
            row_job(c, setup, L)
        if depths[0] is None:
            continue
        small = out / "configs" / ("%s-L%d.json" % (setup["model"], depths[0]))
        jobs.append(("detail %s" % c, [sys.executable, "-m", "trainfit_runner.measure_layer_sweep", "--child", c,
                                       "--model-path", str(small), str(out / "detail")],
                     out / "detail" / (c + ".log")))
    running = []
    summary = out / "summary.jsonl"
    while jobs or running:
        while jobs and len(running) < args.jobs:
            what, argv, log = jobs.pop(0)
            left = deadline - time.monotonic()
            if left < 30:
                append_row(summary, {"what": what, "status": "skipped: deadline"})
                continue
            f = open(log, "w")
            running.append((what, subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env=env,
                                                   cwd=str(HERE.parent)), f, time.monotonic()))
        time.sleep(0.5)
        for r in list(running):
            what, proc, f, t0 = r
            if proc.poll() is None and time.monotonic() < deadline:
                continue
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            f.close()
            running.remove(r)
            append_row(summary, {"what": what, "rc": proc.returncode, "seconds": round(time.monotonic() - t0, 1)})
            print(what, proc.returncode, round(time.monotonic() - t0, 1), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--only", default="")
    ap.add_argument("--deadline-s", type=float, default=540)
    ap.add_argument("--jobs", type=int, default=2, help="configs run at once (peaks are per process)")
    ap.add_argument("--timing", action="store_true", help="only the TIMING rows, one at a time")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--model-path", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        detail_child(args.child, args.model_path, args.out)
    else:
        parent(args)


if __name__ == "__main__":
    main()
