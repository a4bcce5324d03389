"""The PyTorch side of the multi-GPU layouts (layouts.py decides which; docs/bench.md says what each does).

Every function takes the torch module as its first argument, as run.py, models.py and steps.py do,
so that importing this file needs no torch. Each rank runs the same code; a layout is built from
PyTorch's own distributed stack only:

- data parallelism: DistributedDataParallel; ZeroRedundancyOptimizer over DDP (zero1); FSDP2's
  fully_shard (fsdp, fsdp-grad-op, hsdp on a 2-D mesh) with MixedPrecisionPolicy and
  CPUOffloadPolicy;
- tensor parallelism: torch.distributed.tensor.parallel.parallelize_module, Megatron's plan with
  sequence parallelism between the blocks;
- pipeline parallelism: torch.distributed.pipelining's PipelineStage and Schedule1F1B over
  contiguous runs of decoder layers.
"""
import gc
import re

from . import layouts
from .setup_schema import module_names

# The decoder layers of a transformers causal LM (model.layers.N), under PEFT's wrapper too.
LAYER_NAME = re.compile(r"(.*\.)?layers\.\d+")


def base_model(model):
    """The transformers model under PEFT's wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def decoder_layers(model):
    return [m for n, m in base_model(model).named_modules() if LAYER_NAME.fullmatch(n)]


def torch_dtype(torch, name):
    return None if name is None else {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def make_mesh(torch, lay, device):
    """The layout's DeviceMesh (layouts.mesh_shape), or None for one flat process group."""
    shape = layouts.mesh_shape(lay)
    if shape is None:
        return None
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh(device.type, shape[0], mesh_dim_names=shape[1])


def free_cached(torch, device):
    """Returns what a rebuild left behind (the full model before sharding or pruning) to the
    driver, so that the steps start from what the layout itself holds."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------
# Data parallelism

def apply_fsdp(torch, model, cfg, lay, mesh=None):
    """FSDP2: fully_shard on every decoder layer (its parameters gathered for its forward and
    again for its backward), then on the root (embedding, final norm, output layer). PEFT's bf16
    base and fp32 adapters share a unit: FSDP2 shards each parameter on its own."""
    from torch.distributed.fsdp import fully_shard
    kwargs = {}
    if mesh is not None:
        kwargs["mesh"] = mesh
    if lay.parallel == "fsdp-grad-op":
        # ZeRO-2-like: a layer stays gathered from its forward to its backward.
        kwargs["reshard_after_forward"] = False
    param_dtype = torch_dtype(torch, cfg.get("fsdp_param_dtype"))
    reduce_dtype = torch_dtype(torch, cfg.get("fsdp_reduce_dtype"))
    if param_dtype is not None or reduce_dtype is not None:
        # What accelerate and the HF Trainer set up: fp32 shards (the weights setting), layers
        # gathered and computed in param_dtype, gradients reduce-scattered in reduce_dtype.
        from torch.distributed.fsdp import MixedPrecisionPolicy
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype)
    if lay.offload == "optimizer,params":
        # Shards, gradients and the optimizer step live in pinned host memory; each layer is
        # copied to the GPU for its forward and backward.
        from torch.distributed.fsdp import CPUOffloadPolicy
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(base_model(model), **kwargs)
    return model


def apply_ddp(torch, model, device, process_group=None):
    from torch.nn.parallel import DistributedDataParallel as DDP
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None, process_group=process_group)


def make_zero1(torch, params, optimizer_class, optimizer_kwargs):
    """ZeRO stage 1 as PyTorch has it: each rank keeps the optimizer states of its share of the
    parameters, steps them, and broadcasts the updated parameters to the others."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    return ZeroRedundancyOptimizer(params, optimizer_class=optimizer_class, **optimizer_kwargs)


# ---------------------------------------------------------------------------------------------
# Tensor parallelism

TP_PLAN_TEXT = ("embed_tokens RowwiseParallel (vocabulary-sharded, output replicated: transformers derives positions "
                "and the mask from its length); layer 0's input split along the sequence; input_layernorm, "
                "post_attention_layernorm, norm SequenceParallel; self_attn and mlp inputs all-gathered along the "
                "sequence; q/k/v_proj, gate/up_proj ColwiseParallel; o_proj, down_proj RowwiseParallel with the output "
                "reduce-scattered along the sequence; lm_head ColwiseParallel from the sequence-sharded norm, logits "
                "all-gathered (each rank holds the whole logits for transformers' loss); tied embeddings stay tied")


def _sequence_hook(torch, mesh, source, target):
    """A forward pre-hook redistributing a block's hidden states (first positional argument or the
    hidden_states keyword, as transformers passes them) from `source` to `target` placement: the
    sequence-parallel all-gather before attention and MLP, and the split at the first layer."""
    from torch.distributed.tensor import DTensor

    def convert(x):
        if not isinstance(x, torch.Tensor):
            return x
        if not isinstance(x, DTensor):
            x = DTensor.from_local(x, mesh, [source], run_check=False)
        return x.redistribute(mesh, [target]).to_local()

    def hook(module, args, kwargs):
        if args:
            args = (convert(args[0]),) + tuple(args[1:])
        elif "hidden_states" in kwargs:
            kwargs = dict(kwargs, hidden_states=convert(kwargs["hidden_states"]))
        return args, kwargs

    return hook


def apply_tensor_parallel(torch, model, mesh):
    """Megatron-style tensor parallelism with sequence parallelism on a Llama/Qwen-shaped
    transformers model (model.embed_tokens, model.layers[i].self_attn.{q,k,v,o}_proj,
    mlp.{gate,up,down}_proj, the RMSNorms, lm_head). Attention reshapes with -1 heads, so each
    rank runs its share of the heads unchanged."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)
    lm = base_model(model)
    decoder = lm.model
    tied = lm.lm_head.weight is decoder.embed_tokens.weight
    # A padding row is an index into the whole vocabulary, which no rank's shard holds: dropped
    # (it only zeroes that row's gradient; Qwen2.5 and Llama 3 configs set none).
    decoder.embed_tokens.padding_idx = None
    parallelize_module(decoder, mesh, {
        "embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate()),
        "norm": SequenceParallel(use_local_output=True),
    })
    parallelize_module(lm, mesh, {
        "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    })
    # The modules by role, named as the model's family names them (trainfit's table of families).
    names = module_names(getattr(model.config, "model_type", "llama"))
    for layer in decoder.layers:
        parallelize_module(layer, mesh, {
            "input_layernorm": SequenceParallel(use_local_output=True),
            "post_attention_layernorm": SequenceParallel(use_local_output=True),
            "self_attn." + names["attention_query"]: ColwiseParallel(),
            "self_attn." + names["attention_key"]: ColwiseParallel(),
            "self_attn." + names["attention_value"]: ColwiseParallel(),
            "self_attn." + names["attention_output"]: RowwiseParallel(output_layouts=Shard(1)),
            "mlp." + names["mlp_gate"]: ColwiseParallel(),
            "mlp." + names["mlp_up"]: ColwiseParallel(),
            "mlp." + names["mlp_down"]: RowwiseParallel(output_layouts=Shard(1)),
        })
        layer.self_attn.register_forward_pre_hook(_sequence_hook(torch, mesh, Shard(1), Replicate()),
                                                  with_kwargs=True)
        layer.mlp.register_forward_pre_hook(_sequence_hook(torch, mesh, Shard(1), Replicate()), with_kwargs=True)
    decoder.layers[0].register_forward_pre_hook(_sequence_hook(torch, mesh, Replicate(), Shard(1)), with_kwargs=True)
    if tied:
        # Both sides shard the vocabulary rows (Shard(0)): one weight again, as the model has it.
        lm.lm_head.weight = decoder.embed_tokens.weight
    return model


# ---------------------------------------------------------------------------------------------
# Pipeline parallelism

def make_stage_module(torch, model, stage, stages, seq, amp_ctx):
    """This rank's stage of the model: a contiguous run of decoder layers (layouts.pipeline_split),
    stage 0 with the embedding, the last with the final norm and output layer. The layers of other
    stages are dropped (free_cached gives their memory back). Returns (module, loss function)."""
    nn = torch.nn
    lm = base_model(model)
    decoder = lm.model
    first, last = stage == 0, stage == stages - 1
    start, end = layouts.pipeline_split(len(decoder.layers), stages)[stage]
    vocab = lm.config.vocab_size
    hf_loss = getattr(lm, "loss_function", None)

    def loss_fn(logits, labels):
        # transformers' own causal-LM loss (upcast logits, shifted labels), as the unsplit model runs it.
        if hf_loss is not None:
            return hf_loss(logits=logits, labels=labels, vocab_size=vocab)
        return nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())

    class Stage(nn.Module):
        # The pieces come in as arguments: a method closing over `decoder` or `lm` would keep the
        # whole model, dropped layers included, alive as long as the stage.
        def __init__(self, embed_tokens, layers, rotary_emb, norm, lm_head):
            super().__init__()
            self.embed_tokens = embed_tokens
            self.layers = nn.ModuleList(layers)
            self.rotary_emb = rotary_emb
            self.norm = norm
            self.lm_head = lm_head

        def forward(self, x):
            with amp_ctx():
                h = self.embed_tokens(x) if first else x
                # The whole sequence's positions (not from h, which is the received activation).
                pos = torch.arange(seq, device=h.device).unsqueeze(0).expand(h.shape[0], -1)
                kwargs = {"attention_mask": None, "position_ids": pos}  # None: causal attention (sdpa is_causal)
                if self.rotary_emb is not None:
                    kwargs["position_embeddings"] = self.rotary_emb(h, pos)
                for layer in self.layers:
                    out = layer(h, **kwargs)
                    h = out[0] if isinstance(out, tuple) else out
                if last:
                    h = self.lm_head(self.norm(h))
            return h

    # Older transformers compute the rotary table once in the model; newer ones in each attention.
    module = Stage(decoder.embed_tokens if first else None, list(decoder.layers[start:end]),
                   getattr(decoder, "rotary_emb", None), decoder.norm if last else None, lm.lm_head if last else None)
    module.layer_range = (start, end)
    return module, loss_fn


class Pipeline:
    """One optimizer step of a pipeline: Schedule1F1B over `microbatches` micro-batches."""

    def __init__(self, torch, module, loss_fn, stage, stages, microbatches, device, group):
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B
        self.stage, self.stages = stage, stages
        # No input_args: PipelineStage infers the shapes and dtypes stage to stage on the first step.
        self.pipe_stage = PipelineStage(module, stage, stages, device, group=group)
        self.schedule = Schedule1F1B(self.pipe_stage, n_microbatches=microbatches, loss_fn=loss_fn)

    def step(self, ids):
        """ids: microbatches x batch sequences; the first stage feeds them, the last scores them."""
        if self.stage == 0:
            self.schedule.step(ids)
        elif self.stage == self.stages - 1:
            losses = []
            self.schedule.step(target=ids, losses=losses)
        else:
            self.schedule.step()


def build_pipeline(torch, model, cfg, lay, mesh, device, amp_ctx):
    """(stage module, Pipeline, stage index): this rank's stage, wrapped in DDP or FSDP2 over its
    data-parallel group when there are several replicas."""
    pp_mesh = mesh["pp"]
    stage = pp_mesh.get_local_rank()
    # The caller drops the whole model once this returns, and gives its memory back (free_cached).
    module, loss_fn = make_stage_module(torch, model, stage, lay.pp, int(cfg["seq"]), amp_ctx)
    if lay.dp > 1:
        if lay.parallel == "ddp":
            module = apply_ddp(torch, module, device, process_group=mesh["dp"].get_group())
        else:
            from torch.distributed.fsdp import fully_shard
            kwargs = {"mesh": mesh["dp"]}
            if lay.parallel == "fsdp-grad-op":
                kwargs["reshard_after_forward"] = False
            for layer in module.layers:
                fully_shard(layer, **kwargs)
            fully_shard(module, **kwargs)
    pipe = Pipeline(torch, module, loss_fn, stage, lay.pp, lay.microbatches, device, pp_mesh.get_group())
    return module, pipe, stage
