#!/usr/bin/env bash
# The busiest GPU of a plain DDP loop (issue 11): every variant of ddp_busiest_rank.py as its own
# torchrun launch (one clean process group each) on two GPUs, then the summary table.
# Usage: python/scale_jobs/ddp_busiest_rank.sh OUT_DIR
# Environment: MODELS (default "qwen2.5-1.5b llama3.2-3b"), NPROC (default 2), STEPS (default 3),
# SEQ (default 2048), ONLY (a space-separated list of variant names to run; default all), RAW=1 (the
# baseline also writes its raw allocator snapshots, tens of MB a rank, for https://pytorch.org/memory_viz).
# About 20 s a launch: 15 launches, about five minutes on two H200s.
set -uo pipefail
out=$(realpath -m "${1:?OUT_DIR}")
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
models=${MODELS:-qwen2.5-1.5b llama3.2-3b}
common=(--steps "${STEPS:-3}" --seq "${SEQ:-2048}" --out "$out")
# variant name | switches. The baseline is the user's loop; each other variant changes one thing.
variants=(
  "baseline|--snapshot${RAW:+ --raw-snapshot}"
  "foreach-adamw|--snapshot --optimizer foreach"
  "built-on-cpu|--snapshot --build cpu"
  "no-set-device|--snapshot --set-device none"
  "no-init-sync|--snapshot --init-sync off"
  "no-broadcast-buffers|--snapshot --broadcast-buffers off"
  "bucket-view|--snapshot --bucket-view"
  "reset-after-ddp|--snapshot --reset-after-ddp"
  "no-ddp|--snapshot --no-ddp"
  "baseline-cpp-stacks|--snapshot --stacks all"
)
# C++ frames are symbolised when the snapshot is taken, which can take long: the last variant, and
# PyTorch's own fast symboliser where this version has it.
export TORCH_SYMBOLIZE_MODE=${TORCH_SYMBOLIZE_MODE:-fast}
# The second model runs the baseline and the variants most likely to matter (edit to taste).
second=(baseline no-set-device no-init-sync bucket-view no-ddp)
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
} > "$out/env.txt" 2>&1
first_model=1
for model in $models; do
  for v in "${variants[@]}"; do
    name=${v%%|*}
    args=${v#*|}
    if [ "$first_model" = 0 ] && [[ " ${second[*]} " != *" $name "* ]]; then continue; fi
    if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then continue; fi
    echo "== $model $name" | tee -a "$out/log.txt"
    # shellcheck disable=SC2086
    timeout 240 python3 -m torch.distributed.run --standalone --nproc_per_node="${NPROC:-2}" \
      "$here/ddp_busiest_rank.py" --model "$model" --variant "$model.$name" "${common[@]}" $args \
      >> "$out/log.txt" 2>&1 || echo "   exit $?" | tee -a "$out/log.txt"
  done
  first_model=0
done
python3 "$here/busiest_summary.py" "$out"
