"""TRL's own DPOTrainer, KTOTrainer, RewardTrainer and GRPOTrainer on the GPU (issue 34): the
objectives trainfit plans as TRL computes them (docs/model.md, "Objectives"), measured in the real
trainers with their defaults (gradient checkpointing on, bf16 autocast, the Trainer's fused AdamW),
not in trainfit's own runner.

    python3 python/recipe_jobs/trl_objectives.py OUT_DIR [CASE...]

Models are built-in configs with random bf16 weights; the data is text of random words ("w17 w3
...") through a word-level tokenizer built in code, each sequence of a fixed length, so that every
micro-batch has the case's shape: DPO prompt + chosen/rejected completion, KTO prompt + completion
with half the labels desirable, reward chosen/rejected, GRPO prompts whose completions the model
generates (`generate()`, its KV cache) to max_completion_length with a constant reward. LoRA cases
pass peft's LoraConfig (r 16, alpha 32, dropout 0.05, all-linear). OUT_DIR/rows.jsonl is in the
format `trainfit validate` reads, as trl_sft.py writes it.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, ".."))
sys.path.append(HERE)

from trl_sft import measured_of, run_cases, step_meter, word_tokenizer, write_row  # noqa: E402

STEPS = 6
# name: trainer, model, method, batch, prompt tokens, completion tokens, the config fields set.
CASES = {
    "dpo-q0.5b-full-b2": ("dpo", "qwen2.5-0.5b", "full", 2, 256, 768, {}),
    "dpo-q0.5b-full-b2-precomputed": ("dpo", "qwen2.5-0.5b", "full", 2, 256, 768, {"precompute_ref_log_probs": True}),
    "dpo-q1.5b-lora-b2": ("dpo", "qwen2.5-1.5b", "lora", 2, 256, 768, {}),
    "dpo-l1b-lora-b4": ("dpo", "llama3.2-1b", "lora", 4, 256, 768, {}),
    "kto-q0.5b-full-b4": ("kto", "qwen2.5-0.5b", "full", 4, 256, 768, {}),
    "kto-q1.5b-lora-b4": ("kto", "qwen2.5-1.5b", "lora", 4, 256, 768, {}),
    "reward-q0.5b-full-b4": ("reward", "qwen2.5-0.5b", "full", 4, 256, 768, {}),
    "reward-l1b-lora-b4": ("reward", "llama3.2-1b", "lora", 4, 256, 768, {}),
    "grpo-q0.5b-lora-b8-g4": ("grpo", "qwen2.5-0.5b", "lora", 8, 128, 256, {"num_generations": 4}),
    "grpo-q0.5b-full-b8-g4-beta": ("grpo", "qwen2.5-0.5b", "full", 8, 128, 256, {"num_generations": 4, "beta": 0.04}),
    "grpo-q1.5b-lora-b8-g8": ("grpo", "qwen2.5-1.5b", "lora", 8, 128, 256, {"num_generations": 8}),
    # Held out for GRPO's generation (docs/model.md, "Generation"): planned before they ran
    # (data/bench/h100-grpo-generation-2026-12-06/predictions.txt).
    "grpo-l1b-lora-b8-g4-c128": ("grpo", "llama3.2-1b", "lora", 8, 128, 128, {"num_generations": 4}),
    "grpo-q0.5b-full-b4-x2-g4": ("grpo", "qwen2.5-0.5b", "full", 4, 128, 256,
                                 {"num_generations": 4, "gradient_accumulation_steps": 2}),
    "grpo-g1b-lora-b8-g8-c128": ("grpo", "gemma3-1b", "lora", 8, 64, 128, {"num_generations": 8}),
    "grpo-phi3-lora-b4-g4-c64": ("grpo", "phi3-mini", "lora", 4, 128, 64, {"num_generations": 4}),
}


def words(g, vocab, n):
    import torch
    return " ".join("w%d" % i for i in torch.randint(2, vocab, (n,), generator=g).tolist())


def run_case(name, out_dir):
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, TrainerCallback
    import datasets
    import peft
    import trl
    from trainfit_runner.models import load_hf_config

    kind, model_name, method, batch, prompt_len, completion_len, fields = CASES[name]
    fields = dict(fields)
    torch.manual_seed(0)
    config = load_hf_config(model_name)
    vocab = config.vocab_size
    tokenizer = word_tokenizer(vocab)
    config.pad_token_id = 0
    with torch.device("cuda"):
        if kind == "reward":
            config.num_labels = 1
            model = AutoModelForSequenceClassification.from_config(config, dtype=torch.bfloat16)
        else:
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    peft_config = None
    if method == "lora":
        peft_config = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear",
                                      task_type="SEQ_CLS" if kind == "reward" else "CAUSAL_LM")
    g = torch.Generator().manual_seed(1)
    n = batch * (STEPS + 2)
    # Texts of words the tokenizer splits on spaces, one id a word: a prompt ends with a space (TRL
    # joins it to the completion as text) and a completion with the EOS word, which TRL then does not
    # append (it would append it without a space, making one unknown word of two).
    eos = tokenizer.eos_token
    text = lambda k: words(g, vocab, k)
    if kind == "dpo":
        rows = {"prompt": [text(prompt_len) + " " for _ in range(n)],
                "chosen": [text(completion_len - 1) + " " + eos for _ in range(n)],
                "rejected": [text(completion_len - 1) + " " + eos for _ in range(n)]}
        cls, cfg_cls = trl.DPOTrainer, trl.DPOConfig
        fields.setdefault("max_length", prompt_len + completion_len)
    elif kind == "kto":
        rows = {"prompt": [text(prompt_len) + " " for _ in range(n)],
                "completion": [text(completion_len - 1) + " " + eos for _ in range(n)],
                "label": [i % 2 == 0 for i in range(n)]}
        cls, cfg_cls = trl.KTOTrainer, trl.KTOConfig
        fields.setdefault("max_length", prompt_len + completion_len)
    elif kind == "reward":
        # Already tokenized (RewardTrainer reads chosen_ids and rejected_ids as they are).
        ids = lambda: torch.randint(2, vocab, (prompt_len + completion_len,), generator=g).tolist()
        rows = {"chosen_ids": [ids() for _ in range(n)], "rejected_ids": [ids() for _ in range(n)]}
        cls, cfg_cls = trl.RewardTrainer, trl.RewardConfig
        fields.setdefault("max_length", prompt_len + completion_len)
    else:
        rows = {"prompt": [text(prompt_len) for _ in range(n)]}
        cls, cfg_cls = trl.GRPOTrainer, trl.GRPOConfig
        fields.setdefault("max_completion_length", completion_len)
    # A reference copy is what TRL loads from the policy's path: the model is saved and given by its
    # path, loaded in bf16 (model_init_kwargs; TRL's default there is float32) as the policy and copy.
    needs_copy = method == "full" and ((kind in ("dpo", "kto") and not fields.get("precompute_ref_log_probs"))
                                       or (kind == "grpo" and fields.get("beta")))
    if needs_copy:
        path = os.path.join("/tmp/trl-models", model_name)
        if not os.path.isdir(path):
            model.save_pretrained(path)
        del model
        torch.cuda.empty_cache()
        model = path
        fields["model_init_kwargs"] = {"dtype": "bfloat16"}
    data = datasets.Dataset.from_dict(rows)
    meter = step_meter(torch, TrainerCallback)()
    snapshot = os.environ.get("TRL_SNAPSHOT") == name  # the allocator's history of this case, for trace --snapshot
    if snapshot:  # allocation sites only: with stacks the checkpoint's recompute raised SystemError (torch 2.11)
        torch.cuda.memory._record_memory_history(max_entries=300000, context="alloc", stacks="python")
    accum = fields.pop("gradient_accumulation_steps", 1)
    args = cfg_cls(output_dir=os.path.join(out_dir, "trainer-" + name), per_device_train_batch_size=batch,
                   gradient_accumulation_steps=accum, max_steps=STEPS, logging_steps=100, save_strategy="no",
                   report_to=[], dataloader_num_workers=0, **fields)
    extra = {"reward_funcs": [lambda completions, **kw: [1.0] * len(completions)]} if kind == "grpo" else {}
    t0 = time.time()
    status, error, trainable, trainer = "ok", None, None, None
    generation = {"seconds": [], "rows": [], "completion_tokens_max": []}
    try:
        trainer = cls(model=model, args=args, train_dataset=data, processing_class=tokenizer, peft_config=peft_config,
                      callbacks=[meter], **extra)
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        if kind == "grpo":
            time_generation(torch, trainer, generation)
        trainer.train()
    except torch.OutOfMemoryError as e:
        status, error = "oom", str(e)[:400]
    if snapshot:
        torch.cuda.memory._dump_snapshot(os.path.join(out_dir, name + ".pickle"))
        torch.cuda.memory._record_memory_history(enabled=None)
    stats = torch.cuda.memory_stats()
    objective = {"dpo": "dpo", "kto": "kto", "reward": "reward", "grpo": "grpo"}[kind]
    config_row = {"model": model_name, "method": method, "weights": "bf16", "batch": batch,
                  "seq": prompt_len + completion_len, "grad_accum": accum, "grad_ckpt": bool(args.gradient_checkpointing),
                  "optimizer": "adamw", "attn": "sdpa", "trainer": "trl", "objective": objective,
                  "gpu": "h100-sxm" if "H100" in torch.cuda.get_device_name(0) else "h200"}
    if method == "lora":
        config_row.update({"rank": 16, "lora_alpha": 32.0, "lora_dropout": 0.05, "lora_targets": ["all-linear"]})
    if kind in ("dpo", "kto"):
        config_row["reference"] = ("precomputed" if fields.get("precompute_ref_log_probs")
                                   else "copy" if method == "full" else "adapter-off")
    if kind == "grpo":
        config_row.update({"generations": fields["num_generations"], "completion_len": completion_len,
                           "generation": "generate",
                           "reference": "none" if not fields.get("beta") else
                           ("copy" if method == "full" else "adapter-off")})
    recipe = {k: v for k, v in fields.items() if k != "model_init_kwargs"}
    if accum != 1:
        recipe["gradient_accumulation_steps"] = accum
    row = {"case": name, "config": config_row, "recipe": recipe,
           "measured": measured_of(meter, stats, status, error, params_trainable=trainable, optim=str(args.optim),
                                   model_class=type(trainer.model).__name__ if trainer is not None else None,
                                   **({"generation": generation} if kind == "grpo" else {})),
           "stack": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__,
                     "peft": peft.__version__, "datasets": datasets.__version__,
                     "gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d")},
           "wall_seconds": round(time.time() - t0, 1)}
    write_row(out_dir, "rows.jsonl", row)


def time_generation(torch, trainer, generation):
    """Wraps GRPOTrainer._generate_single_turn (the generate() call of a step's generation batch,
    TRL f2cd577) to record its seconds, its rows and its longest completion: the generation's part
    of the step, measured apart from the optimisation step."""
    inner = trainer._generate_single_turn

    def timed(prompt_ids, *args, **kwargs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        completion_ids, logprobs = inner(prompt_ids, *args, **kwargs)
        torch.cuda.synchronize()
        generation["seconds"].append(time.perf_counter() - t0)
        generation["rows"].append(len(prompt_ids))
        generation["completion_tokens_max"].append(max(len(c) for c in completion_ids))
        return completion_ids, logprobs

    trainer._generate_single_turn = timed


def main():
    run_cases(run_case, list(CASES))


if __name__ == "__main__":
    main()
