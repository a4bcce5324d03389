#!/usr/bin/env python3
"""Measure what the GPU memory of one fine-tuning step is made of (trainfit bench seed).

For each config of CONFIGS this builds a Hugging Face causal LM from its config with random
weights directly on the GPU, optionally wraps it in peft LoRA, and runs real training steps
(forward + loss, backward, optimizer step + zero_grad), recording for every phase the peak and
the after-phase value of torch.cuda.memory_allocated(), plus reserved memory, NVML device
memory and step times.  Configs marked ``trace`` also account, on their first (untimed) step,
every tensor autograd saves for backward (torch.autograd.graph.saved_tensors_hooks), attributed
to the innermost nn.Module running when it was saved.

Usage (GPU machine):
    python measure_memory.py --out rows.jsonl --traces traces.jsonl [--only T1,T2,group:qwen-large]
           [--deadline-s 560]
    python measure_memory.py --list
    python measure_memory.py --summarize rows.jsonl [--traces traces.jsonl]   (no torch needed)

The parent process imports no torch: it runs each group of configs (one model family) in its own
child process, with a deadline; a config that crashes, hangs or runs out of memory never stops the
others, and each finished row is flushed (and fsync'ed) to --out at once.
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time
import traceback

DATE = "2026-11-30"
MIB = 1024 * 1024

# ----------------------------------------------------------------------------------------------
# Model shapes (official Hugging Face config.json values).
MODELS = {
    "qwen2.5-0.5b": dict(family="qwen2", hidden=896, layers=24, heads=14, kv=2, inter=4864, vocab=151936, tied=True),
    "qwen2.5-1.5b": dict(family="qwen2", hidden=1536, layers=28, heads=12, kv=2, inter=8960, vocab=151936, tied=True),
    "qwen2.5-3b": dict(family="qwen2", hidden=2048, layers=36, heads=16, kv=2, inter=11008, vocab=151936, tied=True),
    "qwen2.5-7b": dict(family="qwen2", hidden=3584, layers=28, heads=28, kv=4, inter=18944, vocab=152064, tied=False),
    "qwen2.5-14b": dict(family="qwen2", hidden=5120, layers=48, heads=40, kv=8, inter=13824, vocab=152064, tied=False),
    "llama3.2-1b": dict(family="llama", hidden=2048, layers=16, heads=32, kv=8, inter=8192, vocab=128256, tied=True,
                         head_dim=64),
    "mistral-7b": dict(family="mistral", hidden=4096, layers=32, heads=32, kv=8, inter=14336, vocab=32768,
                            tied=False, head_dim=128),
    "gemma2-2b": dict(family="gemma2", hidden=2304, layers=26, heads=8, kv=4, inter=9216, vocab=256000, tied=True,
                       head_dim=256),
}

TARGETS = {
    "all-linear": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    "q,v": ["q_proj", "v_proj"],
    "q,k,v,o": ["q_proj", "k_proj", "v_proj", "o_proj"],
}


def _c(id_, group, model, method, seq, batch, ckpt, weights="bf16", amp=None, rank=16, dropout=0.05,
       targets="all-linear", optimizer="adamw", attn="sdpa", grad_accum=1, trace=False, profile=False):
    cfg = {"model": model, "method": method, "weights": weights, "amp": amp}
    if method == "lora":
        cfg.update(rank=rank, lora_alpha=2 * rank, lora_dropout=dropout, lora_targets=targets)
    cfg.update(optimizer=optimizer, attn=attn, seq=seq, batch=batch, grad_accum=grad_accum, grad_ckpt=ckpt,
               gpu="h200")
    return {"id": id_, "group": group, "config": cfg, "trace": trace, "profile": profile}


Q05, Q15, Q3, Q7, Q14 = "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b"
LL, MI, GE = "llama3.2-1b", "mistral-7b", "gemma2-2b"

# Order matters: traced configs and the 7B/14B first.  "group" = one child process.
CONFIGS = [
    # --- traced (each also fully measured) ---
    _c("T1", "qwen-0.5b-traced", Q05, "full", 512, 1, False, trace=True, profile=True),
    _c("T2", "qwen-0.5b-traced", Q05, "full", 512, 1, True, trace=True),
    _c("T3", "qwen-0.5b-traced", Q05, "full", 512, 1, False, weights="fp32", amp="bf16", trace=True, profile=True),
    _c("T4", "qwen-0.5b-traced", Q05, "lora", 512, 1, False, trace=True),
    _c("T5", "qwen-0.5b-traced", Q05, "lora", 512, 1, True, trace=True),
    _c("T6", "qwen-0.5b-traced", Q05, "lora", 512, 1, False, dropout=0.0, trace=True),
    _c("T7", "qwen-0.5b-traced", Q05, "lora", 512, 1, False, attn="eager", trace=True),
    _c("M20", "qwen-0.5b-traced", Q05, "full", 512, 1, False, weights="fp32", profile=True),
    _c("M21", "qwen-0.5b-traced", Q05, "full", 512, 1, False, optimizer="sgd-momentum"),
    _c("M22", "qwen-0.5b-traced", Q05, "full", 512, 1, False, optimizer="adafactor"),
    _c("M23", "qwen-0.5b-traced", Q05, "full", 512, 1, False, grad_accum=2),
    _c("T8", "llama", LL, "lora", 512, 1, False, trace=True, profile=True),
    _c("M26", "llama", LL, "full", 1024, 2, False),
    _c("T9", "gemma", GE, "lora", 512, 1, False, attn="eager", trace=True),
    _c("T9b", "gemma", GE, "lora", 512, 1, False, attn="sdpa", trace=True, profile=True),
    _c("M27", "gemma", GE, "lora", 1024, 1, True, attn="eager"),
    # --- measured only: the big ones first ---
    _c("M01", "qwen-large", Q7, "lora", 512, 1, True),
    _c("M02", "qwen-large", Q7, "lora", 512, 1, False),
    _c("M03", "qwen-large", Q7, "lora", 2048, 2, True),
    _c("M04", "qwen-large", Q7, "lora", 2048, 2, False),
    _c("M05", "qwen-large", Q14, "lora", 512, 1, True),
    _c("M06", "qwen-large", Q14, "lora", 512, 1, False),
    _c("M07", "qwen-large", Q14, "lora", 4096, 1, True),
    _c("M24", "mistral", MI, "lora", 1024, 1, True),
    _c("M25", "mistral", MI, "lora", 1024, 1, False),
    _c("M08", "qwen-mid", Q15, "lora", 1024, 2, False, rank=64),
    _c("M09", "qwen-mid", Q15, "lora", 1024, 2, False, rank=8, targets="q,v"),
    _c("M10", "qwen-mid", Q15, "lora", 1024, 2, True, targets="q,k,v,o"),
    _c("M13", "qwen-mid", Q15, "full", 1024, 1, False, attn="eager"),
    _c("M16", "qwen-mid", Q15, "full", 512, 2, False, weights="fp32", amp="bf16"),
    _c("M17", "qwen-mid", Q15, "full", 1024, 2, True),
    _c("M18", "qwen-mid", Q15, "full", 1024, 2, False),
    _c("M19", "qwen-mid", Q3, "full", 2048, 1, True),
    _c("M11", "qwen-mid", Q05, "lora", 2048, 1, False, attn="eager"),
    _c("M12", "qwen-mid", Q05, "lora", 2048, 1, True, attn="eager"),
    _c("M14", "qwen-mid", Q05, "full", 2048, 1, True, weights="fp32", amp="bf16"),
    _c("M15", "qwen-mid", Q05, "full", 2048, 1, False, weights="fp32", amp="bf16"),
    _c("M28", "qwen-long", Q3, "lora", 8192, 1, True),
    _c("M29", "qwen-long", Q05, "lora", 16384, 1, True),
    _c("M30", "qwen-long", Q05, "lora", 32768, 1, True),
]
BY_ID = {c["id"]: c for c in CONFIGS}
assert len(BY_ID) == len(CONFIGS)


def select(only):
    if not only:
        return list(CONFIGS)
    want = [w.strip() for w in only.split(",") if w.strip()]
    out = []
    for c in CONFIGS:
        if c["id"] in want or ("group:" + c["group"]) in want:
            out.append(c)
    unknown = [w for w in want if w not in BY_ID and not any("group:" + c["group"] == w for c in CONFIGS)]
    if unknown:
        sys.exit("unknown config ids/groups: %s" % unknown)
    return out


def append_row(path, obj):
    line = json.dumps(obj, separators=(",", ":"))
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def mib(x):
    return None if x is None else round(x / MIB, 1)


# ----------------------------------------------------------------------------------------------
# Parent: one child process per group, with a deadline.

def parent(args):
    sel = select(args.only)
    groups = []
    for c in sel:
        if not groups or groups[-1][0] != c["group"]:
            groups.append((c["group"], []))
        groups[-1][1].append(c["id"])
    deadline = time.time() + args.deadline_s
    for gname, ids in groups:
        todo = list(ids)
        while todo:
            remaining = deadline - time.time()
            if remaining < 15:
                for i in todo:
                    append_row(args.out, _stub_row(i, "not_run", "deadline reached before this config started"))
                break
            base_lines = _count_lines(args.out)
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--ids", ",".join(todo), "--out", args.out,
                   "--traces", args.traces, "--steps", str(args.steps), "--steps-large", str(args.steps_large)]
            print("[parent] group %s: %s (%.0fs left)" % (gname, todo, remaining), flush=True)
            t0 = time.time()
            p = subprocess.Popen(cmd)
            status = "crashed"
            try:
                rc = p.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                rc = "killed at deadline"
                status = "timeout"
            print("[parent] group %s child rc=%s after %.1fs" % (gname, rc, time.time() - t0), flush=True)
            done = set()
            for line in _read_lines(args.out)[base_lines:]:
                try:
                    done.add(json.loads(line)["id"])
                except Exception:
                    pass
            todo = [i for i in todo if i not in done]
            if todo and rc != 0 and status == "crashed" and rc != 3:
                # the config that was running when the child died
                append_row(args.out, _stub_row(todo[0], status, "child rc=%s" % rc))
                todo = todo[1:]
            elif todo and status == "timeout":
                append_row(args.out, _stub_row(todo[0], status, "killed at the run's deadline"))
                todo = todo[1:]
            elif todo and rc == 0:
                for i in todo:
                    append_row(args.out, _stub_row(i, "not_run", "child exited without a row"))
                todo = []


def _read_lines(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def _count_lines(path):
    return len(_read_lines(path))


def _stub_row(id_, status, why):
    c = BY_ID[id_]
    return {"id": id_, "config": c["config"], "measured": {"status": status, "error": why},
            "stack": {"date": DATE}}


# ----------------------------------------------------------------------------------------------
# Child: runs configs in this process.

def child(args):
    import gc
    import torch

    torch.manual_seed(0)
    stack = stack_info(torch)
    print("[child] stack:", json.dumps(stack), flush=True)
    probe = process_probe(torch)
    print("[child] probe:", json.dumps(probe), flush=True)
    nvml = nvml_handle()
    ran = []
    for id_ in args.ids.split(","):
        c = BY_ID[id_]
        gc.collect()
        torch.cuda.empty_cache()
        residual = torch.cuda.memory_allocated()
        residual_reserved = torch.cuda.memory_reserved()
        t0 = time.time()
        row = {"id": id_, "config": c["config"]}
        m = {"status": "error"}
        try:
            m = run_config(torch, c, args, nvml)
        except Exception as e:  # never let one config stop the others
            m = {"status": "error", "error": "%s: %s" % (type(e).__name__, str(e)[:2000]),
                 "traceback": traceback.format_exc()[-4000:]}
        finally:
            gc.collect()
            torch.cuda.empty_cache()
        m["residual_before_build_bytes"] = residual
        m["residual_before_build_mib"] = mib(residual)
        m["reserved_before_build_mib"] = mib(residual_reserved)
        m["ran_before_in_process"] = list(ran)
        m["process_probe"] = probe
        m["wall_seconds_total"] = round(time.time() - t0, 2)
        trace = m.pop("_trace", None)
        row["measured"] = m
        row["stack"] = stack
        append_row(args.out, row)
        if trace is not None:
            trace["id"] = id_
            trace["config"] = c["config"]
            append_row(args.traces, trace)
        print("[child] %s %s peak=%s phase=%s weights=%s residual=%s t=%s (%.1fs)" % (
            id_, m.get("status"), m.get("peak_allocated_mib"), m.get("peak_phase"), m.get("weights_loaded_mib"),
            m.get("residual_before_build_mib"), m.get("step_seconds_median_2_n"), time.time() - t0), flush=True)
        ran.append(id_)
        if m.get("status") == "error":
            print(m.get("traceback", ""), flush=True)
            err = m.get("error", "")
            if "CUDA error" in err or "AcceleratorError" in err or "illegal" in err:
                print("[child] CUDA context may be broken; exiting so the parent starts a fresh process", flush=True)
                sys.exit(3)


def stack_info(torch):
    import importlib
    s = {"date": DATE}
    for name in ("torch", "transformers", "peft", "accelerate"):
        try:
            s[name] = importlib.import_module(name).__version__
        except Exception as e:
            s[name] = "unavailable: %s" % e
    s["cuda"] = torch.version.cuda
    try:
        s["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        pass
    props = torch.cuda.get_device_properties(0)
    total = props.total_memory
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        total = pynvml.nvmlDeviceGetMemoryInfo(h).total
        drv = pynvml.nvmlSystemGetDriverVersion()
        s["driver"] = drv.decode() if isinstance(drv, bytes) else drv
    except Exception as e:
        s["nvml"] = "unavailable: %s" % e
    s["gpu"] = "%s (%d MiB)" % (props.name, total // MIB)
    s["torch_total_memory_mib"] = mib(props.total_memory)
    s["python"] = sys.version.split()[0]
    b = torch.backends.cuda
    flags = {}
    for f in ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled", "cudnn_sdp_enabled"):
        try:
            flags[f] = getattr(b, f)()
        except Exception as e:
            flags[f] = "n/a"
    s["sdp_flags"] = flags
    s["env"] = {k: os.environ.get(k) for k in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
                                               "CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE")}
    return s


def process_probe(torch):
    """cuBLAS workspace sizes and the SDPA backend choice, measured at process start."""
    import torch.nn.functional as F
    p = {}
    ma = torch.cuda.memory_allocated
    try:
        a0 = ma()
        p["alloc_at_start"] = a0
        x = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(512, device="cuda", dtype=torch.bfloat16)
        xf = torch.randn(512, 512, device="cuda")
        xr = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        torch.cuda.synchronize()
        live = ma() - a0  # the probe's own inputs; below, "extra" = what stays allocated beyond them

        def extra():
            torch.cuda.synchronize()
            return ma() - a0 - live

        y = x @ w
        del y
        p["extra_after_bf16_mm"] = extra()
        y = F.linear(x, w, b)
        del y
        p["extra_after_bf16_linear_bias"] = extra()
        y = xf @ xf
        del y
        p["extra_after_fp32_mm"] = extra()
        (xr @ w).float().sum().backward()
        xr.grad = None
        p["extra_after_backward_mm_autograd_thread"] = extra()
        del x, w, b, xf, xr
        torch.cuda.empty_cache()
        p["alloc_after_probe"] = ma()
        p["reserved_after_probe"] = torch.cuda.memory_reserved()
    except Exception as e:
        p["error"] = "%s: %s" % (type(e).__name__, e)
    # SDPA backend the dispatcher picks for typical shapes (private API; best effort).
    try:
        from torch.nn.attention import SDPBackend
        choice = {}
        for (name, h, kv, d, dt) in (("q05_bf16", 14, 2, 64, torch.bfloat16), ("q05_fp32", 14, 2, 64, torch.float32),
                                     ("gemma_bf16_hd256", 8, 4, 256, torch.bfloat16)):
            q = torch.randn(1, h, 512, d, device="cuda", dtype=dt, requires_grad=True)
            k = torch.randn(1, kv, 512, d, device="cuda", dtype=dt, requires_grad=True)
            for gqa in (True, False):
                kk = k if gqa else k.repeat_interleave(h // kv, dim=1)
                try:
                    r = torch._fused_sdp_choice(q, kk, kk, attn_mask=None, dropout_p=0.0, is_causal=True,
                                                scale=None, enable_gqa=gqa)
                    try:
                        r = SDPBackend(r).name
                    except Exception:
                        pass
                    choice["%s_enable_gqa=%s" % (name, gqa)] = r
                except Exception as e:
                    choice["%s_enable_gqa=%s" % (name, gqa)] = "err %s" % e
            del q, k
        p["sdpa_choice_causal_nomask"] = choice
        torch.cuda.empty_cache()
    except Exception as e:
        p["sdpa_choice_error"] = str(e)
    return p


def nvml_handle():
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:
        return None


def nvml_used(h):
    if h is None:
        return None
    try:
        import pynvml
        return pynvml.nvmlDeviceGetMemoryInfo(h).used
    except Exception:
        return None


def make_hf_config(name):
    import transformers
    m = MODELS[name]
    fam = m["family"]
    kw = dict(vocab_size=m["vocab"], hidden_size=m["hidden"], intermediate_size=m["inter"],
              num_hidden_layers=m["layers"], num_attention_heads=m["heads"], num_key_value_heads=m["kv"],
              tie_word_embeddings=m["tied"], use_cache=False)
    ropes = []
    if fam == "qwen2":
        cls = transformers.Qwen2Config
        kw.update(max_position_embeddings=32768, rms_norm_eps=1e-6, hidden_act="silu")
        ropes = [{"rope_type": "default", "rope_theta": 1e6}]
        theta = 1e6
    elif fam == "llama":
        cls = transformers.LlamaConfig
        kw.update(max_position_embeddings=131072, rms_norm_eps=1e-5, hidden_act="silu", head_dim=m["head_dim"],
                  attention_bias=False, mlp_bias=False)
        ropes = [{"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                 {"rope_type": "default", "rope_theta": 500000.0}]
        theta = 500000.0
    elif fam == "mistral":
        cls = transformers.MistralConfig
        kw.update(max_position_embeddings=32768, rms_norm_eps=1e-5, hidden_act="silu", head_dim=m["head_dim"],
                  sliding_window=None)
        ropes = [{"rope_type": "default", "rope_theta": 1e6}]
        theta = 1e6
    elif fam == "gemma2":
        cls = transformers.Gemma2Config
        kw.update(max_position_embeddings=8192, rms_norm_eps=1e-6, head_dim=m["head_dim"],
                  hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=256, sliding_window=4096,
                  final_logit_softcapping=30.0, attn_logit_softcapping=50.0)
        ropes = [{"rope_type": "default", "rope_theta": 10000.0}]
        theta = 10000.0
    else:
        raise ValueError(fam)
    attempts = [dict(kw, rope_parameters=r) for r in ropes] + [dict(kw, rope_theta=theta), dict(kw)]
    errs = []
    for a in attempts:
        try:
            cfg = cls(**a)
            cfg.use_cache = False
            used = {k: a[k] for k in ("rope_parameters", "rope_theta") if k in a}
            return cfg, used, errs
        except Exception as e:
            errs.append("%s: %s" % (type(e).__name__, str(e)[:300]))
    raise RuntimeError("could not build %s config: %s" % (name, errs))


def run_config(torch, c, args, nvml):
    from transformers import AutoModelForCausalLM
    cfg = c["config"]
    mm = MODELS[cfg["model"]]
    S, B, accum = cfg["seq"], cfg["batch"], cfg["grad_accum"]
    big = cfg["model"] in ("qwen2.5-14b",)
    nsteps = args.steps_large if big else args.steps
    dtype = torch.float32 if cfg["weights"] == "fp32" else torch.bfloat16
    res = {"status": "running"}
    hfcfg, rope_used, cfg_errs = make_hf_config(cfg["model"])
    res["hf_config_rope"] = rope_used
    if cfg_errs:
        res["hf_config_attempt_errors"] = cfg_errs
    t_build = time.time()
    with torch.device("cuda"):
        try:
            model = AutoModelForCausalLM.from_config(hfcfg, dtype=dtype, attn_implementation=cfg["attn"])
            res["from_config_dtype_kw"] = "dtype"
        except TypeError:
            model = AutoModelForCausalLM.from_config(hfcfg, torch_dtype=dtype, attn_implementation=cfg["attn"])
            res["from_config_dtype_kw"] = "torch_dtype"
    first_p = next(model.parameters())
    res["built_on"] = str(first_p.device)
    if first_p.device.type != "cuda":
        model.to("cuda")
    res["allocated_after_base_build_bytes"] = torch.cuda.memory_allocated()
    res["attn_implementation_actual"] = getattr(model.config, "_attn_implementation", None)
    hf_model = model
    if cfg["method"] == "lora":
        from peft import LoraConfig, get_peft_model
        lc = LoraConfig(r=cfg["rank"], lora_alpha=cfg["lora_alpha"], lora_dropout=cfg["lora_dropout"],
                        target_modules=TARGETS[cfg["lora_targets"]], task_type="CAUSAL_LM")
        with torch.device("cuda"):
            model = get_peft_model(model, lc)
    # Checkpointing is enabled after the peft wrap, on the transformers model itself: peft's wrap would otherwise
    # call enable_input_require_grads() (it does so when the model already checkpoints); with use_reentrant=False
    # that is not needed, and we do not call it (checked below: trainable_params_without_grad_after_backward).
    if cfg["grad_ckpt"]:
        hf_model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    res["is_gradient_checkpointing"] = bool(getattr(hf_model, "is_gradient_checkpointing", None))
    res["enable_input_require_grads"] = False
    del hf_model
    model.train()
    res["training_mode"] = bool(model.training)
    try:
        hooks = list(model.get_input_embeddings()._forward_hooks.values())
        res["input_embedding_forward_hooks"] = len(hooks)
        res["input_embedding_forward_hook_names"] = [getattr(h, "__qualname__", repr(h)) for h in hooks]
    except Exception as e:
        res["input_embedding_forward_hooks"] = "n/a %s" % e
    res["build_seconds"] = round(time.time() - t_build, 2)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    res["params_total"] = sum(p.numel() for p in params)
    res["params_trainable"] = sum(p.numel() for p in trainable)
    seen = set()
    pb_train = pb_frozen = 0
    dtypes = {}
    for p in params:
        ptr = p.untyped_storage().data_ptr()
        if ptr in seen:
            continue
        seen.add(ptr)
        nb = p.untyped_storage().nbytes()
        if p.requires_grad:
            pb_train += nb
        else:
            pb_frozen += nb
        k = "%s/%s" % (str(p.dtype).replace("torch.", ""), "trainable" if p.requires_grad else "frozen")
        dtypes[k] = dtypes.get(k, 0) + p.numel()
    res["param_bytes_trainable"] = pb_train
    res["param_bytes_frozen"] = pb_frozen
    res["param_numel_by_dtype"] = dtypes
    if cfg["optimizer"] == "adamw":
        opt = torch.optim.AdamW(trainable, lr=1e-4, fused=True)
    elif cfg["optimizer"] == "sgd-momentum":
        opt = torch.optim.SGD(trainable, lr=1e-4, momentum=0.9)
    elif cfg["optimizer"] == "adafactor":
        from transformers.optimization import Adafactor
        opt = Adafactor(trainable, lr=1e-4, scale_parameter=False, relative_step=False, warmup_init=False)
    else:
        raise ValueError(cfg["optimizer"])
    ids = torch.randint(0, mm["vocab"], (B, S), device="cuda")
    if cfg["amp"] == "bf16":
        def amp_ctx():
            return torch.autocast("cuda", dtype=torch.bfloat16)
    else:
        import contextlib

        def amp_ctx():
            return contextlib.nullcontext()
    torch.cuda.synchronize()
    weights_loaded = torch.cuda.memory_allocated()
    res["weights_loaded_bytes"] = weights_loaded
    res["weights_loaded_mib"] = mib(weights_loaded)
    steps = []
    res["steps"] = steps
    try:
        for si in range(1, nsteps + 1):
            tr = Tracer(torch, model, cfg) if (si == 1 and c["trace"]) else None
            st = one_step(torch, model, opt, ids, accum, amp_ctx, tr, trainable)
            st["step"] = si
            steps.append(st)
            if tr is not None:
                res["_trace"] = tr.result(S, B)
            if si == 1:
                res["trainable_params_without_grad_after_backward"] = st.pop("_no_grad", None)
            else:
                st.pop("_no_grad", None)
    except torch.cuda.OutOfMemoryError as e:
        res["status"] = "oom"
        res["error"] = str(e)[:1500]
        res["oom_at_step"] = len(steps) + 1
        res["max_allocated_at_oom_mib"] = mib(torch.cuda.max_memory_allocated())
    torch.cuda.synchronize()
    # ---- summaries
    res["peak_allocated_mib_per_step"] = [s["step_peak_mib"] for s in steps]
    res["peak_reserved_mib_per_step"] = [s["reserved_peak_mib"] for s in steps]
    res["step_start_mib_per_step"] = [s["start_mib"] for s in steps]
    for key in ("forward", "backward", "optimizer"):
        res["%s_peak_mib_per_step" % key] = [max([p["peak_mib"] for p in s["phases"] if p["phase"] == key] or [None])
                                             for s in steps]
        res["after_%s_mib_per_step" % key] = [[p["after_mib"] for p in s["phases"] if p["phase"] == key][-1]
                                              if any(p["phase"] == key for p in s["phases"]) else None
                                              for s in steps]
    res["step_seconds"] = [s["seconds"] for s in steps]
    if res["status"] == "running":
        res["status"] = "ok"
    steady = steps[1:] if len(steps) > 1 else steps
    if steady:
        best = max(steady, key=lambda s: s["step_peak_mib"])
        res["peak_allocated_mib"] = best["step_peak_mib"]
        res["peak_phase"] = best["step_peak_phase"]
        res["step_seconds_median_2_n"] = round(statistics.median([s["seconds"] for s in steady]), 4)
        last = steps[-1]
        res["steady_step"] = {
            "step": last["step"], "start_mib": last["start_mib"],
            "forward_peak_mib": res["forward_peak_mib_per_step"][-1],
            "after_forward_mib": res["after_forward_mib_per_step"][-1],
            "backward_peak_mib": res["backward_peak_mib_per_step"][-1],
            "after_backward_mib": res["after_backward_mib_per_step"][-1],
            "optimizer_peak_mib": res["optimizer_peak_mib_per_step"][-1],
            "after_optimizer_mib": res["after_optimizer_mib_per_step"][-1],
            "phase_gpu_ms": {"%s%d" % (p["phase"], p["micro"]): p["gpu_ms"] for p in last["phases"]},
            "start_requested_mib": last.get("start_requested_mib"),
            "requested_peak_mib": {"%s%d" % (p["phase"], p["micro"]): p.get("requested_peak_mib")
                                   for p in last["phases"]},
            "requested_after_mib": {"%s%d" % (p["phase"], p["micro"]): p.get("requested_after_mib")
                                    for p in last["phases"]},
        }
    res["peak_reserved_mib"] = mib(torch.cuda.max_memory_reserved()) if not steps else max(
        s["reserved_peak_mib"] for s in steps)
    res["reserved_end_mib"] = mib(torch.cuda.memory_reserved())
    res["allocated_end_mib"] = mib(torch.cuda.memory_allocated())
    res["device_used_mib"] = None if nvml_used(nvml) is None else nvml_used(nvml) // MIB
    free, total = torch.cuda.mem_get_info()
    res["mem_get_info_used_mib"] = (total - free) // MIB
    try:
        st = torch.cuda.memory_stats()
        res["num_alloc_retries"] = st.get("num_alloc_retries")
        res["num_ooms"] = st.get("num_ooms")
    except Exception:
        pass
    # optimizer state bytes
    try:
        ob = 0
        for s in opt.state.values():
            for v in s.values():
                if torch.is_tensor(v) and v.is_cuda:
                    ob += v.untyped_storage().nbytes()
        res["optimizer_state_bytes"] = ob
    except Exception as e:
        res["optimizer_state_bytes"] = "err %s" % e
    if steps:
        res["grad_bytes"] = steps[-1].pop("_grad_bytes", None)
        for s in steps:
            s.pop("_grad_bytes", None)
    # profiler on one extra (unrecorded) step
    if c["profile"] and res["status"] == "ok":
        try:
            res["profile"] = profile_step(torch, model, opt, ids, accum, amp_ctx, trainable)
        except Exception as e:
            res["profile"] = {"error": "%s: %s" % (type(e).__name__, str(e)[:500])}
    return res


def one_step(torch, model, opt, ids, accum, amp_ctx, tracer, trainable):
    ma, mx, mr = torch.cuda.memory_allocated, torch.cuda.max_memory_allocated, torch.cuda.max_memory_reserved
    phases = []
    evs = []

    def ev():
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        evs.append(e)

    def requested():
        # bytes the program asked for (before the caching allocator's 512-byte rounding and unsplit-block slack)
        try:
            st = torch.cuda.memory_stats()
            return st.get("requested_bytes.all.current"), st.get("requested_bytes.all.peak")
        except Exception:
            return None, None

    def close(name, micro, start):
        ev()
        rq_cur, rq_peak = requested()
        phases.append({"phase": name, "micro": micro, "start_mib": mib(start), "peak_mib": mib(mx()),
                       "after_mib": mib(ma()), "reserved_peak_mib": mib(mr()),
                       "requested_peak_mib": mib(rq_peak), "requested_after_mib": mib(rq_cur)})

    torch.cuda.synchronize()
    start = ma()
    start_requested = requested()[0]
    t0 = time.perf_counter()
    ev()
    grad_bytes = None
    no_grad = None
    for micro in range(accum):
        torch.cuda.reset_peak_memory_stats()
        s0 = ma()
        if tracer is not None:
            tracer.start()
        try:
            with amp_ctx():
                loss = model(input_ids=ids, labels=ids).loss
        finally:
            if tracer is not None:
                tracer.stop()
        if accum > 1:
            loss = loss / accum
        close("forward", micro, s0)
        if tracer is not None:
            tracer.walk_graph(loss)
        torch.cuda.reset_peak_memory_stats()
        s0 = ma()
        loss.backward()
        del loss
        close("backward", micro, s0)
    grad_bytes = 0
    seen = set()
    no_grad = 0
    for p in trainable:
        if p.grad is None:
            no_grad += 1
            continue
        ptr = p.grad.untyped_storage().data_ptr()
        if ptr not in seen:
            seen.add(ptr)
            grad_bytes += p.grad.untyped_storage().nbytes()
    torch.cuda.reset_peak_memory_stats()
    s0 = ma()
    opt.step()
    opt.zero_grad(set_to_none=True)
    close("optimizer", 0, s0)
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    for i, p in enumerate(phases):
        p["gpu_ms"] = round(evs[i].elapsed_time(evs[i + 1]), 3)
    peak_phase = max(phases, key=lambda p: p["peak_mib"])
    return {"start_mib": mib(start), "start_requested_mib": mib(start_requested), "phases": phases, "step_peak_mib": peak_phase["peak_mib"],
            "step_peak_phase": peak_phase["phase"], "reserved_peak_mib": max(p["reserved_peak_mib"] for p in phases),
            "seconds": round(secs, 4), "_grad_bytes": grad_bytes, "_no_grad": no_grad}


def profile_step(torch, model, opt, ids, accum, amp_ctx, trainable):
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        one_step(torch, model, opt, ids, accum, amp_ctx, None, trainable)
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        if "CUDA" not in str(getattr(e, "device_type", "")):
            continue
        t = getattr(e, "device_time_total", None)
        if t is None:
            t = getattr(e, "cuda_time_total", 0)
        rows.append((t, e.count, e.key[:220]))
    rows.sort(reverse=True)
    pat = re.compile(r"flash|fmha|attention|attn|cudnn|sdpa|efficient|softmax|cross_entropy|nll|cutlass.*att",
                     re.I)
    total = sum(r[0] for r in rows)
    return {"kernels_total_us": round(total, 1), "n_kernel_names": len(rows),
            "top_kernels": [{"us": round(t, 1), "count": n, "name": k} for t, n, k in rows[:25]],
            "attention_like_kernels": [{"us": round(t, 1), "count": n, "name": k} for t, n, k in rows if pat.search(k)]}


# ----------------------------------------------------------------------------------------------
# Saved-tensor tracer.

LAYER_RE = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")


class Tracer:
    def __init__(self, torch, model, cfg):
        self.torch = torch
        self.model = model
        self.cfg = cfg
        self.names = {id(m): (n or "<root>") for n, m in model.named_modules()}
        self.param_ptrs = set()
        self.param_shapes = set()
        for p in model.parameters():
            self.param_ptrs.add(p.untyped_storage().data_ptr())
            self.param_shapes.add(tuple(p.shape))
            self.param_shapes.add(tuple(reversed(p.shape)))
        self.rec = {}
        self.stack = []
        self.errors = []
        self.handles = []
        self.hooks_ctx = None
        self.graph_walked = False
        self.n_packs = 0

    # module tracking
    def _pre(self, mod, inp):
        self.stack.append(self.names.get(id(mod), "<other:%s>" % type(mod).__name__))

    def _post(self, mod, inp, out):
        if self.stack:
            self.stack.pop()

    def _pack(self, t):
        self.n_packs += 1
        try:
            st = t.untyped_storage()
            key = (t.device.type, st.data_ptr())
            r = self.rec.get(key)
            if r is None:
                self.rec[key] = {
                    "module": self.stack[-1] if self.stack else "<none>",
                    "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
                    "storage_nbytes": st.nbytes(), "view_nbytes": t.numel() * t.element_size(),
                    "device": t.device.type,
                    # Only storages of module parameters count as parameters.  (The 2026-11-30 trace file was made
                    # with "or (t.is_leaf and t.requires_grad)" here, which also flagged the embedding output that
                    # enable_input_require_grads turns into a requires-grad leaf: see data/measurements/README.md.)
                    "is_param": st.data_ptr() in self.param_ptrs,
                    "requires_grad_leaf": bool(t.is_leaf and t.requires_grad),
                    "matches_param_shape": tuple(t.shape) in self.param_shapes and t.dim() == 2,
                    "n_saves": 1, "order": len(self.rec), "ops": []}
            else:
                r["n_saves"] += 1
        except Exception as e:
            if len(self.errors) < 20:
                self.errors.append("%s: %s" % (type(e).__name__, e))
        return t

    @staticmethod
    def _unpack(t):
        return t

    def start(self):
        mm = self.torch.nn.modules.module
        self.handles = [mm.register_module_forward_pre_hook(self._pre), mm.register_module_forward_hook(self._post)]
        self.hooks_ctx = self.torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self.hooks_ctx.__enter__()

    def stop(self):
        if self.hooks_ctx is not None:
            self.hooks_ctx.__exit__(None, None, None)
            self.hooks_ctx = None
        for h in self.handles:
            h.remove()
        self.handles = []

    def walk_graph(self, loss):
        """Name the autograd op(s) that saved each storage (skipped under checkpointing: unpacking a
        checkpoint holder outside backward would recompute)."""
        if self.cfg["grad_ckpt"]:
            return
        torch = self.torch
        try:
            seen = set()
            todo = [loss.grad_fn]
            nodes = 0
            while todo:
                n = todo.pop()
                if n is None or n in seen:
                    continue
                seen.add(n)
                nodes += 1
                name = type(n).__name__
                attrs = [a for a in dir(n) if a.startswith("_saved_")]
                vals = []
                for a in attrs:
                    try:
                        vals.append(getattr(n, a))
                    except Exception:
                        pass
                if not attrs and hasattr(n, "saved_tensors"):
                    try:
                        vals.extend(n.saved_tensors)
                    except Exception:
                        pass
                for v in vals:
                    ts = v if isinstance(v, (list, tuple)) else [v]
                    for t in ts:
                        if torch.is_tensor(t):
                            try:
                                key = (t.device.type, t.untyped_storage().data_ptr())
                            except Exception:
                                continue
                            r = self.rec.get(key)
                            if r is not None and name not in r["ops"]:
                                r["ops"].append(name)
                del vals
                for nf, _ in getattr(n, "next_functions", ()):
                    if nf is not None and nf not in seen:
                        todo.append(nf)
            self.graph_walked = nodes
        except Exception as e:
            self.errors.append("walk %s: %s" % (type(e).__name__, e))

    def result(self, S, B):
        tokens = S * B
        recs = sorted(self.rec.values(), key=lambda r: r["order"])
        per_layer = {}
        outside = []
        layer1 = []
        layer1_params = []
        tot = totp = 0
        for r in recs:
            mres = LAYER_RE.search(r["module"])
            r["bytes_per_token"] = round(r["storage_nbytes"] / tokens, 3)
            if r["is_param"]:
                totp += r["storage_nbytes"]
                if mres and mres.group(1) == "1":
                    layer1_params.append({k: r[k] for k in ("module", "dtype", "shape", "storage_nbytes")})
                continue
            tot += r["storage_nbytes"]
            if mres:
                li = int(mres.group(1))
                per_layer[li] = per_layer.get(li, 0) + r["storage_nbytes"]
                if li == 1:
                    e = dict(r)
                    e["module_rel"] = r["module"][mres.end():] if mres.end() < len(r["module"]) else "<layer>"
                    layer1.append(e)
            else:
                outside.append(r)
        nl = max(per_layer) + 1 if per_layer else 0
        for e in layer1 + outside:
            e.pop("order", None)
        return {
            "tokens": tokens, "seq": S, "batch": B, "grad_ckpt": self.cfg["grad_ckpt"],
            "n_pack_calls": self.n_packs, "n_unique_storages": len(recs), "graph_walk_nodes": self.graph_walked,
            "total_saved_unique_bytes_nonparam": tot, "total_saved_param_bytes_flagged": totp,
            "per_layer_nonparam_bytes": [per_layer.get(i, 0) for i in range(nl)],
            "layer1_nonparam_bytes": per_layer.get(1, 0),
            "layer1_bytes_per_token": round(per_layer.get(1, 0) / tokens, 3),
            "layer1": layer1, "layer1_params_flagged": layer1_params,
            "outside_layers_nonparam_bytes": sum(r["storage_nbytes"] for r in outside),
            "outside_layers": outside, "errors": self.errors,
        }


# ----------------------------------------------------------------------------------------------
# Summaries (no torch needed).

def summarize(path, traces):
    rows = {}
    for line in _read_lines(path):
        r = json.loads(line)
        rows[r["id"]] = r  # last wins
    order = [c["id"] for c in CONFIGS]
    print("| id | model | method | w/amp | attn | S | B | acc | ckpt | opt | status | peak MiB | phase | fwd pk | "
          "after fwd | bwd pk | after bwd | opt pk | after opt | start | weights | residual | reserved | dev used "
          "| s/step |")
    print("|" + "---|" * 25)
    for i in order:
        if i not in rows:
            continue
        r = rows[i]
        c, m = r["config"], r["measured"]
        ss = m.get("steady_step", {})
        meth = c["method"] + ("" if c["method"] == "full" else " r%s %s d%s" % (c.get("rank"), c.get("lora_targets"),
                                                                               c.get("lora_dropout")))
        print("| %s |" % " | ".join(str(x) for x in [
            i, c["model"], meth, c["weights"] + ("+" + c["amp"] if c.get("amp") else ""), c["attn"], c["seq"],
            c["batch"], c.get("grad_accum", 1), "y" if c["grad_ckpt"] else "n", c["optimizer"], m.get("status"),
            m.get("peak_allocated_mib"), m.get("peak_phase"), ss.get("forward_peak_mib"),
            ss.get("after_forward_mib"), ss.get("backward_peak_mib"), ss.get("after_backward_mib"),
            ss.get("optimizer_peak_mib"), ss.get("after_optimizer_mib"), ss.get("start_mib"),
            m.get("weights_loaded_mib"), m.get("residual_before_build_mib"), m.get("peak_reserved_mib"),
            m.get("device_used_mib"), m.get("step_seconds_median_2_n")]))
    if traces:
        for line in _read_lines(traces):
            t = json.loads(line)
            print("\n### trace %s %s: tokens=%d total nonparam saved=%.1f MiB, layer1=%d B/token, outside=%.1f MiB"
                  % (t["id"], json.dumps(t["config"]), t["tokens"], t["total_saved_unique_bytes_nonparam"] / MIB,
                     t["layer1_nonparam_bytes"] / t["tokens"], t["outside_layers_nonparam_bytes"] / MIB))
            agg = {}
            for e in t["layer1"]:
                k = (e["module_rel"], e["dtype"])
                a = agg.setdefault(k, [0, 0, set(), []])
                a[0] += e["storage_nbytes"]
                a[1] += 1
                a[2].update(e.get("ops", []))
                a[3].append(e["shape"])
            for (mod, dt), (nb, n, ops, shapes) in agg.items():
                print("  L1 %-40s %-8s %9.1f B/tok  n=%d ops=%s shapes=%s" % (mod, dt, nb / t["tokens"], n,
                                                                            sorted(ops), shapes[:4]))
            for e in t["outside_layers"]:
                print("  OUT %-40s %-8s %12d B (%9.1f B/tok) shape=%s ops=%s" % (
                    e["module"], e["dtype"], e["storage_nbytes"], e["storage_nbytes"] / t["tokens"], e["shape"],
                    e.get("ops")))
            print("  per-layer bytes/token:", [round(x / t["tokens"], 1) for x in t["per_layer_nonparam_bytes"]])
            if t.get("errors"):
                print("  errors:", t["errors"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="h200-memory-phases-%s.jsonl" % DATE)
    ap.add_argument("--traces", default="h200-saved-tensors-%s.jsonl" % DATE)
    ap.add_argument("--only", default="", help="comma list of config ids and/or group:NAME")
    ap.add_argument("--deadline-s", type=float, default=560.0)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--steps-large", type=int, default=3, help="steps for models >= 14B")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--summarize", metavar="ROWS")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ids", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.list:
        for c in select(args.only):
            print(c["id"], c["group"], json.dumps(c["config"]), "trace" if c["trace"] else "",
                  "profile" if c["profile"] else "")
        return
    if args.summarize:
        summarize(args.summarize, args.traces if os.path.exists(args.traces) else None)
        return
    if args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
