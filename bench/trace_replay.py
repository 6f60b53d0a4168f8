#!/usr/bin/env python3
"""Replays a 2-rank `pipeplan train --trace` file offline, to see what the simulator leaves out.

Each rank's recorded actions are played in their recorded order with their recorded durations;
a receive waits until the matching send of the peer has been posted (zero link latency). Three
variants: compute only (what compare's replay charges), compute plus the CPU time of loading
data and posting sends, and that plus the gaps between a rank's consecutive actions. Only
consecutive traced steps are used: the last ones with no pause between them (the trace may
also hold an earlier representative step, and an end-of-epoch evaluation pauses training).

    python3 bench/trace_replay.py trace.json
"""
import json
import sys
from collections import defaultdict

COMPUTE = {"forward", "backward", "recompute", "optimizer", "allreduce"}
OVERHEAD = {"load", "send"}


def steps_of(events):
    """Splits one rank's events (time order) into steps, each ending with its optimizer step
    and the final send wait after it."""
    steps, current, stepped = [], [], False
    for event in events:
        if stepped and event["cat"] != "send-wait":
            steps.append(current)
            current, stepped = [], False
        current.append(event)
        stepped = stepped or event["cat"] == "optimizer"
    if current:
        steps.append(current)
    return steps


def consecutive_tail(steps):
    """The last run of steps with no pause between them longer than the shortest step (an
    untraced step, or a test-set evaluation)."""
    shortest = min(s[-1]["ts"] + s[-1]["dur"] - s[0]["ts"] for s in steps)
    tail = [steps[-1]]
    for step in reversed(steps[:-1]):
        if tail[0][0]["ts"] - (step[-1]["ts"] + step[-1]["dur"]) > shortest:
            break
        tail.insert(0, step)
    return tail


def replay(ranks, charge, with_gaps):
    """Plays both ranks; returns each rank's finishing time in ms."""
    arrival = {}
    clock = {rank: 0.0 for rank in ranks}
    position = {rank: 0 for rank in ranks}
    previous_end = {rank: ranks[rank][0][1]["ts"] for rank in ranks}
    progressed = True
    while progressed:
        progressed = False
        for rank, flat in ranks.items():
            while position[rank] < len(flat):
                step, event = flat[position[rank]]
                gap = max(0.0, event["ts"] - previous_end[rank]) / 1000 if with_gaps else 0.0
                micro_batch = event["args"]["micro_batch"]
                if event["cat"] == "recv-wait":
                    key = (1 - rank, step, micro_batch)
                    if key not in arrival:
                        break
                    clock[rank] = max(clock[rank] + gap, arrival[key])
                else:
                    clock[rank] += gap
                    if event["cat"] in charge:
                        clock[rank] += event["dur"] / 1000
                    if event["cat"] == "send":
                        arrival[(rank, step, micro_batch)] = clock[rank]
                previous_end[rank] = event["ts"] + event["dur"]
                position[rank] += 1
                progressed = True
    return clock


def main():
    trace = json.load(open(sys.argv[1]))
    by_rank = defaultdict(list)
    for event in trace["traceEvents"]:
        if event["ph"] == "X":
            by_rank[event["pid"]].append(event)
    if sorted(by_rank) != [0, 1]:
        sys.exit("trace_replay.py: expected the trace of a 2-rank run")
    tails = {rank: consecutive_tail(steps_of(sorted(evs, key=lambda e: e["ts"])))
             for rank, evs in by_rank.items()}
    count = min(len(t) for t in tails.values())
    ranks = {rank: [(i, e) for i, step in enumerate(t[-count:]) for e in step]
             for rank, t in tails.items()}
    measured = max((t[-1][-1]["ts"] + t[-1][-1]["dur"]) for t in tails.values()) - \
        min(t[-count][0]["ts"] for t in tails.values())
    measured /= 1000
    print(f"{count} consecutive steps, measured span {measured:.1f} ms")
    for name, charge, gaps in [("compute only", COMPUTE, False),
                               ("compute + load + send posting", COMPUTE | OVERHEAD, False),
                               ("... + gaps between actions", COMPUTE | OVERHEAD, True)]:
        span = max(replay(ranks, charge, gaps).values())
        print(f"  replayed, {name}: {span:.1f} ms ({(span - measured) / measured * 100:+.1f}%)")


if __name__ == "__main__":
    main()
