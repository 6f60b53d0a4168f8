#!/usr/bin/env python3
"""Compares two outputs of bench/plan_predictions (a build before and after a change).

Each plan is matched by scenario and rank; it must keep its configuration (dp, pp, b, m,
schedule, split) and its predicted iteration within --tolerance (relative), and in the second
file each best plan re-simulated as `pipeplan simulate` does must give its own prediction.
Prints a summary (how many plans are bit-identical, how many moved, the largest move) and
every plan that moved with --verbose; exits 1 when a plan changed configuration, moved beyond
the tolerance or is missing, or a re-simulation disagrees.

With --skip-one-stage-gpipe, plans of one stage under GPipe in the first file are left out
and plans are matched by scenario and configuration instead of rank: since issue 18 the search
lists one-stage GPipe no more (it is one-stage 1F1B, worse), so the plans below it move up.
"""
import argparse
import sys


def load(path, by_config=False, skip_one_stage_gpipe=False):
    plans = {}
    with open(path) as lines:
        for line in lines:
            fields = line.split()
            if len(fields) < 11:
                continue  # "scenario none": no feasible plan
            scenario, rank, dp, pp, b, m, schedule, split, iteration, bubble, simulated = fields
            if skip_one_stage_gpipe and pp == "1" and schedule == "gpipe":
                continue
            key = (scenario, (dp, pp, b, m, schedule, split)) if by_config else (scenario, int(rank))
            plans[key] = {
                "config": (dp, pp, b, m, schedule, split),
                "iteration": iteration,
                "bubble": bubble,
                "simulated": simulated,
            }
    return plans


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--tolerance", type=float, default=0.005, help="relative (default 0.005)")
    parser.add_argument("--verbose", action="store_true", help="list every plan that moved")
    parser.add_argument("--skip-one-stage-gpipe", action="store_true",
                        help="leave out the first file's pp=1 GPipe plans; match by configuration")
    args = parser.parse_args()
    by_config = args.skip_one_stage_gpipe
    before = load(args.before, by_config, args.skip_one_stage_gpipe)
    after = load(args.after, by_config)
    failures, identical, worst, worst_key = [], 0, 0.0, None
    for key, old in sorted(before.items()):
        new = after.get(key)
        if new is None:
            failures.append(f"{key}: missing after")
            continue
        if new["config"] != old["config"]:
            failures.append(f"{key}: configuration {old['config'][:5]} became {new['config'][:5]}")
            continue
        move = float(new["iteration"]) / float(old["iteration"]) - 1
        if new["iteration"] == old["iteration"]:
            identical += 1
        elif args.verbose:
            print(f"{key[0]} #{key[1]} dp={old['config'][0]} pp={old['config'][1]} "
                  f"m={old['config'][3]} {old['config'][4]}: {old['iteration']} -> "
                  f"{new['iteration']} ms ({move * 100:+.4f} %)")
        if abs(move) > abs(worst):
            worst, worst_key = move, key
        if abs(move) > args.tolerance:
            failures.append(f"{key}: iteration moved {move * 100:+.4f} %")
    for key, new in sorted(after.items()):
        if new["simulated"] != "-" and new["simulated"] != new["iteration"]:
            failures.append(f"{key}: re-simulated {new['simulated']} ms, predicted "
                            f"{new['iteration']} ms")
    print(f"{len(before)} plans: {identical} bit-identical, {len(before) - identical} moved; "
          f"largest move {worst * 100:+.4f} %" + (f" ({worst_key[0]} #{worst_key[1]})"
                                                   if worst_key else ""))
    for failure in failures:
        print("FAIL " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
