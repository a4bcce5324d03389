#!/usr/bin/env bash
# Runs every fuzz target from a copy of its seeds in fuzz/corpus/<target>/ and prints how many
# inputs each one tried, and the total. Build the targets first:
#   cmake --preset fuzz -DCMAKE_CXX_COMPILER_LAUNCHER=ccache && cmake --build --preset fuzz -j2
# Usage: fuzz/run-all.sh SECONDS_PER_TARGET [JOBS] [--keep]
#   JOBS     targets run at once (default 1)
#   FUZZ_RUNS=N in the environment: each target also stops after N inputs (fuzz/nightly.sh: 10 million)
#   --keep   merge what a run found that covers new code into fuzz/corpus/<target>/ (libFuzzer's
#            -merge=1 keeps only inputs that add coverage, so the checked-in corpus stays small)
# Exits non-zero when a target found a crash, a leak, a sanitizer report or a broken invariant;
# the input that did it is left in the run's directory, named in the log.
set -euo pipefail

seconds=${1:?usage: fuzz/run-all.sh SECONDS_PER_TARGET [JOBS] [--keep]}
jobs=${2:-1}
keep=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
bin=${FUZZ_BUILD_DIR:-$here/../build/fuzz/fuzz}
work=$(mktemp -d /tmp/trainfit-fuzz.XXXXXX)
echo "runs in $work"

# Inputs up to 64 KiB reach the deep-nesting and long-line guards (a 64 KiB criterion, a line of
# 32,000 brackets); 2 GiB is far above what any parser here may hold of a 64 KiB input.
run_target() {
  local t=$1
  mkdir -p "$work/$t/corpus" "$work/$t/found"
  cp "$here/corpus/$t/"* "$work/$t/corpus/" 2>/dev/null || true
  (cd "$work/$t/found" &&
     "$bin/$t" "$work/$t/corpus" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
       ${FUZZ_RUNS:+-runs="$FUZZ_RUNS"} -print_final_stats=1 >"$work/$t/log" 2>&1) && echo ok >"$work/$t/status" || echo failed >"$work/$t/status"
}

targets=()
for f in "$bin"/fuzz_*; do [[ -x $f && -f $f ]] && targets+=("$(basename "$f")"); done
[[ ${#targets[@]} -gt 0 ]] || { echo "no fuzz targets in $bin: build the fuzz preset first" >&2; exit 2; }

running=0
for t in "${targets[@]}"; do
  run_target "$t" &
  running=$((running + 1))
  if ((running >= jobs)); then wait -n; running=$((running - 1)); fi
done
wait

total=0
failed=0
for t in "${targets[@]}"; do
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work/$t/log" | grep -o '[0-9]*$' || echo 0)
  status=$(cat "$work/$t/status")
  printf '%-22s %12s executions  %s\n' "$t" "$runs" "$status"
  total=$((total + runs))
  if [[ $status != ok ]]; then
    failed=1
    grep -m3 -E 'ERROR|SUMMARY|Test unit written' "$work/$t/log" | sed 's/^/    /'
  elif [[ $keep == --keep ]]; then
    "$bin/$t" -merge=1 -max_len=65536 "$here/corpus/$t" "$work/$t/corpus" >/dev/null 2>&1
  fi
done
printf '%-22s %12s executions\n' total "$total"
exit $failed
