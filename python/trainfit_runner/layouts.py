"""Which multi-GPU layout a config asks for, and whether this runner can run it (no torch needed).

The settings (`parallel`, `offload`, `tp`, `pp`, `microbatches`, `cp`, `nodes`, the FSDP
mixed-precision dtypes) come from trainfit's settings table; `trainfit plan` refuses the
combinations no framework can run. This module refuses, in addition, what this runner does not
implement, before torchrun starts (a refused layout costs no GPU time and writes an `error` row
with the reason), and computes the pure arithmetic of a layout (degrees, device-mesh shape,
pipeline split, tokens per step) so that it can be tested without a GPU. run.py, steps.py and
parallel.py do the PyTorch side.
"""
import importlib.util
from dataclasses import dataclass

FSDP_FAMILY = ("fsdp", "fsdp-grad-op", "hsdp")
DEEPSPEED_STAGES = ("zero2", "zero3")


class LayoutError(ValueError):
    """A layout this runner cannot run; the message says why (it becomes the row's error)."""


@dataclass(frozen=True)
class Layout:
    gpus: int
    parallel: str  # how the data-parallel replicas hold the model (ddp, fsdp, ...)
    dp: int  # data-parallel degree: gpus / (tp * pp * cp)
    tp: int
    pp: int
    cp: int
    nodes: int
    microbatches: int  # pipeline micro-batches of `batch` sequences each (1 without a pipeline)
    offload: str

    @property
    def distributed(self):
        return self.gpus > 1


def _int(cfg, key, default=1):
    value = cfg.get(key)
    return default if value is None else int(value)


def layout_of(cfg):
    """The layout of a completed config (setup_schema.complete), without checking it."""
    gpus = _int(cfg, "gpus")
    if gpus <= 1:
        return Layout(gpus=1, parallel="single", dp=1, tp=1, pp=1, cp=1, nodes=1, microbatches=1, offload="none")
    tp, pp, cp = _int(cfg, "tp"), _int(cfg, "pp"), _int(cfg, "cp")
    model_parallel = tp * pp * cp
    return Layout(gpus=gpus, parallel=cfg.get("parallel") or "ddp", dp=max(1, gpus // model_parallel), tp=tp, pp=pp,
                  cp=cp, nodes=_int(cfg, "nodes"), microbatches=_int(cfg, "microbatches", pp) if pp > 1 else 1,
                  offload=cfg.get("offload") or "none")


def is_moe(model_json):
    return any(model_json.get(k) for k in ("num_experts", "num_local_experts", "n_routed_experts"))


def deepspeed_installed():
    return importlib.util.find_spec("deepspeed") is not None


def check(cfg, model_json=None):
    """The layout of `cfg`, or LayoutError saying why this runner cannot run it. `model_json` (the
    model's config.json as a dict, when known) lets the head and layer counts be checked."""
    lay = layout_of(cfg)
    if not lay.distributed:
        return lay
    if lay.gpus % (lay.tp * lay.pp * lay.cp):
        raise LayoutError("%d GPUs do not divide into tp x pp x cp = %d x %d x %d" % (lay.gpus, lay.tp, lay.pp, lay.cp))
    if lay.cp > 1:
        raise LayoutError("context parallelism (cp %d) is not implemented in the runner" % lay.cp)
    if lay.parallel in DEEPSPEED_STAGES:
        if not deepspeed_installed():
            raise LayoutError("%s needs DeepSpeed: DeepSpeed is not installed (the runner measures zero1 with PyTorch's "
                              "ZeroRedundancyOptimizer; DeepSpeed's stages 2 and 3 are modelled, not measured)"
                              % lay.parallel)
        raise LayoutError("%s through DeepSpeed is not implemented in the runner" % lay.parallel)
    method = cfg.get("method", "full")
    if method == "qlora" and (lay.parallel not in ("ddp", "zero1") or lay.tp > 1 or lay.pp > 1):
        raise LayoutError("QLoRA runs with parallel ddp or zero1 only (4-bit storage is not sharded)")
    if lay.offload != "none":
        if lay.parallel not in FSDP_FAMILY or lay.offload != "optimizer,params":
            raise LayoutError("offload %s with parallel %s is not implemented in the runner: it offloads through "
                              "FSDP2's CPUOffloadPolicy, offload optimizer,params with fsdp, fsdp-grad-op or hsdp "
                              "(DeepSpeed's offload is modelled, not measured)" % (lay.offload, lay.parallel))
        if cfg.get("offload_device", "cpu") != "cpu":
            raise LayoutError("offload to %s is DeepSpeed's; FSDP2 offloads to CPU memory" % cfg.get("offload_device"))
        if lay.tp > 1 or lay.pp > 1:
            raise LayoutError("offload with tensor or pipeline parallelism is not implemented in the runner")
    if lay.parallel == "hsdp":
        if lay.tp > 1 or lay.pp > 1:
            raise LayoutError("hsdp with tensor or pipeline parallelism is not implemented in the runner")
        if lay.dp % lay.nodes:
            raise LayoutError("hsdp: %d data-parallel GPUs do not spread evenly over %d nodes" % (lay.dp, lay.nodes))
    if lay.tp > 1 and lay.pp > 1:
        raise LayoutError("tensor and pipeline parallelism together are not implemented in the runner")
    if lay.tp > 1:
        if method != "full":
            raise LayoutError("%s under tensor parallelism is not implemented in the runner (full fine-tuning only)"
                              % method)
        if int(cfg.get("seq", 0)) % lay.tp:
            raise LayoutError("sequence parallelism: seq %s does not split into %d equal parts" % (cfg.get("seq"), lay.tp))
        if lay.dp > 1 and lay.parallel not in ("fsdp", "fsdp-grad-op"):
            raise LayoutError("tensor parallelism with %d data-parallel replicas runs them with FSDP2 (parallel fsdp "
                              "or fsdp-grad-op), not %s" % (lay.dp, lay.parallel))
        if model_json is not None:
            if is_moe(model_json):
                raise LayoutError("tensor parallelism of mixture-of-experts layers is not implemented in the runner")
            for key in ("num_attention_heads", "num_key_value_heads"):
                heads = model_json.get(key)
                if heads is not None and heads % lay.tp:
                    raise LayoutError("tp %d does not divide %s %d" % (lay.tp, key, heads))
    if lay.pp > 1:
        if lay.microbatches < lay.pp:
            raise LayoutError("a pipeline of %d stages needs at least %d micro-batches (got %d)"
                              % (lay.pp, lay.pp, lay.microbatches))
        if _int(cfg, "grad_accum") != 1:
            raise LayoutError("grad_accum with a pipeline: use microbatches (the runner's pipeline steps once per "
                              "optimizer step)")
        if lay.dp > 1 and lay.parallel not in ("ddp", "fsdp", "fsdp-grad-op"):
            raise LayoutError("a pipeline with %d data-parallel replicas runs them with ddp or fsdp, not %s"
                              % (lay.dp, lay.parallel))
        if model_json is not None:
            if is_moe(model_json):
                raise LayoutError("pipeline stages of mixture-of-experts models are not implemented in the runner")
            layers = model_json.get("num_hidden_layers")
            if layers is not None and layers < lay.pp:
                raise LayoutError("pp %d is more stages than the model's %d layers" % (lay.pp, layers))
    return lay


def mesh_shape(lay):
    """(shape, dimension names) of the device mesh the layout runs on, or None (one flat group).
    Tensor- and pipeline-parallel ranks are the innermost dimension: neighbouring ranks, so on a
    multi-node machine they share a host (NVLink) and data parallelism crosses hosts."""
    if lay.tp > 1:
        return (lay.dp, lay.tp), ("dp", "tp")
    if lay.pp > 1:
        return (lay.dp, lay.pp), ("dp", "pp")
    if lay.parallel == "hsdp":
        return (lay.nodes, lay.dp // lay.nodes), ("replicate", "shard")
    return None


def pipeline_split(layers, stages):
    """[(first, end)] decoder layers of each stage: contiguous, as equal as they divide, the
    earlier stages taking the remainder (stage 0 also embeds and the last one holds the output
    layer and the loss, so neither end is given more)."""
    if stages < 1 or layers < stages:
        raise LayoutError("cannot split %d layers into %d stages" % (layers, stages))
    base, extra = divmod(layers, stages)
    out, start = [], 0
    for s in range(stages):
        n = base + (1 if s < extra else 0)
        out.append((start, start + n))
        start += n
    return out


def tokens_per_step(cfg, lay):
    """Tokens one optimizer step trains on across the run: each data-parallel replica runs
    grad_accum micro-batches (a pipeline: `microbatches` of them) of batch x seq tokens; tensor-
    and pipeline-parallel ranks share their replica's tokens. A paired objective (dpo, orpo,
    reward) trains on the chosen and the rejected sequence of each example: twice the tokens."""
    paired = 2 if cfg.get("objective") in ("dpo", "orpo", "reward") else 1
    return int(cfg["seq"]) * int(cfg["batch"]) * paired * _int(cfg, "grad_accum") * lay.microbatches * lay.dp


def describe(cfg, lay):
    """What the runner does for this layout, for the row (measured.layout)."""
    d = {"gpus": lay.gpus, "dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "cp": lay.cp, "nodes": lay.nodes}
    if not lay.distributed:
        d["api"] = "single GPU"
        return d
    shape = mesh_shape(lay)
    if shape:
        d["mesh"] = {"shape": list(shape[0]), "dims": list(shape[1])}
    p = lay.parallel
    parts = []
    if lay.tp > 1:
        parts.append("tensor parallel %d (parallelize_module, sequence parallel norms)" % lay.tp)
    if lay.pp > 1:
        parts.append("pipeline %d stages, Schedule1F1B, %d micro-batches" % (lay.pp, lay.microbatches))
    if lay.dp > 1 or (lay.tp == 1 and lay.pp == 1):
        if p == "ddp":
            grad = "no_sync on the first %d micro-batches" % (_int(cfg, "grad_accum") - 1) \
                if _int(cfg, "grad_accum") > 1 else "one all-reduce a step"
            parts.append("DistributedDataParallel (%s)" % grad)
        elif p == "zero1":
            parts.append("DistributedDataParallel + ZeroRedundancyOptimizer")
        elif p in FSDP_FAMILY:
            fsdp = "FSDP2 fully_shard per decoder layer and root"
            if p == "fsdp-grad-op":
                fsdp += ", reshard_after_forward=False"
            if p == "hsdp":
                fsdp += ", 2-D mesh (replicate %d x shard %d)" % (lay.nodes, lay.dp // lay.nodes)
            if cfg.get("fsdp_param_dtype") or cfg.get("fsdp_reduce_dtype"):
                fsdp += ", MixedPrecisionPolicy(param_dtype=%s, reduce_dtype=%s)" % (
                    cfg.get("fsdp_param_dtype"), cfg.get("fsdp_reduce_dtype"))
            if lay.offload == "optimizer,params":
                fsdp += ", CPUOffloadPolicy(pin_memory=True), optimizer step on the CPU"
            parts.append(fsdp)
    d["api"] = "; ".join(parts)
    return d


def main(argv):
    """`python3 -m trainfit_runner.layouts CONFIG_JSON`: what the runner would run for a config
    (its layout, as measured.layout says it), or why it refuses it; nothing runs (smoke.sh DRY_RUN=1)."""
    import json
    from . import setup_schema
    from .models import model_json
    cfg = setup_schema.complete(json.loads(argv[1]))
    try:
        lay = check(cfg, model_json(cfg["model"]))
        print(json.dumps({"method": cfg["method"], "layout": describe(cfg, lay)}))
    except LayoutError as e:
        print(json.dumps({"refused": str(e)}))
    return 0


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv))
