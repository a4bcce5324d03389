#!/usr/bin/env bash
# Records the traces of docs/trace.md ("Data") on a GPU machine (2 GPUs for the DDP job), and, when a
# trainfit binary is given, runs `trainfit trace` on each so both readings sit side by side.
# Usage: python/trace_jobs/record.sh OUT_DIR [TRAINFIT_BINARY]
# Environment: JOBS, a comma-separated subset of record_traces.py's jobs (default all; ddp needs 2 GPUs).
set -uo pipefail
mkdir -p "${1:?OUT_DIR}"
out=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
{ date -u; uname -a; nproc; nvidia-smi
  python3 -c 'import sys, torch, transformers, peft; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(), torch.cuda.device_count(), "GPUs"); print("transformers", transformers.__version__, "peft", peft.__version__)'
} > "$out/env.txt" 2>&1
PYTHONUNBUFFERED=1 python3 "$here/record_traces.py" "$out" ${JOBS:+--jobs "$JOBS"} 2>&1 | tee "$out/record_log.txt"
if [ -n "${2:-}" ]; then
  for d in "$out"/*/; do
    job=$(basename "$d")
    if [ -f "$d/trace.json.gz" ]; then "$2" trace "$d/trace.json.gz" --format json > "$d/trainfit.json" 2>&1; fi
    if [ -f "$d/rank0.json.gz" ] || compgen -G "$d/*.pt.trace.json.gz" >/dev/null; then
      "$2" trace "$d" --format json > "$d/trainfit.json" 2>&1  # a folder: ranks, or one worker's cycles
    fi
    if [ -f "$d/peak.pickle.json" ]; then "$2" trace --snapshot "$d/peak.pickle.json" --format json > "$d/trainfit.json" 2>&1; fi
    echo "$job: trainfit exit $?"
  done
fi
ls -la "$out"/*/ > "$out/files.txt"
