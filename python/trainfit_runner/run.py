"""Run one bench config as real training steps and write one row (docs/bench.md).

    python -m trainfit_runner --config-file config.json --out row.json     # as `trainfit bench` runs it
    python -m trainfit_runner --config '{"model": "qwen2.5-7b", "method": "qlora", ...}' --out row.json

The config is the canonical one `trainfit bench` writes: the settings of `trainfit schema`
(setup_schema.py reads that schema and fills in what a hand-written config leaves out), the
runner's own fields (steps, warmup, device, an emulated card) and runner-specific x_ fields.  The
model is built from its config.json (data/models/, or a path) with random weights: shape, not
values, decides memory and speed.  Full fine-tuning, LoRA (PEFT) and QLoRA (a 4-bit base through
bitsandbytes when installed, else this package's NF4 layer, nf4.py).  Per step: synchronised wall
time, max_memory_allocated / max_memory_reserved (per phase), allocator retries and OOMs, NVML
device memory.  An emulated card (vram_bytes) caps the allocator at its size minus this process's
CUDA context (overflow "oom"), or only records (overflow "spill").  gpus > 1 relaunches itself
under torchrun (DDP, or FSDP) and rank 0 writes the row with every rank's peaks.

The row goes to --out (one JSON object); a config that runs out of memory still writes its row
(status "oom").  Anything else that goes wrong writes status "error" with the traceback.
"""
import argparse
import datetime
import gc
import importlib
import json
import os
import subprocess
import sys
import time
import traceback

from . import layouts, setup_schema
from .models import build_model, model_json
from .rows import MIB, mib, write_row
from .steps import autocast_context, host_memory, nvml, run_steps


# ---------------------------------------------------------------------------------------------
# Environment

def stack_info(torch, device, nv):
    from .host_probe import cpu_model
    s = {"date": datetime.date.today().isoformat(), "python": sys.version.split()[0], "cpu": cpu_model()}
    for name in ("torch", "transformers", "peft", "bitsandbytes", "accelerate"):
        try:
            s[name] = importlib.import_module(name).__version__
        except Exception:
            s[name] = None
    s["cuda"] = torch.version.cuda
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        total = props.total_memory
        mod, h = nv
        if h is not None:
            try:
                total = mod.nvmlDeviceGetMemoryInfo(h).total
                drv = mod.nvmlSystemGetDriverVersion()
                s["driver"] = drv.decode() if isinstance(drv, bytes) else drv
            except Exception:
                pass
        s["gpu"] = "%s (%d MiB)" % (props.name, total // MIB)
        s["gpu_memory_mib"] = total // MIB
        s["torch_total_memory_mib"] = mib(props.total_memory)
        try:
            s["cudnn"] = torch.backends.cudnn.version()
        except Exception:
            pass
    else:
        s["gpu"] = "cpu"
    s["alloc_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF")
    return s


# ---------------------------------------------------------------------------------------------
# Several GPUs: torchrun starts one process per GPU; each runs the steps on its shard of the work.

def wrap_distributed(torch, model, cfg, device, res):
    """Lays the model out over the GPUs as the config says (layouts.py checked it can run; docs/bench.md,
    "Layouts on several GPUs"). Returns (model to train, pipeline or None, pipeline stage or None):

    - ddp, zero1: DistributedDataParallel (every rank holds the whole model; gradients all-reduced
      in buckets); zero1 shards the optimizer states (run_steps builds ZeroRedundancyOptimizer).
    - fsdp, fsdp-grad-op, hsdp: FSDP2's fully_shard per decoder layer and on the root (the
      embedding, final norm and output layer), with the mixed-precision and offload policies.
      FSDP2 shards each parameter on its own, so a LoRA model's bf16 base and fp32 adapters can
      share a unit (FSDP1's flat parameters could not).
    - tp > 1: tensor parallelism (parallel.apply_tensor_parallel), FSDP2 over the data-parallel
      replicas when there are several.
    - pp > 1: this rank's pipeline stage (parallel.build_pipeline)."""
    from . import parallel
    lay = layouts.layout_of(cfg)
    res["layout"] = layouts.describe(cfg, lay)
    mesh = parallel.make_mesh(torch, lay, device)
    if lay.pp > 1:
        module, pipe, stage = parallel.build_pipeline(torch, model, cfg, lay, mesh, device,
                                                      autocast_context(torch, cfg, device))
        res["pipeline_layers"] = list(getattr(module, "layer_range", ()) or
                                      getattr(getattr(module, "module", None), "layer_range", ()))
        return module, pipe, stage
    if lay.tp > 1:
        res["tp_plan"] = parallel.TP_PLAN_TEXT
        model = parallel.apply_tensor_parallel(torch, model, mesh["tp"])
        if lay.dp > 1:
            model = parallel.apply_fsdp(torch, model, cfg, lay, mesh["dp"])
        return model, None, None
    if lay.parallel in layouts.FSDP_FAMILY:
        # The full tensors fully_shard replaced stay in the allocator's cache, as in a user's
        # script that builds on the GPU and then shards (and as the FSDP rows of data/bench/ ran).
        return parallel.apply_fsdp(torch, model, cfg, lay, mesh), None, None
    return parallel.apply_ddp(torch, model, device), None, None


def relaunch_under_torchrun(cfg, out):
    # The config goes in a file, as trainfit passes it: one argument holds at most 128 KiB.
    config_file = str(out) + ".torchrun-config.json"
    with open(config_file, "w") as f:
        json.dump(cfg, f)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=%d" % cfg["gpus"],
           "-m", "trainfit_runner", "--config-file", config_file, "--out", str(out)]
    return subprocess.call(cmd)


def record_oom_snapshot(torch, path):
    """Records the allocator's history from here on and, when an allocation fails, writes the
    memory snapshot to `path` from inside the allocator, before the exception unwinds and frees
    the step's tensors: the pickle `torch.cuda.memory._dump_snapshot` writes, as PyTorch's own
    docs tell users to take one at an OOM (the file `trainfit trace --snapshot` reads). Python
    frames only: C++ frames make the file ten times larger and name no model code."""
    entries = int(os.environ.get("TRAINFIT_OOM_SNAPSHOT_ENTRIES", "100000"))
    torch.cuda.memory._record_memory_history(max_entries=entries, stacks="python")

    def observer(device, alloc, device_alloc, device_free):
        if not os.path.exists(path):  # the first OOM only: a later one is what the first left behind
            torch.cuda.memory._dump_snapshot(path)

    torch._C._cuda_attach_out_of_memory_observer(observer)


# ---------------------------------------------------------------------------------------------

def run(cfg, out):
    import torch
    torch.manual_seed(0)
    dist_info = None
    if "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
        import datetime as dt
        import torch.distributed as dist
        backend = "nccl" if cfg.get("device", "cuda") == "cuda" else "gloo"
        # A rank that fails while the others wait in a collective: the watchdog ends the wait after
        # this long, instead of the bench's whole timeout.
        dist.init_process_group(backend, timeout=dt.timedelta(seconds=int(cfg.get("x_dist_timeout_s", 300))))
        dist_info = (dist.get_rank(), dist.get_world_size())
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cfg.get("device", "cuda") == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device (config device = cuda)")
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    nv = nvml() if device.type == "cuda" else (None, None)
    if device.type == "cuda" and os.environ.get("TRAINFIT_OOM_SNAPSHOT"):
        record_oom_snapshot(torch, os.environ["TRAINFIT_OOM_SNAPSHOT"])
    row = {"config": cfg, "stack": stack_info(torch, device, nv)}
    res = {"status": "running"}
    row["measured"] = res
    stage = None
    t0 = time.time()
    try:
        if device.type == "cuda":
            res["residual_before_build_mib"] = mib(torch.cuda.memory_allocated(device))
        model, vocab = build_model(torch, cfg, device, res)
        extras = {}
        if cfg.get("objective", "sft") != "sft":
            from . import objectives
            extras = objectives.build_extras(torch, cfg, device,
                                             lambda kind: build_model(torch, cfg, device, {}, kind=kind)[0])
            res["extra_models"] = {k: sum(p.numel() for p in m.parameters()) for k, m in extras.items()}
        res["build_seconds"] = round(time.time() - t0, 2)
        res["params_total"] = sum(p.numel() for p in model.parameters())
        res["params_trainable"] = sum(p.numel() for p in model.parameters() if p.requires_grad)
        pipe = None
        if dist_info is not None:
            model, pipe, stage = wrap_distributed(torch, model, cfg, device, res)
            lay = layouts.layout_of(cfg)
            if lay.tp > 1 or lay.pp > 1:
                # What tensor parallelism replaced and the layers of other pipeline stages, now
                # that nothing holds them, go back to the driver: the steps start from the layout.
                from . import parallel
                parallel.free_cached(torch, device)
        run_steps(torch, model, cfg, device, vocab, nv, res, dist_info, pipe, extras)
        if res["status"] == "running":
            res["status"] = "ok"
        # A run that did not fail leaves its history too when asked (the boundary scans keep both
        # sides of a boundary: the allocator's stream of a run that fits beside one that does not).
        snap = os.environ.get("TRAINFIT_OOM_SNAPSHOT")
        if snap and os.environ.get("TRAINFIT_SNAPSHOT_AT_END") and device.type == "cuda" and not os.path.exists(snap):
            torch.cuda.memory._dump_snapshot(snap)
        if os.environ.get("TRAINFIT_HOST_PROBE"):
            del model, extras, pipe  # the host probe's tiny models run next, with this one's memory freed
    except Exception as e:  # the row says what went wrong; the orchestrator keeps going
        oom = isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ())) or "out of memory" in str(e)
        res["status"] = "oom" if oom else "error"
        res["error"] = "%s: %s" % (type(e).__name__, str(e)[:1500])
        res["traceback"] = traceback.format_exc()[-3000:]
    res["wall_seconds"] = round(time.time() - t0, 2)
    host_probe_into(res, torch, device, dist_info)
    if dist_info is not None:
        import torch.distributed as dist
        per_rank = [None] * dist_info[1]
        mine = {k: res.get(k) for k in PER_RANK_FIELDS}
        mine.update(rank=dist_info[0], stage=stage)
        if "host_rss_mib" not in mine or mine["host_rss_mib"] is None:
            mine.update(host_memory(torch))  # a rank that failed before its steps
        dist.all_gather_object(per_rank, mine)
        merge_ranks(res, per_rank)
        res["world_size"] = dist_info[1]
        if dist_info[0] == 0:
            write_row(out, row)
        dist.destroy_process_group()
    else:
        write_row(out, row)
    return 0


def host_probe_into(res, torch, device, dist_info):
    """Under `trainfit bench --host-probe` ($TRAINFIT_HOST_PROBE names the request): the host's
    dispatch time, measured after the config's steps (so that none of its figures moves) in this
    process, on this GPU (host_probe.py), into measured.host_probe. On several GPUs, rank 0's, while
    the other ranks wait in the gather that follows. A probe that fails says why in its record; the
    config's own row stands."""
    try:
        from . import host_probe
        request = host_probe.request_from_environment()
        if request is None or (dist_info is not None and dist_info[0] != 0):
            return
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        res["host_probe"] = host_probe.measure(request, device)
    except Exception as e:
        res["host_probe"] = {"schema": "trainfit.host_probe/1", "status": "error",
                             "error": "%s: %s" % (type(e).__name__, str(e)[:1500])}


# What each rank reports to rank 0 (measured.per_rank[i], with its rank and pipeline stage).
PER_RANK_FIELDS = ("status", "peak_allocated_mib", "peak_phase", "peak_reserved_mib", "device_used_mib",
                   "weights_loaded_mib", "step_seconds_median", "host_rss_mib", "host_rss_peak_mib",
                   "host_pinned_mib", "host_pinned_peak_mib", "host_pinned_stats", "error")


def merge_ranks(res, per_rank):
    """The row's figures from every rank's: the busiest GPU's peak decides whether the run fits
    (and its phase goes with it); the slowest rank's step time is the step's; the status is the
    worst (oom before any other failure)."""
    res["per_rank"] = per_rank
    ranked = [r for r in per_rank if r.get("peak_allocated_mib") is not None]
    if ranked:
        busiest = max(ranked, key=lambda r: r["peak_allocated_mib"])
        res["peak_allocated_mib"] = busiest["peak_allocated_mib"]
        res["peak_phase"] = busiest.get("peak_phase", res.get("peak_phase"))
        res["busiest_rank"] = busiest.get("rank")
    for key in ("peak_reserved_mib", "device_used_mib", "step_seconds_median", "host_rss_peak_mib"):
        values = [r[key] for r in per_rank if r.get(key) is not None]
        if values:
            res[key] = max(values)
    bad = [r["status"] for r in per_rank if r.get("status") != "ok"]
    if bad:
        res["status"] = "oom" if "oom" in bad else bad[0]

def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m trainfit_runner", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    given = ap.add_mutually_exclusive_group(required=True)
    given.add_argument("--config-file", help="a file holding the config, as JSON (what trainfit bench passes)")
    given.add_argument("--config", help="the config, as JSON (by hand)")
    given.add_argument("--host-probe", metavar="REQUEST",
                       help="time the host probe's steps (host_probe.py; what `trainfit calibrate --host` runs) "
                            "and write its record to --out")
    ap.add_argument("--out", required=True, help="where to write the row (JSON)")
    args = ap.parse_args(argv)
    if args.host_probe is not None:
        from . import host_probe
        return host_probe.main(args.host_probe, args.out)
    if args.config_file is not None:
        with open(args.config_file) as f:
            text = f.read()
    else:
        text = args.config
    cfg = setup_schema.complete(json.loads(text))
    if "WORLD_SIZE" not in os.environ:
        # A layout (or an objective) this runner cannot run is refused here, before torchrun and
        # the GPUs start.
        from . import images, objectives
        try:
            layouts.check(cfg, model_json(cfg["model"]))
            objectives.check(cfg)
            images.check(cfg, model_json(cfg["model"]))
        except layouts.LayoutError as e:
            write_row(args.out, refused_row(cfg, str(e)))
            return 0
        except images.ImageError as e:
            write_row(args.out, refused_row(cfg, str(e), "ImageError"))
            return 0
        except objectives.ObjectiveError as e:
            write_row(args.out, refused_row(cfg, str(e), "ObjectiveError"))
            return 0
        if cfg["gpus"] > 1:
            return relaunch_under_torchrun(cfg, args.out)
    return run(cfg, args.out)


def refused_row(cfg, reason, kind="LayoutError"):
    """The row of a config the runner refuses (its layout or its objective): status error, the
    reason, nothing run."""
    return {"config": cfg,
            "stack": {"date": datetime.date.today().isoformat(), "python": sys.version.split()[0]},
            "measured": {"status": "error", "error": "%s: %s" % (kind, reason), "refused": True}}


if __name__ == "__main__":
    sys.exit(main())
