"""Step events for `trainfit watch` (docs/watch.md, "Probe events").

One JSON object a line, appended to the file named by $TRAINFIT_WATCH_EVENTS (`trainfit watch -- JOB`
sets it for the job it starts). Without that variable nothing is written. Drop it into a training loop:

    probe = Probe()
    ...
    probe.step(step, step_seconds, data_seconds)   # after each optimizer step
"""
import json
import os
import time


class Probe:
    def __init__(self):
        path = os.environ.get("TRAINFIT_WATCH_EVENTS")
        self._file = open(path, "a", buffering=1) if path else None
        self.limit_bytes = None  # the allocator's cap, when set_per_process_memory_fraction is used

    def emit(self, **fields):
        if self._file:
            fields.setdefault("t", time.time())
            self._file.write(json.dumps(fields) + "\n")

    def phase(self, phase, expect=None, label=None):
        """A marker for recordings: where the steady state starts and what it should be called."""
        self.emit(phase=phase, expect=expect, label=label)

    def step(self, step, step_seconds, data_seconds=None):
        import torch

        stats = torch.cuda.memory_stats()
        self.emit(step=step, step_seconds=step_seconds, data_seconds=data_seconds,
                  alloc_retries=stats.get("num_alloc_retries", 0), ooms=stats.get("num_ooms", 0),
                  allocated_bytes=torch.cuda.memory_allocated(), reserved_bytes=torch.cuda.memory_reserved(),
                  limit_bytes=self.limit_bytes)
