#!/usr/bin/env bash
# Every multi-GPU layout of the runner once, small: Qwen2.5-0.5B, 256 tokens, 2 steps, through the
# runner directly (no trainfit binary needed), one torchrun launch each; then one line per layout
# (status, busiest GPU's peak, step time, error). About three minutes on two GPUs. Run it first:
# a layout that fails here fails in plans/scale-out-h200x2.toml too.
# Usage: python/scale_jobs/smoke.sh OUT_DIR      (from anywhere; NPROC=2 GPUs by default; DRY_RUN=1:
# print each case's layout, or the runner's reason to refuse it, and run nothing)
# Run it without trainfit's carried LD_LIBRARY_PATH (torch must load its own libraries).
set -uo pipefail
out=$(realpath -m "${1:?OUT_DIR}")
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH="$here/..${PYTHONPATH:+:$PYTHONPATH}"
n=${NPROC:-2}
base="\"model\": \"qwen2.5-0.5b\", \"method\": \"full\", \"gpus\": $n, \"seq\": 256, \"batch\": 1, \"steps\": 2, \"warmup\": 1"
# name | the layout's settings (JSON members). zero2 must come back refused (DeepSpeed).
cases=(
  "ddp|\"parallel\": \"ddp\""
  "ddp-accum4|\"parallel\": \"ddp\", \"grad_accum\": 4"
  "fsdp|\"parallel\": \"fsdp\""
  "fsdp-mixed-precision|\"parallel\": \"fsdp\", \"weights\": \"fp32\", \"fsdp_param_dtype\": \"bf16\", \"fsdp_reduce_dtype\": \"fp32\""
  "fsdp-grad-op|\"parallel\": \"fsdp-grad-op\""
  "fsdp-offload|\"parallel\": \"fsdp\", \"offload\": \"optimizer,params\""
  "fsdp-lora|\"parallel\": \"fsdp\", \"method\": \"lora\""
  "hsdp-2nodes|\"parallel\": \"hsdp\", \"nodes\": 2"
  "zero1|\"parallel\": \"zero1\""
  "zero1-lora|\"parallel\": \"zero1\", \"method\": \"lora\""
  "zero2-refused|\"parallel\": \"zero2\""
  "tp$n|\"tp\": $n"
  "pp$n-m$n|\"pp\": $n, \"microbatches\": $n"
  "pp$n-m$((2 * n))-lora|\"pp\": $n, \"microbatches\": $((2 * n)), \"method\": \"lora\""
)
for c in "${cases[@]}"; do
  name=${c%%|*}
  if [ "${DRY_RUN:-0}" = 1 ]; then  # what would run, or why not; no GPU needed (the unit tests use it)
    echo "$name $(python3 -m trainfit_runner.layouts "{$base, ${c#*|}}")"
    continue
  fi
  echo "== $name" >> "$out/log.txt"
  timeout 180 python3 -m trainfit_runner --config "{$base, ${c#*|}}" --out "$out/$name.json" >> "$out/log.txt" 2>&1 \
    || echo "   exit $?" >> "$out/log.txt"
  python3 - "$out/$name.json" "$name" <<'PY'
import json, sys
try:
    m = json.load(open(sys.argv[1]))["measured"]
except (OSError, ValueError) as e:
    print("%-22s no row (%s)" % (sys.argv[2], e)); sys.exit()
ranks = " ".join("%s:%s" % (r.get("rank"), r.get("peak_allocated_mib")) for r in m.get("per_rank") or [])
print("%-22s %-6s peak %8s MiB (ranks %s) step %8s s  %s" % (sys.argv[2], m.get("status"), m.get("peak_allocated_mib"),
      ranks, m.get("step_seconds_median"), (m.get("error") or "")[:200]))
PY
done | tee "$out/summary.txt"
