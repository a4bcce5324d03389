#!/usr/bin/env bash
# Quick start, part one: install, build, and answer the seed's 16 GB question.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the program needs (no test, benchmark or Python packages), built as one unity build of a
# dozen files a batch (the quickstart preset): the build is most of this command's time.
scripts/install-deps.sh --program
cmake --preset quickstart >/dev/null
cmake --build --preset quickstart
./build/quickstart/app/trainfit plan "$@"
