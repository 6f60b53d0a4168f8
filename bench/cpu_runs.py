#!/usr/bin/env python3
"""The CPU measurements behind bench/RESULTS.md: profiler speed, co-location, the link,
scheduling efficiency, 1f1b against zb-h1, pp=1 against a plain LibTorch loop, plan quality,
prediction accuracy, data parallelism and inference.

Run on a quiet machine (nothing else compiling):
    python3 bench/cpu_runs.py [--build build] [--out out/bench] [--only NAME,...]
Prints one markdown section per measurement; every file it used stays in --out."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ARGS = None


def run(cmd, **kwargs):
    """Runs cmd (a list), returns (seconds, stdout); stops the script on failure."""
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stdout}\n{done.stderr}")
    return seconds, done.stdout


def pipeplan(*args):
    return run([ARGS.pipeplan, *map(str, args)])


def out(name):
    return os.path.join(ARGS.out, name)


def cpu_ticks():
    """(steal, all) jiffies of every CPU since boot, from /proc/stat (Linux)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return fields[7], sum(fields[:8])


STEAL = {}  # output path -> share of the machine's CPU time the hypervisor took meanwhile


def profile(model, name, batch_sizes, co_located=1, extra=()):
    path = out(name)
    args = ["profile", "--model", model, "--batch-sizes", batch_sizes, "-o", path, *extra]
    if co_located > 1:
        args += ["--co-located", co_located]
    steal_before, all_before = cpu_ticks()
    seconds, _ = pipeplan(*args)
    steal_after, all_after = cpu_ticks()
    STEAL[path] = (steal_after - steal_before) / max(1, all_after - all_before)
    return path, seconds


def plan(profile_path, name, devices, memory, global_batch, *flags):
    path = out(name)
    _, text = pipeplan("plan", "--profile", profile_path, "--devices", devices, "--device-memory",
                       memory, "--global-batch", global_batch, *flags, "-o", path)
    return path, text


def run_ranks(name, nproc, cmd):
    """`pipeplan CMD... -o OUT/NAME` over `nproc` ranks (launched when more than one); the
    host's steal over the run is kept in STEAL."""
    run_path = out(name)
    steal_before, all_before = cpu_ticks()
    cmd = [*cmd, "-o", run_path]
    if nproc > 1:
        seconds, _ = pipeplan("launch", "--nproc", nproc, "--", ARGS.pipeplan, *cmd)
    else:
        seconds, _ = pipeplan(*cmd)
    steal_after, all_after = cpu_ticks()
    STEAL[run_path] = (steal_after - steal_before) / max(1, all_after - all_before)
    return run_path, seconds


def train(plan_path, name, nproc, steps, data="synthetic"):
    return run_ranks(name, nproc, ["train", "--plan", plan_path, "--data", data, "--steps", steps])


def infer(plan_path, name, nproc, requests, data="synthetic"):
    return run_ranks(name, nproc,
                     ["infer", "--plan", plan_path, "--data", data, "--requests", requests])


def compare(plan_path, run_path):
    _, text = pipeplan("compare", "--plan", plan_path, "--run", run_path, "--json",
                       out("compare.tmp.json"))
    with open(out("compare.tmp.json")) as f:
        return json.load(f), text


def load(path):
    with open(path) as f:
        return json.load(f)


def section(title):
    print(f"\n### {title}\n", flush=True)


def profiler_speed():
    section("Profiler speed (4 batch sizes, with the link timing)")
    print("| model | batch sizes | wall s | link p2p latency | p2p bandwidth | all-reduce latency | all-reduce bandwidth |")
    print("|---|---|---|---|---|---|---|")
    for model in ["resnet_tiny", "gpt_tiny"]:
        path, seconds = profile(model, f"speed_{model}.json", "4,8,16,32")
        link = load(path)["interconnect"]
        p2p, ar = link["p2p"], link["allreduce"]
        print(f"| {model} | 4,8,16,32 | {seconds:.1f} | {p2p['latency_ms']*1e3:.0f} µs | "
              f"{p2p['bandwidth_bytes_per_s']/1e9:.2f} GB/s | {ar['latency_ms']*1e3:.0f} µs | "
              f"{ar['bandwidth_bytes_per_s']/1e9:.2f} GB/s |")
    link = load(out("speed_resnet_tiny.json"))["interconnect"]
    print("\nresnet_tiny profile, link points (median one-way ms):\n")
    print("| bytes | p2p ms | all-reduce ms |")
    print("|---|---|---|")
    for p, a in zip(link["p2p"]["points"], link["allreduce"]["points"]):
        print(f"| {p['bytes']} | {p['time_ms']:.3f} | {a['time_ms']:.3f} |")


def layer_sum(path, b):
    total = 0.0
    for layer in load(path)["layers"]:
        for point in layer["points"]:
            if point["batch_size"] == b:
                total += point["fwd_ms"] + point["bwd_ms"]
    return total


def co_location():
    section("Co-location: per-layer times measured alone and as one of 2 processes")
    print("| model | b | sum fwd+bwd alone ms | co-located ms | ratio |")
    print("|---|---|---|---|---|")
    for model in ["resnet_tiny", "gpt_tiny"]:
        alone, _ = profile(model, f"alone_{model}.json", "16,32", extra=["--no-comm"])
        shared, _ = profile(model, f"colo_{model}.json", "16,32", co_located=2,
                            extra=["--no-comm"])
        for b in (16, 32):
            a, s = layer_sum(alone, b), layer_sum(shared, b)
            print(f"| {model} | {b} | {a:.2f} | {s:.2f} | {s/a:.2f} |")


def scheduling():
    section("Scheduling efficiency: 2-stage 1f1b, m=8, a balanced MLP (8 x 1024x1024)")
    margs = ["--model-arg", "hidden=1024", "--model-arg", "layers=8"]
    prof, _ = profile("mlp_tiny", "sched_profile.json", "16,32", co_located=2, extra=margs)
    fixed = ["--pp", 2, "--dp", 1, "--micro-batch-size", 32, "--schedule", "1f1b",
             "--checkpoint", "none"]
    plan2, _ = plan(prof, "sched_plan_pp2.json", 2, "8GiB", 256, *fixed)
    plan1, _ = plan(prof, "sched_plan_pp1.json", 1, "8GiB", 256, "--pp", 1, "--dp", 1,
                    "--micro-batch-size", 32, "--schedule", "1f1b", "--checkpoint", "none")
    rows = []
    for repeat in range(ARGS.repeat):
        run2, _ = train(plan2, f"sched_run_pp2_{repeat}.json", 2, 40)
        c, table = compare(plan2, run2)
        if repeat == 0:
            print("```\n" + table.strip() + "\n```\n")
        r = load(run2)["measured"]
        split = c["iteration_split"]
        idle_points = []
        for rank in r["ranks"]:
            sim_idle = c["resimulated_idle_ms_by_rank"][rank["rank"]] / split["resimulated_ms"]
            idle_points.append((rank["idle_ms"] / r["iteration_ms"] - sim_idle) * 100)
        replay = c["step_replay"]
        replay_points = [(meas - sim) * 100 for sim, meas in
                         zip(replay["replayed_idle_fraction_by_rank"],
                             replay["measured_idle_fraction_by_rank"])]
        run1, _ = train(plan1, f"sched_run_pp1_{repeat}.json", 1, 40)
        one = load(run1)["measured"]["iteration_ms"]
        rows.append(f"| {repeat} | {STEAL[run2] * 100:.1f}% | {r['iteration_ms']:.2f} | "
                    f"{split['resimulated_ms']:.2f} | {split['schedule_error_percent']:+.1f}% | "
                    + " / ".join(f"{p:+.1f}" for p in idle_points) + " | "
                    f"{replay['error_percent']:+.1f}% | "
                    + " / ".join(f"{p:+.1f}" for p in replay_points) + " | "
                    f"{STEAL[run1] * 100:.1f}% | {one:.2f} | {one / r['iteration_ms']:.2f}x |")
    print("Each repeat: the 2-rank run, compare, then one rank running the whole model (same b=32,"
          " m=8). Steal: the share of the machine's CPU time the hypervisor took during that run"
          " (/proc/stat). Re-simulated: the plan with the run's mean stage times, against the"
          " median iteration; idle points: measured minus simulated, rank 0 / rank 1; replay:"
          " the last 20 steps, each with its own action times.\n")
    print("| repeat | steal | 2-rank iteration ms | re-simulated ms | error | idle points | "
          "replay | replay idle points | 1-rank steal | 1-rank iteration ms | raw speedup |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


def print_paired_ratios(plans, measured, base):
    """Prints each variant's measured iteration over the `base` variant's of the same repeat (the
    host's drift cancels), and their median beside the simulated ratio; returns the simulated
    iteration of each variant."""
    simulated = {name: load(path)["predictions"]["iteration_ms"] for name, path in plans.items()}
    for name in plans:
        if name == base:
            continue
        ratios = [x / b for x, b in zip(measured[name], measured[base])]
        print(f"\n{name} / {base} measured iteration, repeat by repeat: "
              + ", ".join(f"{x:.3f}" for x in ratios)
              + f"; median {statistics.median(ratios):.3f} (simulated "
              + f"{simulated[name] / simulated[base]:.3f})")
    return simulated


def schedules():
    """Issue 21: 1f1b against interleaved-1f1b (V=2) and zb-h1 on one balanced model, simulated
    and measured, runs of the three schedules alternating so that the host's drift falls on all."""
    section("Schedules: 1f1b, interleaved-1f1b (V=2) and zb-h1, pp=2, m=8, a balanced MLP "
            "(8 x 1024x1024)")
    margs = ["--model-arg", "hidden=1024", "--model-arg", "layers=8"]
    prof, _ = profile("mlp_tiny", "schedules_profile.json", "16,32", co_located=2, extra=margs)
    plans = {}
    for schedule in ("1f1b", "interleaved-1f1b", "zb-h1"):
        extra = ["--virtual-stages", 2] if schedule == "interleaved-1f1b" else []
        path, _ = plan(prof, f"schedules_plan_{schedule}.json", 2, "8GiB", 256, "--pp", 2,
                       "--dp", 1, "--micro-batch-size", 32, "--schedule", schedule,
                       "--checkpoint", "none", *extra)
        _, text = pipeplan("simulate", "--plan", path, "--svg", out(f"schedules_{schedule}.svg"))
        plans[schedule] = path
    rows = []
    measured = {name: [] for name in plans}
    for repeat in range(ARGS.repeat):
        for schedule, path in plans.items():
            run_path, _ = train(path, f"schedules_run_{schedule}_{repeat}.json", 2, 40)
            c, table = compare(path, run_path)
            if repeat == 0:
                print(f"{schedule}:\n```\n" + table.strip() + "\n```\n")
            p = load(path)["predictions"]
            r = load(run_path)["measured"]
            s = c["iteration_split"]
            measured[schedule].append(r["iteration_ms"])
            mem = [st["peak_memory_bytes"]["error_percent"] for st in c["stages"]]
            rows.append(f"| {repeat} | {schedule} | {p['iteration_ms']:.2f} | {p['bubble_fraction'] * 100:.1f}% | "
                        f"{r['iteration_ms']:.2f} | {r['bubble_fraction'] * 100:.1f}% | "
                        f"{s['error_percent']:+.1f}% | {s['compute_error_percent']:+.1f}% | "
                        f"{s['schedule_error_percent']:+.1f}% | {mem[0]:+.1f}% / {mem[1]:+.1f}% | "
                        f"{STEAL[run_path] * 100:.1f}% |")
    print("| repeat | schedule | predicted ms | predicted bubble | measured ms | measured bubble | "
          "error | compute part | schedule part | memory, stage 0 / 1 | steal |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    simulated = print_paired_ratios(plans, measured, "1f1b")
    simulated_order = sorted(plans, key=lambda name: simulated[name])
    for repeat in range(ARGS.repeat):
        order = sorted(plans, key=lambda name: measured[name][repeat])
        print(f"repeat {repeat}: measured order {' < '.join(order)}; simulated "
              f"{' < '.join(simulated_order)}; {'agree' if order == simulated_order else 'DIFFER'}")
    # Each schedule against the 1f1b run of its own repeat (the host's drift cancels), by median.
    paired = {name: statistics.median(x / base for x, base in zip(measured[name], measured["1f1b"]))
              for name in plans}
    order = sorted(plans, key=lambda name: paired[name])
    print(f"median of the repeat-by-repeat ratios to 1f1b: measured order {' < '.join(order)}; "
          f"{'agrees' if order == simulated_order else 'differs'} with the simulated one")


def plain_loop():
    section("One rank (pp=1, dp=1, m=1) against a plain LibTorch loop")
    print("| model | b | plain loop ms | pipeplan train ms | ratio |")
    print("|---|---|---|---|---|")
    for model, b in [("resnet_tiny", 64), ("gpt_tiny", 32)]:
        prof, _ = profile(model, f"plain_{model}.json", str(b), extra=["--no-comm"])
        p, _ = plan(prof, f"plain_plan_{model}.json", 1, "8GiB", b, "--pp", 1, "--dp", 1,
                    "--micro-batch-size", b, "--checkpoint", "none")
        loops, trains = [], []
        for _ in range(3):  # interleaved, so that drifts in machine speed hit both
            _, text = run([ARGS.plain_loop, model, str(b), "60", "5"])
            loops.append(float(text.split("iteration_ms=")[1].split()[0]))
            r, _ = train(p, f"plain_run_{model}.json", 1, 60)
            trains.append(load(r)["measured"]["iteration_ms"])
        lo, tr = statistics.median(loops), statistics.median(trains)
        print(f"| {model} | {b} | {lo:.2f} | {tr:.2f} | {tr/lo:.3f} |")


def plan_quality():
    section("Plan quality: the optimal partition against the baselines (pp=2, same dp, b, m, schedule)")
    print("| model | partition | stages | predicted ms | measured ms | measured samples/s | vs optimal |")
    print("|---|---|---|---|---|---|---|")
    for model in ["resnet_tiny", "vit_tiny"]:
        prof, _ = profile(model, f"quality_{model}.json", "8,16,32", co_located=2)
        results = {}
        for partition in ["optimal", "uniform", "parameters", "greedy-time"]:
            p, _ = plan(prof, f"quality_plan_{model}_{partition}.json", 2, "8GiB", 128, "--pp", 2,
                        "--dp", 1, "--micro-batch-size", 16, "--schedule", "1f1b",
                        "--checkpoint", "none", "--partition", partition)
            r, _ = train(p, f"quality_run_{model}_{partition}.json", 2, 40)
            pl, rn = load(p), load(r)["measured"]
            stages = ",".join(f"{s['first']}:{s['last']}" for s in pl["stages"])
            results[partition] = (stages, pl["predictions"]["iteration_ms"], rn["iteration_ms"],
                                  rn["samples_per_s"])
        best = results["optimal"][3]
        for partition, (stages, pred, meas, sps) in results.items():
            print(f"| {model} | {partition} | {stages} | {pred:.2f} | {meas:.2f} | {sps:.1f} | "
                  f"{sps/best:.3f} |")


def accuracy():
    section("Prediction accuracy: pp=2 on 2 CPU ranks, profiles taken with --co-located 2")
    print(f"Each plan trained {ARGS.repeat} time(s) in a row after its model's profile; every run "
          "is listed with the share of the machine's CPU the hypervisor took during it.\n")
    print("| model | schedule | run | iteration pred / meas ms | error | compute part | schedule part | replay | stage 0 memory error | stage 1 memory error | steal profile / run |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for model, b in [("resnet_tiny", 16), ("vit_tiny", 16), ("gpt_tiny", 16)]:
        if model not in ARGS.models.split(","):
            continue
        prof, _ = profile(model, f"acc_{model}.json", "8,16,32", co_located=2)
        for schedule in ["gpipe", "1f1b"]:
            p, _ = plan(prof, f"acc_plan_{model}_{schedule}.json", 2, "8GiB", 128, "--pp", 2,
                        "--dp", 1, "--micro-batch-size", b, "--schedule", schedule,
                        "--checkpoint", "none")
            for repeat in range(ARGS.repeat):
                suffix = f"_{repeat}" if ARGS.repeat > 1 else ""
                r, _ = train(p, f"acc_run_{model}_{schedule}{suffix}.json", 2, 40)
                c, table = compare(p, r)
                with open(out(f"acc_compare_{model}_{schedule}{suffix}.txt"), "w") as f:
                    f.write(table)
                s = c["iteration_split"]
                mem = [st["peak_memory_bytes"]["error_percent"] for st in c["stages"]]
                print(f"| {model} | {schedule} | {repeat} | {s['predicted_ms']:.2f} / "
                      f"{s['measured_ms']:.2f} | {s['error_percent']:+.1f}% | "
                      f"{s['compute_error_percent']:+.1f}% | {s['schedule_error_percent']:+.1f}% | "
                      f"{c['step_replay']['error_percent']:+.1f}% | {mem[0]:+.1f}% | {mem[1]:+.1f}% | "
                      f"{STEAL[prof] * 100:.1f}% / {STEAL[r] * 100:.1f}% |", flush=True)


def data_parallel():
    """Issue 22: dp=2, pp=1 on the 2 CPU ranks this machine runs, the gradient
    all-reduce after the last backward against overlapped buckets, and ZeRO-1; the variants'
    runs alternate so that the host's drift falls on all."""
    section("Data parallelism: dp=2 pp=1, an MLP of 8 x 1024x1024 (33.6 MB of gradients), "
            "4 MiB buckets; overlap off / on, ZeRO-1")
    margs = ["--model-arg", "hidden=1024", "--model-arg", "layers=8"]
    prof, _ = profile("mlp_tiny", "dp_profile.json", "16,32", co_located=2, extra=margs)
    link = load(prof)["interconnect"]
    for key in ("p2p", "allreduce", "reduce_scatter", "all_gather"):
        if key in link:
            print(f"- {key}: latency {link[key]['latency_ms']:.3f} ms, "
                  f"{link[key]['bandwidth_bytes_per_s'] / 1e9:.2f} GB/s")
    print()
    variants = {"no-overlap": ["--no-overlap", "--zero", 0], "overlap": ["--zero", 0],
                "zero-1": ["--zero", 1]}
    plans = {}
    for name, flags in variants.items():
        path, _ = plan(prof, f"dp_plan_{name}.json", 2, "8GiB", 128, "--pp", 1, "--dp", 2,
                       "--micro-batch-size", 16, "--schedule", "1f1b", "--checkpoint", "none",
                       "--bucket-size", "4MiB", *flags)
        plans[name] = path
    rows = []
    measured = {name: [] for name in plans}
    for repeat in range(ARGS.repeat):
        for name, path in plans.items():
            run_path, _ = train(path, f"dp_run_{name}_{repeat}.json", 2, 40)
            c, table = compare(path, run_path)
            if repeat == 0:
                print(f"{name}:\n```\n" + table.strip() + "\n```\n")
            p = load(path)["predictions"]
            r = load(run_path)["measured"]
            st = c["stages"][0]
            measured[name].append(r["iteration_ms"])
            rows.append(f"| {repeat} | {name} | {p['iteration_ms']:.2f} | {r['iteration_ms']:.2f} | "
                        f"{c['iteration_split']['error_percent']:+.1f}% | "
                        f"{st['allreduce_ms']['predicted']:.2f} / {st['allreduce_ms']['measured']:.2f} | "
                        f"{st['allgather_ms']['predicted']:.2f} / {st['allgather_ms']['measured']:.2f} | "
                        f"{st['optimizer_ms']['predicted']:.2f} / {st['optimizer_ms']['measured']:.2f} | "
                        f"{st['memory_terms']['optimizer_state_bytes'] / 2**20:.1f} MiB | "
                        f"{st['peak_memory_bytes']['error_percent']:+.1f}% | "
                        f"{STEAL[run_path] * 100:.1f}% |")
    print("| repeat | variant | predicted ms | measured ms | error | all-reduce waited pred / meas ms "
          "| all-gather pred / meas ms | optimizer pred / meas ms | opt_state (pred) | "
          "memory error | steal |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print_paired_ratios(plans, measured, "no-overlap")


def mib(num_bytes):
    return f"{num_bytes / 2**20:.3f} MiB"


def inference():
    """Issue 23: one model and split served forward-only, against its training plan's memory, and
    pp=2 against pp=1 serving; the inference runs alternate so that the host's drift falls on
    both."""
    section("Inference: resnet_tiny, split 0:3,3:6, b=4, requests of 64 samples; training against "
            "inference memory per stage, pp=2 against pp=1 serving (pp=2 planned from a profile "
            "taken --co-located 2, pp=1 from one taken alone)")
    prof, _ = profile("resnet_tiny", "inference_profile.json", "2,4,8,16,32", co_located=2)
    # pp=1 serves from one process alone, with LibTorch's default intra-op threads: its profile is
    # taken the same way (the co-located one times each layer on one thread beside another).
    prof_alone, _ = profile("resnet_tiny", "inference_profile_alone.json", "2,4,8,16,32",
                            extra=["--no-comm"])
    fixed = ["--micro-batch-size", 4, "--checkpoint", "none"]
    train_plan, _ = plan(prof, "inference_train_plan.json", 2, "1GiB", 64, "--pp", 2, "--dp", 1,
                         "--schedule", "1f1b", "--partition", "0:3,3:6", *fixed)
    plans = {}
    plans["pp=2"], _ = plan(prof, "inference_plan_pp2.json", 2, "1GiB", 64, "--inference",
                            "--pp", 2, "--dp", 1, "--partition", "0:3,3:6", *fixed[:2])
    plans["pp=1"], _ = plan(prof_alone, "inference_plan_pp1.json", 1, "1GiB", 64, "--inference",
                            "--pp", 1, "--dp", 1, *fixed[:2])
    # Training's memory is deterministic: one run of 30 steps.
    train_run, _ = train(train_plan, "inference_train_run.json", 2, 30)
    memory = {"training pp=2": [compare(train_plan, train_run)[0]]}
    runs = {name: [] for name in plans}
    interval = {name: [] for name in plans}
    rows = []
    for repeat in range(ARGS.repeat):
        for name, path in plans.items():
            nproc = load(path)["pp"]
            run_path, _ = infer(path, f"inference_run_{name[3:]}_{repeat}.json", nproc, 40)
            c, table = compare(path, run_path)
            if repeat == 0:
                print(f"inference {name}:\n```\n" + table.strip() + "\n```\n")
            runs[name].append(c)
            interval[name].append(c["iteration_ms"]["measured"])
            fwd = " / ".join(f"{st['fwd_ms']['predicted']:.3f} / {st['fwd_ms']['measured']:.3f}"
                             for st in c["stages"])
            rows.append(f"| {repeat} | {name} | {c['samples_per_s']['predicted']:.0f} / "
                        f"{c['samples_per_s']['measured']:.0f} | "
                        f"{c['latency_p50_ms']['predicted']:.2f} / "
                        f"{c['latency_p50_ms']['measured']:.2f} / "
                        f"{c['latency_p99_ms']['measured']:.2f} | {fwd} | "
                        f"{STEAL[run_path] * 100:.1f}% | {os.getloadavg()[0]:.2f} |")
    for name in plans:
        memory[f"inference {name}"] = runs[name]
    print("Peak memory per stage (allocator bytes; predicted, measured, median over the runs):\n")
    print("| plan | stage | predicted | measured | error |")
    print("|---|---|---|---|---|")
    for name, comparisons in memory.items():
        for stage in range(len(comparisons[0]["stages"])):
            points = [c["stages"][stage]["peak_memory_bytes"] for c in comparisons]
            measured = statistics.median(p["measured"] for p in points)
            predicted = points[0]["predicted"]
            print(f"| {name} | {stage} | {mib(predicted)} | {mib(measured)} | "
                  f"{(predicted - measured) / measured * 100:+.1f}% |")
    print("\nServing, run by run (forward per micro-batch: predicted / measured ms per stage; "
          "load: the 1-minute load average after the run):\n")
    print("| repeat | plan | samples/s pred / meas | latency pred / p50 / p99 ms | "
          "forward ms per stage | steal | load |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nMedians over {ARGS.repeat} run(s):\n")
    print("| plan | samples/s pred / meas | error | latency pred / p50 / p99 ms | p50 error |")
    print("|---|---|---|---|---|")
    for name, comparisons in runs.items():
        def median_of(key):
            return statistics.median(c[key]["measured"] for c in comparisons)
        sps, p50, p99 = median_of("samples_per_s"), median_of("latency_p50_ms"), \
            median_of("latency_p99_ms")
        sps_pred = comparisons[0]["samples_per_s"]["predicted"]
        lat_pred = comparisons[0]["latency_p50_ms"]["predicted"]
        print(f"| {name} | {sps_pred:.0f} / {sps:.0f} | {(sps_pred - sps) / sps * 100:+.1f}% | "
              f"{lat_pred:.2f} / {p50:.2f} / {p99:.2f} | {(lat_pred - p50) / p50 * 100:+.1f}% |")
    # pp=2's interval over pp=1's of the same repeat: the inverse of the samples/s ratio.
    print_paired_ratios(plans, interval, "pp=1")


MEASUREMENTS = {"profiler_speed": profiler_speed, "co_location": co_location,
                "scheduling": scheduling, "schedules": schedules, "plain_loop": plain_loop, "plan_quality": plan_quality,
                "accuracy": accuracy, "data_parallel": data_parallel, "inference": inference}


def main():
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default="build",
                        help="build folder holding cli/pipeplan and bench/plain_loop")
    parser.add_argument("--out", default="out/bench",
                        help="folder for every profile, plan and run the measurements make")
    parser.add_argument("--only", default=",".join(MEASUREMENTS),
                        help="comma-separated measurements to make, of: " + ",".join(MEASUREMENTS))
    parser.add_argument("--models", default="resnet_tiny,vit_tiny,gpt_tiny",
                        help="the models of the accuracy measurement")
    parser.add_argument("--repeat", type=int, default=1, help="repeats of the scheduling runs and of each accuracy run")
    ARGS = parser.parse_args()
    unknown = [name for name in ARGS.only.split(",") if name not in MEASUREMENTS]
    if unknown:
        parser.error(f"--only: unknown measurement {unknown[0]!r}; expected some of "
                     + ",".join(MEASUREMENTS))
    ARGS.pipeplan = os.path.abspath(os.path.join(ARGS.build, "cli", "pipeplan"))
    ARGS.plain_loop = os.path.abspath(os.path.join(ARGS.build, "bench", "plain_loop"))
    os.makedirs(ARGS.out, exist_ok=True)
    print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f} at the start")
    for name in ARGS.only.split(","):
        MEASUREMENTS[name]()
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
