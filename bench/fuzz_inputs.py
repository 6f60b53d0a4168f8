#!/usr/bin/env python3
"""Fuzzes every input the built `pipeplan` reads, through the command line, and reports crashes,
hangs, exit codes and silent acceptance of corrupted checkpoints.

usage: bench/fuzz_inputs.py [--build DIR] [--work DIR] [--files N] [--jobs J] [--seed S]
                            [--timeout-s S] [--keep]

From one seeded set of valid inputs of mlp_tiny (a profile, a pp=2 training plan, a pp=1
inference plan, a run, a checkpoint folder of a 2-rank run stopped after step 6, its steps log
and a TorchScript file), it writes about N mutated files, spread over the readers below, and runs
the commands that read each:

  reader            commands
  profile           plan --profile F
  plan              simulate --plan F; compare --plan F --run run.json
  inference plan    simulate --plan F; every third file also infer --plan F
  run               compare --plan plan.json --run F
  calibration run   plan --profile p.json --calibrate F
  TorchScript file  models --model F
  manifest          infer --checkpoint C; every second file also launch 2 x train --resume
  stage file        the same, with C/step-6/stage-0.pt or stage-1.pt mutated
  steps log         launch 2 x train --resume --log F

JSON files get the mutations of tests/planner/fuzz_test.cpp (keys deleted, values of another type,
extreme numbers, arrays cut, repeated or shuffled), and some are spoiled in the text (nesting
100,000 or 65 deep, a key repeated, bytes after the document, NUL bytes, flipped or cut bytes);
manifests are half the time checksummed again after the edit, as a user could. Binary files get
runs of random or zero bytes (up to 400 KB), flipped bytes, cuts, and another step's stage file.
Every reader also gets special files: a FIFO, /dev/zero, a folder, a loop of links, an empty file.

A run passes when it exits 0, or exits 2 with one line "pipeplan: error: ..." of at most 600
characters, or (plan and infer only) exits 1 with one such line that is no internal error.
Killed by a signal, an exit code other than 0, 1 and 2, an internal error or a longer error is a
crash; a run past --timeout-s is a hang. A checkpoint case that exits 0 must give the outputs or
final loss of the intact checkpoint (else: a silent acceptance). Prints a summary (files, runs,
crashes, hangs, silent acceptances, slowest run) and writes every run to WORK/fuzz_runs.jsonl.
Exits 1 when anything failed.
"""
import argparse
import concurrent.futures
import copy
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import tempfile
import time

TORCH_PYTHON = "/usr/bin/python3"  # Debian's python3-torch, which scripts/setup.sh installs
TRAIN_STEPS = 8
STOP_AT_STEP = 7  # the training run stops here: checkpoints at steps 3 and 6
MAX_ERROR_CHARS = 600
EXTREME_INTEGERS = [0, -1, 1, 2, 10000000, 2147483648, 4294967297, 1099511627776,
                    9007199254740993, 2**63 - 1, -2**63, 2**64 - 1]
EXTREME_REALS = [0.0, -0.0, -1.0, 1e-300, 1e13, 1e19, 1e308, -1e308]
OTHER_TYPES = [None, True, "x", "", [], {}, 1, -1, 1.5, [1, 2], {"a": 1}, "z" * 100000]
TAILS = [b"\0", b"\0\0garbage", b" x", b"{}", b"\n]", b"\0{\"a\": 1}"]

# Share of the files per reader (of --files).
SHARES = {"profile": 0.2, "plan": 0.14, "inference plan": 0.08, "run": 0.12,
          "calibration run": 0.08, "TorchScript file": 0.06, "manifest": 0.12,
          "stage file": 0.12, "steps log": 0.08}


def log(message):
    print(message, file=sys.stderr, flush=True)


def run_checked(command, cwd, env=None):
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"fuzz_inputs.py: setup failed: {' '.join(command)}\n{result.stderr}")
    return result


# ---- the valid inputs -------------------------------------------------------------------------

def make_bases(pipeplan, work):
    """Writes the valid inputs into `work`; returns the paths and the intact results."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run_checked([pipeplan, "profile", "--model", "mlp_tiny", "--no-comm", "--batch-sizes", "2,4,8",
                 "--warmup", "1", "--repeats", "3", "-o", "p.json"], work, env)
    common = ["--device-memory", "1GiB", "--global-batch", "16"]
    run_checked([pipeplan, "plan", "--profile", "p.json", "--devices", "2", "--pp", "2"] + common +
                ["-o", "plan.json"], work)
    run_checked([pipeplan, "plan", "--profile", "p.json", "--devices", "1", "--inference"] +
                common + ["-o", "serve.json"], work)
    train = [pipeplan, "launch", "--nproc", "2", "--", pipeplan, "train", "--plan", "plan.json",
             "--data", "synthetic", "--steps", str(TRAIN_STEPS), "--checkpoint-dir", "ck",
             "--checkpoint-every", "3", "--log", "steps.jsonl", "-o", "run.json"]
    stopped = subprocess.run(train, cwd=work, env=dict(env, PIPEPLAN_TEST_FAIL_AT_STEP=str(STOP_AT_STEP)),
                             capture_output=True, text=True)
    if stopped.returncode == 0:
        sys.exit("fuzz_inputs.py: setup: the training run did not stop at step 7")
    shutil.copytree(os.path.join(work, "ck"), os.path.join(work, "ck_base"))
    shutil.copy(os.path.join(work, "steps.jsonl"), os.path.join(work, "steps_base.jsonl"))
    # The intact results: a resumed run's final loss, the served outputs.
    shutil.copytree(os.path.join(work, "ck_base"), os.path.join(work, "ck_resumed"))
    run_checked(resume_command(pipeplan, "ck_resumed", "run.json", "steps.jsonl"), work, env)
    final_loss = json.load(open(os.path.join(work, "run.json")))["final_loss"]
    run_checked(infer_command(pipeplan, "serve.json", "ck_base", "served.json", "outputs.pt"), work,
                env)
    outputs = open(os.path.join(work, "outputs.pt"), "rb").read()
    script = ("import torch, sys\n"
              "from torch import nn\n"
              "m = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))\n"
              "m.pipeplan_input_shape = [1, 28, 28]\n"
              "torch.jit.script(m).save(sys.argv[1])\n")
    run_checked([TORCH_PYTHON, "-c", script, os.path.join(work, "model.pt")], work)
    run_checked([pipeplan, "models", "--model", "model.pt"], work)
    return {"final_loss": final_loss, "outputs": outputs}


def resume_command(pipeplan, checkpoint_dir, output, log_path):
    return [pipeplan, "launch", "--nproc", "2", "--", pipeplan, "train", "--plan", "plan.json",
            "--data", "synthetic", "--steps", str(TRAIN_STEPS), "--checkpoint-dir", checkpoint_dir,
            "--checkpoint-every", "3", "--resume", "--log", log_path, "-o", output]


def infer_command(pipeplan, plan, checkpoint_dir, output, outputs):
    command = [pipeplan, "infer", "--plan", plan, "--data", "synthetic", "--requests", "2",
               "--warmup", "0", "-o", output, "--save-outputs", outputs]
    return command + (["--checkpoint", checkpoint_dir] if checkpoint_dir else [])


# ---- mutations --------------------------------------------------------------------------------

def paths_of(value, at=()):
    """Every value's path inside `value`, the root excluded."""
    items = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list) else [])
    out = []
    for key, child in items:
        out.append(at + (key,))
        out.extend(paths_of(child, at + (key,)))
    return out


def get(doc, path):
    for key in path:
        doc = doc[key]
    return doc


def set_at(doc, path, value):
    get(doc, path[:-1])[path[-1]] = value


def mutate(doc, rng):
    """One mutation of the JSON value `doc` in place; returns what it did."""
    paths = paths_of(doc)
    kind = rng.randrange(7)
    if kind <= 2:
        numbers = [p for p in paths if isinstance(get(doc, p), (int, float))
                   and not isinstance(get(doc, p), bool)]
        if not numbers:
            return ""
        path = rng.choice(numbers)
        value = get(doc, path)
        if isinstance(value, float):
            new = rng.choice(EXTREME_REALS + [value * 10 ** rng.randrange(-6, 16)])
        else:
            new = rng.choice(EXTREME_INTEGERS + [value + 1, value - 1])
        set_at(doc, path, new)
        return f"set {path} = {new}"
    if kind == 3:
        members = [p for p in paths if isinstance(get(doc, p[:-1]), dict)]
        if not members:
            return ""
        path = rng.choice(members)
        del get(doc, path[:-1])[path[-1]]
        return f"delete {path}"
    if kind == 4:
        path = rng.choice(paths)
        set_at(doc, path, copy.deepcopy(rng.choice(OTHER_TYPES)))
        return f"retype {path}"
    arrays = [p for p in paths if isinstance(get(doc, p), list) and get(doc, p)]
    if not arrays:
        return ""
    path = rng.choice(arrays)
    array = get(doc, path)
    choice = rng.randrange(3)
    if choice == 0:
        del array[rng.randrange(len(array)):]
        return f"truncate {path}"
    if choice == 1:
        array.insert(rng.randrange(len(array) + 1), copy.deepcopy(rng.choice(array)))
        return f"duplicate in {path}"
    rng.shuffle(array)
    return f"shuffle {path}"


def spoil_text(text, rng):
    """`text` (bytes of a JSON document) made unreadable; returns (bytes, what)."""
    kind = rng.randrange(6)
    if kind == 0:  # nesting in place of the first string value
        depth = rng.choice([65, 100000])
        at = text.find(b'": "')
        if at >= 0:
            return text[:at + 3] + b"[" * depth + b"]" * depth + b', "x": ' + text[at + 3:], \
                f"nest {depth} deep"
    if kind == 1:  # an object's first key given again
        opens = [i for i in range(len(text) - 1) if text[i:i + 2] == b'{"']
        if opens:
            at = rng.choice(opens)
            key = text[at + 1:text.index(b'"', at + 2) + 1]
            return text[:at + 1] + key + b": 0, " + text[at + 1:], f"repeat key {key!r}"
    if kind == 2:
        tail = rng.choice(TAILS)
        return text + tail, f"append {tail!r}"
    if kind == 3:  # flipped bytes
        data = bytearray(text)
        for _ in range(rng.randrange(1, 8)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data), "flip bytes"
    if kind == 4:
        cut = rng.randrange(len(text))
        return text[:cut], f"cut at {cut}"
    at = rng.randrange(len(text))
    return text[:at] + b"\0" * rng.randrange(1, 64) + text[at:], f"NUL bytes at {at}"


def mutated_json(base, rng, rechecksum=None):
    """A mutated document (bytes) of the JSON `base`, and what was done."""
    doc = copy.deepcopy(base)
    what = [mutate(doc, rng) for _ in range(1 if rng.random() < 0.5 else rng.randrange(2, 4))]
    if rechecksum is not None and rng.random() < 0.5:
        rechecksum(doc)
        what.append("checksummed again")
    text = json.dumps(doc, indent=rng.choice([None, 2])).encode()
    if rng.random() < 0.25:
        text, spoiled = spoil_text(text, rng)
        what.append(spoiled)
    return text, "; ".join(w for w in what if w)


def mutated_bytes(base, rng):
    """A mutated copy of binary `base` (a zip archive), and what was done."""
    data = bytearray(base)
    kind = rng.randrange(5)
    if kind == 0:
        size = rng.randrange(1, min(len(data), 400 * 1024) + 1)
        at = rng.randrange(len(data) - size + 1)
        data[at:at + size] = rng.randbytes(size)
        return bytes(data), f"random bytes [{at}, {at + size})"
    if kind == 1:
        size = rng.randrange(1, min(len(data), 400 * 1024) + 1)
        at = rng.randrange(len(data) - size + 1)
        data[at:at + size] = bytes(size)
        return bytes(data), f"zero bytes [{at}, {at + size})"
    if kind == 2:
        for _ in range(rng.randrange(1, 16)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data), "flip bytes"
    if kind == 3:
        cut = rng.randrange(len(data))
        return bytes(data[:cut]), f"cut at {cut}"
    return bytes(data) + rng.randbytes(rng.randrange(1, 4096)), "append bytes"


def log_mutation(base, rng):
    """A mutated steps log (bytes) and what was done."""
    lines = base.split(b"\n")
    kind = rng.randrange(6)
    if kind == 0:
        lines.insert(rng.randrange(len(lines) + 1), b"not json")
        what = "garbage line"
    elif kind == 1:
        del lines[rng.randrange(len(lines))]
        what = "line deleted"
    elif kind == 2:
        lines.insert(rng.randrange(len(lines) + 1), b"[" * 100000 + b"]" * 100000)
        what = "deep line"
    elif kind == 3:
        lines.insert(rng.randrange(len(lines) + 1), b'{"step": 1e999, "x": ' + b"z" * 100000 + b"}")
        what = "huge line"
    elif kind == 4:
        return base[:rng.randrange(len(base))] + b"\0\xff\xfe", "cut and NUL"
    else:
        lines.insert(rng.randrange(len(lines) + 1), b'{"step": 2, "step": 99}')
        what = "repeated key"
    return b"\n".join(lines), what


# ---- cases ------------------------------------------------------------------------------------

def write_special(path, kind):
    """Puts a special file at `path`: fifo, zero (link to /dev/zero), folder, loop, empty."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "zero":
        os.symlink("/dev/zero", path)
    elif kind == "folder":
        os.mkdir(path)
    elif kind == "loop":
        os.symlink(os.path.basename(path), path)
    else:
        open(path, "wb").close()


SPECIALS = ["fifo", "zero", "folder", "loop", "empty"]


class Cases:
    """Writes the cases' files under WORK/cases and lists their runs."""

    def __init__(self, pipeplan, work, rng):
        self.pipeplan, self.work, self.rng = pipeplan, work, rng
        self.runs = []  # dicts: case, reader, what, command, check
        self.files = 0

    def path(self, name):
        folder = os.path.join(self.work, "cases", name)
        os.makedirs(folder, exist_ok=True)
        return folder

    def add(self, reader, what, commands, checks=()):
        """One file's runs, in order; checks[i] (if any) is what commands[i] must give on exit 0."""
        case = f"{reader} #{self.files}"
        self.files += 1
        for idx, command in enumerate(commands):
            self.runs.append({"case": case, "reader": reader, "what": what, "command": command,
                              "check": checks[idx] if idx < len(checks) else None})

    def json_reader(self, reader, base, name, commands_for, rechecksum=None, count=0):
        for idx in range(count):
            folder = self.path(f"{name}-{idx}")
            target = os.path.join(folder, name)
            if idx < len(SPECIALS):
                write_special(target, SPECIALS[idx])
                what = SPECIALS[idx]
            else:
                text, what = mutated_json(base, self.rng, rechecksum)
                open(target, "wb").write(text)
            self.add(reader, what, commands_for(target, folder))


def manifest_checksum(doc):
    """The manifest's own checksum (executor/checkpoint.cpp: FNV-1a of the compact dump)."""
    doc.pop("checksum", None)
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    value = 0xcbf29ce484222325
    for byte in text.encode():
        value = ((value ^ byte) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    doc["checksum"] = f"fnv1a64:{value:016x}"


def plan_cases(cases, counts):
    p = cases.pipeplan
    work = cases.work
    load = lambda name: json.load(open(os.path.join(work, name)))
    common = ["--devices", "2", "--device-memory", "1GiB", "--global-batch", "16"]
    cases.json_reader("profile", load("p.json"), "profile.json",
                      lambda f, d: [[p, "plan", "--profile", f] + common + ["-o", d + "/o.json"]],
                      count=counts["profile"])
    cases.json_reader("plan", load("plan.json"), "plan.json",
                      lambda f, d: [[p, "simulate", "--plan", f, "--trace", d + "/t.json"],
                                    [p, "compare", "--plan", f, "--run", "run.json"]],
                      count=counts["plan"])
    serve = load("serve.json")
    for idx in range(counts["inference plan"]):
        folder = cases.path(f"serve-{idx}")
        target = os.path.join(folder, "serve.json")
        if idx < len(SPECIALS):
            write_special(target, SPECIALS[idx])
            what = SPECIALS[idx]
        else:
            text, what = mutated_json(serve, cases.rng)
            open(target, "wb").write(text)
        commands = [[p, "simulate", "--plan", target]]
        if idx % 3 == 0:
            commands.append(infer_command(p, target, "", folder + "/r.json", folder + "/o.pt"))
        cases.add("inference plan", what, commands)
    cases.json_reader("run", load("run.json"), "run.json",
                      lambda f, d: [[p, "compare", "--plan", "plan.json", "--run", f]],
                      count=counts["run"])
    cases.json_reader("calibration run", load("run.json"), "calibration.json",
                      lambda f, d: [[p, "plan", "--profile", "p.json"] + common +
                                    ["--pp", "2", "--calibrate", f, "-o", d + "/o.json"]],
                      count=counts["calibration run"])


def binary_cases(cases, counts, baseline):
    p, work, rng = cases.pipeplan, cases.work, cases.rng
    model = open(os.path.join(work, "model.pt"), "rb").read()
    for idx in range(counts["TorchScript file"]):
        target = os.path.join(cases.path(f"model-{idx}"), "model.pt")
        if idx < len(SPECIALS):
            write_special(target, SPECIALS[idx])
            what = SPECIALS[idx]
        else:
            data, what = mutated_bytes(model, rng)
            open(target, "wb").write(data)
        cases.add("TorchScript file", what, [[p, "models", "--model", target]])
    step_dir = "step-00000006"
    manifest = json.load(open(os.path.join(work, "ck_base", step_dir, "checkpoint.json")))
    stages = [open(os.path.join(work, "ck_base", step_dir, f"stage-{s}.pt"), "rb").read()
              for s in range(2)]
    for reader in ("manifest", "stage file"):
        for idx in range(counts[reader]):
            folder = cases.path(f"{reader.replace(' ', '_')}-{idx}")
            checkpoint = os.path.join(folder, "ck")
            shutil.copytree(os.path.join(work, "ck_base"), checkpoint)
            stage_idx = idx % 2
            name = "checkpoint.json" if reader == "manifest" else f"stage-{stage_idx}.pt"
            target = os.path.join(checkpoint, step_dir, name)
            os.remove(target)
            if idx < len(SPECIALS):
                write_special(target, SPECIALS[idx])
                what = SPECIALS[idx]
            elif reader == "manifest":
                text, what = mutated_json(manifest, rng, manifest_checksum)
                open(target, "wb").write(text)
            elif idx % 10 == 5:  # the stage file of another step
                shutil.copy(os.path.join(work, "ck_base", "step-00000003", name), target)
                what = "stage file of step 3"
            else:
                data, what = mutated_bytes(stages[stage_idx], rng)
                open(target, "wb").write(data)
            # infer first: a resume writes new checkpoints into the folder.
            commands = [infer_command(p, "serve.json", checkpoint, folder + "/r.json",
                                      folder + "/outputs.pt")]
            checks = [{"kind": "outputs", "path": folder + "/outputs.pt"}]
            if idx % 2 == 0:
                commands.append(resume_command(p, checkpoint, folder + "/run.json",
                                               folder + "/steps.jsonl"))
                checks.append({"kind": "resume", "path": folder + "/run.json"})
                shutil.copy(os.path.join(work, "steps_base.jsonl"), folder + "/steps.jsonl")
            cases.add(reader, what, commands, checks)
    base_log = open(os.path.join(work, "steps_base.jsonl"), "rb").read()
    for idx in range(counts["steps log"]):
        folder = cases.path(f"log-{idx}")
        checkpoint = os.path.join(folder, "ck")
        shutil.copytree(os.path.join(work, "ck_base"), checkpoint)
        target = os.path.join(folder, "steps.jsonl")
        if idx < len(SPECIALS):
            write_special(target, SPECIALS[idx])
            what = SPECIALS[idx]
        else:
            data, what = log_mutation(base_log, rng)
            open(target, "wb").write(data)
        cases.add("steps log", what, [resume_command(p, checkpoint, folder + "/run.json", target)],
                  [{"kind": "resume", "path": folder + "/run.json"}])


# ---- running ----------------------------------------------------------------------------------

def run_one(run, work, timeout_s):
    start = time.monotonic()
    try:
        result = subprocess.run(run["command"], cwd=work, capture_output=True,
                                timeout=timeout_s, env=dict(os.environ, OMP_NUM_THREADS="1"))
        code, err = result.returncode, result.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired as expired:
        code, err = None, (expired.stderr or b"").decode(errors="replace")
    return {"case": run["case"], "reader": run["reader"], "what": run["what"],
            "command": " ".join(run["command"]), "exit": code,
            "seconds": time.monotonic() - start, "error": err.strip()[-2000:]}


# The verdicts that fail the fuzz ("accepted edit" is counted, not failed).
FAILURES = ("crash", "hang", "silent acceptance")
# What stderr holds only when something crashed.
CRASH_WORDS = ["internal error", "terminate called", "Traceback", "Segmentation fault",
               "Aborted", "core dumped", "stack trace", "Exception raised from"]


def error_lines(err):
    """The error lines: pipeplan's own, and those launch relays prefixed with "[rank r] "."""
    return [line for line in err.splitlines() if "pipeplan: error: " in line]


def judge(record, run, baseline):
    """'ok', or why the run failed: crash, hang, silent acceptance."""
    code, err = record["exit"], record["error"]
    if code is None:
        return "hang"
    if code < 0 or code not in (0, 1, 2) or any(word in err for word in CRASH_WORDS):
        return "crash"
    errors = error_lines(err)
    # Each error line is one line of at most MAX_ERROR_CHARS (beside launch's "[rank r] ").
    if code != 0 and (not errors or any(len(line) > MAX_ERROR_CHARS + 16 for line in errors)):
        return "crash"
    if code == 0 and run["check"] and silently_accepted(run["check"], baseline):
        # A manifest edited and checksummed again is a user's edit, not a corruption: counted.
        return "accepted edit" if "checksummed again" in record["what"] else "silent acceptance"
    return "ok"


def silently_accepted(check, baseline):
    if check["kind"] == "resume":
        try:
            loss = json.load(open(check["path"]))["final_loss"]
        except (OSError, ValueError, KeyError):
            return True
        return loss != baseline["final_loss"]
    try:
        return open(check["path"], "rb").read() != baseline["outputs"]
    except OSError:
        return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--work")
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--timeout-s", type=float, default=120)
    parser.add_argument("--keep", action="store_true", help="keep WORK's case files")
    args = parser.parse_args()
    pipeplan = os.path.abspath(os.path.join(args.build, "cli", "pipeplan"))
    if not os.access(pipeplan, os.X_OK):
        sys.exit(f"fuzz_inputs.py: no {pipeplan} (build targets pipeplan and pipeplan-torch)")
    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="pipeplan_fuzz_"))
    if os.path.exists(os.path.join(work, "cases")):
        shutil.rmtree(os.path.join(work, "cases"))
    os.makedirs(work, exist_ok=True)
    rng = random.Random(args.seed)
    started = time.monotonic()
    log(f"fuzz: setting up in {work}")
    baseline = make_bases(pipeplan, work)
    counts = {reader: max(len(SPECIALS) + 1, round(share * args.files))
              for reader, share in SHARES.items()}
    cases = Cases(pipeplan, work, rng)
    plan_cases(cases, counts)
    binary_cases(cases, counts, baseline)
    log(f"fuzz: {cases.files} files, {len(cases.runs)} runs")
    # Each case's runs one after another (a resume then an infer of one folder), cases at once.
    by_case = {}
    for run in cases.runs:
        by_case.setdefault(run["case"], []).append(run)

    def run_case(runs):
        out = []
        for run in runs:
            record = run_one(run, work, args.timeout_s)
            record["verdict"] = judge(record, run, baseline)
            out.append(record)
        return out

    records = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for done, result in enumerate(pool.map(run_case, by_case.values()), start=1):
            records.extend(result)
            if done % 100 == 0:
                log(f"fuzz: {done} of {len(by_case)} files")
    with open(os.path.join(work, "fuzz_runs.jsonl"), "w") as out:
        for record in records:
            out.write(json.dumps(record) + "\n")
    summarize(records, cases.files, time.monotonic() - started, args)
    if not args.keep:
        shutil.rmtree(os.path.join(work, "cases"), ignore_errors=True)
    return 1 if any(r["verdict"] in FAILURES for r in records) else 0


def summarize(records, files, seconds, args):
    by_reader = {}
    for record in records:
        row = by_reader.setdefault(record["reader"], {"files": set(), "runs": 0, "exit": {},
                                                      "bad": 0})
        row["files"].add(record["case"])
        row["runs"] += 1
        row["exit"][str(record["exit"])] = row["exit"].get(str(record["exit"]), 0) + 1
        row["bad"] += record["verdict"] in FAILURES
    print(f"| reader | files | runs | exit 0 | exit 1 | exit 2 | failed |")
    print(f"|---|---:|---:|---:|---:|---:|---:|")
    for reader, row in by_reader.items():
        print(f"| {reader} | {len(row['files'])} | {row['runs']} | {row['exit'].get('0', 0)} | "
              f"{row['exit'].get('1', 0)} | {row['exit'].get('2', 0)} | {row['bad']} |")
    verdicts = {}
    for record in records:
        verdicts[record["verdict"]] = verdicts.get(record["verdict"], 0) + 1
    slowest = max(records, key=lambda r: r["seconds"])
    print(f"fuzz: {files} files, {len(records)} runs, crashes {verdicts.get('crash', 0)}, "
          f"hangs {verdicts.get('hang', 0)}, silent acceptances "
          f"{verdicts.get('silent acceptance', 0)} (edited manifests checksummed again and "
          f"accepted: {verdicts.get('accepted edit', 0)}), slowest run {slowest['seconds']:.1f} s "
          f"({slowest['reader']}: {slowest['what']}), {seconds / 60:.1f} min in all "
          f"(seed {args.seed}, {args.jobs} jobs)")
    for record in records:
        if record["verdict"] != "ok":
            print(f"fuzz {record['verdict']}: {record['case']} ({record['what']}): exit "
                  f"{record['exit']}: {record['command']}\n  {record['error'][-300:]}")
    ones = [r for r in records if r["exit"] == 1]
    for record in ones[:20]:
        print(f"fuzz exit 1: {record['case']} ({record['what']}): "
              f"{(error_lines(record['error']) or [''])[-1][:200]}")


if __name__ == "__main__":
    sys.exit(main())
