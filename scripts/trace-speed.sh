#!/usr/bin/env bash
# `trainfit trace` against a Python reading of the same file (json.load + pandas, as Holistic Trace
# Analysis reads traces), in one run: MB/s, peak memory, and the ratio (docs/trace.md, "Speed").
#   scripts/trace-speed.sh            # a synthetic 1 GB trace
#   scripts/trace-speed.sh 300        # a synthetic trace of about 300 MB
#   scripts/trace-speed.sh FILE.json  # a trace of your own
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh python3-pandas time  # the reading the ratio is against; GNU time for trainfit's own peak memory
cmake --preset release >/dev/null
cmake --build --preset release --target trainfit_cli trainfit_trace_gen
# The ratio is against json.load + pandas: a python3 first on PATH without pandas (a pyenv, a venv)
# would time the plain-Python grouping instead, so Debian's (python3-pandas) is taken when it has it.
python=${PYTHON:-python3}
if ! "$python" -c 'import pandas' 2>/dev/null && /usr/bin/python3 -c 'import pandas' 2>/dev/null; then
  python=/usr/bin/python3
fi
arg=${1:-1024}
if [[ -f "$arg" ]]; then
  "$python" python/trace_jobs/speed.py --trainfit build/release/app/trainfit "$arg"
else
  "$python" python/trace_jobs/speed.py --trainfit build/release/app/trainfit --gen build/release/bench/trainfit_trace_gen \
    --megabytes "$arg"
fi
