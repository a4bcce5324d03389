"""What the watch jobs share: the project's one event writer (python/trainfit_runner/probe.py), which
appends to $TRAINFIT_WATCH_EVENTS when `trainfit watch -- JOB` sets it, and the job's device."""
import os
import sys

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
