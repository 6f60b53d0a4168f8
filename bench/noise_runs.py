#!/usr/bin/env python3
"""How much of a prediction error is the machine: the measurements behind bench/RESULTS.md's
"Session 5". Every run is printed with the share of the machine's CPU that the hypervisor took
meanwhile (steal, /proc/stat).

    python3 bench/noise_runs.py repeat PLAN N         # the same plan trained N times in a row
    python3 bench/noise_runs.py alternate PLAN_A PLAN_B N
                                                      # A, B, A, B, ... (1 rank per dp*pp)
    python3 bench/noise_runs.py split RUN.json        # the schedule part, taken apart

`split` re-simulates a 2-stage run's last 20 measured steps (run.json step_times) in a small
model of the executor's GPipe / 1F1B order with free transfers: with the steps' mean action
times, with those means and independent log-normal jitter of each action's measured spread
(400 draws, median), and with each step's own action times (compare's replay). What the last
leaves to the measured iteration is CPU time outside the actions (posting messages, loading
data, the interpreter), which the simulator does not charge.
"""
import json
import math
import os
import random
import statistics
import subprocess
import sys

BUILD = os.environ.get("PIPEPLAN_BUILD", "build")
PIPEPLAN = os.path.abspath(os.path.join(BUILD, "cli", "pipeplan"))


def cpu_ticks():
    """(steal, all) jiffies of every CPU since boot."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return fields[7], sum(fields[:8])


def train(plan_path, out_path):
    """Trains plan_path for 40 synthetic steps; returns (run.json's measured, steal share)."""
    with open(plan_path) as f:
        plan = json.load(f)
    nproc = plan["dp"] * plan["pp"]
    cmd = [PIPEPLAN, "train", "--plan", plan_path, "--data", "synthetic", "--steps", "40",
           "-o", out_path]
    env = dict(os.environ)
    if nproc > 1:
        cmd = [PIPEPLAN, "launch", "--nproc", str(nproc), "--"] + cmd
    else:
        env["OMP_NUM_THREADS"] = "1"  # as each of the 2 ranks of a 2-rank run
    steal0, all0 = cpu_ticks()
    subprocess.run(cmd, capture_output=True, check=True, env=env)
    steal1, all1 = cpu_ticks()
    with open(out_path) as f:
        measured = json.load(f)["measured"]
    return measured, (steal1 - steal0) / max(1, all1 - all0)


def describe(measured, steal):
    stages = " ".join(f"s{i} fwd {s['fwd_ms']:.2f} bwd {s['bwd_ms']:.2f}"
                      for i, s in enumerate(measured["stages"]))
    fwd_bwd = sum(s["fwd_ms"] + s["bwd_ms"] for s in measured["stages"])
    return (f"iteration {measured['iteration_ms']:.1f} ms | per micro-batch {stages} | "
            f"sum fwd+bwd {fwd_bwd:.2f} | steal {steal * 100:.1f}%")


def repeat(plan_path, count):
    for idx in range(count):
        print(idx, describe(*train(plan_path, f"/tmp/noise_runs_{idx}.json")), flush=True)


def alternate(plan_a, plan_b, count):
    for idx in range(count):
        for name, plan_path in (("A", plan_a), ("B", plan_b)):
            print(idx, name, describe(*train(plan_path, f"/tmp/noise_runs_{name}.json")),
                  flush=True)


def orders(schedule, m):
    """Each rank's (kind, micro-batch) order in a 2-stage pipeline."""
    if schedule == "gpipe":
        one = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
        return one, list(one)
    first = [("F", 0), ("F", 1)]
    for i in range(2, m):
        first += [("B", i - 2), ("F", i)]
    first += [("B", m - 2), ("B", m - 1)]
    last = [action for i in range(m) for action in (("F", i), ("B", i))]
    return first, last


def simulate(schedule, times, optimizer):
    """times[rank][kind] = per-micro-batch ms; free transfers; returns the iteration ms."""
    m = len(times[0]["F"])
    lists = orders(schedule, m)
    done, clock, position = {}, [0.0, 0.0], [0, 0]
    while position[0] < len(lists[0]) or position[1] < len(lists[1]):
        moved = False
        for rank in (0, 1):
            while position[rank] < len(lists[rank]):
                kind, mb = lists[rank][position[rank]]
                needs = (0, "F", mb) if rank == 1 and kind == "F" else \
                        (1, "B", mb) if rank == 0 and kind == "B" else None
                if needs and needs not in done:
                    break
                start = max(clock[rank], done[needs] if needs else 0.0)
                clock[rank] = start + times[rank][kind][mb]
                done[(rank, kind, mb)] = clock[rank]
                position[rank] += 1
                moved = True
        assert moved, "deadlock"
    return max(clock[0] + optimizer[0], clock[1] + optimizer[1])


def split(run_path):
    with open(run_path) as f:
        run = json.load(f)
    with open(run["plan"]["path"]) as f:  # the plan the run came from
        schedule = json.load(f)["schedule"]
    steps = run["measured"]["step_times"]
    if len(steps[0]["ranks"]) != 2:
        sys.exit(f"{run_path}: split takes 2-rank runs")

    def actions(step, rank):
        r = step["ranks"][rank]
        return {"F": r["fwd_ms"], "B": r["bwd_ms"]}

    m = len(steps[0]["ranks"][0]["fwd_ms"])
    pooled = {(rank, kind): [x for s in steps for x in actions(s, rank)[kind]]
              for rank in (0, 1) for kind in ("F", "B")}
    mean = {key: statistics.mean(values) for key, values in pooled.items()}
    spread = {key: statistics.pstdev(values) / mean[key] for key, values in pooled.items()}
    optimizer = [statistics.mean(s["ranks"][rank]["optimizer_ms"] for s in steps)
                 for rank in (0, 1)]
    measured = statistics.median(s["iteration_ms"] for s in steps)
    at_means = simulate(schedule, [{k: [mean[(r, k)]] * m for k in "FB"} for r in (0, 1)],
                        optimizer)
    rng = random.Random(1)

    def draw(key):
        sigma = math.sqrt(math.log(1 + spread[key] ** 2))
        mu = math.log(mean[key]) - sigma ** 2 / 2
        return [rng.lognormvariate(mu, sigma) for _ in range(m)]

    jittered = statistics.median(
        simulate(schedule, [{k: draw((r, k)) for k in "FB"} for r in (0, 1)], optimizer)
        for _ in range(400))
    replayed = statistics.median(
        simulate(schedule, [actions(s, r) for r in (0, 1)],
                 [s["ranks"][r]["optimizer_ms"] for r in (0, 1)]) for s in steps)

    def pct(value):
        return f"{value:.1f} ms ({(value - measured) / measured * 100:+.1f}%)"

    print(f"{run_path} ({schedule}, last {len(steps)} steps): measured median {measured:.1f} ms"
          f" | step means {pct(at_means)} | with jitter {pct(jittered)} | each step's own "
          f"{pct(replayed)} | spread (CV) of actions " +
          " ".join(f"r{r}{k} {spread[(r, k)]:.2f}" for r in (0, 1) for k in "FB"))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    command = sys.argv[1]
    if command == "repeat" and len(sys.argv) == 4:
        repeat(sys.argv[2], int(sys.argv[3]))
    elif command == "alternate" and len(sys.argv) == 5:
        alternate(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif command == "split" and len(sys.argv) == 3:
        split(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
