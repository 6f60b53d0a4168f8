#!/usr/bin/python3
"""pipeplan's training step against what a user would otherwise run, on the same model and data.

Usage: /usr/bin/python3 bench/peers.py [--pipeplan build/cli/pipeplan] [--rounds 3] [--steps 35]
                                       [--batch 64] [--micro-batches 8] [--out peers.json]
                                       [--pp1-threads 2]
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
               output's width). The pipeline peers run only where the module's children are
               pipeplan's layers (a scripted nn.Sequential for Pipe; mlp and resnet_tiny for
               torch.distributed.pipelining); otherwise their rows are left out.
Every configuration trains `--steps` steps of SGD (momentum 0.9, weight decay 5e-4, pipeplan's
defaults) on synthetic data of `--batch` samples (normal float inputs, uniform class targets),
cross-entropy loss, and reports the median step time over the last 20 steps after the warm-up
(pipeplan's run.json keeps the times of its last 20). Every side zeroes gradients in place
after the optimizer step, as pipeplan does. Pairs, run back to back in each of `--rounds`
interleaved rounds:
  pp=1:  pipeplan, one rank, 2 threads      against   a PyTorch eager loop, 2 threads
         (`--pp1-threads N`: N threads both sides)
  dp=2:  pipeplan, 2 ranks, 1 thread each   against   DistributedDataParallel on Gloo, 2 processes
  pp=2, PyTorch 1.x (1 thread a rank):
         pipeplan 1f1b, m micro-batches     against   torch.distributed.pipeline.sync.Pipe on the
                                                      same split, chunks = m (one process)
  pp=2, PyTorch 2.4 or later (torch.distributed.pipelining; 2 ranks, Gloo, 1 thread a rank):
         pipeplan gpipe                     against   ScheduleGPipe
         pipeplan 1f1b                      against   Schedule1F1B
         pipeplan interleaved-1f1b (V = 2)  against   ScheduleInterleaved1F1B
         pipeplan zb-h1                     against   ScheduleInterleavedZeroBubble (the closest:
                                                      both split the backward into input and
                                                      weight gradients to fill the bubble; it
                                                      needs V >= 2 and runs the interleaved split)
         each peer on pipeplan's own plan, exported --to torch-pipelining (its layer ranges
         mapped to the PyTorch module's children) and run by python/pipeplan_pipelining.py (on
         torch < 2.8 with PR #152938's Gloo fix; the loss divided by m)
  pp=2:  pipeplan, the schedule the planner picks (no peer)
Prints a markdown table (median and min-max over the rounds of each configuration's median step
time, and the ratio pipeplan / peer round by round: median and range) headed by the date, the
machine, the load average and the parameter counts, then each configuration's time by phase
(data, compute, communication, optimizer, other; per rank), and writes every step time as JSON.
`--only pp1,dp2` runs some settings only. Needs a python with torch (Debian 12's python3-torch
1.13, or 2.6 inside the Debian 13 root of scripts/debian13-leg.sh); exits 0 with a message
without it.
"""
import argparse
import datetime
import importlib.util
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

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# PyTorch 2.4 and later: torch.distributed.pipelining instead of the removed Pipe.
PIPELINING = importlib.util.find_spec("torch.distributed.pipelining") is not None
WARMUP = 3  # pipeplan's run.json leaves out its first steps the same way
KEPT = 20  # the steps whose times count: pipeplan's run.json keeps its last 20
LR = 0.1
MOMENTUM = 0.9
WEIGHT_DECAY = 5e-4
PHASE_NAMES = ("data", "compute", "communication", "optimizer", "other")
# pipeplan's schedule, the pipelining class it is compared with, and the pipeplan plan whose
# split and placement that class runs.
PIPELINING_PAIRS = [
    ("gpipe", "ScheduleGPipe", "gpipe"),
    ("1f1b", "Schedule1F1B", "1f1b"),
    ("interleaved-1f1b", "ScheduleInterleaved1F1B", "interleaved-1f1b"),
    ("zb-h1", "ScheduleInterleavedZeroBubble", "interleaved-1f1b"),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sgd(parameters, args):
    """pipeplan's default SGD at its learning rate for `args.batch` (0.1 per 256 samples)."""
    return torch.optim.SGD(parameters, lr=LR * args.batch / 256, momentum=MOMENTUM,
                           weight_decay=WEIGHT_DECAY)


def kept(values):
    return values[WARMUP:][-KEPT:]


class PhaseClock:
    """Milliseconds by phase within each step: `mark(phase)` closes the span since the last mark;
    `timed(phase, fn)` wraps a callable whose time is moved from the span around it to `phase`."""

    def __init__(self):
        self.steps = []

    def start_step(self):
        self.steps.append(dict.fromkeys(PHASE_NAMES, 0.0))
        self.last = time.perf_counter()
        self.inner = 0.0

    def mark(self, phase):
        now = time.perf_counter()
        self.steps[-1][phase] += (now - self.last) * 1e3 - self.inner
        self.last, self.inner = now, 0.0

    def timed(self, phase, fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = (time.perf_counter() - start) * 1e3
                self.steps[-1][phase] += spent
                self.inner += spent
        return wrapper

    def step_ms(self):
        return [sum(step.values()) for step in self.steps]

    def medians(self):
        """Each phase's median over the kept steps."""
        steps = kept(self.steps)
        return {name: statistics.median(step[name] for step in steps) for name in PHASE_NAMES}


def train_steps(subject, model, optimizer, steps, batch, forward=None):
    """Runs `steps` SGD steps on fresh synthetic batches of `subject`; returns the kept steps'
    times in ms and the medians by phase (DDP's all-reduce overlaps its backward: compute)."""
    forward = forward or model
    clock = PhaseClock()
    for _ in range(steps):
        clock.start_step()
        x, y = subject.batch(batch)
        clock.mark("data")
        loss = F.cross_entropy(forward(x), y)
        loss.backward()
        clock.mark("compute")
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        clock.mark("optimizer")
    return kept(clock.step_ms()), clock.medians()


def eager(args, subject):
    torch.set_num_threads(args.pp1_threads)
    model = subject.make()
    times, phases = train_steps(subject, model, sgd(model.parameters(), args), args.steps,
                                args.batch)
    return times, [phases]


def init_gloo(rank, port):
    import torch.distributed as dist
    torch.set_num_threads(1)
    # Debian's torch 2.6 is built without libuv, which 2.x's TCPStore asks for by default.
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), USE_LIBUV="0")
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=600))
    return dist


def ddp_worker(rank, port, args, subject, out):
    from torch.nn.parallel import DistributedDataParallel
    dist = init_gloo(rank, port)
    model = DistributedDataParallel(subject.make())
    times, phases = train_steps(subject, model, sgd(model.parameters(), args),
                                args.steps, args.batch // 2)
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"times": times, "phases": phases}, f)
    dist.destroy_process_group()


def pipelining_worker(rank, port, args, subject, description, schedule_class, out):
    """One rank of torch.distributed.pipelining running pipeplan's exported plan with
    `schedule_class`; each stage's forward and backward timed as compute, the batched sends
    and receives (posting and waiting) as communication."""
    sys.path.insert(0, os.path.join(SOURCE, "python"))
    import pipeplan_pipelining as helper
    from torch.distributed.pipelining import schedules
    dist = init_gloo(rank, port)
    desc = helper.load_description(description)
    desc["schedule_class"] = schedule_class
    model = subject.make()
    children = [name for name, _ in model.named_children()]
    for stage in desc["stages"]:  # pipeplan's layer ranges as the module's children
        stage["modules"] = children[stage["layers"][0]:stage["layers"][1]]
    pp_rank, _ = helper.placement(desc, rank)
    stages, modules = helper.build_stages(model, desc, pp_rank, torch.device("cpu"))
    schedule = helper.build_schedule(desc, stages, F.cross_entropy)
    clock = PhaseClock()
    for stage in stages:
        for method in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
            setattr(stage, method, clock.timed("compute", getattr(stage, method)))
    post = schedules._batch_p2p  # after build_schedule: with the Gloo fix where it applies

    class TimedWork:  # a proxy: torch's own Work objects take no new attributes
        def __init__(self, work):
            self.wait = clock.timed("communication", work.wait)

    def timed_p2p(ops, desc=None):
        work = clock.timed("communication", post)(ops, desc=desc)
        return None if work is None else TimedWork(work)
    schedules._batch_p2p = timed_p2p
    optimizer = sgd([p for m in modules for p in m.parameters()], args)
    first = any(stage.is_first for stage in stages)
    last = any(stage.is_last for stage in stages)
    dist.barrier()
    for _ in range(args.steps):
        clock.start_step()
        x, y = subject.batch(args.batch)
        clock.mark("data")
        schedule.step(*((x,) if first else ()), target=y if last else None)
        clock.mark("other")  # the schedule's own work; its compute and transfers are moved out
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        clock.mark("optimizer")
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"times": kept(clock.step_ms()), "phases": clock.medians()}, f)
    dist.destroy_process_group()


def spawn_two(worker, out, *worker_args):
    """Runs `worker` on 2 Gloo ranks; the step time is the slower rank's, step by step."""
    torch.multiprocessing.spawn(worker, args=(free_port(), *worker_args, out), nprocs=2)
    ranks = []
    for rank in range(2):
        with open(f"{out}.{rank}") as f:
            ranks.append(json.load(f))
    return ([max(times) for times in zip(*(r["times"] for r in ranks))],
            [r["phases"] for r in ranks])


def ddp(args, subject, work):
    return spawn_two(ddp_worker, os.path.join(work, "ddp.json"), args, subject)


def pipelining(args, subject, work, description, schedule_class):
    return spawn_two(pipelining_worker, os.path.join(work, "pipelining.json"), args, subject,
                     description, schedule_class)


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
        times, phases = train_steps(subject, model, sgd(model.parameters(), args), args.steps,
                                    args.batch, forward=lambda x: model(x).local_value())
        return times, [phases]
    finally:
        rpc.shutdown()


def run(command, env=None):
    result = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    if result.returncode != 0:
        sys.exit(f"peers.py: {' '.join(command)} failed ({result.returncode}):\n{result.stdout}")
    return result.stdout


def pipeplan_run(args, work, plan, ranks, threads):
    """Kept step times and each rank's means by phase, from the run's run.json."""
    out = os.path.join(work, "run.json")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    run([args.pipeplan, "launch", "--nproc", str(ranks), "--", args.pipeplan, "train", "--plan",
         plan, "--data", "synthetic", "--steps", str(args.steps), "-o", out], env)
    with open(out) as f:
        measured = json.load(f)["measured"]
    steps = [step["iteration_ms"] for step in measured["step_times"]][-KEPT:]
    phases = []  # the rank's means over the run's steps; "other" against the kept steps' mean
    for rank in measured["ranks"]:
        rank_phases = {
            "data": rank["load_ms"], "compute": rank["compute_ms"],
            "communication": rank["recv_wait_ms"] + rank["allreduce_ms"]
            + rank.get("allgather_ms", 0.0),
            "optimizer": rank["optimizer_ms"]}
        rank_phases["other"] = statistics.mean(steps) - sum(rank_phases.values())
        phases.append(rank_phases)
    return steps, phases


def make_plans(args, subject, work):
    """Profiles the model once and writes the plans of the pipeplan configurations, and for
    torch.distributed.pipelining their exports."""
    profile = os.path.join(work, "profile.json")
    m = args.micro_batches
    run([args.pipeplan, "profile", *subject.model_flags(),
         "--batch-sizes", f"{args.batch // m},{args.batch // 2},{args.batch}", "-o", profile])
    common = [args.pipeplan, "plan", "--profile", profile, "--device-memory", "8GiB",
              "--global-batch", str(args.batch)]
    pp2 = ["--devices", "2", "--dp", "1", "--pp", "2"]
    fixed = pp2 + ["--micro-batch-size", str(args.batch // m), "--checkpoint", "none"]
    settings = [("pp1", ["--devices", "1", "--micro-batch-size", str(args.batch)]),
                ("dp2", ["--devices", "2", "--dp", "2", "--pp", "1",
                         "--micro-batch-size", str(args.batch // 2)]),
                ("pp2-best", pp2)]
    schedules = [pair[0] for pair in PIPELINING_PAIRS] if PIPELINING else ["1f1b"]
    for schedule in schedules:
        extra = ["--virtual-stages", "2"] if schedule == "interleaved-1f1b" else []
        settings.append((f"pp2-{schedule}", fixed + ["--schedule", schedule] + extra))
    plans = {}
    for name, extra in settings:
        plans[name] = os.path.join(work, name + ".json")
        run(common + extra + ["-o", plans[name]])
    if PIPELINING:
        for _, _, planned in PIPELINING_PAIRS:
            plans[f"{planned}-export"] = os.path.join(work, f"pp2-{planned}.stages.json")
            run([args.pipeplan, "export", "--plan", plans[f"pp2-{planned}"], "--profile", profile,
                 "--to", "torch-pipelining", "-o", plans[f"{planned}-export"]])
    with open(plans["pp2-1f1b"]) as f:
        stages = [(s["first"], s["last"]) for s in json.load(f)["stages"]]
    return plans, stages


def configurations(args, subject, work, plans, stages):
    """(setting, runner, measure, the runner it is compared with or None), in running order."""
    def pipeplan(plan, ranks, threads):
        return lambda: pipeplan_run(args, work, plans[plan], ranks, threads)
    rows = [("pp=1", "pipeplan", pipeplan("pp1", 1, args.pp1_threads), "PyTorch eager"),
            ("pp=1", "PyTorch eager", lambda: eager(args, subject), None),
            ("dp=2", "pipeplan", pipeplan("dp2", 2, 1), "DDP (gloo)"),
            ("dp=2", "DDP (gloo)", lambda: ddp(args, subject, work), None)]
    if PIPELINING:
        for schedule, peer, planned in PIPELINING_PAIRS:
            rows.append(("pp=2", f"pipeplan {schedule}", pipeplan(f"pp2-{schedule}", 2, 1),
                         peer if subject.children_are_layers else None))
            if subject.children_are_layers:
                description = plans[f"{planned}-export"]
                rows.append(("pp=2", peer, lambda d=description, p=peer: pipelining(
                    args, subject, work, d, p), None))
        if not subject.children_are_layers and "pp2" in args.only.split(","):
            print("peers.py: torch.distributed.pipelining left out: the PyTorch module is no "
                  "module whose children are pipeplan's layers", file=sys.stderr)
    else:
        pipelines = subject.pipe_layers(subject.make()) is not None
        rows.append(("pp=2", "pipeplan 1f1b", pipeplan("pp2-1f1b", 2, 1),
                     "torch Pipe" if pipelines else None))
        if pipelines:
            rows.append(("pp=2", "torch Pipe", lambda: pipe(args, subject, stages), None))
        elif "pp2" in args.only.split(","):
            print("peers.py: torch Pipe left out: the module's children are not pipeplan's "
                  "layers", file=sys.stderr)
    rows.append(("pp=2", "pipeplan, planner's pick", pipeplan("pp2-best", 2, 1), None))
    only = args.only.split(",")
    return [row for row in rows if row[0].replace("=", "") in only]


def summary(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def print_tables(header, rows, best_line, parameters_line, load, args):
    print(f"date: {header['date']}; machine: {header['machine']}; torch {header['torch']}")
    print(f"{header['model']}, {args.steps} steps ({WARMUP} warm-up), {args.rounds} interleaved "
          f"rounds, {args.pp1_threads} threads for pp=1, m={args.micro_batches} for pp=2; load "
          f"average at start "
          f"{' '.join(f'{v:.2f}' for v in load)}; {best_line}; whole run {header['wall_s']:.0f} s")
    print(parameters_line)
    print()
    print("| setting | runner | step ms, median of round medians | min–max | "
          "pipeplan / peer, median of rounds (range) |")
    print("|---|---|---:|---|---:|")
    for row in rows:
        print(f"| {row['setting']} | {row['runner']} | {row['median_ms']:.2f} | "
              f"{row['min_ms']:.2f}–{row['max_ms']:.2f} | {row['ratio_to_peer']} |")
    print()
    print("By phase, ms a step, each rank (medians over the rounds of: pipeplan, its run.json's "
          "means, other the rest of the mean step; the peers, each phase's median. "
          "Communication: waits on transfers and all-reduces (DDP overlaps its all-reduces with "
          "the backward: compute); optimizer: the step and zeroing):")
    print()
    print("| setting | runner | rank | " + " | ".join(PHASE_NAMES) + " |")
    print("|---|---|---:|" + "---:|" * len(PHASE_NAMES))
    for row in rows:
        for rank, phases in enumerate(row["phases_ms"]):
            print(f"| {row['setting']} | {row['runner']} | {rank} | "
                  + " | ".join(f"{phases[name]:.2f}" for name in PHASE_NAMES) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pipeplan", default="build/cli/pipeplan")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=35)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--micro-batches", type=int, default=8)
    parser.add_argument("--out", default="peers.json")
    parser.add_argument("--pp1-threads", type=int, default=2,
                        help="intra-op threads of pp=1's one process, both sides (default 2)")
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
    if args.pp1_threads < 1:
        sys.exit(f"peers.py: --pp1-threads {args.pp1_threads}: expected 1 or more")
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
        runs = configurations(args, subject, work, plans, stages)
        medians = [[] for _ in runs]
        steps = [[] for _ in runs]
        phases = [[] for _ in runs]
        for round_idx in range(args.rounds):
            for index, (_, _, measure, _) in enumerate(runs):
                times, rank_phases = measure()
                steps[index].append(times)
                medians[index].append(statistics.median(times))
                phases[index].append(rank_phases)
            print(f"round {round_idx + 1} of {args.rounds} done ({time.time() - started:.0f} s)",
                  file=sys.stderr)
    index_of = {runner: index for index, (_, runner, _, _) in enumerate(runs)}
    rows = []
    for index, (setting, runner, _, peer) in enumerate(runs):
        s = summary(medians[index])
        # Each round's median against its peer's in the same round: the host's drift between
        # rounds cancels.
        ratio = "-"
        if peer in index_of:
            paired = [mine / theirs for mine, theirs in zip(medians[index],
                                                            medians[index_of[peer]])]
            ratio = (f"{statistics.median(paired):.3f} ({min(paired):.3f}–{max(paired):.3f}) "
                     f"vs {peer}")
        rank_phases = [{name: statistics.median(round_phases[rank][name]
                                                for round_phases in phases[index])
                        for name in PHASE_NAMES} for rank in range(len(phases[index][0]))]
        rows.append({"setting": setting, "runner": runner, "median_ms": s["median"],
                     "min_ms": s["min"], "max_ms": s["max"], "ratio_to_peer": ratio,
                     "phases_ms": rank_phases, "step_ms": steps[index]})
    best_line = (f"planner's pick: {best['schedule']} b={best['micro_batch_size']} "
                 f"m={best['num_micro_batches']} stages "
                 + ",".join(f"{s['first']}:{s['last']}" for s in best["stages"]))
    header = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{os.cpu_count()} CPUs, {platform.platform()}",
        "torch": torch.__version__,
        "load_average_at_start": load,
        "model": f"{subject.description}, batch {args.batch}",
        "parameters": parameters_line,
        "steps": args.steps, "warmup_steps": WARMUP, "rounds": args.rounds,
        "micro_batches": args.micro_batches, "pp1_threads": args.pp1_threads,
        "pp2_stages": stages, "best_plan": best_line,
        "wall_s": time.time() - started,
    }
    with open(args.out, "w") as f:
        json.dump({"header": header, "rows": rows}, f, indent=1)
    print_tables(header, rows, best_line, parameters_line, load, args)


if __name__ == "__main__":
    main()
