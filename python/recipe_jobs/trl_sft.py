"""TRL's own SFTTrainer on the GPU (issue 34): the step as people launch it, with TRL's defaults
and the options its docs tell them to switch on, measured so that trainfit's terms for them can be
checked against the trainer itself rather than a re-implementation of it.

    python3 python/recipe_jobs/trl_sft.py OUT_DIR [CASE...]

Every case is an SFTConfig as a user writes it: TRL's defaults (loss_type "chunked_nll", gradient
checkpointing on, bf16 autocast, the Trainer's default optimizer) except for what the case names.
The model is a built-in's config.json with random weights (shape, not values, decides memory and
time), in bf16 as TRL loads a bf16 checkpoint; the data is random token ids at the case's length,
already tokenized (SFTTrainer then only collates). LoRA cases pass a peft LoraConfig to SFTTrainer
(r 16, alpha 32, dropout 0.05, all-linear), as a recipe's peft settings do.

OUT_DIR/rows.jsonl gets one row per case in the measurement format `trainfit validate` reads
(docs/bench.md, "A results row"): `config` in trainfit's setting keys, `measured` with the busiest
step's peak allocated after the first (max_memory_allocated between a step's begin and end, reset
at each begin) and the median step time of the steps after the first, and `recipe`, the SFTConfig
fields the case set. Cases whose options trainfit does not plan yet (activation offloading) are
rows of their own file, OUT_DIR/unplanned.jsonl, so validate keeps to what it can judge.
"""
import json
import os
import statistics
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, ".."))

# name: model, method, batch, seq, and the SFTConfig fields the case changes from TRL's defaults.
CASES = {
    "q1.5b-full-b4s2048": ("qwen2.5-1.5b", "full", 4, 2048, {}),
    "q1.5b-full-b4s2048-nll": ("qwen2.5-1.5b", "full", 4, 2048, {"loss_type": "nll"}),
    "q1.5b-full-b4s2048-nogc": ("qwen2.5-1.5b", "full", 4, 2048, {"gradient_checkpointing": False}),
    "q0.5b-full-b4s1024": ("qwen2.5-0.5b", "full", 4, 1024, {}),
    "q0.5b-full-b1s4096": ("qwen2.5-0.5b", "full", 1, 4096, {}),
    "q0.5b-full-b4s1024-noamp": ("qwen2.5-0.5b", "full", 4, 1024, {"bf16": False}),
    "q1.5b-lora-b4s1024": ("qwen2.5-1.5b", "lora", 4, 1024, {}),
    "q1.5b-lora-b4s1024-nll": ("qwen2.5-1.5b", "lora", 4, 1024, {"loss_type": "nll"}),
    "q3b-lora-b2s2048": ("qwen2.5-3b", "lora", 2, 2048, {}),
    "q3b-full-b2s1024-nogc": ("qwen2.5-3b", "full", 2, 1024, {"gradient_checkpointing": False}),
    "q7b-lora-b2s2048": ("qwen2.5-7b", "lora", 2, 2048, {}),
    "q7b-lora-b2s2048-nll": ("qwen2.5-7b", "lora", 2, 2048, {"loss_type": "nll"}),
    "l1b-full-b8s1024": ("llama3.2-1b", "full", 8, 1024, {}),
    "l3b-lora-b4s2048": ("llama3.2-3b", "lora", 4, 2048, {}),
    "q1.5b-full-b4s2048-completion": ("qwen2.5-1.5b", "full", 4, 2048, {"completion_half": True}),
}
# Held out: chosen and planned (data/bench/h100-trl-sft-2026-12-06/heldout-predictions.txt) before they first ran.
HELDOUT = {
    "mistral7b-lora-b2s2048": ("mistral-7b", "lora", 2, 2048, {}),
    "gemma3-1b-full-b4s2048": ("gemma3-1b", "full", 4, 2048, {}),
    "l3b-full-b2s2048": ("llama3.2-3b", "full", 2, 2048, {}),
    "q1.5b-full-b4s2048-accum2": ("qwen2.5-1.5b", "full", 4, 2048, {"gradient_accumulation_steps": 2}),
    "q14b-lora-b1s2048": ("qwen2.5-14b", "lora", 1, 2048, {}),
    "qwen3-8b-lora-b2s2048": ("qwen3-8b", "lora", 2, 2048, {}),
    "phi3-mini-lora-b4s1024": ("phi3-mini", "lora", 4, 1024, {}),
    "q0.5b-full-b8s2048-nogc": ("qwen2.5-0.5b", "full", 8, 2048, {"gradient_checkpointing": False}),
}
CASES.update(HELDOUT)
# Packing (docs/model.md, "Packing"), planned at 789bbb9 before any ran: SFTTrainer flattens the
# micro-batch (packing with bfd, or padding_free) and, under SDPA, transformers masks it
# block-diagonally. "example_len": the dataset's examples are that long (BFD then packs
# seq / example_len of them a row); otherwise one example fills a row.
PACKING = {
    "q0.5b-full-b4s2048-packing": ("qwen2.5-0.5b", "full", 4, 2048, {"packing": True}),
    "q0.5b-full-b4s2048-packing-nogc": ("qwen2.5-0.5b", "full", 4, 2048,
                                        {"packing": True, "gradient_checkpointing": False}),
    # TRL refuses padding_free without packing unless max_length is None (it would not truncate);
    # the examples are already seq tokens long.
    "q0.5b-full-b4s1024-padfree-nogc": ("qwen2.5-0.5b", "full", 4, 1024,
                                        {"padding_free": True, "gradient_checkpointing": False, "max_length": None}),
    "l1b-full-b4s2048-packing-nogc-halves": ("llama3.2-1b", "full", 4, 2048,
                                             {"packing": True, "gradient_checkpointing": False, "example_len": 1024}),
    "q1.5b-lora-b4s2048-packing": ("qwen2.5-1.5b", "lora", 4, 2048, {"packing": True}),
    "q1.5b-lora-b4s2048-packing-nogc": ("qwen2.5-1.5b", "lora", 4, 2048,
                                        {"packing": True, "gradient_checkpointing": False}),
}
CASES.update(PACKING)
# Liger's kernels (use_liger_kernel), held out: planned (data/bench/h100-trl-sft-2026-12-06/liger-predictions.txt) before
# they first ran; the three Qwen2.5 Liger cases below were measured before Liger was planned.
HELDOUT_LIGER = {
    "l1b-full-b8s1024-liger": ("llama3.2-1b", "full", 8, 1024, {"use_liger_kernel": True}),
    "l3b-lora-b4s2048-liger": ("llama3.2-3b", "lora", 4, 2048, {"use_liger_kernel": True}),
    "gemma3-1b-full-b4s2048-liger": ("gemma3-1b", "full", 4, 2048, {"use_liger_kernel": True}),
    "mistral7b-lora-b2s2048-liger": ("mistral-7b", "lora", 2, 2048, {"use_liger_kernel": True}),
    "qwen3-8b-lora-b2s2048-liger": ("qwen3-8b", "lora", 2, 2048, {"use_liger_kernel": True}),
    "phi3-mini-lora-b4s1024-liger": ("phi3-mini", "lora", 4, 1024, {"use_liger_kernel": True}),
    "q1.5b-full-b4s2048-nogc-liger": ("qwen2.5-1.5b", "full", 4, 2048,
                                      {"use_liger_kernel": True, "gradient_checkpointing": False}),
    "q0.5b-full-b8s2048-nogc-liger": ("qwen2.5-0.5b", "full", 8, 2048,
                                      {"use_liger_kernel": True, "gradient_checkpointing": False}),
    "q3b-lora-b2s2048-liger": ("qwen2.5-3b", "lora", 2, 2048, {"use_liger_kernel": True}),
    "l3b-lora-b4s2048-nogc-liger": ("llama3.2-3b", "lora", 4, 2048,
                                    {"use_liger_kernel": True, "gradient_checkpointing": False}),
}
CASES.update(HELDOUT_LIGER)
# TRL's autocast over LoRA's branch without checkpointing (every layer's branch copies kept), held
# out: planned (data/bench/h100-trl-sft-2026-12-06/autocast-predictions.txt) before they first ran.
HELDOUT_AUTOCAST = {
    "l3b-lora-b4s2048-nogc": ("llama3.2-3b", "lora", 4, 2048, {"gradient_checkpointing": False}),
    "q1.5b-lora-b4s1024-nogc": ("qwen2.5-1.5b", "lora", 4, 1024, {"gradient_checkpointing": False}),
    "mistral7b-lora-b1s2048-nogc-liger": ("mistral-7b", "lora", 1, 2048,
                                          {"gradient_checkpointing": False, "use_liger_kernel": True}),
}
CASES.update(HELDOUT_AUTOCAST)
# Liger's kernels, measured before they were planned (data/bench/h100-trl-sft-2026-12-06/liger.jsonl).
CASES.update({
    "q1.5b-full-b4s2048-liger": ("qwen2.5-1.5b", "full", 4, 2048, {"use_liger_kernel": True}),
    "q1.5b-lora-b4s1024-liger": ("qwen2.5-1.5b", "lora", 4, 1024, {"use_liger_kernel": True}),
    "q7b-lora-b2s2048-liger": ("qwen2.5-7b", "lora", 2, 2048, {"use_liger_kernel": True}),
})
# Options trainfit does not plan yet: measured now, planned later (their own file).
# The two with TRL's default chunked loss ended in a device-side assert on the H100 (2026-12-06; the
# second only because the first had poisoned the process's CUDA context): run each in a process of
# its own, and the same with loss_type nll, which gathers nothing by index.
UNPLANNED = {
    "q1.5b-full-b4s2048-offload": ("qwen2.5-1.5b", "full", 4, 2048, {"activation_offloading": True}),
    "q1.5b-lora-b4s1024-offload": ("qwen2.5-1.5b", "lora", 4, 1024, {"activation_offloading": True}),
    "q1.5b-full-b4s2048-offload-nll": ("qwen2.5-1.5b", "full", 4, 2048,
                                       {"activation_offloading": True, "loss_type": "nll"}),
    "q1.5b-lora-b4s1024-offload-nll": ("qwen2.5-1.5b", "lora", 4, 1024,
                                       {"activation_offloading": True, "loss_type": "nll"}),
    "q0.5b-full-b4s2048-nogc-offload-nll": ("qwen2.5-0.5b", "full", 4, 2048,
                                            {"activation_offloading": True, "loss_type": "nll",
                                             "gradient_checkpointing": False}),
}
STEPS = 6


def word_tokenizer(vocab_size):
    """A word-level tokenizer built in code (w0 ... wN): SFTTrainer wants a processing class."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel({"w%d" % i: i for i in range(vocab_size)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", pad_token="w0", eos_token="w1")


def step_meter(torch, TrainerCallback):
    """A callback class: each optimizer step's wall time and peak allocated, from its begin to its end."""

    class StepMeter(TrainerCallback):
        def __init__(self):
            self.seconds, self.peaks, self.reserved = [], [], []

        def on_step_begin(self, args, state, control, **kw):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            torch.cuda.synchronize()
            self.seconds.append(time.perf_counter() - self.t0)
            self.peaks.append(torch.cuda.max_memory_allocated() / 2**20)
            self.reserved.append(torch.cuda.max_memory_reserved() / 2**20)

    return StepMeter


def measured_of(meter, stats, status, error, **extra):
    """The row's `measured` object: the busiest step after the first (its peak allocated and
    reserved) and the median step after the first, every step's figures, the allocator's counters."""
    later = meter.peaks[1:]
    return dict({"status": status, "error": error,
                 "peak_allocated_mib": max(later) if later else None,
                 "peak_allocated_mib_per_step": meter.peaks,
                 "peak_reserved_mib": max(meter.reserved[1:]) if len(meter.reserved) > 1 else None,
                 "step_seconds": meter.seconds,
                 "step_seconds_median": statistics.median(meter.seconds[1:]) if len(meter.seconds) > 1 else None,
                 "alloc_retries": stats.get("num_alloc_retries"), "ooms": stats.get("num_ooms")}, **extra)


def write_row(out_dir, file_name, row):
    """Appends the row to OUT_DIR/file_name and says the case's figures."""
    with open(os.path.join(out_dir, file_name), "a") as f:
        f.write(json.dumps(row) + "\n")
    m = row["measured"]
    print(row["case"], m["status"], "peak %.0f MiB" % (m["peak_allocated_mib"] or 0),
          "step %.3f s" % (m["step_seconds_median"] or 0), flush=True)


def run_cases(run_case, names):
    """python3 JOB.py OUT_DIR [CASE...]: each case in turn (all by default); one case's failure is
    written to OUT_DIR/errors.jsonl and the others still run."""
    import gc
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for name in sys.argv[2:] or names:
        try:
            run_case(name, out_dir)
        except Exception:
            with open(os.path.join(out_dir, "errors.jsonl"), "a") as f:
                f.write(json.dumps({"case": name, "error": traceback.format_exc()[-3000:]}) + "\n")
            print(name, "error", traceback.format_exc()[-800:], flush=True)
        import torch
        gc.collect()
        torch.cuda.empty_cache()


def run_case(name, out_dir):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, TrainerCallback
    import datasets
    import trl
    from trl import SFTConfig, SFTTrainer
    from trainfit_runner.models import load_hf_config

    unplanned = name in UNPLANNED
    model_name, method, batch, seq, fields = (UNPLANNED if unplanned else CASES)[name]
    fields = dict(fields)
    completion_half = fields.pop("completion_half", False)
    example_len = fields.pop("example_len", seq)
    torch.manual_seed(0)
    config = load_hf_config(model_name)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    peft_config = None
    if method == "lora":
        import peft
        peft_config = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear",
                                      task_type="CAUSAL_LM")
    vocab = config.vocab_size
    g = torch.Generator().manual_seed(1)
    examples_per_row = seq // example_len
    ids = torch.randint(2, vocab, (batch * examples_per_row * fields.get("gradient_accumulation_steps", 1) * (STEPS + 2),
                                   example_len), generator=g).tolist()
    columns = {"input_ids": ids}
    if completion_half:  # a prompt-completion dataset: the loss on the second half of each sequence
        columns["completion_mask"] = [[0] * (seq // 2) + [1] * (seq - seq // 2) for _ in ids]
    data = datasets.Dataset.from_dict(columns)

    meter = step_meter(torch, TrainerCallback)()
    snapshot = os.environ.get("TRL_SFT_SNAPSHOT") == name  # the allocator's history of this case, for trace --snapshot
    if snapshot:
        # Python frames only: with C++ frames as well, the checkpoint's recompute (which stops early by
        # raising) failed with "SystemError: error return without exception set" (torch 2.11).
        # TRL_SFT_CONTEXT=none records no frames at all: with Python frames the chunked loss's
        # recompute has failed the same way (SystemError in _chunk's entropy, 2026-12-08).
        context = os.environ.get("TRL_SFT_CONTEXT", "all")
        torch.cuda.memory._record_memory_history(max_entries=200000, context=None if context == "none" else context,
                                                 stacks="python")
    fields.setdefault("gradient_accumulation_steps", 1)
    args = SFTConfig(output_dir=os.path.join(out_dir, "trainer-" + name), per_device_train_batch_size=batch,
                     max_steps=STEPS, max_length=fields.pop("max_length", seq), logging_steps=100,
                     save_strategy="no", report_to=[], dataloader_num_workers=0, **fields)
    t0 = time.time()
    status, error, trainer = "ok", None, None
    try:
        trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=word_tokenizer(vocab),
                             peft_config=peft_config, callbacks=[meter])
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        trainer.train()
    except torch.OutOfMemoryError as e:
        status, error, trainable = "oom", str(e)[:400], None
        trainer = None
    if snapshot:
        torch.cuda.memory._dump_snapshot(os.path.join(out_dir, name + ".pickle"))
        torch.cuda.memory._record_memory_history(enabled=None)
    stats = torch.cuda.memory_stats()
    config_row = {"model": model_name, "method": method, "weights": "bf16", "batch": batch, "seq": seq,
                  "grad_accum": int(args.gradient_accumulation_steps), "grad_ckpt": bool(args.gradient_checkpointing), "optimizer": "adamw",
                  "attn": "sdpa", "gpu": "h100-sxm" if "H100" in torch.cuda.get_device_name(0) else "h200",
                  "trainer": "trl", "loss": "chunked" if args.loss_type == "chunked_nll" else "whole"}
    if args.padding_free or (args.packing and args.packing_strategy != "wrapped"):
        config_row["packing"] = True  # SFTTrainer flattened each micro-batch into one sequence
    if args.activation_offloading:
        config_row["activation_offloading"] = True
    if args.use_liger_kernel:  # the patched forward runs Liger's fused loss whatever loss_type says
        config_row.update({"kernels": "liger", "loss": "fused"})
    if method == "lora":
        config_row.update({"rank": 16, "lora_alpha": 32.0, "lora_dropout": 0.05, "lora_targets": ["all-linear"]})
    row = {"case": name, "config": config_row,
           "recipe": dict(fields, **({"completion_only_loss": True} if completion_half else {}),
                          **({"example_len": example_len} if example_len != seq else {})),
           "measured": measured_of(meter, stats, status, error, params_trainable=trainable, optim=str(args.optim),
                                   loss_type=args.loss_type, model_class=type(model).__name__),
           "stack": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
                     "peft": __import__("peft").__version__, "datasets": datasets.__version__,
                     "liger_kernel": _version("liger_kernel"), "gpu": torch.cuda.get_device_name(0),
                     "date": time.strftime("%Y-%m-%d")},
           "wall_seconds": round(time.time() - t0, 1)}
    write_row(out_dir, "unplanned.jsonl" if unplanned else "rows.jsonl", row)
    del trainer, model


def _version(dist):
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return None


def main():
    run_cases(run_case, list(CASES) + list(UNPLANNED))


if __name__ == "__main__":
    main()
