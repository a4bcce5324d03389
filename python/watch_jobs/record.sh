#!/usr/bin/env bash
# Records the jobs of data/watch/ on a GPU machine: `trainfit watch --jsonl` over each job, the
# gpu-labelled tests (which print the measured sampler cost), a /metrics scrape, and the stack.
# Usage: python/watch_jobs/record.sh OUT_DIR [DIR_WITH_bin/_AND_lib/]   (prebuilt trainfit, else build/gpu)
# Environment: JOBS (default "compute input capacity"), SUFFIX for the recordings' names, GPU_TESTS=0 to skip
# the tests, CAPACITY_ARGS for capacity_bound.py.
set -uo pipefail
jobs=${JOBS:-compute input capacity}
suffix=${SUFFIX:-}
mkdir -p "${1:?OUT_DIR}"
out=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
orig_ld=${LD_LIBRARY_PATH:-}
if [ -n "${2:-}" ]; then
  prebuilt=$(realpath "$2")
  tf=$prebuilt/bin/trainfit
  gpu_tests=$prebuilt/bin/trainfit_gpu_tests
  export LD_LIBRARY_PATH=$prebuilt/lib${orig_ld:+:$orig_ld}
else
  (cd "$here/../.." && cmake --preset default -B build/gpu -DTRAINFIT_BUILD_TESTS=ON >/dev/null &&
   cmake --build build/gpu -j16 --target trainfit_cli trainfit_gpu_tests) || exit 1
  tf=$here/../../build/gpu/app/trainfit
  gpu_tests=$here/../../build/gpu/tests/trainfit_gpu_tests
fi
# The job gets the machine's own library path back (torch must not see trainfit's carried libraries).
job=(env "LD_LIBRARY_PATH=$orig_ld" PYTHONUNBUFFERED=1 python3)
{ date -u; uname -a; grep PRETTY /etc/os-release; nproc; nvidia-smi
  "${job[@]}" -c 'import sys, torch; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
} > "$out/env$suffix.txt" 2>&1
[ "${GPU_TESTS:-1}" = 1 ] && "$gpu_tests" --gtest_color=no > "$out/gpu_tests$suffix.txt" 2>&1
cd "$here"
for j in $jobs; do
  case $j in
    compute)
      "$tf" watch --jsonl "$out/compute$suffix.jsonl" --prometheus 127.0.0.1:9400 -- "${job[@]}" compute_bound.py \
        --seconds 32 >> "$out/log$suffix.txt" 2>&1 &
      (sleep 20; "${job[@]}" -c 'import urllib.request as u; print(u.urlopen("http://127.0.0.1:9400/metrics", timeout=5).read().decode())' \
        > "$out/metrics$suffix.txt" 2>&1) &
      wait ;;
    input) "$tf" watch --jsonl "$out/input$suffix.jsonl" -- "${job[@]}" input_bound.py --seconds 32 >> "$out/log$suffix.txt" 2>&1 ;;
    capacity) "$tf" watch --jsonl "$out/capacity$suffix.jsonl" -- "${job[@]}" capacity_bound.py ${CAPACITY_ARGS:---capped 15 --near-full 15} \
        >> "$out/log$suffix.txt" 2>&1 ;;
  esac
done
echo "record.sh done" >> "$out/log$suffix.txt"
