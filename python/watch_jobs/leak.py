"""A leaking job for `trainfit watch`: a bf16 MLP whose loop keeps every step's loss together with its
graph (backward with retain_graph=True, the loss appended to a list: the classic `losses.append(loss)`
without .item()), so each step's saved activations (~64 MiB) stay on the card and used memory climbs
steadily until the run ends (or, left alone, runs out of memory). The steps are paced (--steps-per-
second) so that memory rises by ~0.6 GiB/s: a few minutes to fill an H200. Each step also multiplies
8192 x 8192 bf16 matrices outside the graph (--matmuls, ~2 ms each on an H200) so that the GPU is
busy part of the time: watch warns of growth only on a GPU that is not idle."""
import argparse
import time

import torch

from _jobs import Probe

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=40)
ap.add_argument("--warmup", type=float, default=6)
ap.add_argument("--steps-per-second", type=float, default=10)
ap.add_argument("--matmuls", type=int, default=20)
args = ap.parse_args()

probe = Probe()
probe.phase("warmup")
start = time.time()
torch.manual_seed(0)
width, layers, rows = 2048, 4, 2048  # each layer saves its input and the GELU's: 2 x 8 MiB
model = torch.nn.Sequential(*[m for _ in range(layers) for m in (torch.nn.Linear(width, width), torch.nn.GELU())])
model = model.to(device="cuda", dtype=torch.bfloat16)
opt = torch.optim.SGD(model.parameters(), lr=1e-6)
kept = []  # the leak
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
step, steady = 0, False
last = time.perf_counter()
while time.time() - start < args.seconds:
    x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    loss = model(x).float().square().mean()
    loss.backward(retain_graph=True)
    kept.append(loss)
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        for _ in range(args.matmuls):
            b = a @ a
    torch.cuda.synchronize()
    step += 1
    if not steady and time.time() - start >= args.warmup:
        probe.phase("steady", expect="memory-growing",
                    label=f"every step's loss and graph kept (~{layers * 2 * rows * width * 2 >> 20} MiB a step)")
        steady = True
    pause = 1 / args.steps_per_second - (time.perf_counter() - last)
    if pause > 0:
        time.sleep(pause)
    now = time.perf_counter()
    probe.record(now - last, step=step)
    last = now
probe.phase("end")
print(f"leak: {step} steps in {time.time() - start:.1f} s, {torch.cuda.memory_allocated() / 2**30:.1f} GiB held",
      flush=True)
