"""A straggler for `trainfit watch`: DDP over two GPUs (torchrun --nproc-per-node 2) where rank 0's
batches take 150 ms to make (one DataLoader worker sleeping, standing in for a slow shard or disk)
and rank 1's are ready at once. The model's step is ~20 ms of arithmetic, so rank 1 spends most of
each step inside the all-reduce, waiting for rank 0. Each rank writes its steps (with its data wait)
tagged with its rank and GPU; rank 0 writes the phase markers.

    trainfit watch -- torchrun --nproc-per-node 2 straggler.py"""
import argparse
import time

import torch
import torch.distributed as dist

from _jobs import Probe, all_ranks_done, common_start, ddp_linear_stack, join_ddp, square_loss_step


class Batches(torch.utils.data.Dataset):
    def __init__(self, rows, width, seconds):
        self.rows, self.width, self.seconds = rows, width, seconds

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        time.sleep(self.seconds)
        return torch.randn(self.rows, self.width, generator=torch.Generator().manual_seed(i))


ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=40)
ap.add_argument("--warmup", type=float, default=8)
ap.add_argument("--slow-batch-seconds", type=float, default=0.15)
ap.add_argument("--width", type=int, default=4096)
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--rows", type=int, default=8192)
args = ap.parse_args()

rank, local_rank = join_ddp()
probe = Probe()
if rank == 0:
    probe.phase("warmup")
model = ddp_linear_stack(args.width, args.layers, local_rank)
opt = torch.optim.SGD(model.parameters(), lr=1e-6)
loader = torch.utils.data.DataLoader(Batches(args.rows, args.width, args.slow_batch_seconds if rank == 0 else 0.0),
                                     batch_size=None, num_workers=1, pin_memory=True, prefetch_factor=2,
                                     persistent_workers=True)
it = iter(loader)
start = common_start()
step, steady = 0, False
last = time.perf_counter()
while not all_ranks_done(start, args.seconds):
    t0 = time.perf_counter()
    x = next(it)
    data = time.perf_counter() - t0
    square_loss_step(model, opt, x.to("cuda", dtype=torch.bfloat16, non_blocking=True))
    now = time.perf_counter()
    step += 1
    if rank == 0 and not steady and time.time() - start >= args.warmup:
        probe.phase("steady", expect="straggler",
                    label=f"DDP on {dist.get_world_size()} GPUs, rank 0's batches {args.slow_batch_seconds * 1000:.0f} ms, "
                          "the others' at once")
        steady = True
    probe.record(now - last, data, step=step)
    last = now
if rank == 0:
    probe.phase("end")
    print(f"straggler: {step} steps in {time.time() - start:.1f} s on {dist.get_world_size()} GPUs", flush=True)
dist.destroy_process_group()
