#!/usr/bin/env bash
# Times `pipeplan plan` and `pipeplan simulate` end to end through the command line on the
# synthetic GPT-like profiles of the planner benchmarks, and prints a markdown table.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/planner_scale.sh [--build DIR] [--runs N] [--sizes "L:D:B:H ..."] [--work DIR]
                              [--timeout S]

Writes the synthetic GPT-like profile (build/bench/synthetic_profile) of each size, then runs
  pipeplan plan --profile P --devices D --device-memory 80GiB --global-batch B
                --devices-per-node 8 --optimizer adamw -o plan.json
  pipeplan simulate --plan plan.json
N times each under /usr/bin/time -v and prints, per size and command, the median wall time,
CPU time (user + system) and peak RSS, and the chosen plan, as a markdown table headed by
the date, the commit and the machine. Profile generation is not timed. A first row times
`pipeplan plan --help`: what starting the program costs plan and simulate (pipeplan loads no
LibTorch; `pipeplan --help` starts pipeplan-torch, which does, and is timed on a second row).

  --build DIR    build folder holding bin/pipeplan (or cli/pipeplan) and bench/synthetic_profile
                 (default: build)
  --runs N       runs per command; the table shows the median (default: 3)
  --sizes LIST   space-separated LAYERS:DEVICES:GLOBAL_BATCH:HIDDEN
                 (default: "150:64:512:1024 1000:1024:4096:2048 10000:16384:65536:4096")
  --work DIR     where profiles and plans are written (default: a temporary folder, removed)
  --timeout S    a run taking longer than S seconds is stopped and reported (default: 600)
  --help         this text
EOF
}

build=build
runs=3
sizes="150:64:512:1024 1000:1024:4096:2048 10000:16384:65536:4096"
work=""
timeout_s=600
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "planner_scale.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

pipeplan=""
for candidate in "$build/bin/pipeplan" "$build/cli/pipeplan" "$build/pipeplan"; do
  [[ -x $candidate ]] && pipeplan=$candidate && break
done
generator=$build/bench/synthetic_profile
[[ -n $pipeplan ]] || { echo "planner_scale.sh: no pipeplan under '$build' (build it first)" >&2; exit 2; }
[[ -x $generator ]] || { echo "planner_scale.sh: no $generator (build target synthetic_profile)" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "planner_scale.sh: /usr/bin/time is needed (apt-get install time)" >&2; exit 2; }
if [[ -z $work ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"

# Runs "$@" under /usr/bin/time -v; prints "wall_s cpu_s rss_kib" (wall "timeout" when stopped).
timed() {
  local log=$work/time.log
  if ! /usr/bin/time -v -o "$log" timeout "$timeout_s" "$@" >"$work/stdout.log" 2>&1; then
    if grep -q "Exit status: 124" "$log"; then echo "timeout - -"; return; fi
    echo "planner_scale.sh: failed: $*" >&2
    cat "$work/stdout.log" >&2
    exit 1
  fi
  python3 - "$log" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
def field(name):
    return re.search(re.escape(name) + r": (.*)", text).group(1).strip()
parts = [float(p) for p in field("Elapsed (wall clock) time (h:mm:ss or m:ss)").split(":")]
wall = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
cpu = float(field("User time (seconds)")) + float(field("System time (seconds)"))
print(f"{wall:.3f} {cpu:.3f} {field('Maximum resident set size (kbytes)')}")
EOF
}

# Median of the runs' "wall cpu rss" lines: "wall cpu rss_mib" (or the timeout note).
median() {
  python3 -c '
import statistics, sys
rows = [line.split() for line in sys.stdin if line.strip()]
if any(r[0] == "timeout" for r in rows):
    print("timeout", "-", "-"); sys.exit()
cols = list(zip(*[[float(x) for x in r] for r in rows]))
print(f"{statistics.median(cols[0]):.2f} {statistics.median(cols[1]):.2f} "
      f"{statistics.median(cols[2]) / 1024:.0f}")'
}

# "dp=.. pp=.. b=.. m=.. schedule, checkpoint k/stages, N ms (draws)" of a plan file
# (interleaved-1f1b: "interleaved-1f1b V=2", checkpointed chunks out of pp·V; how the iteration
# was predicted: predictions.iteration_estimate, absent: draws where a stage's times vary).
chosen() {
  python3 - "$1" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
p = plan["predictions"]
checkpointed = sum(1 for stage in plan["stages"] if stage.get("checkpoint"))
v = plan.get("virtual_stages", 1)
varies = any(s.get("fwd_cv", 0) > 0 or s.get("bwd_cv", 0) > 0 for s in p["stages"])
estimate = p.get("iteration_estimate", "draws" if varies else "mean-times")
print("dp={} pp={} b={} m={} {}{}, checkpoint {}/{}, {:.3f} ms ({})".format(
    plan["dp"], plan["pp"], plan["micro_batch_size"], plan["num_micro_batches"],
    plan["schedule"], f" V={v}" if v > 1 else "", checkpointed, len(plan["stages"]),
    p["iteration_ms"], estimate))
EOF
}

commit=$(git -C "$(dirname "$0")" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$(dirname "$0")" diff --quiet HEAD 2>/dev/null || commit="$commit (with uncommitted changes)"
echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $commit"
echo "machine: $(nproc) CPUs, $(uname -sr), $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
echo "runs: median of $runs; 80GiB devices, 8 per node, adamw, amp-bf16 profile; load average" \
  "at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| layers × devices | global batch | command | wall s | CPU s | peak RSS MiB | chosen plan |"
echo "|---|---|---|---:|---:|---:|---|"
start_times=""
for ((run = 0; run < runs; ++run)); do start_times+=$(timed "$pipeplan" plan --help)$'\n'; done
read -r wall cpu rss <<<"$(median <<<"$start_times")"
echo "| - | - | plan --help (start-up) | $wall | $cpu | $rss | - |"
torch_times=""
for ((run = 0; run < runs; ++run)); do torch_times+=$(timed "$pipeplan" --help)$'\n'; done
read -r wall cpu rss <<<"$(median <<<"$torch_times")"
echo "| - | - | --help (start-up of pipeplan-torch, for comparison) | $wall | $cpu | $rss | - |"
for size in $sizes; do
  IFS=: read -r layers devices batch hidden <<<"$size"
  profile=$work/synthetic_${layers}.json
  plan=$work/plan_${layers}_${devices}.json
  [[ -f $profile ]] || "$generator" --layers "$layers" --hidden "$hidden" -o "$profile" >/dev/null
  plan_times=""
  for ((run = 0; run < runs; ++run)); do
    plan_times+=$(timed "$pipeplan" plan --profile "$profile" --devices "$devices" \
      --device-memory 80GiB --global-batch "$batch" --devices-per-node 8 --optimizer adamw \
      -o "$plan")$'\n'
  done
  read -r wall cpu rss <<<"$(median <<<"$plan_times")"
  if [[ $wall == timeout ]]; then
    echo "| $layers × $devices | $batch | plan | > $timeout_s | - | - | (stopped) |"
    continue
  fi
  plan_text=$(chosen "$plan")
  echo "| $layers × $devices | $batch | plan | $wall | $cpu | $rss | $plan_text |"
  sim_times=""
  for ((run = 0; run < runs; ++run)); do
    sim_times+=$(timed "$pipeplan" simulate --plan "$plan")$'\n'
  done
  read -r wall cpu rss <<<"$(median <<<"$sim_times")"
  echo "| $layers × $devices | $batch | simulate | $wall | $cpu | $rss | same plan |"
done
