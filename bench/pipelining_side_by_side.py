"""One plan run by pipeplan's executor and by torch.distributed.pipelining, side by side.

For a model of tests/export/pipelining_models.py: its TorchScript file is profiled and planned
by pipeplan for 2 stages and the given schedule; then, in interleaved repeats (the two runtimes
take turns, starting with the other one each repeat), `pipeplan launch --nproc 2 -- pipeplan
train --data synthetic` and the same plan exported --to torch-pipelining and run by
python/pipeplan_pipelining.py on 2 Gloo ranks each run --steps steps. Each run gives the median
iteration time of its steps after --warmup; the figures are the medians over the repeats, in
samples/s, and their ratio (pipelining / pipeplan).

    python3 bench/pipelining_side_by_side.py --pipeplan build/cli/pipeplan --model gpt \\
        --schedule 1f1b --repeats 5 --steps 20

Both sides need torch.distributed.pipelining (torch 2.4 or later) for the Python and a pipeplan
binary; in the Debian 13 root (scripts/debian13-leg.sh) both are 2.6. Where the pipeplan binary
runs elsewhere (the Debian 12 build, LibTorch 1.13), --pipelining-python gives the command that
runs this file's pipelining side (e.g. the root's python3 through debian13-leg.sh --exec), with
--work-seen-by-pipelining and --source-seen-by-pipelining the paths as that command sees them.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import time

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_SEED = 7


def run(command, cwd=None, env=None):
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode}:\n"
                           f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return result.stdout


# --- the pipelining side (runs under --pipelining-python) -------------------------------------

def script_model(model_name, work):
    """Writes the model's TorchScript file and initial weights (seed 0) into `work`."""
    import torch
    import pipelining_models as models
    torch.manual_seed(0)
    model = models.MODELS[model_name][0]()
    torch.save(model.state_dict(), os.path.join(work, "init.pt"))
    torch.jit.script(model).save(os.path.join(work, "model.pt"))


def time_rank(rank, job):
    """One rank of the pipelining run: `steps` steps; the last stage's rank writes their times."""
    import torch
    import torch.distributed as dist
    import pipeplan_pipelining as helper
    import pipelining_models as models
    torch.set_num_threads(job["threads"])
    dist.init_process_group("gloo", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=600))
    make, loss_fn, batch = models.MODELS[job["model"]]
    desc = helper.load_description(os.path.join(job["work"], "stages.json"))
    torch.manual_seed(0)
    model = make()
    pp_rank, _ = helper.placement(desc, rank)
    stages, modules = helper.build_stages(model, desc, pp_rank, torch.device("cpu"))
    schedule = helper.build_schedule(desc, stages, loss_fn)
    opt = job["optimizer"]
    optimizer = torch.optim.SGD([p for m in modules for p in m.parameters()], lr=opt["lr"],
                                momentum=opt["momentum"], weight_decay=opt["weight_decay"])
    x, y = batch(desc["global_batch"], torch.Generator().manual_seed(SAMPLE_SEED))
    first = any(s.is_first for s in stages)
    last = any(s.is_last for s in stages)
    times_ms = []
    dist.barrier()
    for _ in range(job["steps"]):
        start = time.perf_counter()
        schedule.step(*((x,) if first else ()), target=y if last else None)
        optimizer.step()
        # In place, as pipeplan zeroes: torch 2.x's default (set_to_none=True) frees the
        # gradients, and each backward then page-faults fresh ones in (on this 2-core host it
        # made an eager MLP step 10-36% slower on 1.13 and 2.6 alike; bench/history, session 21).
        optimizer.zero_grad(set_to_none=False)
        times_ms.append((time.perf_counter() - start) * 1e3)
    if last:
        with open(os.path.join(job["work"], "pipelining_times.json"), "w") as f:
            json.dump({"torch": torch.__version__, "times_ms": times_ms}, f)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_pipelining_ranks(job_path):
    """Starts the 2 ranks (env:// rendezvous, USE_LIBUV=0 for Debian's torch 2.6)."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), USE_LIBUV="0")
    procs = [subprocess.Popen([sys.executable, __file__, "--rank", str(rank), "--job", job_path],
                              env=env) for rank in range(2)]
    codes = [p.wait() for p in procs]
    if any(codes):
        raise RuntimeError(f"pipelining ranks exited {codes}")


# --- the driver ---------------------------------------------------------------------------------

class Sides:
    """Runs pipeplan here and the pipelining side through --pipelining-python."""

    def __init__(self, args):
        self.args = args
        self.python = shlex.split(args.pipelining_python) if args.pipelining_python else \
            [sys.executable]
        self.seen_work = args.work_seen_by_pipelining or args.work
        seen_source = args.source_seen_by_pipelining or SOURCE
        self.script = os.path.join(seen_source, "bench", "pipelining_side_by_side.py")

    def pipelining(self, *flags):
        return run(self.python + [self.script] + list(flags))

    def pipeplan(self, *flags, env=None):
        return run([self.args.pipeplan] + list(flags), cwd=self.args.work, env=env)


def prepare(sides, args):
    sides.pipelining("--script", args.model, "--job", sides.seen_work)
    profile = args.profile or "profile.json"
    if not args.profile:
        sides.pipeplan("profile", "--model", "model.pt", "--batch-sizes", "1,2,4", "--warmup",
                       "2", "--repeats", "5", "--threads", str(args.threads), "--no-comm",
                       "-o", profile)
    extra = ["--virtual-stages", "2"] if args.schedule == "interleaved-1f1b" else []
    sides.pipeplan("plan", "--profile", profile, "--devices", "2", "--device-memory", "4GiB",
                   "--global-batch", str(args.global_batch), "--pp", "2", "--dp", "1",
                   "--micro-batch-size", str(args.micro_batch_size), "--schedule", args.schedule,
                   "--checkpoint", "none", "-o", "plan.json", *extra)
    sides.pipeplan("export", "--plan", "plan.json", "--profile", profile, "--to",
                   "torch-pipelining", "-o", "stages.json")
    with open(os.path.join(args.work, "plan.json")) as f:
        plan = json.load(f)
    o = plan["optimizer"]
    lr = o["base_lr"] * plan["global_batch"] / o["base_batch"]
    job = {"model": args.model, "work": sides.seen_work, "steps": args.steps,
           "threads": args.threads,
           "optimizer": {"lr": lr, "momentum": o.get("momentum", 0.0),
                         "weight_decay": o.get("weight_decay", 0.0)}}
    with open(os.path.join(args.work, "job.json"), "w") as f:
        json.dump(job, f)
    return plan


def pipeplan_median_ms(sides, args):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    sides.pipeplan("launch", "--nproc", "2", "--", args.pipeplan, "train", "--plan", "plan.json",
                   "--data", "synthetic", "--steps", str(args.steps), "--log", "steps.jsonl",
                   "-o", "run.json", env=env)
    with open(os.path.join(args.work, "steps.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    # One record per step, then the epoch's test accuracy (no iteration_ms).
    steps = [r for r in records if "iteration_ms" in r]
    return statistics.median(s["iteration_ms"] for s in steps[args.warmup:])


def pipelining_median_ms(sides, args):
    sides.pipelining("--time", "--job", os.path.join(sides.seen_work, "job.json"))
    with open(os.path.join(args.work, "pipelining_times.json")) as f:
        timed = json.load(f)
    sides.pipelining_torch = timed["torch"]
    return statistics.median(timed["times_ms"][args.warmup:])


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main_driver(args):
    os.makedirs(args.work, exist_ok=True)
    sides = Sides(args)
    plan = prepare(sides, args)
    samples = plan["global_batch"]
    runs = {"pipeplan": [], "pipelining": []}
    measure = {"pipeplan": pipeplan_median_ms, "pipelining": pipelining_median_ms}
    for repeat in range(args.repeats):
        order = ["pipeplan", "pipelining"] if repeat % 2 == 0 else ["pipelining", "pipeplan"]
        for side in order:
            median_ms = measure[side](sides, args)
            runs[side].append(samples / median_ms * 1e3)
            print(f"repeat {repeat + 1} {side}: {median_ms:.2f} ms, "
                  f"{runs[side][-1]:.1f} samples/s", flush=True)
    pipeplan_rate = statistics.median(runs["pipeplan"])
    pipelining_rate = statistics.median(runs["pipelining"])
    stages = " ".join(f"{s['first']}:{s['last']}" for s in plan["stages"])
    pipeplan_version = sides.pipeplan("--version").strip()
    print(f"{args.model} {args.schedule} pp=2 b={plan['micro_batch_size']} "
          f"m={plan['num_micro_batches']} stages {stages}: pipeplan {pipeplan_rate:.1f} "
          f"samples/s, torch.distributed.pipelining {pipelining_rate:.1f} samples/s, ratio "
          f"{pipelining_rate / pipeplan_rate:.3f} (medians of {args.repeats} interleaved repeats "
          f"of {args.steps} steps, {args.warmup} warm-up; {pipeplan_version}, torch "
          f"{sides.pipelining_torch}; {cpu_name()}, {os.cpu_count()} cores)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pipeplan", default=os.path.join(SOURCE, "build", "cli", "pipeplan"))
    parser.add_argument("--model", choices=["gpt", "resnet"], default="gpt")
    parser.add_argument("--schedule", default="1f1b",
                        choices=["gpipe", "1f1b", "interleaved-1f1b", "zb-h1"])
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--micro-batch-size", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of each median")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    parser.add_argument("--profile", help="a profile of the model (default: profile it here)")
    parser.add_argument("--work", default="/tmp/pipeplan_side_by_side")
    parser.add_argument("--pipelining-python", help="command running this file's pipelining side")
    parser.add_argument("--work-seen-by-pipelining")
    parser.add_argument("--source-seen-by-pipelining")
    parser.add_argument("--script", help=argparse.SUPPRESS)
    parser.add_argument("--time", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(SOURCE, "python"))
    sys.path.insert(0, os.path.join(SOURCE, "tests", "export"))
    if args.script:
        return script_model(args.script, args.job)
    if args.time:
        return time_pipelining_ranks(args.job)
    if args.rank is not None:
        with open(args.job) as f:
            return time_rank(args.rank, json.load(f))
    if args.steps <= args.warmup:
        parser.error("--steps must exceed --warmup")
    return main_driver(args)


if __name__ == "__main__":
    sys.exit(main())
