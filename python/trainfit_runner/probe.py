"""A probe for your own training code: per-step rows that `trainfit` reads (docs/bench.md).

In a plain PyTorch loop::

    from trainfit_runner.probe import Probe
    probe = Probe("steps.jsonl", config={"model": "qwen2.5-7b", "method": "qlora", "rank": 16,
                                          "seq": 512, "batch": 1, "grad_ckpt": True, "gpu": "rtx-5070-ti"},
                  rows="rows.jsonl")
    for batch in loader:
        with probe.step():                  # or probe.begin() ... probe.end()
            loss = model(**batch).loss
            loss.backward()
            opt.step(); opt.zero_grad()
    probe.close()

With a Hugging Face Trainer::

    trainer = Trainer(..., callbacks=[trainfit_callback("steps.jsonl", config={...}, rows="rows.jsonl")])

Under `trainfit watch -- python train.py` no argument is needed: without a path the probe appends to
the file named by $TRAINFIT_WATCH_EVENTS (watch sets it for the job it starts; unset: steps are kept
in memory only), so `Probe()` or `trainfit_callback()` feed watch its step times and data waits. A
loop that times its own steps calls `probe.record(step_seconds, data_seconds)` instead of the hook;
`probe.phase("steady", expect="compute")` marks phases of a recording. Each event carries the rank
(torch.distributed, else $RANK) and the GPU (its NVML index), so a multi-GPU watch judges every GPU
on its own steps. This is the one event writer of the project: python/watch_jobs' jobs use it too.

Each step appends one JSON line to the steps file, in the event format `trainfit watch --events` reads
({"t", "step", "step_seconds", "data_seconds", "alloc_retries", "ooms", "allocated_bytes",
"reserved_bytes", "rank", "device"} plus "peak_allocated_bytes", "peak_reserved_bytes", "device_used_bytes").  close()
appends one row in the format of `trainfit bench`'s results ({"config", "measured", "stack"}), so
`trainfit validate rows.jsonl` puts the planner's prediction beside your run, and the steady-state
figures are defined as bench defines them (peaks and median step time over the steps after `warmup`).
The config is checked against trainfit's vocabulary (`trainfit schema`, setup_schema.py) when the
probe is made, and the row carries every setting: what you gave, and the default of the rest.
Every line is flushed and fsync'ed as it is written: a run killed at any moment keeps its steps
(watch's events file, taken from the environment, is only flushed: watch reads it as it grows, and an
fsync a step would slow the host-bound jobs it is meant to diagnose).
"""
import contextlib
import json
import os
import statistics
import time

MIB = 1 << 20


WATCH_EVENTS = "TRAINFIT_WATCH_EVENTS"


def _append(path, obj, fsync=True):
    with open(path, "a") as f:
        f.write(json.dumps(obj) + "\n")
        f.flush()
        if fsync:
            os.fsync(f.fileno())


def _rank(torch):
    try:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank()
    except Exception:
        pass
    rank = os.environ.get("RANK")
    return int(rank) if rank and rank.isdigit() else None


def _nvml_index(cuda_index):
    """The NVML index of CUDA device `cuda_index`: CUDA_VISIBLE_DEVICES maps CUDA's numbering to the
    machine's when it lists indexes (watch keys GPUs by NVML index); else the same number."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        items = [v.strip() for v in visible.split(",")]
        if all(v.isdigit() for v in items) and cuda_index < len(items):
            return int(items[cuda_index])
    return cuda_index


class Probe:
    def __init__(self, path=None, config=None, rows=None, warmup=1, device=None, sync=True, snapshot=None,
                 host_probe=None):
        """path: the steps file (None: $TRAINFIT_WATCH_EVENTS when set, else steps stay in memory
        only).  config: the setup in trainfit's
        vocabulary (`trainfit schema`: model, method, weights, rank, lora_targets, seq, batch,
        grad_accum, grad_ckpt, attn, optimizer, gpu...; fields of your own start with x_); a field
        that is not in it raises ValueError here, not at the end of the run.  rows: where close()
        appends the summary row.  snapshot: a path; the allocator's history is recorded from here on
        and, after each step that reaches a new peak, a memory snapshot is written there (pickle)
        with its JSON rendering beside it (<path>.json, for `trainfit trace --snapshot`). Make the
        probe before the model so that the weights' allocations have their stacks.  host_probe: True
        (the packaged request, host_probe_request.json), a request (dict) or the path of one; close()
        then times the host probe's tiny steps on this device (host_probe.py: about ten seconds)
        and the row carries the record (measured.host_probe), from which `trainfit validate` takes
        this host's dispatch time per operation for the row."""
        import torch
        from . import setup_schema
        self.torch = torch
        # Watch's events file (from the environment) is flushed, not fsync'ed, each step.
        self.fsync = path is not None
        if path is None:
            path = os.environ.get(WATCH_EVENTS) or None
        self.path, self.rows_path, self.warmup, self.sync = path, rows, warmup, sync
        self.given = dict(config or {})
        self.config = setup_schema.complete(self.given, runner_fields=False)
        self.cuda = torch.cuda.is_available() if device is None else torch.device(device).type == "cuda"
        self.device = torch.device(device) if device is not None else (
            torch.device("cuda", torch.cuda.current_device()) if self.cuda else torch.device("cpu"))
        self.rank = _rank(torch)
        self.gpu = _nvml_index(self.device.index or 0) if self.cuda else None
        self.limit_bytes = None  # the allocator's cap, when the job sets set_per_process_memory_fraction
        self.steps = []
        self._t0 = None
        self._last_end = None
        self._nvml = None
        if self.cuda:
            try:
                import pynvml
                pynvml.nvmlInit()
                self._nvml = (pynvml, pynvml.nvmlDeviceGetHandleByIndex(self.device.index or 0))
            except Exception:
                self._nvml = None
        self.closed = False
        if host_probe is True:
            from . import host_probe as hp
            host_probe = hp.packaged_request()
        elif isinstance(host_probe, (str, os.PathLike)):
            with open(host_probe) as f:
                host_probe = json.load(f)
        self.host_probe_request = host_probe or None
        self.snapshot_path = snapshot if self.cuda else None
        self._snapshot_peak = -1
        if self.snapshot_path:
            torch.cuda.memory._record_memory_history(max_entries=1000000)

    def _snapshot_if_peak(self, ev):
        peak = ev.get("peak_allocated_bytes", -1)
        if not self.snapshot_path or peak <= self._snapshot_peak:
            return
        self._snapshot_peak = peak
        from . import snapshot_json
        snap = self.torch.cuda.memory._snapshot()
        self.torch.cuda.memory._dump_snapshot(self.snapshot_path)
        snapshot_json.write(snap, self.snapshot_path + ".json", self.device.index or 0, peak)

    # -- the step hook
    def begin(self):
        if self.cuda and self.sync:
            self.torch.cuda.synchronize(self.device)
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats(self.device)
        self._t0 = time.perf_counter()

    def end(self):
        if self._t0 is None:
            return None
        if self.cuda and self.sync:
            self.torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        data = max(0.0, self._t0 - self._last_end) if self._last_end is not None else None  # between steps
        self._last_end = now
        step_seconds = now - self._t0
        self._t0 = None
        return self.record(step_seconds, data)

    def record(self, step_seconds, data_seconds=None, step=None):
        """One step timed by the caller (a loop that measures its own steps): appends its event."""
        ev = {"t": time.time(), "step": step if step is not None else len(self.steps) + 1,
              "step_seconds": round(step_seconds, 6)}
        if data_seconds is not None:
            ev["data_seconds"] = round(data_seconds, 6)  # of which waiting for the next batch
        if self.rank is not None:
            ev["rank"] = self.rank
        if self.gpu is not None:
            ev["device"] = self.gpu
        if self.cuda:
            c = self.torch.cuda
            st = c.memory_stats(self.device)
            ev.update(alloc_retries=st.get("num_alloc_retries", 0), ooms=st.get("num_ooms", 0),
                      allocated_bytes=c.memory_allocated(self.device), reserved_bytes=c.memory_reserved(self.device),
                      peak_allocated_bytes=c.max_memory_allocated(self.device),
                      peak_reserved_bytes=c.max_memory_reserved(self.device))
            if self.limit_bytes is not None:
                ev["limit_bytes"] = self.limit_bytes
            if self._nvml is not None:
                try:
                    ev["device_used_bytes"] = self._nvml[0].nvmlDeviceGetMemoryInfo(self._nvml[1]).used
                except Exception:
                    pass
        self.steps.append(ev)
        self._snapshot_if_peak(ev)
        if self.path:
            _append(self.path, ev, self.fsync)
        return ev

    @contextlib.contextmanager
    def step(self):
        self.begin()
        yield self
        self.end()

    def mark(self, phase, expect="", label=""):
        """A phase marker for `trainfit watch` ({"phase": "steady", "expect": "compute"})."""
        if self.path:
            _append(self.path, {"t": time.time(), "phase": phase, "expect": expect or "", "label": label or ""},
                    self.fsync)

    phase = mark

    # -- the row
    def summary(self, status="ok"):
        steady = self.steps[self.warmup:] or self.steps[-1:]
        m = {"status": status, "steps_recorded": len(self.steps), "source": "trainfit_runner.probe"}
        if steady:
            med = statistics.median(s["step_seconds"] for s in steady)
            m["step_seconds"] = [s["step_seconds"] for s in self.steps]
            m["step_seconds_median"] = round(med, 6)
            # Only from what the user said: a default sequence length is not their tokens.
            tokens = self.given.get("seq", 0) * self.given.get("batch", 0) * self.given.get("grad_accum", 1)
            if tokens and med > 0:
                m["tokens_per_second"] = round(tokens / med, 1)
            if self.cuda:
                m["peak_allocated_mib"] = round(max(s["peak_allocated_bytes"] for s in steady) / MIB, 1)
                m["peak_reserved_mib"] = round(max(s["peak_reserved_bytes"] for s in steady) / MIB, 1)
                used = [s["device_used_bytes"] for s in steady if "device_used_bytes" in s]
                m["device_used_mib"] = used and max(used) // MIB or None
                m["num_alloc_retries"] = self.steps[-1]["alloc_retries"]
                m["num_ooms"] = self.steps[-1]["ooms"]
        stack = {"date": time.strftime("%Y-%m-%d"), "torch": self.torch.__version__}
        for name in ("transformers", "peft", "bitsandbytes"):
            try:
                stack[name] = __import__(name).__version__
            except Exception:
                stack[name] = None
        if self.cuda:
            p = self.torch.cuda.get_device_properties(self.device)
            stack["gpu"] = "%s (%d MiB)" % (p.name, p.total_memory // MIB)
        return {"config": self.config, "measured": m, "stack": stack}

    def close(self, status="ok"):
        if self.closed:
            return None
        self.closed = True
        row = self.summary(status)
        if self.host_probe_request is not None:
            from . import host_probe as hp
            row["measured"]["host_probe"] = hp.measure(self.host_probe_request, self.device)
        if self.rows_path:
            _append(self.rows_path, row)
        return row

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        oom = exc is not None and "out of memory" in str(exc)
        self.close("ok" if exc is None else ("oom" if oom else "error"))
        return False


def trainer_callback(start):
    """A transformers.TrainerCallback around every optimizer step: at on_train_begin,
    start(args, model) makes the recorder (a Probe, or anything with begin, end and close), whose
    begin and end bracket each step and whose close ends the run."""
    from transformers import TrainerCallback

    class StepCallback(TrainerCallback):
        def __init__(self):
            self.recorder = None

        def on_train_begin(self, args, state, control, model=None, **kw):
            self.recorder = start(args, model)

        def on_step_begin(self, args, state, control, **kw):
            if self.recorder is not None:
                self.recorder.begin()

        def on_step_end(self, args, state, control, **kw):
            if self.recorder is not None:
                self.recorder.end()

        def on_train_end(self, args, state, control, **kw):
            if self.recorder is not None:
                self.recorder.close()

    return StepCallback()


def trainfit_callback(path=None, config=None, rows=None, warmup=1):
    """A transformers.TrainerCallback that runs a Probe around every optimizer step."""

    def start(args, model):
        cfg = dict(config or {})
        cfg.setdefault("batch", args.per_device_train_batch_size)
        cfg.setdefault("grad_accum", args.gradient_accumulation_steps)
        cfg.setdefault("grad_ckpt", bool(args.gradient_checkpointing))
        return Probe(path, cfg, rows, warmup)

    return trainer_callback(start)
