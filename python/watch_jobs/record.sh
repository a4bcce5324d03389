#!/usr/bin/env bash
# Records `trainfit watch` over its check jobs on a GPU machine, all into one folder, then scores them:
#   OUT/<job>.jsonl         the watch recording (--jsonl: samples, /proc host readings, probe events, verdicts)
#   OUT/<job>.txt           watch's verdict lines and end-of-job summary (stderr) and the job's output
#   OUT/scores.txt          score.py: each job named right in what share of its steady windows, live and replayed
#   OUT/gpu_tests.txt       the gpu-labelled tests (the real driver's reading cost and the sampler's)
#   OUT/sampler_cost.txt    trainfit_bench's sampler benchmark against the real driver (% of a core at 10 Hz)
#   OUT/metrics.txt, OUT/env.txt   a /metrics scrape during the compute job; the machine and stack
# Usage: python/watch_jobs/record.sh OUT_DIR [DIR_WITH_bin/_AND_lib/]   (prebuilt trainfit, else build/gpu)
# Environment: JOBS (default "compute input host leak ddp straggler"; also "capacity"), SECONDS_PER_JOB (40),
# GPU_TESTS=0 to skip the tests and the benchmark, CAPACITY_ARGS for capacity_bound.py. The ddp and
# straggler jobs need two GPUs (torchrun; ddp with NCCL_P2P_DISABLE=1); the others run on GPU 0 (CUDA_VISIBLE_DEVICES=0) so
# that watch's "only the job's GPUs" shows too.
set -uo pipefail
jobs=${JOBS:-compute input host leak ddp straggler}
seconds=${SECONDS_PER_JOB:-40}
mkdir -p "${1:?OUT_DIR}"
out=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
orig_ld=${LD_LIBRARY_PATH:-}
if [ -n "${2:-}" ]; then
  prebuilt=$(realpath "$2")
  tf=$prebuilt/bin/trainfit
  gpu_tests=$prebuilt/bin/trainfit_gpu_tests
  bench=$prebuilt/bin/trainfit_bench
  export LD_LIBRARY_PATH=$prebuilt/lib${orig_ld:+:$orig_ld}
else
  (cd "$here/../.." && cmake --preset default -B build/gpu -DTRAINFIT_BUILD_TESTS=ON >/dev/null &&
   cmake --build build/gpu -j16 --target trainfit_cli trainfit_gpu_tests trainfit_bench) || exit 1
  tf=$here/../../build/gpu/app/trainfit
  gpu_tests=$here/../../build/gpu/tests/trainfit_gpu_tests
  bench=$here/../../build/gpu/bench/trainfit_bench
fi
# The job gets the machine's own library path back (torch must not see trainfit's carried libraries).
py=(env "LD_LIBRARY_PATH=$orig_ld" PYTHONUNBUFFERED=1)
{ date -u; uname -a; grep PRETTY /etc/os-release; nproc; nvidia-smi; nvidia-smi topo -m
  "${py[@]}" python3 -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.device_count(), torch.cuda.get_device_name())'
} > "$out/env.txt" 2>&1
if [ "${GPU_TESTS:-1}" = 1 ]; then
  TRAINFIT_CLI=$tf "$gpu_tests" --gtest_color=no > "$out/gpu_tests.txt" 2>&1
  # The sampler against the real driver at 10 Hz, every GPU of the machine (and the fake at 1, 2, 8).
  { TRAINFIT_BENCH_REAL_NVML=1 "$bench" --benchmark_filter=SamplerRealDriver
    "$bench" --benchmark_filter=SamplerFakeDriver; } > "$out/sampler_cost.txt" 2>&1
fi
cd "$here"
watch_job() {  # NAME CUDA_VISIBLE_DEVICES COMMAND...
  local name=$1 visible=$2
  shift 2
  CUDA_VISIBLE_DEVICES=$visible "$tf" watch --jsonl "$out/$name.jsonl" -- "${py[@]}" "$@" > "$out/$name.txt" 2>&1
  echo "$name: exit $?" >> "$out/log.txt"
}
for j in $jobs; do
  case $j in
    compute)
      CUDA_VISIBLE_DEVICES=0 "$tf" watch --jsonl "$out/compute.jsonl" --prometheus 127.0.0.1:9400 -- "${py[@]}" \
        python3 compute_bound.py --seconds "$seconds" > "$out/compute.txt" 2>&1 &
      (sleep 20; "${py[@]}" python3 -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:9400/metrics", timeout=5).read().decode())' \
        > "$out/metrics.txt" 2>&1) &
      wait
      echo "compute: done" >> "$out/log.txt" ;;
    input) watch_job input 0 python3 input_bound.py --seconds "$seconds" ;;
    host) watch_job host 0 python3 host_bound.py --seconds "$seconds" ;;
    leak) watch_job leak 0 python3 leak.py --seconds "$seconds" ;;
    ddp) NCCL_P2P_DISABLE=1 watch_job ddp 0,1 torchrun --standalone --nproc-per-node 2 ddp_comm.py --seconds "$seconds" ;;
    straggler) watch_job straggler 0,1 torchrun --standalone --nproc-per-node 2 straggler.py --seconds "$seconds" ;;
    capacity) watch_job capacity 0 python3 capacity_bound.py ${CAPACITY_ARGS:---capped 15 --near-full 15} ;;
    *) echo "unknown job '$j'" >> "$out/log.txt" ;;
  esac
done
# With trainfit's own library path (a prebuilt trainfit needs its lib/), unlike the jobs.
TRAINFIT=$tf python3 "$here/score.py" "$out" > "$out/scores.txt" 2>&1
echo "score.py: exit $?" >> "$out/log.txt"
echo "record.sh done" >> "$out/log.txt"
cat "$out/scores.txt"
