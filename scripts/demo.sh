#!/usr/bin/env bash
# Quick start, part one: install, build, and answer the seed's 16 GB question.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target trainfit_cli
./build/release/app/trainfit plan "$@"
