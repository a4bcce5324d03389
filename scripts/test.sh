#!/usr/bin/env bash
# Quick start, part two: install, build, run every test that needs no GPU, then check that
# `cmake --install` gives a working trainfit and CMake package (scripts/check-install.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --browser
# puppeteer-core for the browser tests, at the lock file's versions; Chromium is Debian's (no download).
(cd tests/browser && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
cmake --preset default >/dev/null
cmake --build --preset default
ctest --preset default
scripts/check-install.sh build/default
