#!/usr/bin/env bash
# The nightly fuzzing run: every target until it has tried 10 million inputs (FUZZ_RUNS to change
# it) or a day has passed, as many at once as the machine has cores, from a copy of its seeds.
# Prints each target's executions and their total (fuzz/README.md keeps the counts of each run);
# exits non-zero when a target found a crash, a leak, a sanitizer report or a broken invariant.
# Build the targets first:
#   cmake --preset fuzz -DCMAKE_CXX_COMPILER_LAUNCHER=ccache && cmake --build --preset fuzz -j"$(nproc)"
# Usage: fuzz/nightly.sh [--keep]   (--keep: merge what covers new code into fuzz/corpus/)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export FUZZ_RUNS=${FUZZ_RUNS:-10000000}
exec "$here/run-all.sh" "${FUZZ_SECONDS:-86400}" "${FUZZ_JOBS:-$(nproc)}" "$@"
