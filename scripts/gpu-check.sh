#!/usr/bin/env bash
# Run ON THE GPU MACHINE: builds pipeplan against the LibTorch of the machine's PyTorch (CUDA,
# CUPTI and NCCL from that environment) and runs every test, the `gpu` label included.
# Needs .deps/gpu from scripts/gather-gpu-deps.sh (the GPU machine downloads nothing).
# BUILD_DIR (default build-gpu) and JOBS choose the build folder and parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."
deps=$PWD/.deps/gpu
[ -d "$deps" ] || { echo "gpu-check: $deps missing: run scripts/gather-gpu-deps.sh on the development machine and carry .deps" >&2; exit 1; }
python=${PYTHON:-python3}
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
torch_version=$("$python" -c 'import torch; print(torch.__version__, torch.version.cuda)')
site=$("$python" -c 'import site; print(site.getsitepackages()[0])')
echo "gpu-check: torch $torch_version, prefix $torch_prefix"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

# CUPTI and NCCL headers ship in pip's nvidia-* wheels beside torch when not in the toolkit.
export PIPEPLAN_CUPTI_ROOT=${PIPEPLAN_CUPTI_ROOT:-$site/nvidia/cuda_cupti}
export NCCL_ROOT=${NCCL_ROOT:-$site/nvidia/nccl}

BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$deps;$torch_prefix" \
  -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}"
cmake --build "$BUILD_DIR" -j"$JOBS"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$JOBS" --timeout 900 "$@"
