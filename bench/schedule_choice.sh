#!/usr/bin/env bash
# Which schedule the planner picks on a synthetic GPT-like profile, over a grid of global
# batches and device memories, and the predicted throughput gain of its pick over the best
# 1f1b plan of the same search (issue 21). Prints a markdown table; an interleaved-1f1b pick
# shows its virtual stages, "interleaved-1f1b(V=2)".
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/schedule_choice.sh [--build DIR] [--layers L] [--devices D] [--hidden H]
                                [--batches "B ..."] [--memories "SIZE ..."] [--work DIR]

Writes the synthetic GPT-like profile (build/bench/synthetic_profile: B/W split included) of
L layers (default 1000) and width H (default 2048), then for every global batch B and device
memory SIZE runs
  pipeplan plan --profile P --devices D --device-memory SIZE --global-batch B
                --devices-per-node 8 --optimizer adamw            (every schedule)
  pipeplan plan ... --schedule 1f1b                               (1f1b alone)
and prints per cell the chosen plan, its predicted samples/s, the best 1f1b plan's, the gain
(pick / 1f1b - 1) and the wall time of the first search. Defaults: D = 1024, batches
"1024 2048 4096 8192 16384", memories "24GiB 40GiB 80GiB". A cell without any feasible plan
says so.
EOF
}

build=build
layers=1000
devices=1024
hidden=2048
batches="1024 2048 4096 8192 16384"
memories="24GiB 40GiB 80GiB"
work=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --devices) devices=$2; shift 2 ;;
    --hidden) hidden=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --memories) memories=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --help|-h) usage; exit 0 ;;
    *) echo "schedule_choice.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

pipeplan=$build/cli/pipeplan
generator=$build/bench/synthetic_profile
[[ -x $pipeplan ]] || { echo "schedule_choice.sh: no $pipeplan (build target pipeplan)" >&2; exit 2; }
[[ -x $generator ]] || { echo "schedule_choice.sh: no $generator (build target synthetic_profile)" >&2; exit 2; }
if [[ -z $work ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"

profile=$work/profile.json
"$generator" --layers "$layers" --hidden "$hidden" -o "$profile" >/dev/null

# "schedule samples_per_s dp pp b m" of a plan file.
describe() {
  python3 - "$1" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
v = p.get("virtual_stages", 1)
print(p["schedule"] + (f"(V={v})" if v > 1 else ""), f'{p["predictions"]["samples_per_s"]:.1f}',
      p["dp"], p["pp"], p["micro_batch_size"], p["num_micro_batches"])
PY
}

echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "machine: $(nproc) CPUs; profile: synthetic GPT-like, $layers layers, width $hidden; $devices devices, 8 per node, adamw"
echo
echo "| global batch | device memory | pick | pick samples/s | best 1f1b | 1f1b samples/s | gain | search s |"
echo "|---:|---:|---|---:|---|---:|---:|---:|"
declare -A picks=()
for batch in $batches; do
  for memory in $memories; do
    common=(--profile "$profile" --devices "$devices" --device-memory "$memory"
            --global-batch "$batch" --devices-per-node 8 --optimizer adamw)
    start=$(date +%s.%N)
    if ! "$pipeplan" plan "${common[@]}" -o "$work/pick.json" >/dev/null 2>&1; then
      echo "| $batch | $memory | no feasible plan | | | | | |"
      continue
    fi
    seconds=$(python3 -c "print(f'{$(date +%s.%N) - $start:.2f}')")
    read -r schedule pick_sps dp pp b m < <(describe "$work/pick.json")
    picks[$schedule]=$(( ${picks[$schedule]:-0} + 1 ))
    if "$pipeplan" plan "${common[@]}" --schedule 1f1b -o "$work/base.json" >/dev/null 2>&1; then
      read -r _ base_sps bdp bpp bb bm < <(describe "$work/base.json")
      gain=$(python3 -c "print(f'{($pick_sps / $base_sps - 1) * 100:+.1f}%')")
      base="dp=$bdp pp=$bpp b=$bb m=$bm"
    else
      base_sps="-"; gain="-"; base="none feasible"
    fi
    echo "| $batch | $memory | $schedule dp=$dp pp=$pp b=$b m=$m | $pick_sps | $base | $base_sps | $gain | $seconds |"
  done
done
echo
summary=""
for schedule in "${!picks[@]}"; do summary+="$schedule ${picks[$schedule]}, "; done
echo "picks: ${summary%, }"
