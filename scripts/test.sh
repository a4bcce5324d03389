#!/usr/bin/env bash
# Quick start, part two: install, build, and run every test that needs no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default
ctest --preset default
