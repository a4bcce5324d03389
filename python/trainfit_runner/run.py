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
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

from . import layouts, setup_schema

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
# Model

def builtin_config_path(name):
    """The config.json of a built-in model (MODEL_DIRS/NAME.json), or None."""
    for d in MODEL_DIRS:
        p = d / (name + ".json")
        if p.is_file():
            return p
    return None


def config_json_path(name):
    """The config.json of a model: a path to it or to a folder holding it, or a built-in name; or None."""
    p = Path(name)
    if p.is_dir():
        p = p / "config.json"
    return p if p.is_file() else builtin_config_path(name)


def language_model_config(d):
    """The config.json dict of the causal language model a config describes. A multimodal Gemma 3
    config (model_type gemma3, Gemma3ForConditionalGeneration) holds its text model's in text_config;
    the planner plans that text model, so the runner builds it too (AutoModelForCausalLM then makes a
    Gemma3ForCausalLM; the vision tower and projector are left out, and res["model_class"] says what
    was built). Absent text_config fields take Gemma3TextConfig's defaults, as they do in transformers."""
    if d.get("model_type") == "gemma3" and isinstance(d.get("text_config"), dict):
        return dict(d["text_config"], model_type="gemma3_text")
    return d


def load_hf_config(name):
    """The transformers config of a built-in name (data/models/NAME.json) or a config.json path."""
    import transformers
    p = config_json_path(name)
    if p is None:
        raise FileNotFoundError("model %r: no such config.json, and no built-in model of that name in %s"
                                % (name, " or ".join(str(d) for d in MODEL_DIRS)))
    d = language_model_config(json.loads(p.read_text()))
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


def build_model(torch, cfg, device, res, kind=None):
    """The trained model: a causal LM, or under objective reward a sequence classifier (TRL's
    RewardTrainer: AutoModelForSequenceClassification, num_labels 1). With `kind` ("causal" or
    "classifier"), only the base as it is stored (quantised under QLoRA), without adapters or
    checkpointing: what the objectives' reference, value and reward models are built as."""
    base_only = kind is not None
    if kind is None:
        kind = "classifier" if cfg.get("objective") == "reward" else "causal"
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
        import transformers
        hf = load_hf_config(cfg["model"])
        attn = {"sdpa": "sdpa", "eager": "eager", "flash": "flash_attention_2"}[cfg["attn"]]
        if kind == "classifier":
            # One score per sequence, read at its last token: the padding id (vocab - 1, which the
            # objectives' random ids never use) marks none, so every sequence is scored at its end.
            hf.num_labels = 1
            hf.pad_token_id = hf.vocab_size - 1
            cls = transformers.AutoModelForSequenceClassification
        else:
            cls = transformers.AutoModelForCausalLM
        with torch.device(device):
            model = cls.from_config(hf, dtype=dtype, attn_implementation=attn)
        vocab = hf.vocab_size
        res["attn_implementation_actual"] = getattr(model.config, "_attn_implementation", None)
        res["model_class"] = type(model).__name__
    if weights in ("nf4", "fp4", "int8"):
        res["quant_backend"] = quantize(torch, model, weights, compute, cfg)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the bf16 blocks of the build go back to the driver
        if cfg["kbit_prepare"] and not base_only:
            # PEFT's preparation: every parameter frozen, the unquantised ones cast to fp32.
            # Checkpointing stays this runner's own (below), non-reentrant, as the planner models it.
            from peft import prepare_model_for_kbit_training
            model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    if base_only:
        return model, vocab
    inner = model
    if method in ("lora", "qlora"):
        from peft import LoraConfig, get_peft_model
        # A sequence classifier's score head trains whole beside the adapters (PEFT's SEQ_CLS task
        # adds it to modules_to_save, as TRL's RewardTrainer recommends).
        lc = LoraConfig(r=cfg["rank"], lora_alpha=cfg["lora_alpha"], lora_dropout=cfg["lora_dropout"],
                        target_modules=setup_schema.lora_targets(cfg),
                        task_type="SEQ_CLS" if kind == "classifier" else "CAUSAL_LM")
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

def optimizer_spec(torch, name, device):
    """(optimizer class, keyword arguments) of an optimizer setting: what make_optimizer builds, and
    what ZeroRedundancyOptimizer (zero1) builds on each rank's share of the parameters."""
    if name == "adamw":
        return torch.optim.AdamW, dict(lr=1e-4, **({"fused": True} if device.type == "cuda" else {}))
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


def autocast_context(torch, cfg, device):
    """A context manager factory: torch.autocast in the amp dtype, or nothing."""
    amp = cfg.get("amp")
    if not amp:
        return contextlib.nullcontext
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[amp]
    return lambda: torch.autocast(device.type, dtype=dtype)


def run_steps(torch, model, cfg, device, vocab, nv, res, dist_info, pipe=None, extras=None):
    """The measured steps. `model` is what wrap_distributed returned; `pipe` a parallel.Pipeline
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
                            loss = model(input_ids=ids, labels=ids).loss
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
        from . import objectives
        try:
            layouts.check(cfg, model_json(cfg["model"]))
            objectives.check(cfg)
        except layouts.LayoutError as e:
            write_row(args.out, refused_row(cfg, str(e)))
            return 0
        except objectives.ObjectiveError as e:
            write_row(args.out, refused_row(cfg, str(e), "ObjectiveError"))
            return 0
        if cfg["gpus"] > 1:
            return relaunch_under_torchrun(cfg, args.out)
    return run(cfg, args.out)


def model_json(name):
    """The model's config.json as a dict (for the layout checks), or None when it cannot be read here."""
    p = config_json_path(name)
    try:
        return json.loads(p.read_text()) if p is not None else None
    except (OSError, ValueError):
        return None


def refused_row(cfg, reason, kind="LayoutError"):
    """The row of a config the runner refuses (its layout or its objective): status error, the
    reason, nothing run."""
    return {"config": cfg,
            "stack": {"date": datetime.date.today().isoformat(), "python": sys.version.split()[0]},
            "measured": {"status": "error", "error": "%s: %s" % (kind, reason), "refused": True}}


if __name__ == "__main__":
    sys.exit(main())
