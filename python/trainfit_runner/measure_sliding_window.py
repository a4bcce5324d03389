"""What sliding-window attention layers change under transformers' SDPA path, measured.

Gemma 2/3 and Mistral interleave (or use only) layers that attend to the last W tokens. Whether that
changes memory or time depends on what reaches the attention kernel: a causal layer with no padding
calls torch's SDPA with is_causal=True and no mask (the flash kernel, which skips the masked half),
while a sliding layer needs an explicit mask, and a mask rules the flash kernel out. This script
builds a model from its published config (random weights: shape decides memory and time), runs
forward and backward as published and with every layer made full (causal) attention, and records:
  - every scaled_dot_product_attention call: mask shape and dtype, is_causal, and which layer kind;
  - the masks' bytes (each distinct mask tensor counted once);
  - peak allocated memory of a forward+backward and the median step time.

    cd python && python3 -m trainfit_runner.measure_sliding_window --config ../data/models/gemma3-1b.json \
        --seq 4096 8192 --out FILE

Prints one JSON document (schema trainfit.sliding-window/1).
"""
import argparse
import json
import statistics
import time


def build(config_path, full_attention, seq, torch, transformers):
    raw = json.load(open(config_path))
    raw = {k: v for k, v in raw.items() if not k.startswith("_") or k == "_sliding_window_pattern"}
    cfg = transformers.AutoConfig.for_model(raw.pop("model_type"), **raw)
    cfg.use_cache = False
    if full_attention:
        if getattr(cfg, "layer_types", None):
            cfg.layer_types = ["full_attention"] * cfg.num_hidden_layers
        # Gemma 3 builds its sliding mask whatever the layer types: a window as long as the
        # sequence keeps that call valid while no layer uses it.
        cfg.sliding_window = seq
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    return model, cfg


def run(config_path, seq, full_attention, steps, torch, transformers):
    import torch.nn.functional as F
    model, cfg = build(config_path, full_attention, seq, torch, transformers)
    calls = []
    masks = {}
    original = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
        if attn_mask is not None:
            masks[attn_mask.data_ptr()] = attn_mask.numel() * attn_mask.element_size()
        calls.append({"mask": None if attn_mask is None else [list(attn_mask.shape), str(attn_mask.dtype)],
                      "is_causal": bool(is_causal), "q": list(q.shape)})
        return original(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kw)

    ids = torch.randint(0, cfg.vocab_size, (1, seq), device="cuda")
    times, peaks = [], []
    for step in range(steps):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        F.scaled_dot_product_attention = spy if step == 0 else original
        # transformers calls torch.nn.functional.scaled_dot_product_attention through the module.
        t0 = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        F.scaled_dot_product_attention = original
        peaks.append(torch.cuda.max_memory_allocated() - base)
        model.zero_grad(set_to_none=True)
        del out
    kinds = {}
    for c in calls:
        key = "mask %s %s" % (c["mask"][0], c["mask"][1]) if c["mask"] else "no mask, is_causal=%s" % c["is_causal"]
        kinds[key] = kinds.get(key, 0) + 1
    result = {"seq": seq, "full_attention": full_attention, "sliding_window": getattr(cfg, "sliding_window", None),
              "layer_types": sorted(set(getattr(cfg, "layer_types", None) or [])),
              "sdpa_calls_forward": kinds, "mask_bytes_distinct": sum(masks.values()),
              "peak_allocated_above_weights_bytes": max(peaks[1:]), "step_seconds_median": statistics.median(times[1:]),
              "step_seconds": times}
    del model
    torch.cuda.empty_cache()
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--seq", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--out")
    args = ap.parse_args()
    import torch
    import transformers
    rows = []
    for seq in args.seq:
        for full in (False, True):
            rows.append(run(args.config, seq, full, args.steps, torch, transformers))
    doc = {"schema": "trainfit.sliding-window/1", "config": args.config, "gpu": torch.cuda.get_device_name(),
           "torch": torch.__version__, "transformers": transformers.__version__, "date": time.strftime("%Y-%m-%d"),
           "rows": rows}
    text = json.dumps(doc, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
