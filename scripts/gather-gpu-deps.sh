#!/usr/bin/env bash
# Run HERE (the development machine), before using the GPU machine: gathers what the GPU machine
# lacks (nlohmann/json, CLI11, GoogleTest, Google Benchmark, zlib, Fashion-MNIST) into the
# git-ignored folder .deps/gpu, which travels with the working tree (name it in `carry`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
tool=../shared/tools/gpu-deps.sh
[ -x "$tool" ] || { echo "gather-gpu-deps: $tool not found (it comes with the steering repo's shared/)" >&2; exit 1; }
"$tool" .deps/gpu
