"""The measured training steps of a bench row (docs/bench.md): the optimizer, the emulated card's
allocator cap, autocast, the step loop with its synchronised wall time and per-phase peaks, and the
process's host memory. The host probe (host_probe.py) times its steps with the same loop, so that
its step is the one a bench row's step_seconds comes from.

The torch module is an argument, never imported at the top, so that the runner imports without
torch (python/tests check that).
"""
import contextlib
import os
import statistics
import time

from . import layouts
from .rows import mib

# ---------------------------------------------------------------------------------------------
# The device as NVML sees it

def nvml():
    """(module, handle of this process's device) or (None, None)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        index = int(os.environ.get("LOCAL_RANK", "0"))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible:
            ids = [v for v in visible.split(",") if v.strip()]
            if index < len(ids) and ids[index].strip().isdigit():
                index = int(ids[index])
        return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None, None


def nvml_used(nv):
    mod, h = nv
    if h is None:
        return None
    try:
        return mod.nvmlDeviceGetMemoryInfo(h).used
    except Exception:
        return None


# ---------------------------------------------------------------------------------------------
# Steps

def optimizer_spec(torch, name, device):
    """(optimizer class, keyword arguments) of an optimizer setting: what make_optimizer builds, and
    what ZeroRedundancyOptimizer (zero1) builds on each rank's share of the parameters."""
    if name == "adamw":
        return torch.optim.AdamW, dict(lr=1e-4, **({"fused": True} if device.type == "cuda" else {}))
    if name == "adamw-foreach":  # torch's default on CUDA: the foreach implementation
        return torch.optim.AdamW, dict(lr=1e-4, foreach=True)
    if name == "sgd":
        return torch.optim.SGD, {"lr": 1e-4}
    if name == "sgd-momentum":
        return torch.optim.SGD, {"lr": 1e-4, "momentum": 0.9}
    if name == "adafactor":
        from transformers.optimization import Adafactor
        return Adafactor, {"lr": 1e-4, "scale_parameter": False, "relative_step": False, "warmup_init": False}
    if name == "adamw-8bit":
        import bitsandbytes as bnb
        return bnb.optim.AdamW8bit, {"lr": 1e-4}
    raise ValueError("unknown optimizer %r" % name)


def make_optimizer(torch, name, params, device):
    cls, kwargs = optimizer_spec(torch, name, device)
    return cls(params, **kwargs)


def cap_allocator(torch, device, vram, nv, context=None):
    """Caps the caching allocator so that this process, CUDA context included, fits a card of `vram`
    bytes as NVML reports it (nvidia-smi's total): limit = vram - (device used - reserved).
    `context` (bytes) replaces the measured context when other processes share the GPU: NVML's
    device-wide figure then counts their memory too."""
    torch.cuda.synchronize(device)
    if context is None:
        used = nvml_used(nv)
        if used is None:
            free, total = torch.cuda.mem_get_info(device)
            used = total - free
        context = max(0, used - torch.cuda.memory_reserved(device))
    limit = vram - context
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(max(0.0, min(1.0, limit / total)), device)
    return {"emulated_vram_mib": mib(vram), "allocator_limit_mib": mib(limit), "context_at_cap_mib": mib(context)}


def autocast_context(torch, cfg, device):
    """A context manager factory: torch.autocast in the amp dtype, or nothing."""
    amp = cfg.get("amp")
    if not amp:
        return contextlib.nullcontext
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[amp]
    return lambda: torch.autocast(device.type, dtype=dtype)


def run_steps(torch, model, cfg, device, vocab, nv, res, dist_info, pipe=None, extras=None):
    """The measured steps. `model` is what run.py's wrap_distributed returned; `pipe` a parallel.Pipeline
    when this rank is a pipeline stage (its step runs every micro-batch, forward and backward);
    `extras` the models an objective needs beside it (objectives.build_extras)."""
    lay = layouts.layout_of(cfg)
    extras = extras or {}
    params = [p for p in model.parameters() if p.requires_grad]
    if "value" in extras:
        # PPO: one optimizer over the policy's trainable parameters and the whole value model
        # (PPOTrainer's optimizer is over PolicyAndValueWrapper).
        params += [p for p in extras["value"].parameters() if p.requires_grad]
    # FSDP2's CPUOffloadPolicy keeps shards and gradients on the host: the optimizer steps there,
    # with the same class and arguments as on the GPU (fused AdamW has a CPU kernel). A torch
    # whose fused AdamW refuses these parameters (offloaded DTensor shards), when it is built or
    # at its first step, gets the default implementation instead, and the row says so.
    opt_device = torch.device("cpu") if dist_info is not None and lay.offload == "optimizer,params" else device
    cls, kwargs = optimizer_spec(torch, cfg["optimizer"], device)

    def build_optimizer():
        if dist_info is not None and lay.parallel == "zero1":
            from . import parallel
            return parallel.make_zero1(torch, params, cls, kwargs)
        return cls(params, **kwargs)

    def describe_optimizer():
        res["optimizer"] = "%s(%s%s) on %s" % (type(opt).__name__, cls.__name__,
                                                ", fused" if kwargs.get("fused") else "", opt_device.type)

    def unfused_on_cpu(e):
        if opt_device.type != "cpu" or not kwargs.pop("fused", False):
            return False
        res["optimizer_fallback"] = "fused on the CPU failed (%s): default AdamW" % str(e).split("\n")[0][:300]
        return True

    try:
        opt = build_optimizer()
    except (RuntimeError, NotImplementedError) as e:
        if not unfused_on_cpu(e):
            raise
        opt = build_optimizer()
    describe_optimizer()

    def optimizer_step():
        nonlocal opt
        try:
            opt.step()
        except (RuntimeError, NotImplementedError) as e:
            if not unfused_on_cpu(e):
                raise
            opt = build_optimizer()
            describe_optimizer()
            opt.step()

    B, S, accum = cfg["batch"], cfg["seq"], cfg["grad_accum"]
    gen = torch.Generator(device="cpu").manual_seed(1234)
    # A pipeline step feeds `microbatches` micro-batches of `batch` sequences at once.
    ids = torch.randint(0, vocab, (B * lay.microbatches if pipe else B, S), generator=gen).to(device)
    # A multimodal model's image inputs (its placeholders written into ids), or Gemma 3's
    # token_type_ids alone in a text-only step.
    from . import images
    model_inputs = images.inputs(torch, model, cfg, ids, gen) if hasattr(model, "config") else {}
    if cfg.get("packing") and pipe is None:
        # TRL's packing (padding_free collator): the micro-batch's rows, one example each, as one
        # sequence whose position_ids restart at each example and with no attention mask, from
        # which transformers finds the examples (docs/model.md, "Packing").
        ids = ids.reshape(1, B * S)
        model_inputs["position_ids"] = torch.arange(S, device=device).repeat(B).unsqueeze(0)
    amp_ctx = autocast_context(torch, cfg, device)
    objective = None
    if cfg.get("objective", "sft") != "sft":
        from . import objectives
        objective = objectives.ObjectiveStep(torch, cfg, device, vocab, model, extras, gen)
        res["objective"] = objectives.describe(objective.plan)
    # DDP (and zero1, which is DDP underneath) all-reduces once per optimizer step: the first
    # accum-1 micro-batches run under no_sync, as accelerate does.
    from torch.nn.parallel import DistributedDataParallel
    no_sync = model.no_sync if accum > 1 and isinstance(model, DistributedDataParallel) else None
    res["grad_sync"] = "no_sync on the first %d micro-batches" % (accum - 1) if no_sync else "every micro-batch"
    cuda = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    vram = cfg.get("vram_bytes")
    if cuda and vram and cfg.get("overflow", "oom") == "oom":
        res.update(cap_allocator(torch, device, vram, nv, cfg.get("x_context_bytes")))
    elif vram:
        res["emulated_vram_mib"] = mib(vram)
    sync()
    res["weights_loaded_mib"] = mib(torch.cuda.memory_allocated(device)) if cuda else None
    steps = []
    res["steps"] = steps
    stats = torch.cuda.memory_stats if cuda else (lambda *_: {})

    def phase_peak():
        if not cuda:
            return None, None
        a, r = torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)
        torch.cuda.reset_peak_memory_stats(device)
        return a, r

    try:
        for i in range(cfg["steps"]):
            rec = {"step": i + 1}
            steps.append(rec)
            sync()
            if cuda:
                torch.cuda.reset_peak_memory_stats(device)
            t0 = time.perf_counter()
            peaks = {}
            if pipe is not None:
                pipe.step(ids)  # 1F1B: forwards and backwards interleaved, one phase
                peaks["pipeline"] = [phase_peak()]
            if objective is not None:
                with amp_ctx():
                    objective.before_step()  # GRPO's reference scoring: a forward, no grad
                peaks.setdefault("forward", []).append(phase_peak())
            for micro in range(accum if pipe is None else 0):
                with (no_sync() if no_sync and micro < accum - 1 else contextlib.nullcontext()):
                    with amp_ctx():
                        if objective is None:
                            loss = model(input_ids=ids, labels=ids, **model_inputs).loss
                        else:
                            loss = objective.loss(micro)
                    if accum > 1:
                        loss = loss / accum
                    peaks.setdefault("forward", []).append(phase_peak())
                    loss.backward()
                    del loss
                    if objective is not None:
                        objective.after_backward(micro == accum - 1)
                    peaks.setdefault("backward", []).append(phase_peak())
            optimizer_step()
            opt.zero_grad(set_to_none=True)
            if objective is not None:
                objective.after_step()  # PPO's metrics over the logits it kept
            peaks["optimizer"] = [phase_peak()]
            sync()
            rec["seconds"] = round(time.perf_counter() - t0, 5)
            if cuda:
                best = max(((a, r, k) for k, v in peaks.items() for a, r in v), key=lambda t: t[0])
                rec["peak_allocated_mib"] = mib(best[0])
                rec["peak_phase"] = best[2]
                rec["peak_reserved_mib"] = mib(max(r for v in peaks.values() for _, r in v))
                for k, v in peaks.items():
                    rec["%s_peak_mib" % k] = mib(max(a for a, _ in v))
                rec["device_used_mib"] = mib(nvml_used(nv))
                st = stats(device)
                rec["alloc_retries"] = st.get("num_alloc_retries", 0)
                rec["ooms"] = st.get("num_ooms", 0)
    except torch.cuda.OutOfMemoryError as e:
        res["status"] = "oom"
        res["error"] = str(e).split("\n")[0][:1000]
        res["oom_at_step"] = len(steps)
        res["max_allocated_at_oom_mib"] = mib(torch.cuda.max_memory_allocated(device))
        steps.pop()  # the step that failed has no figures
    summarise(res, cfg, cuda, stats, device)
    res.update(host_memory(torch))
    return model


def summarise(res, cfg, cuda, stats, device):
    steps = [s for s in res["steps"] if "seconds" in s]
    steady = steps[cfg["warmup"]:] or steps[-1:]
    res["step_seconds"] = [s["seconds"] for s in steps]
    if steady:
        med = statistics.median(s["seconds"] for s in steady)
        res["step_seconds_median"] = round(med, 5)
        tokens = layouts.tokens_per_step(cfg, layouts.layout_of(cfg))
        res["tokens_per_second"] = round(tokens / med, 1) if med > 0 else None
    if cuda and steady:
        best = max(steady, key=lambda s: s["peak_allocated_mib"])
        res["peak_allocated_mib"] = best["peak_allocated_mib"]
        res["peak_phase"] = best["peak_phase"]
        res["peak_reserved_mib"] = max(s["peak_reserved_mib"] for s in steady)
        used = [s["device_used_mib"] for s in steady if s.get("device_used_mib") is not None]
        res["device_used_mib"] = max(used) if used else None
        res["peak_allocated_mib_per_step"] = [s["peak_allocated_mib"] for s in steps]
    if cuda:
        st = stats(device)
        res["num_alloc_retries"] = st.get("num_alloc_retries", 0)
        res["num_ooms"] = st.get("num_ooms", 0)


# ---------------------------------------------------------------------------------------------
# Host memory

def host_memory(torch=None):
    """This process's host memory (MiB): resident set now and at its peak (/proc/self/status
    VmRSS, VmHWM), and the CUDA pinned host memory the caching host allocator holds (offloaded
    shards and their staging buffers), now and at its peak, where PyTorch reports it."""
    out = {}
    try:
        with open("/proc/self/status") as f:
            out.update(parse_proc_status(f.read()))
    except OSError:
        pass
    try:
        st = torch.cuda.host_memory_stats()
        out["host_pinned_mib"] = mib(st.get("allocated_bytes.current"))
        out["host_pinned_peak_mib"] = mib(st.get("allocated_bytes.peak"))
        # The byte counters as this version names them, in case the two above are named otherwise.
        out["host_pinned_stats"] = {k: v for k, v in st.items() if "bytes" in k}
    except Exception:
        pass
    return out


def parse_proc_status(text):
    """{host_rss_mib, host_rss_peak_mib} from the text of /proc/<pid>/status (values in kB)."""
    keys = {"VmRSS": "host_rss_mib", "VmHWM": "host_rss_peak_mib"}
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name in keys:
            fields = value.split()
            if fields and fields[0].isdigit():
                out[keys[name]] = round(int(fields[0]) / 1024, 1)
    return out
