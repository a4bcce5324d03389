#!/usr/bin/env python3
"""Writes plans/advise-check/*.toml: for each of a dozen questions put to `trainfit advise`, a bench plan
that runs its recommended setup (#1) and the runner-up (#2) on an H200, with the allocator capped
at the card the question was about. The plans pre-register two criteria each: #1 runs without an
out-of-memory error or allocator retries, and the measured tokens/s order #1 and #2 as predicted.

The questions are asked of an H200 with the smaller card's memory (a GPU spec file written next to
the plans), so that the predicted speeds are the speeds of the card that runs them. The optimizer
is held at AdamW: the GPU machine has no bitsandbytes, so AdamW8bit cannot run there.

Usage: scripts/advise_check.py TRAINFIT   (then `trainfit bench plans/advise-check/<name>.toml`)
"""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "plans" / "advise-check"
# Settings a bench matrix carries (docs/bench.md, "A results row").
MATRIX_KEYS = ["model", "method", "weights", "amp", "rank", "lora_alpha", "lora_dropout", "lora_targets",
               "adapter_dtype", "compute_dtype", "double_quant", "kbit_prepare", "optimizer", "attn", "seq",
               "batch", "grad_accum", "grad_ckpt"]

# (name, card memory in MiB as nvidia-smi reports it, advise arguments)
QUESTIONS = [
    ("q15b-lora-24g", 24564, "--model qwen2.5-1.5b --seq 1024 --tokens-per-step 16384"),
    ("q3b-lora-16g", 16380, "--model qwen2.5-3b --seq 2048 --tokens-per-step 16384"),
    ("l1b-full-24g", 24564, "--model llama3.2-1b --method full --seq 1024 --tokens-per-step 16384"),
    ("q7b-qlora-16g", 16380, "--model qwen2.5-7b --method qlora --seq 1024 --tokens-per-step 8192"),
    ("q05b-full-12g-largest-batch", 12288, "--model qwen2.5-0.5b --method full --seq 2048 --goal largest-batch"),
    ("l3b-lora-40g-least-memory", 40960, "--model llama3.2-3b --seq 2048 --tokens-per-step 16384 --goal least-memory"),
    ("m7b-lora-40g", 40960, "--model mistral-7b --seq 2048 --tokens-per-step 16384"),
    ("g2b-lora-24g", 24564, "--model gemma2-2b --seq 1024 --tokens-per-step 16384"),
    ("phi3-lora-24g", 24564, "--model phi3-mini --lora-targets qkv_proj,o_proj --seq 2048 --tokens-per-step 16384"),
    ("q15b-full-24g-longest-seq", 24564, "--model qwen2.5-1.5b --method full --seq 1024 --goal longest-seq"),
    ("q7b-lora-80g", 81920, "--model qwen2.5-7b --seq 1024 --tokens-per-step 32768"),
    ("l1b-lora-12g", 12288, "--model llama3.2-1b --seq 2048 --tokens-per-step 32768"),
]


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return '"' + ",".join(v) + '"'
    return json.dumps(v)


def condition(setup, keys):
    parts = []
    for k in keys:
        v = setup.get(k)
        if isinstance(v, bool):
            parts.append(k if v else f"not {k}")
        elif isinstance(v, list):
            parts.append(f'{k} == "{",".join(short(t) for t in v)}"')
        elif isinstance(v, str):
            parts.append(f'{k} == "{v}"')
        else:
            parts.append(f"{k} == {v}")
    return "(" + " and ".join(parts) + ")"


def short(target):
    return target[:-5] if target.endswith("_proj") and target[:-5] in {"q", "k", "v", "o", "gate", "up", "down"} else target


def main():
    trainfit = sys.argv[1]
    OUT.mkdir(parents=True, exist_ok=True)
    h200 = (ROOT / "data" / "gpus" / "h200.toml").read_text()
    for name, mib, args in QUESTIONS:
        spec = OUT / f"h200-{mib}mib.toml"
        spec.write_text(h200.replace('id = "h200"', f'id = "h200-{mib}mib"')
                        .replace('name = "NVIDIA H200 SXM 141GB"', f'name = "NVIDIA H200 capped at {mib} MiB"')
                        .replace("aliases = [\"H200 SXM\", \"H200 SXM 141GB\"]\n", "")
                        .replace('memory = "143771MiB"', f'memory = "{mib}MiB"'))
        cmd = [trainfit, "advise", *args.split(), "--gpu-spec", str(spec.relative_to(ROOT)), "--fix", "optimizer",
               "--top", "2", "--format", "json"]
        answer = json.loads(subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True).stdout)
        first, second = answer["results"][0], answer["results"][1]
        a, b = first["setup"], second["setup"]
        keys = [k for k in MATRIX_KEYS if k in a or k in b]
        differ = [k for k in keys if a.get(k) != b.get(k)]
        faster_first = first["tokens_per_second"] >= second["tokens_per_second"]
        lines = [f"# Written by scripts/advise_check.py: `trainfit advise {args} --gpu-spec {spec.relative_to(ROOT)} "
                 f"--fix optimizer` ({answer['goal']}), its #1 and #2 run on an H200 capped at {mib} MiB.",
                 f'name = "advise-check-{name}"',
                 'description = """',
                 f"#1: {first['command']}",
                 f"    predicted {first['peak_allocated_bytes'] / 2**20:.0f} MiB, {first['tokens_per_second']:.0f} tokens/s",
                 f"#2: {second['command']}",
                 f"    predicted {second['peak_allocated_bytes'] / 2**20:.0f} MiB, {second['tokens_per_second']:.0f} tokens/s",
                 '"""',
                 "hypotheses = [",
                 '  "H1: the recommended setup runs on the capped card without an out-of-memory error or allocator retries.",',
                 f'  "H2: the measured tokens/s order #1 and #2 as predicted (#{1 if faster_first else 2} faster).",',
                 "]",
                 f"exclude = ['not ({condition(a, differ)} or {condition(b, differ)})']" if differ else "",
                 "",
                 "[run]",
                 "steps = 5",
                 "warmup = 2",
                 "timeout = 300",
                 'gpu = "h200"',
                 f'vram = "{mib}MiB"',
                 'overflow = "oom"',
                 "",
                 "[matrix]"]
        for k in keys:
            va, vb = a.get(k), b.get(k)
            if k in differ and va is not None and vb is not None:
                lines.append(f"{k} = [{toml_value(va)}, {toml_value(vb)}]")
            elif va is not None:
                lines.append(f"{k} = {toml_value(va)}")
        one, two = condition(a, differ) if differ else "true", condition(b, differ) if differ else "true"
        faster, slower = (one, two) if faster_first else (two, one)
        lines += ["",
                  "[[criteria]]",
                  'name = "H1 recommended-runs"',
                  'text = "the recommended setup runs without an out-of-memory error or allocator retries"',
                  f"where = '{one}'",
                  "expect = 'status == \"ok\" and ooms == 0 and alloc_retries == 0'",
                  "",
                  "[[criteria]]",
                  'name = "H2 order-holds"',
                  'text = "the setup predicted faster is faster"',
                  f"expect = 'max(tokens_per_second, {faster}) > max(tokens_per_second, {slower})'",
                  ""]
        (OUT / f"{name}.toml").write_text("\n".join(lines))
        print(f"{name}: #1 {first['tokens_per_second']:.0f} tokens/s, #2 {second['tokens_per_second']:.0f}; differ in {differ}")


if __name__ == "__main__":
    main()
