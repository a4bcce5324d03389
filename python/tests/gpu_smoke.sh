#!/usr/bin/env bash
# The runner's smoke test on a GPU machine: the NF4 layer against dequantise-then-matmul, then four
# one-config runs (QLoRA, QLoRA with checkpointing on an emulated 16 GB card, an emulated card too
# small to train on: must come back "oom", full fine-tuning). Rows go to ${OUT:-/tmp}/smoke-N.json.
set -u
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
python3 tests/test_nf4.py || echo "NF4 CHECKS FAILED"
i=0
for cfg in \
  '{"model":"qwen2.5-0.5b","method":"qlora","rank":16,"lora_targets":"q,v","seq":512,"batch":1,"grad_ckpt":false,"steps":3,"warmup":1}' \
  '{"model":"qwen2.5-0.5b","method":"qlora","rank":16,"lora_targets":"q,v","seq":512,"batch":1,"grad_ckpt":true,"steps":3,"warmup":1,"vram_bytes":17095000064,"overflow":"spill"}' \
  '{"model":"qwen2.5-0.5b","method":"qlora","rank":16,"seq":2048,"batch":1,"grad_ckpt":false,"steps":3,"warmup":1,"vram_bytes":1800000000,"overflow":"oom"}' \
  '{"model":"qwen2.5-0.5b","method":"full","weights":"bf16","seq":512,"batch":1,"grad_ckpt":false,"steps":4,"warmup":1}'; do
  i=$((i + 1))
  t0=$(date +%s.%N)
  python3 -m trainfit_runner --config "$cfg" --out "$out/smoke-$i.json" > "$out/smoke-$i.log" 2>&1
  echo "config $i: rc=$? $(python3 -c "import sys;print(round($(date +%s.%N)-$t0,1))")s"
  python3 -c "import json,sys;m=json.load(open(sys.argv[1]))['measured'];print({k:m.get(k) for k in ('status','peak_allocated_mib','peak_reserved_mib','device_used_mib','weights_loaded_mib','step_seconds','allocator_limit_mib','quant_backend','build_seconds','error')})" "$out/smoke-$i.json" || tail -20 "$out/smoke-$i.log"
done
