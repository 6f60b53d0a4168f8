#!/usr/bin/python3
"""pipeplan's training step against what a user would otherwise run, on the same model and data.

Usage: /usr/bin/python3 bench/peers.py [--pipeplan build/cli/pipeplan] [--rounds 3] [--steps 35]
                                       [--batch 64] [--micro-batches 8] [--out peers.json]
                                       [--only pp1,dp2,pp2]
                                       [--model mlp | resnet_tiny | FILE.pt
                                        [--input-shape 3x32x32] [--classes N]]

The model (bench/peer_models.py), `--model`:
  mlp          (default) 8 x (Linear(1024, 1024) + ReLU), 1024 logits: scripted for pipeplan,
               the same nn.Module (same weights) for the PyTorch side.
  resnet_tiny  pipeplan's zoo model, its C++ layers (what a zoo user trains), against a PyTorch
               twin written from models/resnet.cpp: stem conv 3x3 1->16 + BN + ReLU, four basic
               blocks of width 16, 32, 64, 128 (strides 1, 2, 2, 2, 1x1 conv + BN shortcuts), global
               average pool, Linear(128, 10); 1 x 28 x 28 float inputs, 10 classes. Same layers,
               shapes and initialisation scheme; not the same weights. Its parameter count, total
               and per layer, is checked against `pipeplan models --model resnet_tiny --json`
               (printed; the script refuses to run when they differ). This compares pipeplan's
               native layers, what a user of the zoo trains, with eager PyTorch (DDP with its
               default, BatchNorm buffers broadcast every step); pipeplan on a TorchScript file
               (its interpreter, no graph optimisation) is the FILE.pt case: script the twin
               (torch.jit.script(peer_models.resnet_twin(peer_models.RESNET_TINY)).save(...))
               and pass the file.
  FILE.pt      any TorchScript file of one float32 input and [batch, classes] logits: pipeplan
               trains the file, the PyTorch side torch.jit.load of the same file (same weights;
               torch's default executor). One sample's shape from `--input-shape` (else the
               file's pipeplan_input_shape attribute), the classes from `--classes` (else the
               output's width). torch Pipe runs only where the module's children are pipeplan's
               layers (a scripted nn.Sequential); otherwise its row is left out.
Every configuration trains `--steps` steps of SGD (momentum 0.9, weight decay 5e-4, pipeplan's
defaults) on synthetic data of `--batch` samples (normal float inputs, uniform class targets),
cross-entropy loss, and reports the median step time over the last 20 steps after the warm-up
(pipeplan's run.json keeps the times of its last 20). Pairs, run back to back in each of
`--rounds` interleaved rounds:
  pp=1:  pipeplan, one rank, 2 threads      against   a PyTorch eager loop, 2 threads
  dp=2:  pipeplan, 2 ranks, 1 thread each   against   DistributedDataParallel on Gloo, 2 processes
  pp=2:  pipeplan 1f1b, m micro-batches,    against   torch.distributed.pipeline.sync.Pipe on the
         and the schedule the planner picks           same split, chunks = m (one process)
Prints a markdown table (median and min-max over the rounds of each configuration's median step
time, and the ratio to its peer round by round: median and range) headed by the date, the
machine, the load average and the parameter counts, and writes every step time as JSON.
`--only pp1,dp2` runs some settings only. Needs Debian's python3-torch (1.13); exits 0 with a
message without it.
"""
import argparse
import datetime
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError:
    print("peers.py: skipped: PyTorch is not importable by this python "
          "(run it with Debian's /usr/bin/python3 and python3-torch)")
    sys.exit(0)

import peer_models

WARMUP = 3  # pipeplan's run.json leaves out its first steps the same way
KEPT = 20  # the steps whose times count: pipeplan's run.json keeps its last 20
LR = 0.1
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sgd(model, lr):
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)


# pp=1 by phase, one dict of medians per round: {"data": ms, "forward": ms, ...}.
PHASES = {"pipeplan": [], "eager": []}


def train_steps(subject, model, optimizer, steps, batch, forward=None, phases=None):
    """Step times in ms of `steps` SGD steps on fresh synthetic batches of `subject`; with
    `phases` (a dict), also each step's data, forward (with the loss), backward and optimizer
    times."""
    forward = forward or model
    times = []
    for _ in range(steps):
        marks = [time.perf_counter()]
        x, y = subject.batch(batch)
        marks.append(time.perf_counter())
        loss = F.cross_entropy(forward(x), y)
        marks.append(time.perf_counter())
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        marks.append(time.perf_counter())
        optimizer.step()
        marks.append(time.perf_counter())
        times.append((marks[-1] - marks[0]) * 1e3)
        if phases is not None:
            for name, begin, end in zip(("data", "forward", "backward", "optimizer"), marks,
                                        marks[1:]):
                phases.setdefault(name, []).append((end - begin) * 1e3)
    return times[WARMUP:][-KEPT:]


def eager(args, subject):
    torch.set_num_threads(2)
    model = subject.make()
    phases = {}
    times = train_steps(subject, model, sgd(model, LR * args.batch / 256), args.steps, args.batch,
                        phases=phases)
    PHASES["eager"].append({name: statistics.median(values[WARMUP:][-KEPT:])
                            for name, values in phases.items()})
    return times


def ddp_worker(rank, port, args, subject, out):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    model = DistributedDataParallel(subject.make())
    times = train_steps(subject, model, sgd(model, LR * args.batch / 256), args.steps,
                        args.batch // 2)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(times, f)
    dist.destroy_process_group()


def ddp(args, subject, work):
    out = os.path.join(work, "ddp.json")
    torch.multiprocessing.spawn(ddp_worker, args=(free_port(), args, subject, out), nprocs=2)
    with open(out) as f:
        return json.load(f)


def pipe(args, subject, stages):
    from torch.distributed import rpc
    from torch.distributed.pipeline.sync import Pipe
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    rpc.init_rpc("peers", rank=0, world_size=1)
    try:
        layers = subject.pipe_layers(subject.make())
        model = Pipe(nn.Sequential(*[nn.Sequential(*layers[first:last]) for first, last in stages]),
                     chunks=args.micro_batches, checkpoint="never")
        return train_steps(subject, model, sgd(model, LR * args.batch / 256), args.steps,
                           args.batch, forward=lambda x: model(x).local_value())
    finally:
        rpc.shutdown()


def run(command, env=None):
    result = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    if result.returncode != 0:
        sys.exit(f"peers.py: {' '.join(command)} failed ({result.returncode}):\n{result.stdout}")
    return result.stdout


def pipeplan_run(args, work, plan, ranks, threads):
    out = os.path.join(work, "run.json")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    run([args.pipeplan, "launch", "--nproc", str(ranks), "--", args.pipeplan, "train", "--plan",
         plan, "--data", "synthetic", "--steps", str(args.steps), "-o", out], env)
    with open(out) as f:
        measured = json.load(f)["measured"]
    if ranks == 1:  # the run's own means per phase (one micro-batch: forward and backward once)
        rank = measured["ranks"][0]
        phases = {"data": rank["load_ms"], "forward": rank["fwd_ms"],
                  "backward": rank["bwd_ms"], "optimizer": rank["optimizer_ms"]}
        phases["other"] = rank["iteration_ms"] - sum(phases.values())
        PHASES["pipeplan"].append(phases)
    return [step["iteration_ms"] for step in measured["step_times"]][-KEPT:]


def make_plans(args, subject, work):
    """Profiles the model once and writes the plans of the pipeplan configurations."""
    profile = os.path.join(work, "profile.json")
    m = args.micro_batches
    run([args.pipeplan, "profile", *subject.model_flags(),
         "--batch-sizes", f"{args.batch // m},{args.batch // 2},{args.batch}", "-o", profile])
    common = [args.pipeplan, "plan", "--profile", profile, "--device-memory", "8GiB",
              "--global-batch", str(args.batch)]
    plans = {}
    for name, extra in [
            ("pp1", ["--devices", "1", "--micro-batch-size", str(args.batch)]),
            ("dp2", ["--devices", "2", "--dp", "2", "--pp", "1",
                     "--micro-batch-size", str(args.batch // 2)]),
            ("pp2-1f1b", ["--devices", "2", "--dp", "1", "--pp", "2", "--schedule", "1f1b",
                          "--micro-batch-size", str(args.batch // m)]),
            ("pp2-best", ["--devices", "2", "--dp", "1", "--pp", "2"])]:
        plans[name] = os.path.join(work, name + ".json")
        run(common + extra + ["-o", plans[name]])
    with open(plans["pp2-1f1b"]) as f:
        stages = [(s["first"], s["last"]) for s in json.load(f)["stages"]]
    return plans, stages


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pipeplan", default="build/cli/pipeplan")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=35)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--out", default="peers.json")
    parser.add_argument("--only", default="pp1,dp2,pp2",
                        help="comma-separated settings to run: pp1, dp2, pp2")
    parser.add_argument("--model", default="mlp",
                        help="mlp, resnet_tiny (pipeplan's zoo model against its PyTorch twin) "
                             "or a TorchScript file")
    parser.add_argument("--input-shape", help="one sample's shape for a TorchScript file: 3x32x32")
    parser.add_argument("--classes", type=int,
                        help="classes of a TorchScript file's targets (default: its output width)")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if not only or not only <= {"pp1", "dp2", "pp2"}:
        sys.exit(f"peers.py: --only {args.only!r}: expected settings among pp1, dp2, pp2")
    if args.steps <= WARMUP or args.batch % (2 * args.micro_batches):
        sys.exit(f"peers.py: --steps must exceed {WARMUP} and --batch be a multiple of "
                 "2 x --micro-batches")
    started = time.time()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as work:
        subject = peer_models.subject(args.model, work, args.input_shape, args.classes)
        parameters_line = subject.check_layers(args.pipeplan)
        print(parameters_line, file=sys.stderr)
        plans, stages = make_plans(args, subject, work)
        with open(plans["pp2-best"]) as f:
            best = json.load(f)
        configurations = [
            ("pp=1", "pipeplan", lambda: pipeplan_run(args, work, plans["pp1"], 1, 2)),
            ("pp=1", "PyTorch eager", lambda: eager(args, subject)),
            ("dp=2", "pipeplan", lambda: pipeplan_run(args, work, plans["dp2"], 2, 1)),
            ("dp=2", "DDP (gloo)", lambda: ddp(args, subject, work)),
            ("pp=2", "pipeplan 1f1b", lambda: pipeplan_run(args, work, plans["pp2-1f1b"], 2, 1)),
            ("pp=2", "pipeplan, planner's pick", lambda: pipeplan_run(args, work,
                                                                     plans["pp2-best"], 2, 1)),
            ("pp=2", "torch Pipe", lambda: pipe(args, subject, stages)),
        ]
        configurations = [c for c in configurations if c[0].replace("=", "") in only]
        if "pp2" in only and subject.pipe_layers(subject.make()) is None:
            print("peers.py: torch Pipe left out: the module's children are not pipeplan's "
                  "layers", file=sys.stderr)
            configurations = [c for c in configurations if c[1] != "torch Pipe"]
        medians = {index: [] for index in range(len(configurations))}
        steps = {index: [] for index in range(len(configurations))}
        for round_idx in range(args.rounds):
            for index, (_, _, measure) in enumerate(configurations):
                times = measure()
                steps[index].append(times)
                medians[index].append(statistics.median(times))
            print(f"round {round_idx + 1} of {args.rounds} done ({time.time() - started:.0f} s)",
                  file=sys.stderr)
    rows = []
    peer_of = {"pp=1": "PyTorch eager", "dp=2": "DDP (gloo)", "pp=2": "torch Pipe"}
    results = {}
    for index, (group, name, _) in enumerate(configurations):
        results[(group, name)] = summary(medians[index])
    peer_index = {group: index for index, (group, name, _) in enumerate(configurations)
                  if name == peer_of[group]}
    peer_index = {group: peer_index.get(group) for group in peer_of}
    for index, (group, name, _) in enumerate(configurations):
        s = results[(group, name)]
        # Each round's median against its peer's in the same round: the host's drift between
        # rounds cancels.
        ratio = "-"
        if name != peer_of[group] and peer_index[group] is not None:
            paired = [mine / theirs
                      for mine, theirs in zip(medians[index], medians[peer_index[group]])]
            ratio = f"{statistics.median(paired):.3f} ({min(paired):.3f}–{max(paired):.3f})"
        rows.append({"setting": group, "runner": name, "median_ms": s["median"],
                     "min_ms": s["min"], "max_ms": s["max"], "ratio_to_peer": ratio,
                     "step_ms": steps[index]})
    best_line = (f"planner's pick: {best['schedule']} b={best['micro_batch_size']} "
                 f"m={best['num_micro_batches']} stages "
                 + ",".join(f"{s['first']}:{s['last']}" for s in best["stages"]))
    header = {
        "date": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{os.cpu_count()} CPUs, {platform.platform()}",
        "torch": torch.__version__,
        "load_average_at_start": load,
        "model": f"{subject.description}, batch {args.batch}",
        "parameters": parameters_line,
        "steps": args.steps, "warmup_steps": WARMUP, "rounds": args.rounds,
        "micro_batches": args.micro_batches, "pipe_stages": stages, "best_plan": best_line,
        "wall_s": time.time() - started,
    }
    with open(args.out, "w") as f:
        json.dump({"header": header, "rows": rows, "pp1_phases": PHASES}, f, indent=1)
    print(f"date: {header['date']}; machine: {header['machine']}; torch {header['torch']}")
    print(f"{header['model']}, {args.steps} steps ({WARMUP} warm-up), {args.rounds} interleaved "
          f"rounds, m={args.micro_batches} for pp=2; load average at start "
          f"{' '.join(f'{v:.2f}' for v in load)}; {best_line}; whole run {header['wall_s']:.0f} s")
    print(parameters_line)
    print()
    print("| setting | runner | step ms, median of round medians | min–max | "
          "ratio to peer, median of rounds (range) |")
    print("|---|---|---:|---|---:|")
    for row in rows:
        print(f"| {row['setting']} | {row['runner']} | {row['median_ms']:.2f} | "
              f"{row['min_ms']:.2f}–{row['max_ms']:.2f} | {row['ratio_to_peer']} |")
    if PHASES["pipeplan"] and PHASES["eager"]:
        print()
        print("pp=1 by phase, ms (median over rounds; pipeplan: its run.json means, its optimizer "
              "phase with the finite check and zeroing; eager: zero_grad with backward):")
        print()
        print("| phase | pipeplan | PyTorch eager |")
        print("|---|---:|---:|")
        for name in ("data", "forward", "backward", "optimizer", "other"):
            cells = [statistics.median(r[name] for r in PHASES[who]) if name in PHASES[who][0]
                     else None for who in ("pipeplan", "eager")]
            print(f"| {name} | " + " | ".join("-" if c is None else f"{c:.2f}" for c in cells)
                  + " |")


if __name__ == "__main__":
    main()
