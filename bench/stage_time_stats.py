#!/usr/bin/env python3
"""Which per-stage time lets a deterministic simulation match a run: the median or the mean of
each step's per-micro-batch mean? Uses the run's step_times (its last measured steps), puts each
statistic into a copy of the plan's stage predictions, runs `pipeplan simulate` on it and
compares with the median measured iteration of the same steps. pp=2 plans only.

    python3 bench/stage_time_stats.py plan.json run.json [--pipeplan build/cli/pipeplan]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile


def simulate(pipeplan, plan, stage_times):
    plan = json.loads(json.dumps(plan))
    for stage, (fwd, bwd, optimizer) in zip(plan["predictions"]["stages"], stage_times):
        stage["fwd_ms"], stage["bwd_ms"], stage["optimizer_ms"] = fwd, bwd, optimizer
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(plan, f)
    try:
        out = subprocess.run([pipeplan, "simulate", "--plan", f.name], capture_output=True,
                             text=True, check=True).stdout
    finally:
        os.unlink(f.name)
    return float(out.split("iteration ")[1].split(" ms")[0])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("plan")
    parser.add_argument("run")
    parser.add_argument("--pipeplan", default="build/cli/pipeplan")
    args = parser.parse_args()
    plan = json.load(open(args.plan))
    steps = json.load(open(args.run))["measured"]["step_times"]
    if plan["pp"] != 2 or plan["dp"] != 1:
        raise SystemExit("stage_time_stats.py: expected a dp=1 pp=2 plan")
    measured = statistics.median(s["iteration_ms"] for s in steps)
    for name, statistic in (("median", statistics.median), ("mean", statistics.mean)):
        times = []
        for rank in (0, 1):
            fwd = statistic(statistics.mean(s["ranks"][rank]["fwd_ms"]) for s in steps)
            bwd = statistic(statistics.mean(s["ranks"][rank]["bwd_ms"]) for s in steps)
            optimizer = statistic(s["ranks"][rank]["optimizer_ms"] for s in steps)
            times.append((fwd, bwd, optimizer))
        simulated = simulate(args.pipeplan, plan, times)
        print(f"{name} of the step means over {len(steps)} steps: simulated {simulated:.1f} ms, "
              f"measured median {measured:.1f} ms ({(simulated - measured) / measured * 100:+.1f}%)")


if __name__ == "__main__":
    main()
