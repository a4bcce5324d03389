#!/usr/bin/env bash
# Installs the Debian 12 packages trainfit builds and tests with, and any packages named as
# arguments (what one script alone needs: trace-speed.sh's pandas). Safe to run again.
#   scripts/install-deps.sh [--program | --browser] [PACKAGE...]
# --program installs only what the program needs to build (scripts/demo.sh: the quick start's
# first command, which builds no tests and no Python module); --browser adds what only the browser
# tests need (scripts/test.sh passes it): Chromium and Node.js are most of the download.
set -euo pipefail
packages=(g++ cmake ninja-build pkg-config libcli11-dev nlohmann-json3-dev libfmt-dev libtomlplusplus-dev
          libcpp-httplib-dev libsimdjson-dev zlib1g-dev libisal-dev libyaml-cpp-dev)
if [ "${1:-}" = --program ]; then
  shift
else
  # The tests, the benchmarks, the Python package's module, and the runner's Python.
  packages+=(libgtest-dev libgmock-dev libbenchmark-dev python3 python3-dev python3-venv pybind11-dev)
fi
if [ "${1:-}" = --browser ]; then
  shift
  # The browser tests (tests/browser): Debian's chromium, and Node.js with npm unless a Node.js is
  # already there (a NodeSource nodejs brings its own npm, which Debian's npm package would conflict with).
  packages+=(chromium)
  command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
fi
packages+=("$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
