#!/usr/bin/env bash
# Installs what is missing, builds pipeplan and runs the end-to-end example: profile resnet_tiny
# on this machine's CPU, plan it for 2 devices under a memory limit that one device cannot meet,
# simulate the plan, train one epoch of Fashion-MNIST with 2 local ranks, compare the plan with
# the run, and serve the trained weights with an inference plan of 2 stages. Every artefact lands
# in $DEMO_DIR (default out/demo).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/build-env.sh
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${CCACHE_ARGS[@]+"${CCACHE_ARGS[@]}"} >/dev/null
cmake --build "$BUILD_DIR" -j"$JOBS" --target pipeplan
pipeplan=$(realpath "$BUILD_DIR/cli/pipeplan")
out=${DEMO_DIR:-out/demo}
mkdir -p "$out"
out=$(realpath "$out")
# A device memory that holds half of resnet_tiny's training state at these micro-batch sizes but
# not all of it, so the planner has to split the model into two pipeline stages.
memory=${DEMO_DEVICE_MEMORY:-6MiB}
start=$SECONDS

step() { echo; echo "== [$((SECONDS - start)) s] $*"; }

step "profile resnet_tiny layer by layer, 2 processes at once as the 2 ranks will run"
"$pipeplan" profile --model resnet_tiny --batch-sizes 2,4,8,16,32 --co-located 2 \
  -o "$out/profile.json"

step "plan for 2 devices of $memory each, global batch 64"
"$pipeplan" plan --profile "$out/profile.json" --devices 2 --device-memory "$memory" \
  --global-batch 64 -o "$out/plan.json" | tee "$out/plan.txt"

step "simulate the plan's schedule"
"$pipeplan" simulate --plan "$out/plan.json" --svg "$out/simulated.svg" \
  --trace "$out/simulated_trace.json" | tee "$out/simulate.txt"

step "train one epoch of Fashion-MNIST on 2 local ranks"
"$pipeplan" launch --nproc 2 -- "$pipeplan" train --plan "$out/plan.json" --data fashion-mnist \
  --epochs 1 --log "$out/steps.jsonl" --trace "$out/run_trace.json" \
  --checkpoint-dir "$out/checkpoints" -o "$out/run.json"

step "compare the plan's predictions with the run"
"$pipeplan" compare --plan "$out/plan.json" --run "$out/run.json" --svg "$out/compare.svg" \
  | tee "$out/compare.txt"

# The training plan's micro-batch size, so that serving evaluates the test split in the same
# batches as training's evaluation did (and gets the same accuracy, not one within rounding).
if ! "$pipeplan" plan --help | grep -q -- --inference; then
  step "skipped serving: this pipeplan's plan has no --inference yet"
else
  micro_batch_size=$(grep -o '"micro_batch_size": *[0-9]*' "$out/plan.json" | grep -o '[0-9]*$')
  step "plan inference for 2 pipeline stages, requests of 64 samples in micro-batches of $micro_batch_size"
  "$pipeplan" plan --inference --profile "$out/profile.json" --devices 2 --pp 2 \
    --device-memory "$memory" --global-batch 64 --micro-batch-size "$micro_batch_size" \
    -o "$out/infer_plan.json" | tee "$out/infer_plan.txt"

  step "serve the trained weights: 50 requests on 2 local ranks"
  "$pipeplan" launch --nproc 2 -- "$pipeplan" infer --plan "$out/infer_plan.json" \
    --data fashion-mnist --requests 50 --checkpoint "$out/checkpoints" -o "$out/infer_run.json"
  accuracy() { grep -o '"test_accuracy": *[0-9.e-]*' "$1" | tail -1 | grep -o '[0-9.e-]*$'; }
  echo "test accuracy: trained $(accuracy "$out/run.json"), served with pp=2 $(accuracy "$out/infer_run.json")"
fi

step "done"
cat <<DONE
artefacts in $out/:
  profile.json        per-layer times and memory, link latency and bandwidth
  plan.json           the plan, with every prediction (plan.txt: what plan printed)
  simulated.svg       the simulated timeline (simulated_trace.json: Chrome trace)
  run.json            measured iteration time, memory, accuracy (steps.jsonl: per-step log)
  run_trace.json      every rank's real actions (Chrome trace; open in ui.perfetto.dev)
  compare.svg         predicted beside measured, and the two timelines (compare.txt: table)
  checkpoints/        the trained weights
  infer_plan.json     the inference plan (infer_plan.txt: what plan printed)
  infer_run.json      served samples/s, request latency p50/p90/p99, accuracy
DONE
