#!/usr/bin/env bash
# check_includes.sh must fail, naming each file, on a tree that breaks its rules.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree"/{profiler,executor,planner,plans,common}
echo '#include "executor/trainer.h"' >"$tree/profiler/a.cpp"
echo '#include "profiler/device.h"' >"$tree/executor/b.cpp"
echo '#include "profiler/layer_profiler.h"' >"$tree/planner/c.h"
echo '  #include <torch/torch.h>' >"$tree/plans/d.cpp"
echo '#include <c10/core/Device.h>' >"$tree/common/e.h"
echo '#include "plans/plan.h"' >"$tree/planner/ok.cpp"
if output=$(bash "$here/check_includes.sh" "$tree" 2>&1); then
  echo "expected a failure, got: $output"
  exit 1
fi
for file in profiler/a.cpp executor/b.cpp planner/c.h plans/d.cpp common/e.h; do
  grep -q "^$file:1: " <<<"$output" || { echo "not reported: $file"; echo "$output"; exit 1; }
done
if grep -q 'planner/ok.cpp' <<<"$output"; then echo "allowed include reported"; exit 1; fi
echo "violation_test: ok"
