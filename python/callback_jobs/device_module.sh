#!/usr/bin/env bash
# Builds the package's compiled module on the GPU machine, whose Python (3.12, in a venv) is not
# Debian 12's (3.11), so the module built here cannot load there. The library is compiled here as
# usual and carried (stripped) with the shared libraries it links; there only the binding is compiled,
# against that Python's headers and the pybind11 that PyTorch ships.
#   here:  python/callback_jobs/device_module.sh --carry    (writes .devcarry/pymod.tar.xz, ~2 MB: carry it)
#   there: python/callback_jobs/device_module.sh DEST       (DEST/trainfit: the package, importable)
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" = --carry ]; then
  rm -rf .devcarry/pymod && mkdir -p .devcarry/pymod/lib
  cp build/default/src/libtrainfit.a .devcarry/pymod/lib/ && strip --strip-debug .devcarry/pymod/lib/libtrainfit.a
  for l in $(ldd build/default/python/trainfit/_trainfit*.so | awk '/lib(fmt|tomlplusplus|simdjson|isal|yaml-cpp)/ {print $3}'); do
    cp -L "$l" .devcarry/pymod/lib/
  done
  tar -C .devcarry -cJf .devcarry/pymod.tar.xz pymod
  du -sh .devcarry/pymod.tar.xz
  exit 0
fi
[ -d .devcarry/pymod ] || tar -C .devcarry -xJf .devcarry/pymod.tar.xz
dest=${1:?DEST}
mkdir -p "$dest"
rm -rf "$dest/trainfit" && cp -r python/trainfit "$dest/trainfit"
cp .devcarry/pymod/lib/*.so.* "$dest/trainfit/"
py_include=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")
# pybind11: PyTorch's copy where there is one (the GPU machine has no pybind11-dev), else the system's.
pybind=()
torch_include=$(python3 -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'include'))" 2>/dev/null) &&
  pybind=(-isystem "$torch_include")
suffix=$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
version=$(sed -n 's/^project(trainfit VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
g++ -std=c++20 -O2 -fPIC -shared -DTRAINFIT_VERSION="\"$version\"" -Iinclude "${pybind[@]}" -isystem "$py_include" \
    python/binding/trainfit_module.cpp .devcarry/pymod/lib/libtrainfit.a "$dest"/trainfit/lib*.so.* -lz \
    -Wl,-rpath,'$ORIGIN' -o "$dest/trainfit/_trainfit$suffix"
python3 -c "import sys; sys.path.insert(0, '$dest'); import trainfit; print('trainfit', trainfit.__version__, trainfit.plan(model='qwen2.5-7b', gpu='h200').verdict)"
