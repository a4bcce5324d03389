"""Measures, each on its own, the host and GPU costs the time model's multi-GPU terms price
(docs/model.md, "The step" and "Two-GPU layouts"): the constants in include/trainfit/time.hpp
marked AWAITS MEASUREMENT, the DTensor operations the runner's tensor-parallel plan dispatches
(src/time/step_work.cpp, kDTensorForwardOpsPerLayer and the others), FSDP2's host work per unit and per parameter
tensor, whether a pipeline stage's host waits for the other stage, and Python's garbage
collections during FSDP steps.

    cd python && torchrun --standalone --nproc-per-node 2 -m trainfit_runner.measure_dispatch --out FILE

About a minute on two H200s (torch, transformers; no network: the models are built from the
built-in configs with random weights). Rank 0 prints one JSON object and writes it to --out. Each
section is measured on its own and reports an `error` instead of stopping the others. What each
section reports:

- `dtensor`: `dtensor_seconds_per_op`, the host time an operation on DTensors takes beyond the same
  operation on plain tensors: a chain of small elementwise operations (the GPU is never the limit),
  forward and backward under autograd, DTensor (Shard(1), as sequence parallelism keeps the
  activations) against plain; and the same for a linear (weight Shard(0), input Replicate).
- `tp_plan`: the runner's own plan (parallel.apply_tensor_parallel) on Qwen2.5-1.5B-shaped models of
  2 and 4 layers: operations dispatched on DTensors (a TorchDispatchMode counting the operations with
  a DTensor argument), DTensor.from_local / to_local / redistribute calls, per decoder layer (forward,
  backward) and outside the layers; and, in situ, the host time a layer's forward and backward takes
  under the plan against the same layer without it, divided by its DTensor operations.
- `collectives`: `collective_launch_seconds` (host time to issue one torch.distributed.broadcast with
  async_op=True and wait on its handle, as ZeroRedundancyOptimizer does for every parameter tensor)
  and `collective_latency_seconds` (GPU time of one small NCCL broadcast, back to back, measured with
  CUDA events behind a sleep kernel so that the host's issuing is not in it); and ZeRO-1's whole
  post-step broadcast of Qwen2.5-1.5B's parameters (greedy partition, one broadcast a tensor): host
  and GPU seconds, against what the model prices.
- `fsdp`: FSDP2 (fully_shard per block and on the root) on tiny models of k blocks of q parameter
  tensors: the step's host time over the same model without FSDP at four (k, q), solved for a
  per-step, a per-unit and a per-parameter-tensor cost, for reshard_after_forward True and False and
  MixedPrecisionPolicy (fp32 shards, bf16 compute, fp32 reduce); the model prices 8 operations a
  parameter tensor (262 us) today.
- `pipeline`: torch.distributed.pipelining's Schedule1F1B over the runner's two stages of an 8-layer
  Qwen2.5-1.5B-shaped model, 2 and 4 micro-batches: on each rank, when schedule.step() returns to the
  host and when the GPU is done. The time model assumes a stage's host never waits for the other
  stage (its receives make the GPU stream wait): then the host returns long before the GPU is done
  and its time grows with the micro-batches alone.
- `gc`: 20 FSDP2 steps of an 8-layer Qwen2.5-1.5B-shaped model: each step's wall time and the
  garbage collections (generation, seconds) that ran in it, to see whether slow steps are gen-2
  collections.
"""
import argparse
import contextlib
import datetime
import gc
import json
import os
import statistics
import time
import traceback

import torch
import torch.distributed as dist

from . import models, parallel


def cuda_sync():
    torch.cuda.synchronize()


def median_time(fn, repeats=5, warmup=2, sync=True):
    """Median wall seconds of fn() (GPU work included when sync)."""
    for _ in range(warmup):
        fn()
    if sync:
        cuda_sync()
    times = []
    for _ in range(repeats):
        dist.barrier()
        if sync:
            cuda_sync()
        t0 = time.perf_counter()
        fn()
        if sync:
            cuda_sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def section(name, fn, out):
    try:
        out[name] = fn()
    except Exception as e:  # one section failing leaves the others' figures
        out[name] = {"error": "%s: %s" % (type(e).__name__, e), "traceback": traceback.format_exc()[-2000:]}
    dist.barrier()
    gc.collect()
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------
# DTensor dispatch

def scalar(y):
    """A plain scalar to call backward on: a DTensor's local part (its backward rewraps the gradient
    with the same placements), summed in fp32."""
    from torch.distributed.tensor import DTensor
    return (y.to_local() if isinstance(y, DTensor) else y).float().sum()

def dtensor_costs(device, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    mesh = init_device_mesh("cuda", (world,))
    n = 2000

    def chain(x):
        for _ in range(n):
            x = x * 1.0001
        return x

    base = torch.randn(1, 64 * world, 64, device=device)
    plain = base[:, :64].clone().requires_grad_()
    dt = distribute_tensor(base, mesh, [Shard(1)]).detach().requires_grad_()

    def fwd_bwd(x):
        def step():
            scalar(chain(x)).backward()
            x.grad = None
        return step

    def fwd_only(x):
        def step():
            with torch.no_grad():
                chain(x)
        return step

    t_plain = median_time(fwd_bwd(plain))
    t_dt = median_time(fwd_bwd(dt))
    t_plain_ng = median_time(fwd_only(plain))
    t_dt_ng = median_time(fwd_only(dt))
    # A column-parallel linear: weight Shard(0), input Replicate (as ColwiseParallel computes).
    w_plain = torch.randn(256, 256, device=device, dtype=torch.bfloat16, requires_grad=True)
    w_dt = distribute_tensor(torch.randn(256 * world, 256, device=device, dtype=torch.bfloat16), mesh,
                             [Shard(0)]).detach().requires_grad_()
    x_plain = torch.randn(1, 16, 256, device=device, dtype=torch.bfloat16, requires_grad=True)
    x_dt = distribute_tensor(x_plain.detach(), mesh, [Replicate()]).requires_grad_()
    m = 200

    def linears(x, w):
        def step():
            y = x
            for _ in range(m):
                y = torch.nn.functional.linear(x, w)
            scalar(y).backward()
        return step

    ops = count_dtensor_ops(linears(x_dt, w_dt))
    t_lin_plain = median_time(linears(x_plain, w_plain))
    t_lin_dt = median_time(linears(x_dt, w_dt))
    per_op = (t_dt - t_plain) / (2 * n)
    return {
        "how": "host seconds of %d chained x * 1.0001 on a 1 x %d x 64 fp32 tensor, forward and backward, "
               "DTensor Shard(1) over %d GPUs against a plain tensor; %d F.linear (256x256 bf16, weight "
               "Shard(0), input Replicate) forward + one backward" % (n, 64 * world, world, m),
        "plain_op_seconds": t_plain / (2 * n),
        "dtensor_op_seconds": t_dt / (2 * n),
        "dtensor_seconds_per_op": per_op,
        "no_grad": {"plain_op_seconds": t_plain_ng / n, "dtensor_op_seconds": t_dt_ng / n,
                    "extra_seconds_per_op": (t_dt_ng - t_plain_ng) / n},
        "linear": {"calls": m, "dtensor_ops_counted": ops, "plain_seconds": t_lin_plain, "dtensor_seconds": t_lin_dt,
                   "extra_seconds_per_dtensor_op": (t_lin_dt - t_lin_plain) / max(1, ops["dtensor_ops"])},
    }


class _Counter:
    """Counts, while active, the operations dispatched with a DTensor argument (and the others), and
    the calls of DTensor.from_local, to_local and redistribute."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.distributed.tensor import DTensor
        import torch.utils._pytree as pytree
        counter = self
        self.dtensor_ops = 0
        self.plain_ops = 0
        self.calls = {"from_local": 0, "to_local": 0, "redistribute": 0}
        self.by_op = {}

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                if any(isinstance(a, DTensor) for a in pytree.tree_leaves((args, kwargs))):
                    counter.dtensor_ops += 1
                    name = str(func.overloadpacket.__name__)
                    counter.by_op[name] = counter.by_op.get(name, 0) + 1
                else:
                    counter.plain_ops += 1
                return func(*args, **kwargs)

        self.mode = Mode()
        self.DTensor = DTensor

    @contextlib.contextmanager
    def active(self):
        D = self.DTensor
        import inspect
        orig = {"from_local": inspect.getattr_static(D, "from_local"), "to_local": D.to_local,
                "redistribute": D.redistribute}
        calls = self.calls
        from_local_fn = orig["from_local"].__func__ if isinstance(orig["from_local"], staticmethod) else None

        def from_local(*a, **k):
            calls["from_local"] += 1
            return from_local_fn(*a, **k)

        def to_local(self_, *a, **k):
            calls["to_local"] += 1
            return orig["to_local"](self_, *a, **k)

        def redistribute(self_, *a, **k):
            calls["redistribute"] += 1
            return orig["redistribute"](self_, *a, **k)

        if from_local_fn is not None:
            D.from_local = staticmethod(from_local)
        D.to_local = to_local
        D.redistribute = redistribute
        try:
            with self.mode:
                yield self
        finally:
            D.from_local = orig["from_local"]
            D.to_local = orig["to_local"]
            D.redistribute = orig["redistribute"]

    def snapshot(self):
        return {"dtensor_ops": self.dtensor_ops, "plain_ops": self.plain_ops, **dict(self.calls)}


def count_dtensor_ops(fn):
    c = _Counter()
    with c.active():
        fn()
    cuda_sync()
    return c.snapshot()


# ---------------------------------------------------------------------------------------------
# The runner's tensor-parallel plan

def qwen_like(layers, device, dtype=torch.bfloat16):
    """A Qwen2.5-1.5B-shaped causal LM (the built-in config) of `layers` decoder layers, random weights."""
    import transformers
    hf = models.load_hf_config("qwen2.5-1.5b")
    hf.num_hidden_layers = layers
    if getattr(hf, "layer_types", None):
        hf.layer_types = hf.layer_types[:layers]
    if getattr(hf, "max_window_layers", None):
        hf.max_window_layers = min(hf.max_window_layers, layers)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(hf, dtype=dtype, attn_implementation="sdpa")
    model.train()
    return model, hf.vocab_size


def tp_plan(device, world):
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cuda", (world,))
    seq = 256  # short: the host, not the GPU, sets the pace
    out = {"model": "qwen2.5-1.5b shape", "seq": seq, "tp": world, "counts": {}, "host_seconds": {}}
    for layers in (2, 4, 6):
        model, vocab = qwen_like(layers, device)
        gen = torch.Generator(device="cpu").manual_seed(0)
        ids = torch.randint(0, vocab, (1, seq), generator=gen).to(device)
        # Every step starts with the gradients set to None, as the runner's do: a backward into
        # existing gradients would add one accumulation (add_) a parameter tensor to both sides.
        # (The 2026-12-01 run did not; docs/model.md takes those add_ out of its counts.)
        def plain():
            model.zero_grad(set_to_none=True)
            model(input_ids=ids, labels=ids).loss.backward()

        plain_step = median_time(plain)
        model = parallel.apply_tensor_parallel(torch, model, mesh)

        def step():
            model.zero_grad(set_to_none=True)
            model(input_ids=ids, labels=ids).loss.backward()

        step()  # the first step fills DTensor's sharding caches
        if layers in (2, 4):
            model.zero_grad(set_to_none=True)
            fwd, bwd = _Counter(), _Counter()
            with fwd.active():
                loss = model(input_ids=ids, labels=ids).loss
            with bwd.active():
                loss.backward()
            cuda_sync()
            out["counts"][layers] = {"forward": fwd.snapshot(), "backward": bwd.snapshot(),
                                     "forward_by_op": fwd.by_op, "backward_by_op": bwd.by_op}
        out["host_seconds"][layers] = {"tp": median_time(step), "plain": plain_step}
        del model
        gc.collect()
        torch.cuda.empty_cache()
    c2, c4 = out["counts"][2], out["counts"][4]
    per_layer, outside = {}, {}
    for phase in ("forward", "backward"):
        for key in ("dtensor_ops", "from_local", "to_local", "redistribute"):
            per = (c4[phase][key] - c2[phase][key]) / 2.0
            per_layer.setdefault(phase, {})[key] = per
            outside.setdefault(phase, {})[key] = c2[phase][key] - 2.0 * per
    out["per_layer"] = per_layer
    out["outside_layers"] = outside

    def total(d):
        return sum(d[p][k] for p in d for k in ("dtensor_ops", "from_local", "to_local", "redistribute"))

    out["dtensor_ops_per_layer_step"] = total(per_layer)  # the model: kDTensorForward/BackwardOpsPerLayer
    out["dtensor_ops_outside_step"] = total(outside)      # the model: kDTensorForward/BackwardOpsOutside
    h2, h6 = out["host_seconds"][2], out["host_seconds"][6]
    extra_per_layer = ((h6["tp"] - h2["tp"]) - (h6["plain"] - h2["plain"])) / 4.0
    out["extra_host_seconds_per_layer"] = extra_per_layer
    out["in_situ_dtensor_seconds_per_op"] = extra_per_layer / max(1.0, out["dtensor_ops_per_layer_step"])
    return out


# ---------------------------------------------------------------------------------------------
# Collectives issued one by one

def sleep_cycles_per_second():
    """What torch.cuda._sleep's cycles come to in seconds on this GPU, timed with events."""
    cycles = 20_000_000
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    torch.cuda._sleep(cycles)
    e1.record()
    cuda_sync()
    return cycles / (e0.elapsed_time(e1) / 1e3)


def collectives(device, world, rank):
    n = 400
    t = torch.zeros(2048, device=device, dtype=torch.bfloat16)

    def issue():
        return [dist.broadcast(t, src=i % world, async_op=True) for i in range(n)]

    for _ in range(3):
        for w in issue():
            w.wait()
    cuda_sync()
    launch, waits = [], []
    for _ in range(5):
        dist.barrier()
        cuda_sync()
        t0 = time.perf_counter()
        works = issue()
        t1 = time.perf_counter()
        for w in works:
            w.wait()
        t2 = time.perf_counter()
        cuda_sync()
        launch.append((t1 - t0) / n)
        waits.append((t2 - t1) / n)

    def gpu_seconds(issue_fn, count, sleep_s=0.08):
        # A sleep kernel holds the stream while the host issues everything; the NCCL stream waits
        # on it, so the events time the collectives alone, back to back.
        cycles = int(sleep_s * sleep_cycles_per_second())
        res = []
        for _ in range(3):
            dist.barrier()
            cuda_sync()
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(cycles)
            e0.record()
            t0 = time.perf_counter()
            works = issue_fn()
            for w in works:
                w.wait()
            host = time.perf_counter() - t0
            e1.record()
            cuda_sync()
            res.append((e0.elapsed_time(e1) / 1e3, host))
        gpu = statistics.median(r[0] for r in res)
        host = max(r[1] for r in res)
        return gpu / count, host < sleep_s

    latency, clean = gpu_seconds(issue, n)
    out = {"how": "%d broadcasts of 4 KiB, alternating source, async_op=True, then every handle waited on" % n,
           "collective_launch_seconds": statistics.median(launch) + statistics.median(waits),
           "issue_seconds": statistics.median(launch), "wait_seconds": statistics.median(waits),
           "collective_latency_seconds": latency, "latency_clean": clean}
    # ZeRO-1's post-step broadcast of a real model's parameters (ZeroRedundancyOptimizer,
    # parameters_as_bucket_view=False): greedy partition by size, each rank's tensors in turn.
    import transformers
    hf = models.load_hf_config("qwen2.5-1.5b")
    with torch.device("meta"):
        meta = transformers.AutoModelForCausalLM.from_config(hf, dtype=torch.bfloat16)
    shapes = [p.shape for p in meta.parameters()]
    del meta
    params = [torch.zeros(s, device=device, dtype=torch.bfloat16) for s in shapes]
    sizes = [0] * world
    owner = {}
    for i in sorted(range(len(params)), key=lambda i: params[i].numel(), reverse=True):
        r = min(range(world), key=lambda r: sizes[r])
        owner[i] = r
        sizes[r] += params[i].numel()

    def zero1():
        return [dist.broadcast(params[i], src=r, async_op=True)
                for r in range(world) for i in range(len(params)) if owner[i] == r]

    for _ in range(2):
        for w in zero1():
            w.wait()
    cuda_sync()
    hosts = []
    for _ in range(3):
        dist.barrier()
        cuda_sync()
        t0 = time.perf_counter()
        for w in zero1():
            w.wait()
        hosts.append(time.perf_counter() - t0)
        cuda_sync()
    gpu, clean = gpu_seconds(zero1, 1, sleep_s=0.2)
    total_bytes = sum(p.numel() for p in params) * 2
    out["zero1_qwen2.5-1.5b"] = {"tensors": len(params), "bytes": total_bytes, "host_seconds": statistics.median(hosts),
                                 "gpu_seconds": gpu, "gpu_clean": clean,
                                 "bus_bytes_per_s": (world - 1) / world * total_bytes / gpu if gpu > 0 else None}
    del params
    return out


# ---------------------------------------------------------------------------------------------
# FSDP2's host work

def least_squares(rows, values):
    """x minimising |rows x - values| (normal equations, Gaussian elimination; a few unknowns)."""
    n = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(n)] + [sum(r[i] * v for r, v in zip(rows, values))]
         for i in range(n)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(a[r][c]))
        a[c], a[p] = a[p], a[c]
        for r in range(n):
            if r != c and a[c][c] != 0:
                f = a[r][c] / a[c][c]
                a[r] = [x - f * y for x, y in zip(a[r], a[c])]
    return [a[i][n] / a[i][i] if a[i][i] != 0 else float("nan") for i in range(n)]


def fsdp_costs(device, world):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    nn = torch.nn
    width = 64 * world

    class Block(nn.Module):
        def __init__(self, q):
            super().__init__()
            self.ws = nn.ParameterList(nn.Parameter(torch.randn(width, width) / width) for _ in range(q))

        def forward(self, x):
            for w in self.ws:
                x = x @ w
            return x

    class Net(nn.Module):
        def __init__(self, k, q):
            super().__init__()
            self.blocks = nn.ModuleList(Block(q) for _ in range(k))

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return x.float().sum()

    def step_time(k, q, variant):
        torch.manual_seed(0)
        dtype = torch.float32 if variant == "mixed-precision" else torch.bfloat16
        net = Net(k, q).to(device=device, dtype=dtype)
        if variant != "plain":
            kw = {}
            if variant == "reshard-after-forward-false":
                kw["reshard_after_forward"] = False
            if variant == "mixed-precision":
                kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            for b in net.blocks:
                fully_shard(b, **kw)
            fully_shard(net, **kw)
        x = torch.randn(8, width, device=device, dtype=torch.bfloat16 if variant != "mixed-precision" else torch.float32)
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=True)

        def fwd_bwd():
            net.zero_grad(set_to_none=True)  # no accumulation into the last step's gradients
            net(x).backward()

        fwd_bwd()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t = median_time(fwd_bwd, repeats=5, warmup=2)
        steps = []
        for _ in range(5):  # the optimizer step alone, each after a backward that made gradients
            opt.zero_grad(set_to_none=True)
            fwd_bwd()
            dist.barrier()
            cuda_sync()
            t0 = time.perf_counter()
            opt.step()
            cuda_sync()
            steps.append(time.perf_counter() - t0)
        del net, opt
        return t, statistics.median(steps)

    design = [(8, 2), (8, 8), (32, 2), (32, 8)]
    out = {"how": "step host seconds of k blocks of q %dx%d matmuls (fully_shard per block and on the root) "
                  "minus the same model without FSDP; solved for seconds = a + k u + k q c" % (width, width)}
    plain = {kq: step_time(*kq, "plain") for kq in design}
    for variant in ("default", "reshard-after-forward-false", "mixed-precision"):
        rows, opt_rows = [], []
        for kq in design:
            t, o = step_time(*kq, variant)
            rows.append((kq, t - plain[kq][0]))
            opt_rows.append((kq, o - plain[kq][1]))
        # (a, u, c) from the four points: four equations, three unknowns, least squares.
        design_rows = [[1.0, float(k), float(k * q)] for (k, q), _ in rows]
        sol = least_squares(design_rows, [v for _, v in rows])
        osol = least_squares(design_rows, [v for _, v in opt_rows])
        out[variant] = {"extra_seconds": {"%dx%d" % kq: v for kq, v in rows},
                        "per_step_seconds": sol[0], "per_unit_seconds": sol[1],
                        "per_parameter_tensor_seconds": sol[2],
                        "optimizer_extra_per_parameter_tensor_seconds": osol[2]}
    out["plain_seconds"] = {"%dx%d" % kq: v[0] for kq, v in plain.items()}
    return out


# ---------------------------------------------------------------------------------------------
# Pipeline: does a stage's host wait for the other?

def pipeline_host(device, world, rank):
    from torch.distributed.device_mesh import init_device_mesh
    if world != 2:
        return {"skipped": "needs two ranks"}
    mesh = init_device_mesh("cuda", (1, 2), mesh_dim_names=("dp", "pp"))
    seq = 1024
    out = {"model": "qwen2.5-1.5b shape, 8 layers, 2 stages", "seq": seq}
    for m in (2, 4):
        model, vocab = qwen_like(8, device)
        module, loss_fn = parallel.make_stage_module(torch, model, rank, 2, seq, contextlib.nullcontext)
        del model
        gc.collect()
        pipe = parallel.Pipeline(torch, module, loss_fn, rank, 2, m, device, mesh["pp"].get_group())
        ids = torch.randint(0, vocab, (m, seq), device=device)
        for _ in range(2):
            pipe.step(ids)
        cuda_sync()
        host, wall = [], []
        for _ in range(4):
            dist.barrier()
            cuda_sync()
            t0 = time.perf_counter()
            pipe.step(ids)
            host.append(time.perf_counter() - t0)
            cuda_sync()
            wall.append(time.perf_counter() - t0)
            for p in module.parameters():
                p.grad = None
        out["m%d" % m] = {"host_return_seconds": statistics.median(host), "wall_seconds": statistics.median(wall)}
        del pipe, module
        gc.collect()
        torch.cuda.empty_cache()
    return out


# ---------------------------------------------------------------------------------------------
# Garbage collections in FSDP steps

def gc_pauses(device, world):
    from torch.distributed.fsdp import fully_shard
    model, vocab = qwen_like(8, device)
    for layer in parallel.decoder_layers(model):
        fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    ids = torch.randint(0, vocab, (1, 2048), device=device)
    events = []
    starts = {}

    def cb(phase, info):
        if phase == "start":
            starts["t"] = time.perf_counter()
        else:
            events.append((info.get("generation"), time.perf_counter() - starts.get("t", time.perf_counter())))

    gc.callbacks.append(cb)
    steps = []
    try:
        for i in range(20):
            cuda_sync()
            before = len(events)
            t0 = time.perf_counter()
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            cuda_sync()
            steps.append({"step": i + 1, "seconds": time.perf_counter() - t0,
                          "collections": [{"generation": g, "seconds": s} for g, s in events[before:]]})
    finally:
        gc.callbacks.remove(cb)
    del model, opt
    return {"how": "20 steps of an 8-layer Qwen2.5-1.5B-shaped model under FSDP2, 2048 tokens; gc.callbacks",
            "gc_thresholds": gc.get_threshold(), "steps": steps}


def main():
    ap = argparse.ArgumentParser(prog="python -m trainfit_runner.measure_dispatch", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--only", help="comma-separated sections (dtensor,tp_plan,collectives,fsdp,pipeline,gc)")
    args = ap.parse_args()
    # A section that fails on one rank inside a collective would leave the other waiting: three
    # minutes, then the process group gives up (run the whole under `timeout 300` as well).
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    only = set(args.only.split(",")) if args.only else None
    out = {}
    t_start = time.perf_counter()
    plan = [("dtensor", lambda: dtensor_costs(device, world)),
            ("tp_plan", lambda: tp_plan(device, world)),
            ("collectives", lambda: collectives(device, world, rank)),
            ("fsdp", lambda: fsdp_costs(device, world)),
            ("pipeline", lambda: pipeline_host(device, world, rank)),
            ("gc", lambda: gc_pauses(device, world))]
    for name, fn in plan:
        if only is None or name in only:
            t0 = time.perf_counter()
            section(name, fn, out)
            if isinstance(out[name], dict):
                out[name]["section_seconds"] = time.perf_counter() - t0
    # Every rank's figures: rank 0 reports them all (the host costs are per process).
    gathered = [None] * world
    dist.all_gather_object(gathered, out)
    if rank == 0:
        import transformers
        doc = {"schema": "trainfit.dispatch-costs/1", "world_size": world, "gpu": torch.cuda.get_device_name(local),
               "torch": torch.__version__, "transformers": transformers.__version__,
               "nccl": ".".join(map(str, torch.cuda.nccl.version())), "date": time.strftime("%Y-%m-%d"),
               "seconds": time.perf_counter() - t_start, "ranks": gathered}
        text = json.dumps(doc, indent=1, default=str)
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
