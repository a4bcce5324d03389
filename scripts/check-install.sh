#!/usr/bin/env bash
# After the tests (scripts/test.sh): `cmake --install` of a build gives a working trainfit. Installs
# into a temporary prefix and, from outside the repository, checks what an install must do:
#   1. bench --dry-run of a shipped plan with the installed binary;
#   2. bench running a config: the runner's PYTHONPATH leads to the installed runner package;
#   3. the installed runner package finds the installed built-in model configs (needs python3);
#   4. a project of its own (tests/install/) builds against the installed CMake package and runs
#      (its /metrics server loads the installed HTTP module through the run path the package gives);
#   5. the installed trainfit finds its HTTP module relative to itself.
# Usage: scripts/check-install.sh [BUILD_DIR]   (default: build/default, already built)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
build=$(realpath "${1:-build/default}")
tmp=$(realpath "$(mktemp -d)")  # resolved: the binary finds its share/ folder through /proc/self/exe
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "check-install: FAILED: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null
share=$prefix/share/trainfit
# Nothing of the repository or the build may be reachable by accident.
cd "$tmp"
unset TRAINFIT_PYTHON_DIR TRAINFIT_RUNNER PYTHONPATH

# 1. The shipped plan, as the docs run it, relative to the install's own share folder.
out=$(cd "$share" && "$prefix/bin/trainfit" bench plans/seed-16gb.toml --dry-run) || fail "bench --dry-run: $out"
grep -q "8 configs" <<<"$out" || fail "bench --dry-run printed no 8 configs: $out"
echo "check-install: bench --dry-run of the installed seed-16gb plan: 8 configs"

# 2. A config run by the stand-in runner (the tests' runner: no torch needed), which records the
# PYTHONPATH it got; the default runner (python3 -m trainfit_runner) gets the same environment.
printf "name = 'install'\n[run]\nsteps = 2\n[matrix]\nmodel = 'qwen2.5-0.5b'\n" >plan.toml
"$prefix/bin/trainfit" bench plan.toml --results results --runner "$build/tests/trainfit_standin_runner" \
  >bench.out 2>&1 || fail "bench with the stand-in runner: $(cat bench.out)"
grep -qF '"status":"ok"' results/results.jsonl || fail "bench: no ok row: $(cat bench.out)"
grep -qF "\"pythonpath\":\"$share/python\"" results/results.jsonl ||
  fail "the runner's PYTHONPATH is not the installed $share/python: $(grep -o '"pythonpath":[^,]*' results/results.jsonl)"
[ -f "$share/python/trainfit_runner/__init__.py" ] || fail "no runner package in $share/python"
echo "check-install: bench ran a config; the runner's PYTHONPATH is the installed package's folder"

# 3. The runner resolves built-in model names next to its own package (model_files.py: MODEL_DIRS).
if command -v python3 >/dev/null; then
  found=$(PYTHONPATH=$share/python python3 -c \
    'from trainfit_runner.model_files import builtin_config_path; print(builtin_config_path("qwen2.5-0.5b"))') ||
    fail "python3 could not import the installed runner"
  [ "$found" = "$share/models/qwen2.5-0.5b.json" ] || fail "the installed runner reads $found, not $share/models"
  echo "check-install: the installed runner reads built-in models from $share/models"
else
  echo "check-install: SKIPPED the runner's model lookup: no python3"
fi

# 4. Another project, linking the installed library through find_package(trainfit).
cmake -S "$repo/tests/install" -B consumer -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  >consumer.log 2>&1 || fail "configuring tests/install against the package: $(cat consumer.log)"
cmake --build consumer >>consumer.log 2>&1 || fail "building tests/install: $(cat consumer.log)"
consumer/install_check || fail "tests/install's program"
echo "check-install: tests/install built against the installed CMake package and ran"

# 5. serve loads the HTTP module from lib/trainfit beside the installed binary: an address that is
# not this machine's is then refused as bad input (2); a module not found is a failure of the
# machine (3).
code=0
out=$("$prefix/bin/trainfit" serve --host 203.0.113.7 --port 0 2>&1) || code=$?
[ "$code" = 2 ] || fail "the installed serve did not reach its HTTP module (exit $code): $out"
echo "check-install: the installed trainfit loads its HTTP module, $(cd "$prefix" && find . -name libtrainfit_http.so)"
