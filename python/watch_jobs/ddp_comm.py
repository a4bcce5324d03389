"""A communication-bound job for `trainfit watch`: DDP over two GPUs (torchrun --nproc-per-node 2) with
NCCL peer-to-peer off (record.sh sets NCCL_P2P_DISABLE=1), so every all-reduce goes through host
memory over PCIe. The model is wide and the batch tiny: ~0.5 B bf16 parameters (1 GiB of gradients to
all-reduce each step) against a few milliseconds of arithmetic, so the ranks spend their steps in
NCCL. Each rank writes its steps with its rank and GPU; rank 0 writes the phase markers.

    NCCL_P2P_DISABLE=1 trainfit watch -- torchrun --nproc-per-node 2 ddp_comm.py"""
import argparse
import os
import time

import torch
import torch.distributed as dist

from _jobs import Probe, all_ranks_done, common_start, ddp_linear_stack, join_ddp, square_loss_step

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=40)
ap.add_argument("--warmup", type=float, default=8)
ap.add_argument("--width", type=int, default=8192)
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--rows", type=int, default=64)
args = ap.parse_args()

rank, local_rank = join_ddp()
probe = Probe()
if rank == 0:
    probe.phase("warmup")
model = ddp_linear_stack(args.width, args.layers, local_rank)
opt = torch.optim.SGD(model.parameters(), lr=1e-6)
x = torch.randn(args.rows, args.width, device="cuda", dtype=torch.bfloat16)
start = common_start()
step, steady = 0, False
while not all_ranks_done(start, args.seconds):
    t0 = time.perf_counter()
    square_loss_step(model, opt, x)
    step += 1
    if rank == 0 and not steady and time.time() - start >= args.warmup:
        probe.phase("steady", expect="communication",
                    label=f"DDP on {dist.get_world_size()} GPUs, {args.layers}x{args.width} bf16, "
                          f"NCCL_P2P_DISABLE={os.environ.get('NCCL_P2P_DISABLE', '')}")
        steady = True
    probe.record(time.perf_counter() - t0, step=step)
if rank == 0:
    probe.phase("end")
    print(f"ddp_comm: {step} steps in {time.time() - start:.1f} s on {dist.get_world_size()} GPUs", flush=True)
dist.destroy_process_group()
