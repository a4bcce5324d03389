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

from _jobs import Probe, square_loss_step

ap = argparse.ArgumentParser()
ap.add_argument("--seconds", type=float, default=40)
ap.add_argument("--warmup", type=float, default=8)
ap.add_argument("--width", type=int, default=8192)
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--rows", type=int, default=64)
args = ap.parse_args()

local_rank = int(os.environ.get("LOCAL_RANK", "0"))
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl")
rank = dist.get_rank()
probe = Probe()
if rank == 0:
    probe.phase("warmup")
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(args.width, args.width, bias=False) for _ in range(args.layers)])
model = model.to(device="cuda", dtype=torch.bfloat16)
model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
opt = torch.optim.SGD(model.parameters(), lr=1e-6)
x = torch.randn(args.rows, args.width, device="cuda", dtype=torch.bfloat16)
# Every rank starts its clock together and runs the same number of steps (a rank stopping early
# would leave the other waiting in an all-reduce for ever).
start = torch.tensor([time.time()], dtype=torch.float64, device="cuda")
dist.broadcast(start, 0)
start = start.item()
step, steady = 0, False
while True:
    done = torch.tensor([1.0 if time.time() - start >= args.seconds else 0.0], device="cuda")
    dist.all_reduce(done, op=dist.ReduceOp.MAX)
    if done.item() > 0:
        break
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
