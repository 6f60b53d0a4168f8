#!/usr/bin/env bash
# Checks the include rules between folders (docs/architecture.md, Folders) in the tree at $1:
# measuring and running share runtime/ and never include each other, the planner stands on
# plans/ and common/ alone, and the LibTorch-free folders include no LibTorch header.
# Prints every violation as FILE:LINE: RULE and exits 1 if there is any.
set -euo pipefail
root=${1:?usage: check_includes.sh SOURCE_ROOT}
cd "$root"
violations=0

# forbid FOLDER PATTERN RULE: no file under FOLDER has an #include matching PATTERN.
forbid() {
  local folder=$1 pattern=$2 rule=$3
  [ -d "$folder" ] || return 0
  local hits
  hits=$(grep -rnE --include='*.h' --include='*.cpp' "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($pattern)" "$folder" || true)
  if [ -n "$hits" ]; then
    while IFS= read -r hit; do
      echo "${hit%%:#*}: $rule"
      violations=$((violations + 1))
    done <<<"$(echo "$hits" | cut -d: -f1,2)"
  fi
}

torch_headers='torch/|c10/|ATen/|caffe2/'
torch_folders='models/|runtime/|profiler/|executor/|cli/'
forbid profiler 'executor/' "profiler/ must not include executor/ (shared pieces live in runtime/)"
forbid executor 'profiler/' "executor/ must not include profiler/ (shared pieces live in runtime/)"
forbid runtime 'profiler/|executor/|cli/' "runtime/ is below profiler/ and executor/"
forbid planner 'profiler/|executor/|runtime/|models/|cli/' "planner/ stands on plans/ and common/ alone"
for folder in plans planner common export; do
  forbid "$folder" "$torch_headers|$torch_folders" "$folder/ must not include LibTorch or a LibTorch folder"
done
forbid plans 'planner/|export/' "plans/ is below planner/ and export/"
forbid export 'planner/' "export/ stands on plans/ and common/ alone"
forbid common 'plans/|planner/' "common/ is the floor"

if [ "$violations" -gt 0 ]; then
  echo "check_includes: $violations violation(s)" >&2
  exit 1
fi
echo "check_includes: ok"
