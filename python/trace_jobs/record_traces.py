"""Records the real traces `trainfit trace` is checked against, on a GPU machine (docs/trace.md, "Data").

    python3 python/trace_jobs/record_traces.py OUT_DIR            # every job, each in its own process
    python3 python/trace_jobs/record_traces.py OUT_DIR --jobs lora,full

Jobs (models built from config with random weights, as the bench runner builds them; no network).
Each is built to have one cause that dominates its steps, by a wide margin, even with the profiler's
own per-operator cost on the host (tens of microseconds an operator):
  full        Qwen2.5-1.5B, full fine-tuning, bf16, AdamW, seq 2048, batch 8   (expect compute)
  lora        Qwen2.5-1.5B, LoRA r16, bf16, seq 2048, batch 8         (expect memory-bandwidth: PEFT's
              fp32 adapter path, its casts and dropout, outweighs the bf16 matrix multiplies; the
              job was built expecting compute, and both the kernels and the planner say otherwise)
  loader      the Qwen2.5-0.5B full step (about 0.1 s) fed by a DataLoader whose batches take 400 ms
                                                                         (expect input-pipeline)
  lora-small  Qwen2.5-0.5B, LoRA r16, seq 128, batch 1: thousands of tiny kernels a step
                                                                         (expect launch-overhead)
  host        a tiny model (32 layers of 64-wide linears), batch 1      (expect launch-overhead)
  ddp         Qwen2.5-0.5B full fine-tuning under DDP on 2 GPUs (torchrun), one trace per rank
              (no single cause: the reading's figures are checked, not a verdict)
  snapshot    the 0.5B full step with the probe's memory snapshot at its peak step (peak.pickle and
              peak.pickle.json, with max_memory_allocated in it)

Variants, recorded after trainfit's reading was written and checked against these files only after
their verdicts were written down (data/trace/README.md, "Held out"): the ways users record traces
that the jobs above do not.
  compiled     the 0.5B full step under torch.compile (Triton's fused kernels)      (expect compute)
  detailed     the 1.5B full step, batch 4, with record_shapes, profile_memory, with_stack and
               with_flops: memory instants, Python frames, shapes in every event  (expect compute)
  tensorboard  the 0.5B full step, batch 4 x 1024, through tensorboard_trace_handler (gzip) with
               repeat=2: two files of one worker in one folder               (expect launch-overhead)
  sync         the 0.5B full step with an .item() after every decoder layer     (expect launch-overhead,
               most of it sync wait)
  graph        a whole training step (32 bf16 linears 2048 wide, 8192 rows, AdamW capturable) captured
               in one CUDA graph and replayed: one launch a step                 (expect compute)
  cpu-only     the 0.5B full step profiled with the CPU activity alone: no GPU events (no verdict)
  h2d          a small model fed 1 GiB of pageable host memory copied to the GPU every step
                                                                                  (expect offload)
  long         the lora-small step, 8 active steps: a file of about 140 MB for the speed ratio
                                                                             (expect launch-overhead)
Written down on 2026-12-02 before these two ran:
  workers      the loader job's 400 ms batches made by two DataLoader worker processes: one batch
               every 200 ms against a step of about 110 ms; about 45% of each step waiting in
               _MultiProcessingDataLoaderIter.__next__                      (expect input-pipeline)
  trainer      the 0.5B full step, batch 4 x 1024, through transformers' Trainer (bf16, fused AdamW,
               gradient clipping), the profiler stepped by a TrainerCallback as the HF docs show
                                                                             (expect launch-overhead)

Written down on 2026-12-02 before it ran, after the kernel categories learnt cuDNN's convolutions
from Holistic Trace Analysis's V100 and A100 test traces (docs/trace.md, "Held out: other people's
traces"):
  conv         torchvision's ResNet-50, batch 64 of 224 x 224 images, bf16 autocast, channels_last,
               SGD with momentum: cuDNN's convolution kernels over half the kernel time, batch
               norms and ReLUs the rest; the GPU over 90% busy                  (expect compute)
Written down on 2026-12-02 after `conv` ran (launch-overhead: its GPU did 15 ms of a 60-80 ms step,
the host's Python and the profiler's cost per operator set the pace; batch norms and other
elementwise kernels took twice the convolutions' time), before this one did:
  conv-large   the same at batch 512: the GPU's work grows eightfold (about 120 ms a step) while the
               host's stays, so the GPU sets the pace; batch norms, ReLUs and adds twice the
               convolutions' time, as at batch 64                      (expect memory-bandwidth)

Written down on 2026-12-02 (the evening) before these three ran, with `trainfit plan`'s prediction
for each setup on an H200 beside them:
  llama-full   Llama-3.2-1B (a family no trace here has), full fine-tuning, bf16, AdamW, 8 x 2048: the
               GPU over 90% busy, matrix multiplies and attention ahead of the elementwise and
               optimizer kernels (plan: 0.196 s against 0.073 s of a 0.270 s step)   (expect compute)
  long-seq     Qwen2.5-0.5B full fine-tuning at 1 x 16384 tokens: attention the largest category,
               ahead of the matrix multiplies (plan: attention 95 ms, matmul 71 ms, memory
               traffic 64 ms of a 0.234 s step)                                        (expect compute)
  lora-ckpt    the `lora` job with gradient checkpointing: the recomputed forward repeats both the
               adapters' fp32 passes and the projections, so the elementwise kernels stay ahead
               (plan: memory traffic 0.62 s against matmul and attention 0.24 s of a 0.954 s step)
                                                                              (expect memory-bandwidth)

Each job writes OUT_DIR/<job>/: trace.json.gz (ddp: rank0.json.gz, rank1.json.gz), expected.json (the
independent reading of read_trace.py, plus "expect", the bottleneck the job was built to have),
and log.txt. A job that fails leaves its log and does not stop the others; OUT_DIR/summary.json
says what each job did. Profiles are short (5 steps: 1 wait, 1 warmup, 3 active), so the files
stay small enough to check in.
"""
import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))  # trainfit_runner

SMALL_FULL = {"model": "qwen2.5-0.5b", "method": "full", "weights": "bf16", "seq": 1024, "batch": 4,
              "optimizer": "adamw"}

JOBS = {
    "full": {"expect": "compute", "config": {"model": "qwen2.5-1.5b", "method": "full", "weights": "bf16",
                                             "seq": 2048, "batch": 8, "optimizer": "adamw"}},
    "lora": {"expect": "memory-bandwidth", "config": {"model": "qwen2.5-1.5b", "method": "lora", "weights": "bf16", "rank": 16,
                                             "seq": 2048, "batch": 8}},
    "loader": {"expect": "input-pipeline", "config": {"model": "qwen2.5-0.5b", "method": "full", "weights": "bf16",
                                                      "seq": 1024, "batch": 4, "optimizer": "adamw"},
               "loader_seconds": 0.4},
    "lora-small": {"expect": "launch-overhead", "config": {"model": "qwen2.5-0.5b", "method": "lora", "weights": "bf16",
                                                           "rank": 16, "seq": 128, "batch": 1}},
    "host": {"expect": "launch-overhead", "toy": True},
    "ddp": {"expect": None, "config": {"model": "qwen2.5-0.5b", "method": "full", "weights": "bf16",
                                       "seq": 1024, "batch": 4, "optimizer": "adamw"},
            "gpus": 2},
    # The MoE step as the families plan ran it (data/bench/h200-families-2026-12-01.jsonl): where
    # Phi-3.5-MoE's step goes that its layers alone do not explain (not in data/trace/).
    "phimoe": {"expect": None, "config": {"model": "phi3.5-moe", "method": "lora", "weights": "bf16", "rank": 16,
                                          "lora_targets": "q,k,v,o", "seq": 1024, "batch": 1}},
    "qwen3moe": {"expect": None, "config": {"model": "qwen3-30b-a3b", "method": "lora", "weights": "bf16",
                                            "rank": 16, "lora_targets": "q,k,v,o", "seq": 1024, "batch": 1}},
    "snapshot": {"expect": None, "config": {"model": "qwen2.5-0.5b", "method": "full", "weights": "bf16",
                                            "seq": 1024, "batch": 4, "optimizer": "adamw"}, "snapshot": True},
    # Variants (see the docstring).
    "compiled": {"expect": "compute", "config": SMALL_FULL, "compile": True},
    "detailed": {"expect": "compute", "config": {"model": "qwen2.5-1.5b", "method": "full", "weights": "bf16",
                                                 "seq": 2048, "batch": 4, "optimizer": "adamw"},
                 "profiler": {"record_shapes": True, "profile_memory": True, "with_stack": True, "with_flops": True}},
    "tensorboard": {"expect": "launch-overhead", "config": SMALL_FULL, "tensorboard": True},
    "sync": {"expect": "launch-overhead", "config": SMALL_FULL, "item_every_layer": True},
    "graph": {"expect": "compute", "toy": "graph"},
    "cpu-only": {"expect": None, "config": SMALL_FULL, "cpu_only": True},
    "h2d": {"expect": "offload", "toy": "h2d"},
    "long": {"expect": "launch-overhead", "config": {"model": "qwen2.5-0.5b", "method": "lora", "weights": "bf16",
                                                     "rank": 16, "seq": 128, "batch": 1}, "active": 8},
    "workers": {"expect": "input-pipeline", "config": SMALL_FULL, "loader_seconds": 0.4, "loader_workers": 2},
    "trainer": {"expect": "launch-overhead", "config": SMALL_FULL, "hf_trainer": True},
    "conv": {"expect": "compute", "toy": "conv"},
    "conv-large": {"expect": "memory-bandwidth", "toy": "conv", "batch": 512},
    "llama-full": {"expect": "compute", "config": {"model": "llama3.2-1b", "method": "full", "weights": "bf16",
                                                   "seq": 2048, "batch": 8, "optimizer": "adamw"}},
    "long-seq": {"expect": "compute", "config": {"model": "qwen2.5-0.5b", "method": "full", "weights": "bf16",
                                                 "seq": 16384, "batch": 1, "optimizer": "adamw"}},
    "lora-ckpt": {"expect": "memory-bandwidth", "config": {"model": "qwen2.5-1.5b", "method": "lora", "weights": "bf16",
                                                           "rank": 16, "seq": 2048, "batch": 8, "grad_ckpt": True}},
}


def gzip_file(src, dst):
    with open(src, "rb") as f, gzip.open(dst, "wb", compresslevel=6) as g:
        shutil.copyfileobj(f, g)
    os.remove(src)


def build_graphed(torch, device):
    """A whole training step captured in one CUDA graph: the host launches it once a step."""
    nn = torch.nn
    model = nn.Sequential(*[m for _ in range(32) for m in (nn.Linear(2048, 2048), nn.ReLU())])
    model = model.to(device=device, dtype=torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, capturable=True)
    x = torch.randn(8192, 2048, device=device, dtype=torch.bfloat16)

    def eager():
        loss = model(x).float().square().mean()
        loss.backward()
        opt.step()
        return loss

    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm up on a side stream, as CUDA graph capture asks
        for _ in range(3):
            opt.zero_grad(set_to_none=True)
            eager()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        eager()

    def step(_batch):
        graph.replay()
        return None

    return step, lambda: None


def build_h2d(torch, device):
    """A small model whose every batch is 1 GiB of pageable host memory copied to the GPU."""
    nn = torch.nn
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    host = torch.randn(256, 1024, 1024)  # 1 GiB of fp32, not pinned

    def step(batch):
        on_gpu = batch.to(device)
        loss = model(on_gpu[:64].reshape(-1, 1024)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step, lambda: host


def build_conv(torch, device, batch):
    """torchvision's ResNet-50 at `batch` x 224 x 224, bf16 autocast, channels_last, SGD with momentum."""
    import torchvision
    model = torchvision.models.resnet50().to(device=device, memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    images = torch.randn(batch, 3, 224, 224, device=device).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=device)

    def step(batch):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(batch), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step, lambda: images


def build(torch, job, device):
    """The model, its optimizer and a batch maker, as the bench runner builds them."""
    if job.get("toy") == "conv":
        return build_conv(torch, device, job.get("batch", 64))
    if job.get("toy") == "graph":
        return build_graphed(torch, device)
    if job.get("toy") == "h2d":
        return build_h2d(torch, device)
    if job.get("toy"):
        nn = torch.nn
        layers = [nn.Linear(64, 64) for _ in range(32)]
        model = nn.Sequential(*[m for l in layers for m in (l, nn.ReLU())]).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(1, 64, device=device)

        def step(batch):
            loss = model(batch).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        return step, lambda: x
    from trainfit_runner import models, run, setup_schema, steps
    cfg = setup_schema.complete(dict(job["config"]))
    model, vocab = models.build_model(torch, cfg, device, {})
    if job.get("gpus", 1) > 1:
        # DDP: the wrapped model; the runner's record of the layout goes nowhere here.
        model, _pipe, _stage = run.wrap_distributed(torch, model, cfg, device, {})
    if job.get("item_every_layer"):
        # A host read of each decoder layer's output: the queue drains at every layer, as a debug
        # print or a NaN check in a hook does.
        def read_back(_module, _inputs, out):
            (out[0] if isinstance(out, tuple) else out).sum().item()  # returns None: the output stays as it is

        for layer in model.model.layers:
            layer.register_forward_hook(read_back)
    if job.get("compile"):
        model = torch.compile(model)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = steps.make_optimizer(torch, cfg["optimizer"], params, device)
    gen = torch.Generator(device="cpu").manual_seed(1234)
    ids = torch.randint(0, vocab, (cfg["batch"], cfg["seq"]), generator=gen)

    def step(batch):
        batch = batch.to(device, non_blocking=True)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step, lambda: ids


class SlowBatches:
    """A map-style dataset whose every batch takes `seconds` to make: a loader the GPU waits for."""

    def __init__(self, make, seconds, n):
        self.make, self.seconds, self.n = make, seconds, n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.seconds)
        return self.make()


def run_trainer(torch, job, device, out_dir):
    """The step through transformers' Trainer, profiled the way its documentation shows: a callback
    that steps the profiler at the end of each optimizer step."""
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from trainfit_runner import models, setup_schema
    cfg = setup_schema.complete(dict(job["config"]))
    model, vocab = models.build_model(torch, cfg, device, {})
    gen = torch.Generator(device="cpu").manual_seed(1234)
    rows = [torch.randint(0, vocab, (cfg["seq"],), generator=gen) for _ in range(64)]

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return len(rows)

        def __getitem__(self, i):
            return {"input_ids": rows[i], "labels": rows[i]}

    class StepProfiler(TrainerCallback):
        def __init__(self, prof):
            self.prof = prof

        def on_step_end(self, args, state, control, **kwargs):
            self.prof.step()

    args = TrainingArguments(output_dir=os.path.join(out_dir, "trainer"), per_device_train_batch_size=cfg["batch"],
                             max_steps=8, bf16=True, optim="adamw_torch_fused", learning_rate=1e-5,
                             logging_steps=1000, save_strategy="no", report_to=[], dataloader_num_workers=0)
    schedule = torch.profiler.schedule(wait=3, warmup=1, active=3, repeat=1)  # past the first steps' set-up
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, schedule=schedule) as prof:
        trainer = Trainer(model=model, args=args, train_dataset=Rows(), callbacks=[StepProfiler(prof)])
        trainer.train()
    raw = os.path.join(out_dir, "trace.json")
    prof.export_chrome_trace(raw)
    gzip_file(raw, raw + ".gz")


def run_job(name, out_dir):
    """One job, in this process (under torchrun for ddp)."""
    import torch
    job = JOBS[name]
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        import torch.distributed as dist
        dist.init_process_group("nccl")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.cuda.set_device(device)
    torch.manual_seed(0)
    probe = None
    if job.get("snapshot"):
        from trainfit_runner.probe import Probe
        # Made before the model, so that the weights' allocations carry their stacks.
        probe = Probe(os.path.join(out_dir, "steps.jsonl"), config=job["config"], rows=os.path.join(out_dir, "row.jsonl"),
                      snapshot=os.path.join(out_dir, "peak.pickle"))
    if job.get("hf_trainer"):
        run_trainer(torch, job, device, out_dir)
        return
    step, make_batch = build(torch, job, device)
    active = job.get("active", 3)
    steps = 2 + active * (2 if job.get("tensorboard") else 1)
    if job.get("loader_seconds"):
        data = torch.utils.data.DataLoader(SlowBatches(make_batch, job["loader_seconds"], steps), batch_size=None,
                                           num_workers=job.get("loader_workers", 0))
    else:
        data = [make_batch() for _ in range(steps)]
    for _ in range(2):  # warm up outside the profile: cuBLAS handles, autotuning, the allocator's pools
        step(make_batch())
    torch.cuda.synchronize(device)
    if probe is None and job.get("tensorboard"):
        # The handler writes each cycle's file itself: <worker>.<time>.pt.trace.json.gz, two here.
        schedule = torch.profiler.schedule(wait=1, warmup=1, active=active // 2 + 1, repeat=2)
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        handler = torch.profiler.tensorboard_trace_handler(out_dir, worker_name="worker0", use_gzip=True)
        with torch.profiler.profile(activities=acts, schedule=schedule, on_trace_ready=handler) as prof:
            for batch in data:
                step(batch)
                prof.step()
    elif probe is None:
        schedule = torch.profiler.schedule(wait=1, warmup=1, active=active, repeat=1)
        acts = [torch.profiler.ProfilerActivity.CPU]
        if not job.get("cpu_only"):
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=acts, schedule=schedule, **job.get("profiler", {})) as prof:
            for batch in data:
                step(batch)
                prof.step()
        raw = os.path.join(out_dir, "rank%d.json" % rank if world > 1 else "trace.json")
        prof.export_chrome_trace(raw)
        gzip_file(raw, raw + ".gz")
    else:
        for batch in data:
            with probe.step():
                step(batch)
        probe.close()
    if world > 1:
        import torch.distributed as dist
        dist.barrier()
        dist.destroy_process_group()


def expected_figures(name, out_dir):
    import read_trace
    job = JOBS[name]
    files = sorted(f for f in os.listdir(out_dir) if f.endswith(".json.gz"))
    expected = {"job": name, "expect": job.get("expect"), "config": job.get("config"), "files": {}}
    for f in files:
        expected["files"][f] = read_trace.read(os.path.join(out_dir, f))
    if job.get("snapshot"):
        with open(os.path.join(out_dir, "peak.pickle.json")) as f:
            snap = json.load(f)
        expected["allocator_max_memory_allocated"] = snap.get("allocator", {}).get("max_memory_allocated")
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--jobs", default=",".join(JOBS))
    ap.add_argument("--job", help=argparse.SUPPRESS)  # one job in this process (what the loop below starts)
    a = ap.parse_args(argv)
    if a.job:
        run_job(a.job, a.out)
        return 0
    os.makedirs(a.out, exist_ok=True)
    summary = {}
    for name in a.jobs.split(","):
        out_dir = os.path.join(a.out, name)
        os.makedirs(out_dir, exist_ok=True)
        job = JOBS[name]
        me = os.path.abspath(__file__)
        if job.get("gpus", 1) > 1:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=%d" % job["gpus"],
                   me, out_dir, "--job", name]
        else:
            cmd = [sys.executable, me, out_dir, "--job", name]
        t0 = time.time()
        with open(os.path.join(out_dir, "log.txt"), "w") as log:
            try:
                code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=1200)
            except subprocess.TimeoutExpired:
                code = "timeout"
        status = {"exit": code, "seconds": round(time.time() - t0, 1)}
        if code == 0:
            try:
                expected_figures(name, out_dir)
            except Exception:
                status["expected_error"] = traceback.format_exc()[-2000:]
        summary[name] = status
        print(name, status, flush=True)
        with open(os.path.join(a.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
