#!/usr/bin/env bash
# Records issue 11's measurements on a machine with two GPUs (docs/bench.md, "Layouts on several GPUs").
# Usage: python/scale_jobs/record.sh OUT_DIR PREBUILT_DIR [JOB...]
#   PREBUILT_DIR holds bin/trainfit and lib/ (the GPU machine's .devcarry); JOBs, in order, default all:
#   env      the machine and the stack (nvidia-smi, topology, torch, transformers)       (seconds)
#   smoke    python/scale_jobs/smoke.sh: every layout once, Qwen2.5-0.5B                  (~3 min)
#   busiest  python/scale_jobs/ddp_busiest_rank.sh: rank 1's extra peak under DDP         (~5 min)
#   bench    trainfit bench $PLAN (default plans/scale-out-h200x2.toml: the rows for data/bench/)  (~8 min);
#            run it again with the same OUT_DIR to resume a plan that ran out of time (BENCH_TIMEOUT seconds)
#   dispatch torchrun -m trainfit_runner.measure_dispatch at world size 2 (DTensor, collectives, gc)  (~1 min)
#   host     trainfit calibrate --host: this host's dispatch cost per operation                 (~20 s)
# Each job fits one 10-minute call: run them one call each. Results: OUT_DIR/{env.txt,smoke/,busiest/,bench/}.
set -uo pipefail
mkdir -p "${1:?OUT_DIR}"
out=$(realpath "$1")
prebuilt=$(realpath "${2:?PREBUILT_DIR with bin/trainfit and lib/}")
shift 2
jobs=("$@")
[ ${#jobs[@]} -eq 0 ] && jobs=(env smoke busiest bench)
plan=${PLAN:-plans/scale-out-h200x2.toml}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# The Python jobs get the machine's own library path (torch must not see trainfit's carried libraries).
orig_ld=${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}  # NVLink multicast off, as the earlier two-GPU rows ran
for j in "${jobs[@]}"; do
  case $j in
    env)
      { date -u; uname -a; nproc; free -g; nvidia-smi; nvidia-smi topo -m
        python3 -c 'import sys, torch, transformers; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version()); print("transformers", transformers.__version__)'
        python3 -c 'import peft; print("peft", peft.__version__)'
        python3 -c 'import deepspeed' 2>&1 | tail -1
      } > "$out/env.txt" 2>&1 ;;
    smoke) LD_LIBRARY_PATH=$orig_ld "$here/smoke.sh" "$out/smoke" ;;
    busiest) LD_LIBRARY_PATH=$orig_ld "$here/ddp_busiest_rank.sh" "$out/busiest" ;;
    bench)
      (cd "$repo" && LD_LIBRARY_PATH="$prebuilt/lib${orig_ld:+:$orig_ld}" TRAINFIT_PYTHON_DIR="$repo/python" \
        timeout "${BENCH_TIMEOUT:-3600}" "$prebuilt/bin/trainfit" bench "$plan" --results "$out/bench" \
        > "$out/bench.txt" 2>> "$out/bench.log")
      echo "bench exit $?" >> "$out/bench.log"; tail -40 "$out/bench.txt" ;;
    dispatch)
      (cd "$repo/python" && LD_LIBRARY_PATH=$orig_ld torchrun --standalone --nproc-per-node 2 \
        -m trainfit_runner.measure_dispatch --only "${DISPATCH_SECTIONS:-dtensor,tp_plan,collectives,gc}" \
        --out "$out/dispatch-world2.json" > "$out/dispatch.log" 2>&1)
      echo "dispatch exit $?" >> "$out/dispatch.log" ;;
    host)
      (cd "$repo" && LD_LIBRARY_PATH="$prebuilt/lib${orig_ld:+:$orig_ld}" TRAINFIT_PYTHON_DIR="$repo/python" \
        "$prebuilt/bin/trainfit" calibrate --host --out "$out/host.toml" --record "$out/host-record.json" \
        > "$out/host.txt" 2>&1)
      echo "host exit $?" >> "$out/host.txt" ;;
    *) echo "unknown job $j (env, smoke, busiest, bench, dispatch, host)" >&2; exit 2 ;;
  esac
done
