#!/usr/bin/env bash
# Installs what is missing, builds pipeplan and runs every test except those labelled `gpu`.
# BUILD_DIR (default build) picks the build folder; extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/build-env.sh
start=$(date +%s)
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CCACHE_ARGS[@]+"${CCACHE_ARGS[@]}"} >/dev/null
cmake --build "$BUILD_DIR" -j"$JOBS"
built=$(date +%s)
echo "test: build took $((built - start)) s"
ctest --test-dir "$BUILD_DIR" -LE gpu --output-on-failure -j"$JOBS" --timeout 900 "$@"
echo "test: tests took $(( $(date +%s) - built )) s"
