"""Measurements of the model families of issue 37 on the GPU machine, with the project's runner
(python/trainfit_runner: a config built with random weights, real training steps, peak memory and
step time as `trainfit bench` records them) and what the built models hold.

    python3 python/family_jobs/measure_families.py OUT inspect            # parameters, PEFT's wraps
    python3 python/family_jobs/measure_families.py OUT run CASE [CASE...]  # runner rows
    python3 python/family_jobs/measure_families.py OUT sources             # the modeling files read
    python3 python/family_jobs/measure_families.py OUT predict TRAINFIT [CASE...]  # plans, before the runs

`inspect` builds every model of MODELS on the meta device (no memory) and writes inspect.json: the
total parameters as sum(p.numel()), the parameters by module kind, and for LoRA with all-linear at
lora_dropout 0.05 and 0 what PEFT wrapped (module names, classes) or the error it raised.

A case too large for one GPU at full depth runs at reduced depth (`layers`): the same layer shapes,
fewer of them; its config is written beside its row (OUT/configs/CASE.json), so the planner plans
the same model. The quantization_config of a checkpoint (gpt-oss's MXFP4) is left out: the runner
builds the bf16 model people train (Mxfp4Config(dequantize=True)).
"""
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = ["smollm3-3b", "granite3.3-2b", "granite3.3-8b", "gpt-oss-20b", "gpt-oss-120b", "glm4.5-air", "gemma3-4b",
          "mistral-small3.1", "qwen2.5-vl-7b", "qwen3-vl-8b", "llama4-scout", "qwen3-next-80b-a3b",
          "granite4.0-h-350m", "granite4.0-h-tiny", "granite4.0-h-small", "falcon-h1-0.5b", "falcon-h1-7b",
          "nemotron-h-8b"]

ATTN_ONLY = "q_proj,k_proj,v_proj,o_proj"
# Qwen3-Next's token mixers: the attention layers' projections and the Gated DeltaNet layers'.
MIXERS = ATTN_ONLY + ",in_proj_qkvz,in_proj_ba,out_proj"
# Falcon-H1's linear modules less the Mamba mixer's out_proj, which PEFT refuses a LoRA adapter.
FALCON_H1_TARGETS = ATTN_ONLY + ",mamba.in_proj,gate_proj,up_proj,down_proj"
# Nemotron-H's linear modules less the Mamba mixer's out_proj.
NEMOTRON_H_TARGETS = ATTN_ONLY + ",mixer.in_proj,up_proj,down_proj"
# The MoE cases' predictions were written when lora_dropout defaulted to 0.05 everywhere: pinned so.
D05 = dict(lora_dropout=0.05)
# name: (model, layers or None, runner settings)
CASES = {
    "smollm3-lora-ckpt": ("smollm3-3b", None, dict(method="lora", seq=2048, batch=4, grad_ckpt=True)),
    "smollm3-lora": ("smollm3-3b", None, dict(method="lora", seq=1024, batch=2, grad_ckpt=False)),
    "smollm3-full-ckpt": ("smollm3-3b", None, dict(method="full", seq=1024, batch=2, grad_ckpt=True)),
    "granite2b-lora-ckpt": ("granite3.3-2b", None, dict(method="lora", seq=2048, batch=4, grad_ckpt=True)),
    "granite2b-lora": ("granite3.3-2b", None, dict(method="lora", seq=1024, batch=2, grad_ckpt=False)),
    "granite2b-full-ckpt": ("granite3.3-2b", None, dict(method="full", seq=1024, batch=2, grad_ckpt=True)),
    "granite8b-lora-ckpt": ("granite3.3-8b", None, dict(method="lora", seq=1024, batch=2, grad_ckpt=True)),
    "oss20b-lora-attn-ckpt-sdpa": ("gpt-oss-20b", None,
                                   dict(**D05, method="lora", lora_targets=ATTN_ONLY, seq=1024, batch=2, grad_ckpt=True)),
    "oss20b-lora-attn-ckpt": ("gpt-oss-20b", None, dict(**D05, method="lora", lora_targets=ATTN_ONLY, seq=1024, batch=2,
                                                        grad_ckpt=True, attn="eager")),
    "oss20b-l4-lora-attn": ("gpt-oss-20b", 4, dict(**D05, method="lora", lora_targets=ATTN_ONLY, seq=1024, batch=2,
                                                   grad_ckpt=False, attn="eager")),
    "oss20b-l2-full-ckpt": ("gpt-oss-20b", 2, dict(method="full", seq=512, batch=1, grad_ckpt=True, attn="eager")),
    "oss20b-l2-lora-all-d0": ("gpt-oss-20b", 2, dict(method="lora", lora_dropout=0.0, seq=512, batch=1,
                                                     grad_ckpt=True, attn="eager")),
    "glm45air-l3-lora-attn-ckpt": ("glm4.5-air", 3, dict(**D05, method="lora", lora_targets=ATTN_ONLY, seq=1024, batch=4,
                                                          grad_ckpt=True)),
    "glm45air-l3-lora-attn": ("glm4.5-air", 3, dict(**D05, method="lora", lora_targets=ATTN_ONLY, seq=1024, batch=2,
                                                     grad_ckpt=False)),
    # Multimodal configs built whole (vision_tower loaded, the default): the tower idle in a text step.
    "gemma3-4b-lora-loaded": ("gemma3-4b", None, dict(method="lora", seq=1024, batch=2, grad_ckpt=True)),
    "qwen25vl-lora-ckpt": ("qwen2.5-vl-7b", None, dict(method="lora", seq=1024, batch=2, grad_ckpt=True)),
    # Images through the towers (all-linear reaches them: their adapters train).
    "gemma3-4b-lora-images": ("gemma3-4b", None, dict(method="lora", seq=1024, batch=2, grad_ckpt=False, images=1)),
    "gemma3-4b-lora-images-ckpt": ("gemma3-4b", None, dict(method="lora", seq=2048, batch=2, grad_ckpt=True,
                                                           images=2)),
    # LLaMA-Factory's default: the tower frozen and out of the targets, images through it.
    "gemma3-4b-lora-images-frozen": ("gemma3-4b", None, dict(method="lora", seq=1024, batch=2, grad_ckpt=False,
                                                             images=1, vision_tower="frozen")),
    "qwen25vl-lora-images": ("qwen2.5-vl-7b", None, dict(method="lora", seq=1024, batch=2, grad_ckpt=False,
                                                         images=2, image_tokens=256)),
    # Qwen3-VL-8B (the runner lays its images out as Qwen2.5-VL's: 16-pixel patches, 2 x 2 merged).
    "qwen3vl-lora-images": ("qwen3-vl-8b", None, dict(method="lora", seq=1024, batch=2, grad_ckpt=False,
                                                       images=2, image_tokens=256)),
    "qwen3vl-lora-ckpt": ("qwen3-vl-8b", None, dict(method="lora", seq=2048, batch=2, grad_ckpt=True)),
    # Llama 4's text model at two layers: every token through all 16 experts.
    "llama4-l2-lora-attn": ("llama4-scout", 2, dict(method="lora", lora_targets=ATTN_ONLY, seq=1024, batch=1,
                                                    grad_ckpt=False, vision_tower="dropped")),
    # The whole model (tower loaded): Llama4ForConditionalGeneration, its loss as transformers 5.17 computes it.
    # Qwen3-Next at four layers (three Gated DeltaNet, one gated attention; 512 experts each), with
    # flash-linear-attention on the path (device_job.sh) and PyTorch's convolution.
    "qwen3next-l4-lora-mixers": ("qwen3-next-80b-a3b", 4, dict(method="lora", lora_targets=MIXERS, lora_dropout=0.0,
                                                               seq=2048, batch=2, grad_ckpt=False)),
    "qwen3next-l4-lora-mixers-ckpt": ("qwen3-next-80b-a3b", 4, dict(method="lora", lora_targets=MIXERS,
                                                                    lora_dropout=0.05, seq=4096, batch=2,
                                                                    grad_ckpt=True)),
    "qwen3next-l4-full-ckpt": ("qwen3-next-80b-a3b", 4, dict(method="full", seq=1024, batch=1, grad_ckpt=True)),
    # Mistral Small 3.1 (Mistral3ForConditionalGeneration: Mistral's text layers, Pixtral's tower loaded
    # and idle in a text step); whole, and at four text layers.
    "mistral31-lora-ckpt": ("mistral-small3.1", None, dict(method="lora", seq=1024, batch=2, grad_ckpt=True)),
    "mistral31-l4-lora": ("mistral-small3.1", 4, dict(method="lora", seq=2048, batch=2, grad_ckpt=False)),
    "mistral31-l4-full-ckpt": ("mistral-small3.1", 4, dict(method="full", seq=1024, batch=2, grad_ckpt=True)),
    # One 448 x 448 image (256 tokens, 1024 Pixtral positions) through the tower, which all-linear adapts.
    "mistral31-l4-lora-images": ("mistral-small3.1", 4, dict(method="lora", seq=1024, batch=1, grad_ckpt=False,
                                                             images=1, image_tokens=256)),
    # Granite 4.0-H: Mamba-2 layers as transformers runs them without the hub's kernels (its PyTorch
    # scan), four attention layers among them; Tiny at six layers (five Mamba-2, one attention).
    "granite4-350m-lora": ("granite4.0-h-350m", None, dict(method="lora", seq=1024, batch=1, grad_ckpt=False)),
    "granite4-350m-lora-ckpt": ("granite4.0-h-350m", None, dict(method="lora", seq=2048, batch=1, grad_ckpt=True)),
    "granite4-350m-full-ckpt": ("granite4.0-h-350m", None, dict(method="full", seq=1024, batch=2, grad_ckpt=True)),
    "granite4-tiny-l6-lora": ("granite4.0-h-tiny", 6, dict(method="lora", lora_dropout=0.0, seq=1024, batch=1,
                                                           grad_ckpt=False)),
    "granite4-tiny-lora-ckpt": ("granite4.0-h-tiny", None, dict(method="lora", lora_dropout=0.0, seq=1024, batch=1,
                                                                grad_ckpt=True)),
    # Granite 4.0-H Small at six layers (five Mamba-2, one attention; 72 experts, top 10), full.
    "granite4-small-l6-full-ckpt": ("granite4.0-h-small", 6, dict(method="full", seq=1024, batch=1, grad_ckpt=True)),
    # Falcon-H1: attention and the PyTorch Mamba-2 scan side by side in every layer; 0.5B without the
    # gated norm, 7B (at four layers) with it. PEFT refuses all-linear there (it would wrap the Mamba
    # mixer's out_proj): the LoRA cases name the targets it accepts, as `trainfit plan` prints them.
    "falconh1-0.5b-lora": ("falcon-h1-0.5b", None, dict(method="lora", lora_targets=FALCON_H1_TARGETS, seq=1024,
                                                        batch=1, grad_ckpt=False)),
    "falconh1-0.5b-lora-ckpt": ("falcon-h1-0.5b", None, dict(method="lora", lora_targets=FALCON_H1_TARGETS, seq=2048,
                                                             batch=2, grad_ckpt=True)),
    "falconh1-0.5b-full-ckpt": ("falcon-h1-0.5b", None, dict(method="full", seq=2048, batch=1, grad_ckpt=True)),
    "falconh1-7b-l4-lora": ("falcon-h1-7b", 4, dict(method="lora", lora_targets=FALCON_H1_TARGETS, seq=1024, batch=1,
                                                    grad_ckpt=False)),
    "falconh1-7b-l4-full-ckpt": ("falcon-h1-7b", 4, dict(method="full", seq=1024, batch=1, grad_ckpt=True)),
    # Nemotron-H-8B (data/models/nemotron-h-8b.json: the published shapes as far as they were read, see
    # READING.md): blocks of one sublayer each; at eight blocks (four Mamba-2,
    # three MLP, one attention) and whole. PEFT refuses all-linear there (out_proj), as on Falcon-H1.
    "nemotronh8b-l8-lora": ("nemotron-h-8b", 8, dict(method="lora", lora_targets=NEMOTRON_H_TARGETS, seq=1024,
                                                     batch=1, grad_ckpt=False)),
    "nemotronh8b-l8-full-ckpt": ("nemotron-h-8b", 8, dict(method="full", seq=1024, batch=1, grad_ckpt=True)),
    "nemotronh8b-lora-ckpt": ("nemotron-h-8b", None, dict(method="lora", lora_targets=NEMOTRON_H_TARGETS, seq=1024,
                                                          batch=1, grad_ckpt=True)),
    # Held out for the scan's time term (TimeProfile::broadcast_ops_per_element, from one profile of
    # Granite 4.0-H-350M at 1 x 1024): other shapes, batches and sequences, predicted before they run
    # (data/bench/families-2026-12-08/predictions.jsonl).
    "granite4-350m-lora-ckpt-b2s2048": ("granite4.0-h-350m", None, dict(method="lora", seq=2048, batch=2,
                                                                        grad_ckpt=True)),
    "granite4-tiny-l6-full-ckpt-s2048": ("granite4.0-h-tiny", 6, dict(method="full", seq=2048, batch=1,
                                                                      grad_ckpt=True)),
    "falconh1-7b-l4-lora-b2s2048": ("falcon-h1-7b", 4, dict(method="lora", lora_targets=FALCON_H1_TARGETS,
                                                            seq=2048, batch=2, grad_ckpt=False)),
    "nemotronh8b-l8-full-ckpt-s2048": ("nemotron-h-8b", 8, dict(method="full", seq=2048, batch=1,
                                                                  grad_ckpt=True)),
    "llama4-l2-lora-attn-loaded": ("llama4-scout", 2, dict(method="lora", lora_targets=ATTN_ONLY, seq=1024,
                                                           batch=1, grad_ckpt=False)),
}


def model_config(name, layers=None):
    path = ROOT / "data" / "models" / (name + ".json")
    if not path.exists():  # a family the planner does not read yet
        path = Path(__file__).with_name("configs") / (name + ".json")
    d = json.loads(path.read_text())
    d.pop("quantization_config", None)
    # Mistral3Config ties the head to the embedding unless the config says otherwise, and Mistral
    # Small 3.1's does not; its checkpoint holds both, so from_pretrained unties them (transformers'
    # tie_weights: "both are present in the checkpoints, so we will NOT tie them") and users train
    # 24.0B parameters. A model built from the config alone would be 0.67B smaller: built untied.
    if d.get("model_type") == "mistral3":
        d.setdefault("tie_word_embeddings", False)
    if layers is not None:
        text = d["text_config"] if isinstance(d.get("text_config"), dict) else d  # a multimodal config's
        text["num_hidden_layers"] = layers
        for key in ("layer_types", "no_rope_layers", "hybrid_override_pattern"):
            if isinstance(text.get(key), (list, str)):
                text[key] = text[key][:layers]
    return d


def inspect(out):
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model
    result = {}
    for name in MODELS:
        d = model_config(name)
        cfg = transformers.CONFIG_MAPPING[d["model_type"]].from_dict(d)
        # A multimodal config builds whole, as the trainers load it (its tower counted).
        auto = (transformers.AutoModelForImageTextToText if "vision_config" in d
                else transformers.AutoModelForCausalLM)
        entry = {}
        try:
            with torch.device("meta"):
                model = auto.from_config(cfg, dtype=torch.bfloat16)
            entry["class"] = type(model).__name__
            entry["params_total"] = sum(p.numel() for p in model.parameters())
            kinds = {}
            for pname, p in model.named_parameters():
                key = ".".join(part for part in pname.split(".") if not part.isdigit())
                kinds[key] = kinds.get(key, 0) + p.numel()
            entry["params_by_name"] = kinds
            for dropout in (0.05, 0.0):
                try:
                    with torch.device("meta"):
                        m = auto.from_config(cfg, dtype=torch.bfloat16)
                        pm = get_peft_model(m, LoraConfig(r=16, lora_alpha=32, lora_dropout=dropout,
                                                           target_modules="all-linear", task_type="CAUSAL_LM"))
                    wrapped = {}
                    for mname, mod in pm.named_modules():
                        if hasattr(mod, "lora_A") and hasattr(mod, "base_layer"):
                            key = ".".join(part for part in mname.split(".") if not part.isdigit())
                            key = key.split("layers.", 1)[-1]
                            wrapped[key] = type(mod).__name__
                    entry["lora_all_linear_dropout_%g" % dropout] = {
                        "wrapped": wrapped,
                        "trainable": sum(p.numel() for p in pm.parameters() if p.requires_grad)}
                except Exception as e:  # PEFT's refusal is the finding
                    entry["lora_all_linear_dropout_%g" % dropout] = {"error": "%s: %s" % (type(e).__name__, e)}
        except Exception as e:
            entry["error"] = "%s: %s" % (type(e).__name__, e)
        result[name] = entry
        print(name, entry.get("params_total"), entry.get("error", ""), flush=True)
    (out / "inspect.json").write_text(json.dumps(result, indent=1))


def run(out, names):
    (out / "rows").mkdir(parents=True, exist_ok=True)
    for name in names:
        cfg = runner_config(out, name)
        row = out / "rows" / (name + ".json")
        t0 = time.time()
        with open(out / "rows" / (name + ".log"), "w") as log:
            try:
                rc = subprocess.run([sys.executable, "-m", "trainfit_runner", "--config", json.dumps(cfg),
                                     "--out", str(row)], cwd=ROOT / "python", stdout=log, stderr=log,
                                    timeout=int(os.environ.get("CASE_TIMEOUT", "150"))).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        status = json.loads(row.read_text())["measured"].get("status") if row.exists() else "no row"
        print("%s: rc %s, %s, %.0f s" % (name, rc, status, time.time() - t0), flush=True)


def runner_config(out, name):
    """The case's runner config, its model's config.json written to OUT/configs/CASE.json."""
    model, layers, settings = CASES[name]
    (out / "configs").mkdir(parents=True, exist_ok=True)
    path = out / "configs" / (name + ".json")
    path.write_text(json.dumps(model_config(model, layers), indent=1))
    return dict(model=str(path), steps=4, warmup=1, weights="bf16", gpu="h200", **settings)


def predict(out, trainfit, names):
    """trainfit's plan of each case on an H100 and an H200 (the setup as the runner takes it, by its
    JSON keys), written before the cases run: OUT/predictions.jsonl."""
    with open(out / "predictions.jsonl", "w") as f:
        for name in names:
            cfg = runner_config(out, name)
            setup = {k: v for k, v in cfg.items() if k not in ("steps", "warmup", "gpu")}
            setup_file = out / "configs" / (name + ".setup.json")
            setup_file.write_text(json.dumps(setup))
            for gpu in ("h100-sxm", "h200"):
                p = subprocess.run([trainfit, "plan", "--setup", str(setup_file), "--gpu", gpu, "--format", "json",
                                    "--no-suggest"], capture_output=True, text=True)
                row = {"case": name, "gpu": gpu}
                if p.returncode == 0:
                    plan = json.loads(p.stdout)
                    row.update(peak_allocated_mib=round(plan["memory"]["peak_allocated_bytes"] / 2**20, 1),
                               step_seconds=round(plan["time"]["step_seconds"], 4), warnings=plan.get("warnings"))
                else:
                    row["refused"] = p.stderr.strip()
                f.write(json.dumps(row) + "\n")
                print(json.dumps(row))


def sources(out):
    import peft
    import transformers
    tf = Path(transformers.__file__).parent
    files = [tf / "models" / m / f for m, f in [
        ("gpt_oss", "modeling_gpt_oss.py"), ("gpt_oss", "configuration_gpt_oss.py"),
        ("granite", "modeling_granite.py"), ("granite", "configuration_granite.py"),
        ("smollm3", "modeling_smollm3.py"), ("smollm3", "configuration_smollm3.py"),
        ("llama4", "modeling_llama4.py"), ("llama4", "configuration_llama4.py"),
        ("glm4_moe", "modeling_glm4_moe.py"), ("glm4_moe", "configuration_glm4_moe.py"),
        ("qwen3_next", "modeling_qwen3_next.py"), ("qwen3_next", "configuration_qwen3_next.py"),
        ("granitemoehybrid", "modeling_granitemoehybrid.py"),
        ("granitemoehybrid", "configuration_granitemoehybrid.py"), ("qwen2_5_vl", "modeling_qwen2_5_vl.py"),
        ("qwen3_vl", "modeling_qwen3_vl.py"), ("mistral3", "modeling_mistral3.py"),
        ("gemma3", "modeling_gemma3.py"), ("llama", "modeling_llama.py"), ("mixtral", "modeling_mixtral.py"),
        ("siglip", "modeling_siglip.py"), ("pixtral", "modeling_pixtral.py"), ("qwen3_next", "modeling_qwen3_next.py"),
        ("falcon_h1", "modeling_falcon_h1.py"), ("nemotron_h", "modeling_nemotron_h.py")]]
    files += [tf / "integrations" / f for f in ("moe.py", "sdpa_attention.py", "flex_attention.py", "mxfp4.py",
                                                   "eager_paged.py")]
    files += [tf / f for f in ("masking_utils.py", "modeling_layers.py", "modeling_rope_utils.py")]
    files += [Path(peft.__file__).parent / "tuners" / "lora" / f for f in ("layer.py", "model.py")]
    # How all-linear picks its targets (the fused experts it wraps for some families and not others).
    files += [Path(peft.__file__).parent / f for f in ("tuners/tuners_utils.py", "utils/constants.py", "utils/other.py")]
    with tarfile.open(out / "sources.tar.gz", "w:gz") as t:
        for f in files:
            if f.exists():
                t.add(f, arcname=str(f.relative_to(tf.parent)))
    print("sources:", sum(f.exists() for f in files), "of", len(files))


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    what = sys.argv[2]
    if what == "inspect":
        inspect(out)
    elif what == "run":
        run(out, sys.argv[3:] or list(CASES))
    elif what == "sources":
        sources(out)
    elif what == "predict":
        predict(out, sys.argv[3], sys.argv[4:] or list(CASES))
    else:
        sys.exit("unknown step %r" % what)


if __name__ == "__main__":
    main()
