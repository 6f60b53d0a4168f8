#!/usr/bin/env bash
# Installs what is missing, builds pipeplan and runs the end-to-end example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/build-env.sh
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CCACHE_ARGS[@]+"${CCACHE_ARGS[@]}"} >/dev/null
cmake --build "$BUILD_DIR" -j"$JOBS" --target pipeplan
pipeplan=$BUILD_DIR/cli/pipeplan
out=${DEMO_DIR:-out/demo}
mkdir -p "$out"

echo "== the model zoo"
"$pipeplan" models | tee "$out/models.txt"
echo
echo "demo: artefacts in $out/"
