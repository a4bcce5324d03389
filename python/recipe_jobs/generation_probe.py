"""The host's time per decoding step of transformers' generate(), as TRL's GRPOTrainer calls it
(issue 34): a tiny model whose every kernel is a few microseconds, so that a decoding step's wall
time is the host's work alone (docs/model.md, "Generation").

    python3 python/recipe_jobs/generation_probe.py OUT.json

The model is the host probe's (python/trainfit_runner/host_probe_request.json: Qwen2 shrunk to
hidden size 64, vocabulary 1,024) at 2 and 8 layers, full and with PEFT's LoRA on all-linear (r 16,
dropout 0.05), in bf16 and in training mode, with gradient checkpointing off: what GRPOTrainer's
unwrap_model_for_generation hands to generate() (TRL f2cd577, trl/models/utils.py), under
torch.no_grad, sampling with GRPOConfig's defaults (temperature 1, top_p 1, top_k 0) and the
dynamic KV cache. Each model is run as it is ("plain") and as the Trainer's accelerator hands it to
generate() under bf16 mixed precision ("accelerate": its forward inside torch.autocast, its outputs
converted to fp32), which is what GRPOTrainer generates with. For each: the seconds of generate() with 1 and with 1 + N new tokens, whose
difference over N is one decoding step; and the ATen operations one decoding step dispatches
(a TorchDispatchMode counting them), so that trainfit's own count can be compared with the
library's. Two layer counts give the per-layer part and the part outside the layers (the embedding,
the final norm, the output layer and the sampling loop).
"""
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.append(ROOT)

ROWS, PROMPT, NEW = 8, 64, 128
REPEATS = 5
REAL = [("qwen2.5-0.5b", "full"), ("qwen2.5-0.5b", "lora"), ("qwen2.5-1.5b", "lora")]
WRAPS = ("plain", "accelerate")


def tiny_config(layers):
    from transformers import AutoConfig
    with open(os.path.join(ROOT, "trainfit_runner", "host_probe_request.json")) as f:
        model = dict(json.load(f)["model"])
    model.update(num_hidden_layers=layers, max_window_layers=layers, use_cache=True)
    return AutoConfig.for_model(**model)


def build(layers, method, name=None, wrap="plain"):
    import torch
    from transformers import AutoModelForCausalLM
    from trainfit_runner.models import load_hf_config
    torch.manual_seed(0)
    config = load_hf_config(name) if name else tiny_config(layers)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    if method == "lora":
        import peft
        model = peft.get_peft_model(model, peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05,
                                                           target_modules="all-linear", task_type="CAUSAL_LM"))
    model.train()  # as the trainer leaves it: dropout on
    if wrap == "accelerate":
        # What GRPOTrainer generates with: the Trainer's accelerator prepares the model under bf16 mixed
        # precision (its forward inside torch.autocast, its outputs converted to fp32), and
        # unwrap_model_for_generation's accelerator.unwrap_model keeps that wrapper (keep_fp32_wrapper=True).
        from accelerate import Accelerator
        accelerator = Accelerator(mixed_precision="bf16")
        model = accelerator.unwrap_model(accelerator.prepare_model(model))
    return model


def generate(model, ids, new):
    import torch
    from transformers import GenerationConfig
    config = GenerationConfig(max_new_tokens=new, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                              pad_token_id=0, bos_token_id=1, eos_token_id=2, disable_compile=True)
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)


def timed(model, ids, new):
    import torch
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    generate(model, ids, new)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def aten_ops(model, ids, new):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        generate(model, ids, new)
    return Count.n


def main():
    import torch
    import transformers
    import peft
    out = {"rows": ROWS, "prompt": PROMPT, "new_tokens": NEW, "repeats": REPEATS, "cases": [],
           "stack": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                     "gpu": torch.cuda.get_device_name(0), "date": time.strftime("%Y-%m-%d")}}
    try:
        with open("/proc/cpuinfo") as f:
            out["stack"]["cpu"] = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    for wrap in WRAPS:
        for method in ("full", "lora"):
            for layers in (2, 8):
                model = build(layers, method, wrap=wrap)
                ids = torch.randint(3, 1024, (ROWS, PROMPT), device="cuda")
                for _ in range(3):  # warm-up: kernels loaded, allocator's cache filled
                    timed(model, ids, 16)
                one = statistics.median(timed(model, ids, 1) for _ in range(REPEATS))
                many = statistics.median(timed(model, ids, 1 + NEW) for _ in range(REPEATS))
                ops = (aten_ops(model, ids, 1 + 16) - aten_ops(model, ids, 1)) / 16
                case = {"wrap": wrap, "method": method, "layers": layers, "generate_1_s": one,
                        "generate_many_s": many, "decode_step_s": (many - one) / NEW,
                        "aten_ops_per_decode_step": ops}
                out["cases"].append(case)
                print(json.dumps(case), flush=True)
                del model
                torch.cuda.empty_cache()
    # Built-in models at their real size: the same decoding step with real kernels beside the host's.
    for name, method in REAL:
        model = build(None, method, name, wrap="accelerate")
        ids = torch.randint(3, 1000, (ROWS, PROMPT), device="cuda")
        for _ in range(2):
            timed(model, ids, 16)
        one = statistics.median(timed(model, ids, 1) for _ in range(3))
        many = statistics.median(timed(model, ids, 1 + NEW) for _ in range(3))
        case = {"model": name, "method": method, "wrap": "accelerate", "generate_1_s": one, "generate_many_s": many,
                "decode_step_s": (many - one) / NEW}
        out.setdefault("real", []).append(case)
        print(json.dumps(case), flush=True)
        del model
        torch.cuda.empty_cache()
    by = {(c["wrap"], c["method"], c["layers"]): c for c in out["cases"]}
    for wrap in WRAPS:
        for method in ("full", "lora"):
            a, b = by[(wrap, method, 2)], by[(wrap, method, 8)]
            per_layer = (b["decode_step_s"] - a["decode_step_s"]) / 6
            aten_layer = (b["aten_ops_per_decode_step"] - a["aten_ops_per_decode_step"]) / 6
            out[wrap + "-" + method] = {"per_layer_s": per_layer, "outside_s": a["decode_step_s"] - 2 * per_layer,
                                        "aten_per_layer": aten_layer,
                                        "aten_outside": a["aten_ops_per_decode_step"] - 2 * aten_layer}
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({w + "-" + m: out[w + "-" + m] for w in WRAPS for m in ("full", "lora")}, indent=1))


if __name__ == "__main__":
    main()
