#!/usr/bin/env bash
# Builds .devcarry/pysrc: flash-linear-attention (fla, pure Python and Triton kernels) and einops from
# git checkouts of their public sources, for the GPU machine, which has no package index. With it
# on PYTHONPATH (device_job.sh puts it there when the call carries it) transformers' Qwen3-Next
# runs fla's chunk_gated_delta_rule, as it does where `pip install flash-linear-attention` was run.
#   python/family_jobs/carry_fla.sh FLA_GIT EINOPS_GIT      # git directories of fla-org/flash-linear-attention
#                                                           # and arogozhnikov/einops (the fetch tool's mirrors)
# Each package gets a minimal dist-info (name, version) so importlib.metadata finds it; COMMITS
# names the commits, which the job copies into its results.
set -euo pipefail
[ $# -eq 2 ] || { sed -n 2,9p "$0"; exit 2; }
fla=$1; einops=$2
dest=$(cd "$(dirname "$0")/../.." && pwd)/.devcarry/pysrc
rm -rf "$dest"; mkdir -p "$dest"
git -C "$fla" archive HEAD fla | tar -x -C "$dest"
git -C "$einops" archive HEAD einops | tar -x -C "$dest"
dist() { local d="$dest/$1-$2.dist-info"; mkdir -p "$d"; printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' "$1" "$2" > "$d/METADATA"; : > "$d/RECORD"; echo "$3" > "$d/top_level.txt"; }
dist flash_linear_attention "$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$dest/fla/__init__.py")" fla
# einops' development version string ("0.9.0dev") is no version packaging parses: its release part.
dist einops "$(sed -n 's/^__version__ = "\([0-9.]*[0-9]\).*"/\1/p' "$dest/einops/__init__.py")" einops
echo "fla $(git -C "$fla" rev-parse HEAD) einops $(git -C "$einops" rev-parse HEAD)" > "$dest/COMMITS"
cat "$dest/COMMITS"; du -sh "$dest"
