"""What the watch jobs share: the project's one event writer (python/trainfit_runner/probe.py), which
appends to $TRAINFIT_WATCH_EVENTS when `trainfit watch -- JOB` sets it, and the job's device."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trainfit_runner.probe import Probe  # noqa: E402,F401


def square_loss_step(model, opt, x, retain_graph=False):
    """One optimizer step of `model` on `x` with the mean square of its output as the loss, waited
    for on the GPU (so that the caller's clock times the whole step). Returns the loss."""
    import torch

    loss = model(x).float().square().mean()
    loss.backward(retain_graph=retain_graph)
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return loss


def join_ddp():
    """This process's rank of a job under torchrun, on its own GPU (LOCAL_RANK), in an NCCL process
    group. Returns (rank, local_rank)."""
    import torch
    import torch.distributed as dist

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    return dist.get_rank(), local_rank


def ddp_linear_stack(width, layers, local_rank):
    """`layers` bias-free bf16 linears width x width under DistributedDataParallel, seeded alike on
    every rank."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])
    return torch.nn.parallel.DistributedDataParallel(model.to(device="cuda", dtype=torch.bfloat16),
                                                     device_ids=[local_rank])


def common_start():
    """Rank 0's clock, on every rank: the ranks run for the same time and so the same number of steps
    (a rank stopping early would leave the others waiting in an all-reduce for ever)."""
    import torch
    import torch.distributed as dist

    start = torch.tensor([time.time()], dtype=torch.float64, device="cuda")
    dist.broadcast(start, 0)
    return start.item()


def all_ranks_done(start, seconds):
    """True on every rank once any rank's clock has run `seconds` past `start`."""
    import torch
    import torch.distributed as dist

    done = torch.tensor([1.0 if time.time() - start >= seconds else 0.0], device="cuda")
    dist.all_reduce(done, op=dist.ReduceOp.MAX)
    return done.item() > 0
