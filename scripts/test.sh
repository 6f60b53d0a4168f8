#!/usr/bin/env bash
# Installs what is missing, builds pipeplan and runs every test except those labelled `gpu`, on
# two legs: this machine (Debian 12, LibTorch 1.13) first, then a cached Debian 13 root
# (LibTorch 2.6, scripts/debian13-leg.sh), which is made (when not cached) while the first leg
# runs. Each leg also compiles the CUDA branches (scripts/cuda-check.sh) and checks that a planted
# error there is caught.
#
# PIPEPLAN_LEG picks the legs: both (default), debian12 (this machine only), debian13 (the root
# only), or here (this system, whatever it is: what the Debian 13 leg runs inside its root).
# BUILD_DIR (default build) picks the build folder; extra arguments go to ctest. PIPEPLAN_TESTS
# (all, or torch-facing) and PIPEPLAN_BUILD_BENCH (ON or OFF) go to CMake: the Debian 13 leg
# builds no benchmarks and only the tests that reach LibTorch (docs/building.md).
set -euo pipefail
cd "$(dirname "$0")/.."
leg=${PIPEPLAN_LEG:-both}
case "$leg" in
  both|debian12|debian13|here) ;;
  *) echo "test: PIPEPLAN_LEG is '$leg'; expected both, debian12, debian13 or here" >&2; exit 2 ;;
esac
started=$(date +%s)

prepare_pid=""
if [ "$leg" != debian13 ]; then
  bash scripts/setup.sh
  source scripts/build-env.sh
  if [ "$leg" = both ]; then
    # The Debian 13 root (minutes of downloads and unpacking when it is not cached) is made while
    # this leg builds and tests; a failure here stops it (its completion marks are then missing).
    mkdir -p "$BUILD_DIR"
    # In a session of its own, so that the whole group (debootstrap, apt-get) can be stopped.
    setsid bash scripts/debian13-leg.sh --prepare >"$BUILD_DIR/debian13-prepare.log" 2>&1 &
    prepare_pid=$!
    trap '[ -n "$prepare_pid" ] && kill -- "-$prepare_pid" 2>/dev/null || true' EXIT
  fi
  start=$(date +%s)
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CCACHE_ARGS[@]+"${CCACHE_ARGS[@]}"} \
    -DPIPEPLAN_TESTS="${PIPEPLAN_TESTS:-all}" -DPIPEPLAN_BUILD_BENCH="${PIPEPLAN_BUILD_BENCH:-ON}" \
    >/dev/null
  cmake --build "$BUILD_DIR" -j"$JOBS"
  built=$(date +%s)
  echo "test: build took $((built - start)) s"
  ctest --test-dir "$BUILD_DIR" -LE gpu --output-on-failure -j"$JOBS" --timeout 900 "$@" \
    | tee "$BUILD_DIR/ctest.log"
  skipped=$(grep -c '\*\*\*Skipped' "$BUILD_DIR/ctest.log" || true)
  tested=$(date +%s)
  echo "test: tests took $((tested - built)) s; $skipped skipped"
  if [ "$skipped" -gt 0 ]; then  # which, and the reasons they gave (GTEST_SKIP's messages)
    grep '\*\*\*Skipped' "$BUILD_DIR/ctest.log" | sed 's/^ */test: skipped: /'
    grep -h -A1 ': Skipped$' "$BUILD_DIR"/Testing/Temporary/LastTest*.log 2>/dev/null \
      | grep -v -e ': Skipped$' -e '^--$' | sort | uniq -c | sed 's/^ */test: reason given: /' || true
  fi
  bash scripts/check-test-labels.sh "$BUILD_DIR"
  bash scripts/check-doc-links.sh
  bash scripts/cuda-check.sh "$BUILD_DIR"
  bash scripts/cuda-check.sh "$BUILD_DIR" --plant
  echo "test: label, link and CUDA checks took $(( $(date +%s) - tested )) s"
fi

if [ -n "$prepare_pid" ]; then
  if ! wait "$prepare_pid"; then
    prepare_pid=""
    tail -n 20 "$BUILD_DIR/debian13-prepare.log" >&2
    echo "test: making the Debian 13 root failed (log: $BUILD_DIR/debian13-prepare.log)" >&2
    exit 1
  fi
  prepare_pid=""
  sed 's/^/test: /' "$BUILD_DIR/debian13-prepare.log"
fi
if [ "$leg" = both ] || [ "$leg" = debian13 ]; then
  bash scripts/debian13-leg.sh "$@"
fi
echo "test: all legs ($leg) passed in $(( $(date +%s) - started )) s"
