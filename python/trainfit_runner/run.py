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
import contextlib
import datetime
import gc
import importlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

from . import setup_schema

MIB = 1 << 20
# The built-in models' config.json files: data/models/ of the repository this package is in
# (python/trainfit_runner/), or models/ beside python/ in an install (<prefix>/share/trainfit/:
# python/trainfit_runner/ and models/; docs/bench.md). resolve(): the build tree links python/.
ROOT = Path(__file__).resolve().parents[2]
MODEL_DIRS = (ROOT / "data" / "models", ROOT / "models")


def mib(x):
    return None if x is None else round(x / MIB, 1)


def write_row(path, row):
    tmp = str(path) + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# Environment

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


def stack_info(torch, device, nv):
    s = {"date": datetime.date.today().isoformat(), "python": sys.version.split()[0]}
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
# Model

def builtin_config_path(name):
    """The config.json of a built-in model (MODEL_DIRS/NAME.json), or None."""
    for d in MODEL_DIRS:
        p = d / (name + ".json")
        if p.is_file():
            return p
    return None


def load_hf_config(name):
    """The transformers config of a built-in name (data/models/NAME.json) or a config.json path."""
    import transformers
    p = Path(name)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        p = builtin_config_path(name)
        if p is None:
            raise FileNotFoundError("model %r: no such config.json, and no built-in model of that name in %s"
                                    % (name, " or ".join(str(d) for d in MODEL_DIRS)))
    d = json.loads(p.read_text())
    d.pop("torch_dtype", None)
    d.pop("transformers_version", None)
    cls = transformers.CONFIG_MAPPING[d["model_type"]]
    cfg = cls.from_dict(d)
    cfg.use_cache = False
    return cfg


def build_toy(torch, cfg, device, dtype):
    """A tiny torch-only causal LM (x_toy): lets the runner's pipeline be tested without transformers."""
    nn = torch.nn
    h, v, layers = int(cfg.get("x_toy_hidden", 64)), int(cfg.get("x_toy_vocab", 256)), int(cfg.get("x_toy_layers", 2))

    class Out:
        def __init__(self, loss):
            self.loss = loss

    class Toy(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(v, h)
            self.layers = nn.ModuleList(nn.Sequential(nn.Linear(h, 4 * h), nn.SiLU(), nn.Linear(4 * h, h))
                                        for _ in range(layers))
            self.lm_head = nn.Linear(h, v, bias=False)

        def forward(self, input_ids, labels):
            x = self.embed(input_ids)
            for layer in self.layers:
                x = x + layer(x)
            logits = self.lm_head(x).float()
            return Out(torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, v), labels[:, 1:].reshape(-1)))

    m = Toy().to(device=device, dtype=dtype)
    m.vocab_size = v
    return m


def torch_dtype(torch, name):
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def build_model(torch, cfg, device, res):
    method, weights = cfg["method"], cfg["weights"]
    if method == "qlora":
        # The base is built in the compute dtype, then its decoder linears are quantised; what stays
        # unquantised (embedding, norms, output layer) keeps that dtype, as transformers loads it.
        compute = torch_dtype(torch, cfg["compute_dtype"])
        dtype = compute
    else:
        compute = dtype = torch_dtype(torch, weights)
    if cfg.get("x_toy"):
        model = build_toy(torch, cfg, device, dtype)
        vocab = model.vocab_size
    else:
        from transformers import AutoModelForCausalLM
        hf = load_hf_config(cfg["model"])
        attn = {"sdpa": "sdpa", "eager": "eager", "flash": "flash_attention_2"}[cfg["attn"]]
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(hf, dtype=dtype, attn_implementation=attn)
        vocab = hf.vocab_size
        res["attn_implementation_actual"] = getattr(model.config, "_attn_implementation", None)
    if weights in ("nf4", "fp4", "int8"):
        res["quant_backend"] = quantize(torch, model, weights, compute, cfg)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the bf16 blocks of the build go back to the driver
        if cfg["kbit_prepare"]:
            # PEFT's preparation: every parameter frozen, the unquantised ones cast to fp32.
            # Checkpointing stays this runner's own (below), non-reentrant, as the planner models it.
            from peft import prepare_model_for_kbit_training
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    inner = model
    if method in ("lora", "qlora"):
        from peft import LoraConfig, get_peft_model
        lc = LoraConfig(r=cfg["rank"], lora_alpha=cfg["lora_alpha"], lora_dropout=cfg["lora_dropout"],
                        target_modules=setup_schema.lora_targets(cfg), task_type="CAUSAL_LM")
        with torch.device(device):
            model = get_peft_model(model, lc)
        # PEFT keeps adapters in fp32 (autocast_adapter_dtype); another adapter dtype is a cast.
        adapter = torch_dtype(torch, cfg["adapter_dtype"])
        if adapter != torch.float32:
            for name, p in model.named_parameters():
                if "lora_" in name:
                    p.data = p.data.to(adapter)
    if cfg["grad_ckpt"]:
        # After the PEFT wrap, on the transformers model, non-reentrant: the stack the planner models.
        inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model, vocab


def quantize(torch, model, weights, compute, cfg):
    """Replaces the decoder's linear layers by 4-bit (or 8-bit) ones; returns the backend used."""
    backend = cfg.get("x_quant_backend", "auto")
    try:
        import bitsandbytes as bnb  # noqa: F401
        have_bnb = True
    except Exception:
        have_bnb = False
    if backend == "bnb" or (backend == "auto" and have_bnb):
        import bitsandbytes as bnb
        nn = torch.nn
        for _, parent in list(model.named_modules()):
            for name, child in list(parent.named_children()):
                if type(child) is not nn.Linear or name == "lm_head":
                    continue
                dev = child.weight.device
                if weights == "int8":
                    new = bnb.nn.Linear8bitLt(child.in_features, child.out_features, bias=child.bias is not None,
                                              has_fp16_weights=False, device="meta")
                    new.weight = bnb.nn.Int8Params(child.weight.data.cpu(), requires_grad=False,
                                                   has_fp16_weights=False)
                else:
                    new = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                            compute_dtype=compute, compress_statistics=cfg["double_quant"],
                                            quant_type=weights, device="meta")
                    new.weight = bnb.nn.Params4bit(child.weight.data.cpu(), requires_grad=False,
                                                   compress_statistics=cfg["double_quant"], quant_type=weights)
                if child.bias is not None:
                    new.bias = nn.Parameter(child.bias.data.to(compute), requires_grad=False)
                setattr(parent, name, new.to(dev))  # bitsandbytes quantises on the move to the GPU
                del child
        model.is_loaded_in_4bit = weights != "int8"
        model.is_loaded_in_8bit = weights == "int8"
        return "bitsandbytes " + bnb.__version__
    if weights != "nf4":
        raise RuntimeError("%s weights need bitsandbytes, which is not installed" % weights)
    from . import nf4
    n = nf4.quantize_model_(model, double_quant=cfg["double_quant"], compute_dtype=compute)
    model.is_loaded_in_4bit = True  # what PEFT's k-bit preparation looks for
    return "trainfit nf4 (%d layers)" % n


# ---------------------------------------------------------------------------------------------
# Steps

def make_optimizer(torch, name, params, device):
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, **({"fused": True} if device.type == "cuda" else {}))
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-4, momentum=0.9)
    if name == "adafactor":
        from transformers.optimization import Adafactor
        return Adafactor(params, lr=1e-4, scale_parameter=False, relative_step=False, warmup_init=False)
    if name == "adamw-8bit":
        import bitsandbytes as bnb
        return bnb.optim.AdamW8bit(params, lr=1e-4)
    raise ValueError("unknown optimizer %r" % name)


def cap_allocator(torch, device, vram, nv):
    """Caps the caching allocator so that this process, CUDA context included, fits a card of `vram`
    bytes as NVML reports it (nvidia-smi's total): limit = vram - (device used - reserved)."""
    torch.cuda.synchronize(device)
    used = nvml_used(nv)
    if used is None:
        free, total = torch.cuda.mem_get_info(device)
        used = total - free
    context = max(0, used - torch.cuda.memory_reserved(device))
    limit = vram - context
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(max(0.0, min(1.0, limit / total)), device)
    return {"emulated_vram_mib": mib(vram), "allocator_limit_mib": mib(limit), "context_at_cap_mib": mib(context)}


def run_steps(torch, model, cfg, device, vocab, nv, res, dist_info):
    ddp = dist_info is not None
    params = [p for p in model.parameters() if p.requires_grad]
    res["params_total"] = sum(p.numel() for p in model.parameters())
    res["params_trainable"] = sum(p.numel() for p in params)
    if ddp:
        model = wrap_distributed(torch, model, cfg, device)
        params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(torch, cfg["optimizer"], params, device)
    B, S, accum = cfg["batch"], cfg["seq"], cfg["grad_accum"]
    gen = torch.Generator(device="cpu").manual_seed(1234)
    ids = torch.randint(0, vocab, (B, S), generator=gen).to(device)
    amp = cfg.get("amp")
    amp_ctx = (lambda: torch.autocast(device.type, dtype={"bf16": torch.bfloat16, "fp16": torch.float16}[amp])) \
        if amp else contextlib.nullcontext
    cuda = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    vram = cfg.get("vram_bytes")
    if cuda and vram and cfg.get("overflow", "oom") == "oom":
        res.update(cap_allocator(torch, device, vram, nv))
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
            for micro in range(accum):
                with amp_ctx():
                    loss = model(input_ids=ids, labels=ids).loss
                if accum > 1:
                    loss = loss / accum
                peaks.setdefault("forward", []).append(phase_peak())
                loss.backward()
                del loss
                peaks.setdefault("backward", []).append(phase_peak())
            opt.step()
            opt.zero_grad(set_to_none=True)
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
    return model


def summarise(res, cfg, cuda, stats, device):
    steps = [s for s in res["steps"] if "seconds" in s]
    steady = steps[cfg["warmup"]:] or steps[-1:]
    res["step_seconds"] = [s["seconds"] for s in steps]
    if steady:
        med = statistics.median(s["seconds"] for s in steady)
        res["step_seconds_median"] = round(med, 5)
        tokens = cfg["seq"] * cfg["batch"] * cfg["grad_accum"] * int(os.environ.get("WORLD_SIZE", "1"))
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
# Several GPUs: torchrun starts one process per GPU; each runs the steps on its shard of the work.

def wrap_distributed(torch, model, cfg, device):
    """DDP (every rank holds the whole model; gradients all-reduced in buckets) or FSDP2's
    fully_shard (parameters, gradients and optimizer states sharded; each decoder layer its own
    unit, gathered for its forward and again for its backward; the root unit holds the
    embedding, final norm and output layer).  FSDP2 shards each parameter on its own, so a LoRA
    model's bf16 base and fp32 adapters can share a unit (FSDP1's flat parameters could not)."""
    if cfg.get("parallel", "ddp") == "fsdp":
        from torch.distributed.fsdp import fully_shard
        inner = model.get_base_model() if hasattr(model, "get_base_model") else model
        layers = [m for n, m in inner.named_modules() if re.fullmatch(r"(.*\.)?layers\.\d+", n)]
        for layer in layers:
            fully_shard(layer)
        fully_shard(inner)
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


def relaunch_under_torchrun(cfg, out):
    # The config goes in a file, as trainfit passes it: one argument holds at most 128 KiB.
    config_file = str(out) + ".torchrun-config.json"
    with open(config_file, "w") as f:
        json.dump(cfg, f)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=%d" % cfg["gpus"],
           "-m", "trainfit_runner", "--config-file", config_file, "--out", str(out)]
    return subprocess.call(cmd)


# ---------------------------------------------------------------------------------------------

def run(cfg, out):
    import torch
    torch.manual_seed(0)
    dist_info = None
    if "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
        import torch.distributed as dist
        backend = "nccl" if cfg.get("device", "cuda") == "cuda" else "gloo"
        dist.init_process_group(backend)
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
    row = {"config": cfg, "stack": stack_info(torch, device, nv)}
    res = {"status": "running"}
    row["measured"] = res
    t0 = time.time()
    try:
        if device.type == "cuda":
            res["residual_before_build_mib"] = mib(torch.cuda.memory_allocated(device))
        model, vocab = build_model(torch, cfg, device, res)
        res["build_seconds"] = round(time.time() - t0, 2)
        run_steps(torch, model, cfg, device, vocab, nv, res, dist_info)
        if res["status"] == "running":
            res["status"] = "ok"
    except Exception as e:  # the row says what went wrong; the orchestrator keeps going
        oom = isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ())) or "out of memory" in str(e)
        res["status"] = "oom" if oom else "error"
        res["error"] = "%s: %s" % (type(e).__name__, str(e)[:1500])
        res["traceback"] = traceback.format_exc()[-3000:]
    res["wall_seconds"] = round(time.time() - t0, 2)
    if dist_info is not None:
        import torch.distributed as dist
        per_rank = [None] * dist_info[1]
        mine = {k: res.get(k) for k in ("status", "peak_allocated_mib", "peak_reserved_mib", "device_used_mib",
                                        "step_seconds_median", "error")}
        dist.all_gather_object(per_rank, mine)
        res["per_rank"] = per_rank
        peaks = [r["peak_allocated_mib"] for r in per_rank if r.get("peak_allocated_mib") is not None]
        if peaks:
            res["peak_allocated_mib"] = max(peaks)  # the busiest GPU decides whether the run fits
        bad = [r["status"] for r in per_rank if r["status"] != "ok"]
        if bad:
            res["status"] = "oom" if "oom" in bad else bad[0]
        res["world_size"] = dist_info[1]
        if dist_info[0] == 0:
            write_row(out, row)
        dist.destroy_process_group()
    else:
        write_row(out, row)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m trainfit_runner", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    given = ap.add_mutually_exclusive_group(required=True)
    given.add_argument("--config-file", help="a file holding the config, as JSON (what trainfit bench passes)")
    given.add_argument("--config", help="the config, as JSON (by hand)")
    ap.add_argument("--out", required=True, help="where to write the row (JSON)")
    args = ap.parse_args(argv)
    if args.config_file is not None:
        with open(args.config_file) as f:
            text = f.read()
    else:
        text = args.config
    cfg = setup_schema.complete(json.loads(text))
    if cfg["gpus"] > 1 and "WORLD_SIZE" not in os.environ:
        return relaunch_under_torchrun(cfg, args.out)
    return run(cfg, args.out)


if __name__ == "__main__":
    sys.exit(main())
