#!/usr/bin/env bash
# Compiles every translation unit that has `#ifdef PIPEPLAN_HAS_CUDA` branches with those branches
# on (-fsyntax-only), against the CPU LibTorch's own CUDA headers (c10/cuda, ATen/cuda, c10d's
# ProcessGroupNCCL.hpp) and the CUDA toolkit's (CUDA runtime, CUPTI, NCCL), so that code which only
# a GPU machine builds is at least compiled on every CI run.
#
#   bash scripts/cuda-check.sh BUILD_DIR [--plant]
#
# BUILD_DIR is a configured build (its compile_commands.json gives each file's flags).
# --plant compiles a copy of runtime/device.cpp with an error planted inside its first CUDA branch
# and succeeds only when the check reports that error: a check that cannot fail checks nothing.
# CUDA_HOME (default /usr/local/cuda) is the toolkit; without it the check skips with one line.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: cuda-check.sh BUILD_DIR [--plant]}
plant=0
[ "${2:-}" = "--plant" ] && plant=1
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda/include/cuda_runtime_api.h" ] || [ ! -f "$cuda/include/cupti.h" ] \
   || [ ! -f "$cuda/include/nccl.h" ]; then
  echo "cuda-check: skipped: no CUDA toolkit with CUPTI and NCCL headers at $cuda"
  exit 0
fi
commands=$build/compile_commands.json
[ -f "$commands" ] || { echo "cuda-check: $commands missing: configure $build first" >&2; exit 1; }

# The generated header that a CUDA build of LibTorch installs and a CPU build does not.
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
mkdir -p "$stub/c10/cuda/impl"
echo '#pragma once' >"$stub/c10/cuda/impl/cuda_cmake_macros.h"

# Every source folder (no git: the Debian 13 leg sees the checkout without its repository).
mapfile -t files < <(grep -rl --include='*.cpp' 'PIPEPLAN_HAS_CUDA' \
  common plans models runtime profiler planner executor cli tests bench | sort)
[ ${#files[@]} -gt 0 ] || { echo "cuda-check: no file has a PIPEPLAN_HAS_CUDA branch" >&2; exit 1; }

# Each file's compile command without its output, dependency and precompiled-header flags (the
# precompiled header was built without CUDA); <torch/torch.h> comes first, as the header did.
flags_of() {
  python3 - "$commands" "$PWD/$1" <<'PY'
import json, shlex, sys
entries = {e["file"]: e for e in json.load(open(sys.argv[1]))}
entry = entries.get(sys.argv[2])
if entry is None:
    sys.exit(f"cuda-check: {sys.argv[2]} is not in {sys.argv[1]} (not built here?)")
args = shlex.split(entry["command"])[1:]
out, skip = [], False
for arg in args:
    if skip:
        skip = False
        continue
    if arg in ("-o", "-MF", "-MT", "-c"):
        skip = arg != "-c"
        continue
    if arg in ("-MD", "-Winvalid-pch") or arg.endswith(sys.argv[2]) or "cmake_pch" in arg:
        continue
    if arg == "-include":
        skip = True
        continue
    out.append(arg)
print(shlex.join(out))
PY
}

check_one() {
  local file=$1 source=$2 flags
  flags=$(flags_of "$file") || return 1
  # shellcheck disable=SC2086
  eval "g++ $flags" -fsyntax-only -DPIPEPLAN_HAS_CUDA=1 -isystem "$stub" -isystem "$cuda/include" \
    -include torch/torch.h -x c++ "$source"
}

if [ "$plant" -eq 1 ]; then
  copy=$stub/device_planted.cpp
  awk '{print} /^#ifdef PIPEPLAN_HAS_CUDA/ && !done {print "pipeplan_planted_error();"; done=1}' \
    runtime/device.cpp >"$copy"
  if log=$(check_one runtime/device.cpp "$copy" 2>&1); then
    echo "cuda-check --plant: the planted error compiled: the CUDA branches are not being checked" >&2
    exit 1
  fi
  if ! grep -q "pipeplan_planted_error" <<<"$log"; then
    echo "cuda-check --plant: the copy failed, but not at the planted error:" >&2
    echo "$log" | head -n 20 >&2
    exit 1
  fi
  echo "cuda-check --plant: ok (the planted error in a CUDA branch was reported)"
  exit 0
fi

# The files compile side by side, $JOBS at a time (each is one g++ of LibTorch's headers).
start=$SECONDS
jobs_max=${JOBS:-$(nproc)}
for idx in "${!files[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  ( check_one "${files[$idx]}" "${files[$idx]}" >"$stub/log.$idx" 2>&1 || touch "$stub/failed.$idx" ) &
done
wait
failed=()
for idx in "${!files[@]}"; do
  if [ -e "$stub/failed.$idx" ]; then
    failed+=("${files[$idx]}")
    head -n 30 "$stub/log.$idx" >&2
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "cuda-check: CUDA branches fail to compile in: ${failed[*]}" >&2
  exit 1
fi
echo "cuda-check: ok: ${#files[@]} files compiled with PIPEPLAN_HAS_CUDA against $cuda ($((SECONDS - start)) s)"
