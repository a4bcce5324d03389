"""A compute-bound job for `trainfit watch`: a bf16 MLP (4 layers of 8192x8192) trained on a batch of
16384 rows that never leaves the GPU, so nothing but the GPU's arithmetic sets the pace.
About 26 TFLOP a step (forward, backward, update); on an H200 a step takes ~40 ms."""
import argparse
import time

import torch

from _jobs import Probe, square_loss_step

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=35)
ap.add_argument("--warmup", type=float, default=6)
args = ap.parse_args()

probe = Probe()
probe.phase("warmup")
start = time.time()
torch.manual_seed(0)
width, layers, batch = 8192, 4, 16384
model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
model = model.to(device="cuda", dtype=torch.bfloat16)
opt = torch.optim.SGD(model.parameters(), lr=1e-6)
x = torch.randn(batch, width, device="cuda", dtype=torch.bfloat16)
step, steady = 0, False
while time.time() - start < args.seconds:
    t0 = time.perf_counter()
    square_loss_step(model, opt, x)
    step += 1
    if not steady and time.time() - start >= args.warmup:
        probe.phase("steady", expect="compute", label=f"bf16 MLP {layers}x{width}, batch {batch}, data on the GPU")
        steady = True
    probe.record(time.perf_counter() - t0, step=step)
probe.phase("end")
print(f"compute_bound: {step} steps in {time.time() - start:.1f} s", flush=True)
