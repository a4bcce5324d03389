"""An input-pipeline-bound job for `trainfit watch`: a small bf16 MLP (~3 TFLOP a step, a few ms on
an H200) fed by a DataLoader whose two workers each take 60 ms to produce a batch (a sleep standing
in for decoding, augmentation or slow storage). The GPU waits for data most of the time."""
import argparse
import time

import torch

from _jobs import Probe


class SlowBatches(torch.utils.data.Dataset):
    def __init__(self, batches, rows, width, seconds):
        self.batches, self.rows, self.width, self.seconds = batches, rows, width, seconds

    def __len__(self):
        return self.batches

    def __getitem__(self, i):
        time.sleep(self.seconds)
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.rows, self.width, generator=g), torch.randint(0, 10, (self.rows,), generator=g)


ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=35)
ap.add_argument("--warmup", type=float, default=6)
ap.add_argument("--workers", type=int, default=2)
ap.add_argument("--batch-seconds", type=float, default=0.06)
args = ap.parse_args()

probe = Probe()
probe.phase("warmup")
start = time.time()
torch.manual_seed(0)
rows, width, hidden = 8192, 256, 4096
layers = [torch.nn.Linear(width, hidden), torch.nn.GELU()]
for _ in range(4):
    layers += [torch.nn.Linear(hidden, hidden), torch.nn.GELU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(hidden, 10)).to(device="cuda", dtype=torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
loader = torch.utils.data.DataLoader(SlowBatches(100000, rows, width, args.batch_seconds), batch_size=None,
                                     shuffle=False, num_workers=args.workers, pin_memory=True, prefetch_factor=2,
                                     persistent_workers=True)
step, steady = 0, False
it = iter(loader)
last = time.perf_counter()
while time.time() - start < args.seconds:
    t0 = time.perf_counter()
    x, y = next(it)
    data = time.perf_counter() - t0
    x = x.to("cuda", dtype=torch.bfloat16, non_blocking=True)
    y = y.to("cuda", non_blocking=True)
    loss = torch.nn.functional.cross_entropy(model(x).float(), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    now = time.perf_counter()
    step += 1
    if not steady and time.time() - start >= args.warmup:
        probe.phase("steady", expect="input-pipeline",
                    label=f"{args.workers} DataLoader workers x {args.batch_seconds * 1000:.0f} ms a batch, small MLP")
        steady = True
    probe.record(now - last, data, step=step)
    last = now
probe.phase("end")
print(f"input_bound: {step} steps in {time.time() - start:.1f} s", flush=True)
