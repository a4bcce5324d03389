"""A capacity-bound job for `trainfit watch`: a bf16 MLP stack (12 layers, 2048 -> 8192 -> 2048, with
LayerNorm) trained on batches whose size varies from step to step (8k-32k tokens, as with dynamic
padding), under an allocator capped just above the step's peak with
torch.cuda.set_per_process_memory_fraction. The cached blocks of one step do not fit the next one's
tensors, the cap forbids new ones, so the allocator frees its whole cache, synchronises and retries
(num_alloc_retries), step after step; now and then it runs out of memory and the step is skipped.

Phases: uncapped baseline; cap tuned until retries happen on most steps; "capped" (the card itself
mostly free: only the allocator's statistics show the problem); "near-full" (a ballast tensor fills
the card to ~95%, the same headroom left to the model: nvidia-smi now shows memory near the top too)."""
import argparse
import random
import statistics
import time

import torch

from _jobs import Probe

ap = argparse.ArgumentParser()
ap.add_argument("--baseline", type=float, default=4)
ap.add_argument("--tune", type=float, default=6)
ap.add_argument("--capped", type=float, default=17)
ap.add_argument("--near-full", type=float, default=17)
args = ap.parse_args()

probe = Probe()
probe.phase("warmup")
torch.manual_seed(0)
random.seed(0)
width, layers, max_tokens = 2048, 12, 32768
blocks = []
for _ in range(layers):
    blocks += [torch.nn.LayerNorm(width), torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)]
model = torch.nn.Sequential(*blocks).to(device="cuda", dtype=torch.bfloat16)
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
total = torch.cuda.get_device_properties(0).total_memory
step = 0


def train_step(tokens):
    x = torch.randn(tokens, width, device="cuda", dtype=torch.bfloat16)
    loss = model(x).float().square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def run(seconds, on_step=None):
    """Steps with random sizes for `seconds`; returns (step times, retries, ooms) over them."""
    global step
    times = []
    s0 = torch.cuda.memory_stats()
    end = time.time() + seconds
    while time.time() < end:
        tokens = random.randrange(max_tokens // 4, max_tokens + 1, 64)
        t0 = time.perf_counter()
        try:
            train_step(tokens)
            torch.cuda.synchronize()
        except torch.cuda.OutOfMemoryError:
            opt.zero_grad(set_to_none=True)
            torch.cuda.empty_cache()
        dt = time.perf_counter() - t0
        step += 1
        times.append(dt)
        probe.record(dt, step=step)
        if on_step:
            on_step()
    s1 = torch.cuda.memory_stats()
    return times, s1.get("num_alloc_retries", 0) - s0.get("num_alloc_retries", 0), s1.get("num_ooms", 0) - s0.get("num_ooms", 0)


# Uncapped: the step's peak at the largest batch, and the speed without any cap.
train_step(max_tokens)
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
train_step(max_tokens)
torch.cuda.synchronize()
peak = torch.cuda.max_memory_allocated()
times, _, _ = run(args.baseline)
baseline = statistics.median(times)
print(f"capacity_bound: peak {peak / 2**30:.2f} GiB, uncapped median step {baseline * 1000:.1f} ms", flush=True)

# Cap tuning: start 8% above the peak, tighten until most steps retry, loosen if most steps fail.
factor = 1.08
torch.cuda.empty_cache()
tune_end = time.time() + args.tune
while time.time() < tune_end:
    cap = int(peak * factor)
    torch.cuda.set_per_process_memory_fraction(cap / total)
    probe.limit_bytes = cap
    times, retries, ooms = run(1.0)
    n = max(len(times), 1)
    print(f"capacity_bound: cap {factor:.3f} x peak: {retries} retries, {ooms} ooms in {n} steps", flush=True)
    if ooms > 0.3 * n:
        factor *= 1.03
    elif retries < 0.5 * n and factor > 1.005:
        factor = max(1.0, factor * 0.98)
cap = int(peak * factor)
torch.cuda.set_per_process_memory_fraction(cap / total)
probe.limit_bytes = cap

probe.phase("steady", expect="capacity", label=f"allocator capped at {factor:.3f} x the step's peak ({cap / 2**30:.1f} GiB)")
times, retries, ooms = run(args.capped)
print(f"capacity_bound: capped: median step {statistics.median(times) * 1000:.1f} ms "
      f"({statistics.median(times) / baseline:.2f}x uncapped), {retries} retries, {ooms} ooms in {len(times)} steps", flush=True)

# Near-full: a ballast takes the card to ~95%; the model keeps the same headroom under the cap.
torch.cuda.empty_cache()
ballast_bytes = int(0.95 * total) - cap
torch.cuda.set_per_process_memory_fraction(0.95)
ballast = torch.empty(ballast_bytes, dtype=torch.uint8, device="cuda")
ballast.fill_(1)
probe.limit_bytes = int(0.95 * total)
free, _ = torch.cuda.mem_get_info()
probe.phase("steady", expect="capacity", label=f"same cap, card filled to {100 * (1 - free / total):.0f}% by a ballast")
times, retries, ooms = run(args.near_full)
print(f"capacity_bound: near-full: median step {statistics.median(times) * 1000:.1f} ms "
      f"({statistics.median(times) / baseline:.2f}x uncapped), {retries} retries, {ooms} ooms in {len(times)} steps", flush=True)
probe.phase("end")
