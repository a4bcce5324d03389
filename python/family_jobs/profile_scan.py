"""Where a Mamba-2 layer's step time goes in transformers' PyTorch scan (no hub kernels), on the GPU.

    python3 python/family_jobs/profile_scan.py OUT [MODEL [LAYERS [SEQ]]]

Builds MODEL's config (data/models/MODEL.json, default granite4.0-h-350m) with every layer a
Mamba-2 layer (LAYERS of them, default 4), random bf16 weights, full fine-tuning, batch 1 of SEQ
tokens (default 1024), and times forward + backward: the median of 5 steps unprofiled, then one step
under torch.profiler. Writes OUT/scan_profile.txt: the step times, the operators by self CUDA time
with their input shapes (so each one's bytes, and the bandwidth it reached, can be worked out), the
kernels by name, and the rates of the scan's kinds of kernel at G's shape (kernel_rates). The
question it answers: is the scan bound by memory traffic (as planned), or by something an H100 and
an H200 share (their SMs and clocks are the same; only HBM differs)?
"""
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers

ROOT = Path(__file__).resolve().parents[2]


def timed(fn, reps=10):
    """Median seconds of fn() on the GPU (CUDA events), after two warm-up calls."""
    fn()
    fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def kernel_rates(f, chunks=4, chunk=256, heads=48, state=128):
    """The scan's kinds of fp32 kernel at G's shape (batch 1, `chunks` chunks of `chunk`, `heads` x
    `state`), each against a plain contiguous copy of the same bytes: a broadcast product
    C[:, :, :, None] * B[:, :, None] (what G, M, the diagonal output and the states are made by), its
    sum over the innermost dimension and over a middle one (the backward's sum_to_size), and the
    contiguous product. Elements a second and GB/s (bytes read and written)."""
    shape = (1, chunks, chunk, chunk, heads, state)
    C = torch.randn(1, chunks, chunk, 1, heads, state, device="cuda")
    B = torch.randn(1, chunks, 1, chunk, heads, state, device="cuda")
    prod = C * B
    other = torch.randn_like(prod)
    n = prod.numel()
    cases = [
        ("contiguous copy (read n, write n)", lambda: prod.clone(), 8 * n),
        ("contiguous product a*b (read 2n, write n)", lambda: prod * other, 12 * n),
        ("broadcast product C[:,:,:,None]*B[:,:,None] (write n)", lambda: C * B, 4 * n),
        ("sum over the innermost dimension (read n)", lambda: prod.sum(dim=-1), 4 * n),
        ("sum over a middle dimension, dim 3 (read n)", lambda: prod.sum(dim=3), 4 * n),
        ("sum over a middle dimension, dim 2 (read n)", lambda: prod.sum(dim=2), 4 * n),
        ("broadcast product then its sum (G)", lambda: (C * B).sum(dim=-1), 8 * n),
    ]
    f.write("\nkernel rates at G's shape %s, %.2e fp32 elements:\n" % (shape, n))
    for label, fn, nbytes in cases:
        t = timed(fn)
        f.write("%-60s %8.3f ms  %7.1f GB/s  %6.1f G elements/s\n" % (label, t * 1e3, nbytes / t / 1e9, n / t / 1e9))


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    name = sys.argv[2] if len(sys.argv) > 2 else "granite4.0-h-350m"
    layers = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    seq = int(sys.argv[4]) if len(sys.argv) > 4 else 1024
    d = json.loads((ROOT / "data" / "models" / (name + ".json")).read_text())
    d["num_hidden_layers"] = layers
    if "layer_types" in d:
        d["layer_types"] = ["mamba"] * layers
    cfg = transformers.CONFIG_MAPPING[d["model_type"]].from_dict(d)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.train()
    ids = torch.randint(0, cfg.vocab_size, (1, seq), device="cuda")

    def step():
        loss = model(input_ids=ids, labels=ids, use_cache=False).loss  # no cache: a Mamba-only stack has no attention layer to size it
        loss.backward()
        model.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        step()
        torch.cuda.synchronize()
    events = prof.key_averages(group_by_input_shape=True)
    kernels = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            k = kernels.setdefault(e.name[:150], [0, 0.0])
            k[0] += 1
            k[1] += e.device_time_total
    with open(out / "scan_profile.txt", "w") as f:
        f.write("model %s, %d Mamba-2 layers, seq %d, %s, torch %s, transformers %s\n" % (
            name, layers, seq, torch.cuda.get_device_name(), torch.__version__, transformers.__version__))
        f.write("step seconds (forward + backward, unprofiled): %s, median %.4f\n" % (
            [round(t, 4) for t in times], statistics.median(times)))
        f.write("kernel time in the profiled step: %.4f s over %d kernels\n\n" % (
            sum(v[1] for v in kernels.values()) / 1e6, sum(v[0] for v in kernels.values())))
        f.write(events.table(sort_by="self_device_time_total", row_limit=70, max_name_column_width=40,
                             max_shapes_column_width=120))
        f.write("\nkernels by total time (us): count, total\n")
        for k, (n, t) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:60]:
            f.write("%10.0f %6d  %s\n" % (t, n, k))
        del model
        torch.cuda.empty_cache()
        kernel_rates(f)
    print(open(out / "scan_profile.txt").read()[:3000])


if __name__ == "__main__":
    main()
