"""trainfit.hf.Callback inside a real transformers.Trainer on the GPU (issue 38): the forecast it
prints at on_train_begin, read from the live run alone, against what the run then measured.

    python3 python/callback_jobs/trainer_forecast.py OUT_DIR [CASE...]

Each case builds a built-in model from its config.json with random weights, a LoRA adapter with
PEFT where the case asks, and a dataset of random token ids at the case's sequence length, then
trains max_steps optimizer steps with Callback(seq=...) (a plain Trainer's arguments hold no
sequence length; everything else is read from the model, the adapter, the arguments and the
device). OUT_DIR/CASE.txt keeps what the callback printed; OUT_DIR/results.jsonl one line per case:
the settings read, the plan's peak and step, the measured steady peak (max_memory_allocated over the
optimizer steps after the first) and median step, and the library versions.

The trl-* cases run TRL's SFTTrainer (TRL's sources on PYTHONPATH, ../shared/tools/python-sources.sh).
On the GPU machine the package's module is built there first (device_module.sh). Both kinds of case
have run on an H100 (data/bench/h100-trainer-callback-2026-12-06.jsonl).
"""
import io
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, ".."))  # after $PYTHONPATH, which may hold an installed trainfit

CASES = {
    # name: (built-in model, LoRA?, grad_ckpt, batch, seq, weights dtype)
    "q0.5b-full-amp": ("qwen2.5-0.5b", False, False, 4, 1024, "fp32"),
    "q1.5b-lora": ("qwen2.5-1.5b", True, False, 4, 1024, "bf16"),
    "l1b-lora-ckpt": ("llama3.2-1b", True, True, 8, 2048, "bf16"),
    "q3b-full-ckpt-bf16": ("qwen2.5-3b", False, True, 2, 1024, "bf16"),
}
# The same cases run by TRL's SFTTrainer (its SFTConfig: max_length is read as seq; loss_type "nll",
# the whole-vocabulary loss trainfit plans, where TRL's default chunked loss is issue 34's).
TRL_CASES = {
    "trl-q1.5b-lora-ckpt": ("qwen2.5-1.5b", True, True, 4, 1024, "bf16"),
    "trl-q0.5b-full": ("qwen2.5-0.5b", False, False, 4, 1024, "bf16"),
}


def word_tokenizer(vocab_size):
    """A word-level tokenizer built in code (w0 ... wN), for trainers that want one."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.WordLevel({"w%d" % i: i for i in range(vocab_size)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", pad_token="w0", eos_token="w1")


def run_case(name, out_dir):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
    from trainfit_runner.models import load_hf_config
    import trainfit
    from trainfit.hf import Callback

    trl = name in TRL_CASES
    model_name, lora, ckpt, batch, seq, weights = TRL_CASES[name] if trl else CASES[name]
    torch.manual_seed(0)
    config = load_hf_config(model_name)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[weights]
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).cuda()
    peft_version = None
    if lora:
        import peft
        peft_version = peft.__version__
        model = peft.get_peft_model(model, peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05,
                                                           target_modules="all-linear", task_type="CAUSAL_LM"))
    vocab = config.vocab_size
    g = torch.Generator().manual_seed(1)
    rows = [{"input_ids": ids, "labels": ids.clone()}
            for ids in torch.randint(0, vocab, (batch * 8, seq), generator=g)]
    common = dict(output_dir=os.path.join(out_dir, "trainer-" + name), per_device_train_batch_size=batch,
                  gradient_accumulation_steps=1, max_steps=6, learning_rate=1e-5, bf16=(weights == "fp32"),
                  gradient_checkpointing=ckpt, gradient_checkpointing_kwargs={"use_reentrant": False} if ckpt else None,
                  logging_steps=100, save_strategy="no", report_to=[], dataloader_num_workers=0)
    said = io.StringIO()
    if trl:
        import datasets
        from trl import SFTConfig, SFTTrainer
        args = SFTConfig(max_length=seq, loss_type="nll", **common)  # the Trainer's default optim: fused AdamW
        callback = Callback(stream=said)  # everything from the run, seq from max_length
        data = datasets.Dataset.from_dict({"input_ids": [r["input_ids"].tolist() for r in rows]})
        trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=word_tokenizer(vocab),
                             callbacks=[callback])
    else:
        args = TrainingArguments(optim="adamw_torch", remove_unused_columns=False, **common)
        callback = Callback(seq=seq, stream=said)
        trainer = Trainer(model=model, args=args, train_dataset=rows, callbacks=[callback])
    t0 = time.time()
    status = "ok"
    try:
        trainer.train()
    except torch.OutOfMemoryError:
        status = "oom"
    text = said.getvalue()
    with open(os.path.join(out_dir, name + ".txt"), "w") as f:
        f.write(text)
    forecast = callback.recorder
    p = forecast.plan
    measured = forecast.measured or {}
    row = {"case": name, "status": status, "settings": {k: v for k, v in forecast.settings.items()
                                                         if k != "config_json"},
           "notes": forecast.notes, "verdict": p.verdict, "predicted_peak_allocated_bytes": p.peak_allocated_bytes,
           "predicted_step_seconds": p.step_seconds, "measured": measured,
           "peak_error": (p.peak_allocated_bytes / measured["peak_allocated_bytes"] - 1)
           if measured.get("peak_allocated_bytes") else None,
           "step_error": (p.step_seconds / measured["step_seconds_median"] - 1)
           if measured.get("step_seconds_median") and p.step_seconds else None,
           "wall_seconds": round(time.time() - t0, 1), "printed": text,
           "stack": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft_version,
                     "trl": __import__("trl").__version__ if trl else None, "optim": str(args.optim),
                     "trainfit": trainfit.__version__, "gpu": torch.cuda.get_device_name(0),
                     "date": time.strftime("%Y-%m-%d")}}
    with open(os.path.join(out_dir, "results.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")
    print(text, flush=True)
    del trainer, model
    torch.cuda.empty_cache()
    return row


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for name in sys.argv[2:] or list(CASES) + list(TRL_CASES):
        try:
            run_case(name, out_dir)
        except Exception as e:  # one case's failure is written and the others still run
            import traceback
            with open(os.path.join(out_dir, "results.jsonl"), "a") as f:
                f.write(json.dumps({"case": name, "status": "error", "error": traceback.format_exc()[-3000:]}) + "\n")
            print("%s: %s" % (name, e), flush=True)


if __name__ == "__main__":
    main()
