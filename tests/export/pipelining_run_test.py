"""A pipeplan plan run by torch.distributed.pipelining, checked against one process.

For a model of pipelining_models.py: save its TorchScript file, profile it with pipeplan, plan 2
stages for gpipe, 1f1b, interleaved-1f1b and zb-h1 (and, for the GPT, 1f1b with every stage
checkpointed), export each plan --to torch-pipelining and --to torchtitan, build the stages with
python/pipeplan_pipelining.py, run 3 optimizer steps on 2 Gloo ranks (zb-h1 through the per-rank
action CSV and _PipelineScheduleRuntime) and compare every step's loss and every parameter and
buffer after the last step with one process running the same micro-batches (1e-5 relative).

Also checked, without running: each stage the helper builds holds the parameters of the plan's
layer range (counted from profile.json, not from the export), and a description whose split
differs from the plan's fails that check; the torchtitan TOML names the same modules, a schedule
torch knows and the same micro-batch count; ScheduleInterleaved1F1B's order is the exported one.

    python3 pipelining_run_test.py --pipeplan build/cli/pipeplan --model gpt

Exits 77 (CTest: skipped) with one line where torch is older than 2.4.
"""

import argparse
import copy
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

STEPS = 3
GLOBAL_BATCH = 8
MICRO_BATCH = 2
LEARNING_RATE = 0.05
MOMENTUM = 0.9
RELATIVE_TOLERANCE = 1e-5
SKIP = 77
CASES = [  # (name, schedule, extra plan flags)
    ("gpipe", "gpipe", []),
    ("1f1b", "1f1b", []),
    ("interleaved-1f1b", "interleaved-1f1b", ["--virtual-stages", "2"]),
    ("zb-h1", "zb-h1", []),
]
CHECKPOINT_CASE = ("1f1b-checkpoint", "1f1b", [])


def torch_version():
    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def run(command, cwd):
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode}: {result.stderr}")
    return result.stdout


def batches(model_name, steps):
    import pipelining_models as models
    generator = torch.Generator().manual_seed(1234)
    make = models.MODELS[model_name][2]
    return [make(GLOBAL_BATCH, generator) for _ in range(steps)]


def make_model(model_name):
    import pipelining_models as models
    torch.manual_seed(0)
    return models.MODELS[model_name][0]()


def prepare(args, work):
    """TorchScript file, profile, and per case the plan and its two exports."""
    model = make_model(args.model)
    torch.save(model.state_dict(), os.path.join(work, "init.pt"))
    torch.jit.script(model).save(os.path.join(work, "model.pt"))
    profile = args.profile or os.path.join(work, "profile.json")
    if not args.profile:
        run([args.pipeplan, "profile", "--model", "model.pt", "--batch-sizes", "1,2",
             "--warmup", "1", "--repeats", "3", "--threads", "1", "--no-comm", "-o", profile], work)
    cases = CASES + ([CHECKPOINT_CASE] if args.model == "gpt" else [])
    for name, schedule, extra in cases:
        checkpoint = "all" if name.endswith("-checkpoint") else "none"
        run([args.pipeplan, "plan", "--profile", profile, "--devices", "2", "--device-memory",
             "4GiB", "--global-batch", str(GLOBAL_BATCH), "--pp", "2", "--dp", "1",
             "--micro-batch-size", str(MICRO_BATCH), "--schedule", schedule, "--checkpoint",
             checkpoint, "-o", f"plan-{name}.json"] + extra, work)
        run([args.pipeplan, "export", "--plan", f"plan-{name}.json", "--to", "torch-pipelining",
             "--profile", profile, "-o", f"stages-{name}.json"], work)
        run([args.pipeplan, "export", "--plan", f"plan-{name}.json", "--to", "torchtitan",
             "--profile", profile, "-o", f"job-{name}.toml", "--schedule-csv",
             f"actions-{name}.csv"], work)
    return profile, [c[0] for c in cases]


def stage_parameter_counts(model, desc):
    import pipeplan_pipelining as helper
    return [sum(p.numel() for p in helper.split_module(model, s["modules"]).parameters())
            for s in desc["stages"]]


def check_split(model, desc, plan, profile):
    """Raises AssertionError unless each stage the helper builds from `desc` holds the parameters
    of the plan's layer range, as profile.json counts them."""
    layers = profile["layers"]
    expected = [sum(layers[i]["param_count"] for i in range(s["first"], s["last"]))
                for s in plan["stages"]]
    built = stage_parameter_counts(model, desc)
    assert built == expected, f"stages hold {built} parameters, the plan's layers {expected}"


def check_exports(args, work, profile_path, names):
    import pipeplan_pipelining as helper
    import tomllib
    from torch.distributed.pipelining.schedules import get_schedule_class
    model = make_model(args.model)
    with open(profile_path) as f:
        profile = json.load(f)
    for name in names:
        desc = helper.load_description(os.path.join(work, f"stages-{name}.json"))
        with open(os.path.join(work, f"plan-{name}.json")) as f:
            plan = json.load(f)
        check_split(model, desc, plan, profile)
        with open(os.path.join(work, f"job-{name}.toml"), "rb") as f:
            job = tomllib.load(f)
        parallelism = job["parallelism"]
        assert parallelism["module_fqns_per_model_part"] == [s["modules"] for s in desc["stages"]]
        assert (job["training"]["local_batch_size"] //
                parallelism["pipeline_parallel_microbatch_size"] == desc["n_microbatches"])
        cls = get_schedule_class(parallelism["pipeline_parallel_schedule"])
        if desc["schedule_class"] != "_PipelineScheduleRuntime":
            assert cls.__name__ == desc["schedule_class"], (cls.__name__, desc["schedule_class"])
    # The negative: a description whose split differs from the plan's (the first module of
    # stage 1 moved to stage 0) must fail the split check.
    desc = helper.load_description(os.path.join(work, "stages-1f1b.json"))
    with open(os.path.join(work, "plan-1f1b.json")) as f:
        plan = json.load(f)
    moved = copy.deepcopy(desc)
    moved["stages"][0]["modules"].append(moved["stages"][1]["modules"].pop(0))
    try:
        check_split(model, moved, plan, profile)
    except AssertionError as error:
        print(f"negative: a split differing from the plan fails: {error}")
    else:
        raise AssertionError("a description whose split differs from the plan passed the check")


def reference(args, name, desc):
    """Losses and final state of one process running the same micro-batches in order."""
    import pipelining_models as models
    loss_fn = models.MODELS[args.model][1]
    model = make_model(args.model)
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    n = desc["n_microbatches"]
    losses = []
    for x, y in batches(args.model, STEPS):
        total = 0.0
        for xm, ym in zip(torch.tensor_split(x, n), torch.tensor_split(y, n)):
            loss = loss_fn(model(xm), ym) / n
            loss.backward()
            total += loss.item()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(total)
    return losses, model.state_dict()


def worker(rank, job_path):
    """One rank: every case's stages, schedule and 3 steps; writes its losses and state."""
    import pipeplan_pipelining as helper
    import pipelining_models as models
    import torch.distributed as dist
    with open(job_path) as f:
        job = json.load(f)
    dist.init_process_group("gloo", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=job["timeout_s"]))
    loss_fn = models.MODELS[job["model"]][1]
    results = {}
    for name in job["cases"]:
        desc = helper.load_description(os.path.join(job["work"], f"stages-{name}.json"))
        model = make_model(job["model"])
        model.load_state_dict(torch.load(os.path.join(job["work"], "init.pt")))
        pp_rank, _ = helper.placement(desc, rank)
        stages, modules = helper.build_stages(model, desc, pp_rank, torch.device("cpu"))
        schedule = helper.build_schedule(desc, stages, loss_fn)
        params = [p for m in modules for p in m.parameters()]
        optimizer = torch.optim.SGD(params, lr=LEARNING_RATE, momentum=MOMENTUM)
        first = any(s.is_first for s in stages)
        last = any(s.is_last for s in stages)
        losses = []
        for x, y in batches(job["model"], STEPS):
            step_losses = [] if last else None
            schedule.step(*((x,) if first else ()), target=y if last else None,
                          losses=step_losses)
            optimizer.step()
            optimizer.zero_grad()
            if last:
                losses.append(sum(l.item() for l in step_losses))
        state = {}
        for module in modules:
            state.update(module.state_dict())
        order = getattr(schedule, "pipeline_order", None)
        compute = [str(a) for a in order[pp_rank] if a is not None] if order else None
        results[name] = {"losses": losses, "state": state, "order": compute}
        dist.barrier()
    torch.save(results, os.path.join(job["work"], f"rank{rank}.pt"))
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(args, work, names):
    job = {"model": args.model, "work": work, "cases": names, "timeout_s": args.timeout}
    job_path = os.path.join(work, "job.json")
    with open(job_path, "w") as f:
        json.dump(job, f)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), USE_LIBUV="0",
               OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(rank), "--job", job_path],
                              env=env) for rank in range(2)]
    codes = [p.wait(timeout=args.timeout + 60) for p in procs]
    if any(codes):
        raise RuntimeError(f"ranks exited {codes}")
    return [torch.load(os.path.join(work, f"rank{rank}.pt")) for rank in range(2)]


def relative_error(a, b):
    a, b = a.double(), b.double()
    scale = b.abs().max().item()
    return (a - b).abs().max().item() / scale if scale > 0 else (a - b).abs().max().item()


def compare(args, work, names, ranks):
    failures = []
    for name in names:
        desc = json.load(open(os.path.join(work, f"stages-{name}.json")))
        ref_losses, ref_state = reference(args, name, desc)
        losses = next(r[name]["losses"] for r in ranks if r[name]["losses"])
        state = {**ranks[0][name]["state"], **ranks[1][name]["state"]}
        loss_error = max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses))
        if sorted(state) != sorted(ref_state):
            failures.append(f"{name}: the stages hold {sorted(set(state) ^ set(ref_state))} "
                            "differently from the model")
            continue
        worst = max((relative_error(state[k], ref_state[k]), k) for k in ref_state)
        print(f"{args.model} {name}: losses {['%.6f' % l for l in losses]}, loss error "
              f"{loss_error:.2e}, worst tensor {worst[1]} {worst[0]:.2e}")
        if loss_error > RELATIVE_TOLERANCE or worst[0] > RELATIVE_TOLERANCE:
            failures.append(f"{name}: loss error {loss_error:.2e}, {worst[1]} {worst[0]:.2e}")
        if desc["schedule_class"] == "ScheduleInterleaved1F1B":
            for rank, result in enumerate(ranks):
                if result[name]["order"] != desc["actions"][rank]:
                    failures.append(f"{name}: torch's order on rank {rank} "
                                    f"{result[name]['order']} is not the export's")
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pipeplan", help="the pipeplan binary")
    parser.add_argument("--model", choices=["gpt", "resnet"], default="gpt")
    parser.add_argument("--profile", help="use this profile instead of profiling here")
    parser.add_argument("--work", help="keep the files here (default: a temporary folder)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a rank may wait")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        return worker(args.worker, args.job)
    if torch_version() < (2, 4):
        print(f"skipped: torch {torch.__version__} has no torch.distributed.pipelining "
              "runtime with schedule CSVs (needs 2.4 or later; the Debian 13 leg runs this)")
        return SKIP
    work = args.work or tempfile.mkdtemp(prefix=f"pipeplan_pipelining_{args.model}_")
    os.makedirs(work, exist_ok=True)
    profile, names = prepare(args, work)
    check_exports(args, work, profile, names)
    failures = compare(args, work, names, run_ranks(args, work, names))
    for failure in failures:
        print(f"FAILED {args.model} {failure}")
    if not failures and not args.work:
        shutil.rmtree(work)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
