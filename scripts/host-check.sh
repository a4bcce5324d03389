#!/usr/bin/env bash
# On a GPU machine (torch, transformers and peft installed): measure this host's dispatch time per
# operation with `trainfit calibrate --host`, and check it on host-bound steps (docs/model.md,
# "Host dispatch, measured"). Everything goes under $OUT (default host-check-out/).
#
#   scripts/host-check.sh calibrate   # about a minute: the figure three times (twice at 24 layers, once at 4),
#                                     # and the held-out Qwen2.5-0.5B LoRA rows of data/bench/ at it and at the default
#   scripts/host-check.sh bench       # about six minutes: plans/host-check-h200.toml with the probe beside
#                                     # each config, validated at its own figure, at calibrate's and at the default
#   scripts/host-check.sh all         # both
#
# $TRAINFIT is the binary (default build/default/app/trainfit); the runner package is this
# checkout's python/ ($TRAINFIT_PYTHON_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
stage=${1:-all}
TRAINFIT=${TRAINFIT:-build/default/app/trainfit}
OUT=${OUT:-host-check-out}
export TRAINFIT_PYTHON_DIR=${TRAINFIT_PYTHON_DIR:-$PWD/python}
mkdir -p "$OUT"

if [[ $stage == calibrate || $stage == all ]]; then
  { grep -m1 "model name" /proc/cpuinfo || true; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
    python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__)" || true
  } > "$OUT/machine.txt" 2>&1
  "$TRAINFIT" calibrate --host --gpu h200 --out "$OUT/h200-host.toml" --record "$OUT/record.json" 2>&1 | tee "$OUT/calibrate.txt"
  "$TRAINFIT" calibrate --host --gpu h200 --record "$OUT/record-again.json" > "$OUT/calibrate-again.txt" 2>&1 || true
  "$TRAINFIT" calibrate --host --gpu h200 --layers 4 --record "$OUT/record-4-layers.json" > "$OUT/calibrate-4-layers.txt" 2>&1 || true
  # The held-out host-bound rows measured before (another day, perhaps another host of the same kind).
  python3 - data/bench/h200-wide-2026-11-30.jsonl data/bench/h200-wide-quick-2026-11-30.jsonl \
    > "$OUT/heldout-0.5b-lora.jsonl" <<'PY'
import json, sys
for path in sys.argv[1:]:
    for line in open(path):
        c = json.loads(line)["config"] if line.strip() else {}
        if c.get("model") == "qwen2.5-0.5b" and c.get("method") == "lora":
            print(line.rstrip("\n"))
PY
  "$TRAINFIT" validate "$OUT/heldout-0.5b-lora.jsonl" > "$OUT/heldout-default.txt"
  "$TRAINFIT" validate "$OUT/heldout-0.5b-lora.jsonl" --profile "$OUT/h200-host.toml" > "$OUT/heldout-measured.txt"
  tail -n 3 "$OUT"/heldout-*.txt
fi

if [[ $stage == bench || $stage == all ]]; then
  "$TRAINFIT" bench plans/host-check-h200.toml --host-probe --results "$OUT/host-check" > "$OUT/bench.txt" 2>&1 || true
  rows="$OUT/host-check/results.jsonl"
  "$TRAINFIT" validate "$rows" > "$OUT/validate-own-host.txt"                  # each row at its own probe's figure
  "$TRAINFIT" validate "$rows" --profile-host > "$OUT/validate-default.txt"    # the default profile (32.8 us)
  if [[ -f $OUT/h200-host.toml ]]; then                                        # calibrate --host's figure
    "$TRAINFIT" validate "$rows" --profile "$OUT/h200-host.toml" --profile-host > "$OUT/validate-calibrated.txt"
  fi
  "$TRAINFIT" validate "$rows" --format json > "$OUT/validate-own-host.json"
  tail -n 4 "$OUT"/validate-*.txt
fi
