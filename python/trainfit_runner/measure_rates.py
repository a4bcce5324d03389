"""Measures the rates the time model divides by, on the local GPU (docs/model.md, "The time model").

Each figure is what one kind of kernel or host work achieves with the installed PyTorch:
  - bf16 GEMMs at training shapes (tensor cores),
  - fp32 GEMMs at LoRA adapter shapes (PEFT keeps adapters in fp32: CUDA-core kernels),
  - causal scaled-dot-product attention forward + backward (the fused kernel PyTorch picks),
  - elementwise memory bandwidth,
  - host time per dispatched operation: forward ops recorded by autograd, backward nodes,
    operations without autograd,
  - the GPU-side floor of a tiny kernel (CUDA graph replay, so the host is out of the loop).
And, for two training steps, a profile: GPU busy time against wall time (what holds each back).
Prints one JSON object; `--out FILE` also writes it.
"""
import argparse
import json
import sys
import time

import torch


def timed(fn, iters, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / iters


def gemm(m, k, n, dtype, iters=20):
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    t = timed(lambda: a @ b, iters)
    return {"m": m, "k": k, "n": n, "dtype": str(dtype), "seconds": t, "flops_per_s": 2 * m * k * n / t}


def attention(b, h, kv, s, d, iters=5):
    q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, kv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, kv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)

    def step():
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv != h)
        o.backward(g)

    t = timed(step, iters)
    fwd = 2 * b * s * s * h * d  # QK^T and PV, causal half
    return {"b": b, "heads": h, "kv_heads": kv, "seq": s, "head_dim": d, "seconds": t,
            "flops_per_s": 3.5 * fwd / t}


def bandwidth(n_bytes=1 << 30):
    x = torch.empty(n_bytes // 2, device="cuda", dtype=torch.bfloat16)
    x.fill_(1.0)
    t = timed(lambda: x.mul_(1.0001), 20)
    return {"bytes": n_bytes, "seconds": t, "bytes_per_s": 2 * n_bytes / t}  # read + write


def host_costs(n=20000):
    out = {}
    x = torch.ones(1, device="cuda", requires_grad=True)

    def chain():
        y = x
        for _ in range(n):
            y = y * 1.0001
        return y

    chain()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    y = chain()
    torch.cuda.synchronize()
    out["forward_op_seconds"] = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    y.backward()
    torch.cuda.synchronize()
    out["backward_node_seconds"] = (time.perf_counter() - t0) / n
    z = torch.ones(1, device="cuda")
    with torch.no_grad():
        t0 = time.perf_counter()
        for _ in range(n):
            z.mul_(1.0001)
        torch.cuda.synchronize()
    out["no_grad_op_seconds"] = (time.perf_counter() - t0) / n
    lin = torch.nn.Linear(64, 64, device="cuda", dtype=torch.bfloat16)
    a = torch.randn(8, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    t0 = time.perf_counter()
    for _ in range(n // 10):
        lin(a)
    torch.cuda.synchronize()
    out["module_call_seconds"] = (time.perf_counter() - t0) / (n // 10)
    return out


def kernel_floor(n=2000):
    z = torch.ones(1024, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            z.add_(1.0)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            z.add_(1.0)
    g.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(5):
        g.replay()
    torch.cuda.synchronize()
    return {"kernel_seconds": (time.perf_counter() - t0) / (5 * n)}


def build(model_name, method, ckpt):
    """A model from the repository's config with random weights, as the calibration data was measured."""
    import transformers
    with open("data/models/%s.json" % model_name) as f:
        d = json.load(f)
    d.pop("architectures", None)
    d.pop("torch_dtype", None)
    cfg = transformers.AutoConfig.for_model(d.pop("model_type"), **d)
    cfg.use_cache = False
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    base = model
    if method == "lora":
        from peft import LoraConfig, get_peft_model
        lc = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, task_type="CAUSAL_LM",
                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
        with torch.device("cuda"):
            model = get_peft_model(model, lc)
    if ckpt:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5, fused=True)
    return model, opt


def profile_step(model_name, method, seq, batch, ckpt):
    """GPU busy time vs wall time of one steady training step (torch.profiler)."""
    cfg = {"model": model_name, "method": method, "weights": "bf16", "rank": 16, "lora_targets": "all-linear",
           "optimizer": "adamw", "attn": "sdpa", "seq": seq, "batch": batch, "grad_ckpt": ckpt}
    model, opt = build(model_name, method, ckpt)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), device="cuda")

    def step():
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    busy = 0.0
    kernels = 0
    # GPU time by kind of kernel: matrix multiplies, attention, and everything else (elementwise,
    # reductions, copies), to see which one a step spends its GPU time on.
    by_kind = {"gemm": 0.0, "attention": 0.0, "other": 0.0}
    top = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            dt = e.time_range.elapsed_us() * 1e-6
            busy += dt
            kernels += 1
            n = e.name.lower()
            if any(k in n for k in ("fmha", "flash", "sdpa", "attention", "attn")):
                kind = "attention"
            elif any(k in n for k in ("gemm", "cutlass", "xmma", "nvjet", "cublas", "matmul")):
                kind = "gemm"
            else:
                kind = "other"
            by_kind[kind] += dt
            top[e.name[:90]] = top.get(e.name[:90], 0.0) + dt
    steps = []
    for _ in range(8):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        steps.append(time.perf_counter() - t0)
    steps.sort()
    del model, opt
    torch.cuda.empty_cache()
    top = sorted(top.items(), key=lambda kv: -kv[1])[:12]
    return {"config": cfg, "wall_seconds_profiled": wall, "gpu_busy_seconds": busy, "kernels": kernels,
            "gpu_seconds_by_kind": by_kind, "top_kernels": top,
            "gpu_busy_fraction": busy / wall, "step_seconds_median_of_8": steps[len(steps) // 2], "step_seconds": steps}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--profile-steps", action="store_true")
    ap.add_argument("--only-steps", action="store_true", help="skip the micro-benchmarks")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False  # PyTorch's default: fp32 matmuls on CUDA cores
    r = {"stack": {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d")}}
    configs = [("qwen2.5-0.5b", "lora", 512, 1, False), ("qwen2.5-0.5b", "full", 512, 1, False),
               ("qwen2.5-14b", "lora", 2048, 4, True), ("qwen2.5-7b", "full", 1024, 1, True)]
    if args.only_steps:
        configs = [("qwen2.5-14b", "lora", 2048, 4, True), ("qwen2.5-7b", "lora", 2048, 2, False),
                   ("qwen2.5-0.5b", "lora", 512, 1, False), ("qwen2.5-3b", "lora", 8192, 1, True)]
        args.profile_steps = True
    else:
        r.update(micro_benchmarks())
    if args.profile_steps:
        r["steps"] = []
        for c in configs:
            try:
                r["steps"].append(profile_step(*c))
            except Exception as e:  # one config failing must not lose the rest
                r["steps"].append({"config": list(c), "error": repr(e)[:500]})
            print(json.dumps(r["steps"][-1])[:600], file=sys.stderr, flush=True)
    text = json.dumps(r, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


def micro_benchmarks():
    r = {}
    r["gemm_bf16"] = [gemm(8192, 8192, 8192, torch.bfloat16), gemm(4096, 3584, 18944, torch.bfloat16),
                      gemm(4096, 18944, 3584, torch.bfloat16), gemm(2048, 896, 4864, torch.bfloat16),
                      gemm(512, 896, 896, torch.bfloat16), gemm(512, 5120, 13824, torch.bfloat16)]
    r["gemm_fp32"] = [gemm(4096, 4096, 4096, torch.float32), gemm(2048, 896, 16, torch.float32),
                      gemm(2048, 16, 896, torch.float32), gemm(8192, 3584, 16, torch.float32),
                      gemm(8192, 16, 18944, torch.float32)]
    r["attention"] = [attention(1, 14, 2, 4096, 64), attention(1, 14, 2, 16384, 64), attention(1, 28, 4, 4096, 128),
                      attention(4, 40, 8, 2048, 128), attention(1, 16, 2, 8192, 128)]
    r["bandwidth"] = bandwidth()
    r["host"] = host_costs()
    r["kernel_floor"] = kernel_floor()
    return r


if __name__ == "__main__":
    main()
