"""torch.distributed.pipelining stages from a user's nn.Module and a pipeplan export.

    pipeplan export --plan plan.json --to torch-pipelining -o stages.json

writes which modules (by fully qualified name) each pipeline stage holds, which rank runs it,
the schedule and its micro-batches. This module turns that description and the model into
``PipelineStage`` objects and a schedule, torchtitan's way: each stage is a deep copy of the
whole model from which the modules the stage does not hold are deleted.

    import pipeplan_pipelining as pp
    desc = pp.load_description("stages.json")
    pp_rank, replica = pp.placement(desc, dist.get_rank())
    pp_group, dp_group = pp.process_groups(desc)
    stages, modules = pp.build_stages(model, desc, pp_rank, device, group=pp_group)
    schedule = pp.build_schedule(desc, stages, loss_fn)
    schedule.step(x, target=y)               # first stage gives x, last stage y
    pp.all_reduce_gradients(modules, dp_group)   # dp > 1
    optimizer.step()

The model's forward must tolerate the deleted modules, as torchtitan's models do: a module that
holds parameters or buffers and is not on the stage becomes None (or leaves its ModuleList,
ModuleDict or Sequential, which keep the other items' names), so write
``if self.embed is not None: x = self.embed(x)`` for the modules around the repeated blocks.
Modules without parameters or buffers (activations, pooling) stay on every stage.

Version notes, each handled here by checking the installed torch:
  * torch < 2.8: ``_batch_p2p`` waits for only the last of the works ``batch_isend_irecv``
    returns, which on Gloo are one per operation, so 1F1B, interleaved and runtime (CSV)
    schedules hang (pytorch issue #132644, fixed in 2.8 by PR #152938). ``build_schedule``
    replaces it with one that waits for every work, on Gloo and torch < 2.8 only.
  * torch 2.6: the last stage detaches its outputs in place after their backward, which fails
    when the model returns a view ("Can't detach views in-place", pytorch issue #142229; later
    versions skip views, PR #142237). Where the installed stage code does not skip them,
    ``build_stages`` makes the last stage return a copy of a view output.
  * torch's runtime shape inference (2.6) runs each stage's forward once on zeros before the
    first step, which moves BatchNorm's running statistics (running_var towards 0) and counts a
    batch; the stages made here put every buffer back afterwards.
  * torch 2.6 sums the micro-batches' gradients; later schedules take ``scale_grads``. The
    loss given to the schedule here is divided by the number of micro-batches and
    ``scale_grads=False`` is passed where it exists, so that on every version the gradients are
    the mean over the micro-batches and the losses the schedule reports sum to the batch's mean.
"""

import copy
import csv
import inspect
import json
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules
from torch.distributed.pipelining import stage as _stage_module

SCHEMA = "pipeplan.export.torch-pipelining/1"
# Containers whose items a stage may hold some of.
_CONTAINERS = (nn.ModuleList, nn.ModuleDict, nn.Sequential)


def load_description(path):
    """The export's JSON; refuses another schema."""
    with open(path) as f:
        desc = json.load(f)
    if desc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {desc.get('schema')!r} is not {SCHEMA!r}")
    return desc


def placement(desc, rank):
    """(pp_rank, replica) of global `rank` in the plan's rank map."""
    for entry in desc["ranks"]:
        if entry["rank"] == rank:
            return entry["pp_rank"], entry["replica"]
    raise ValueError(f"rank {rank} is not in the plan's {len(desc['ranks'])} ranks")


def process_groups(desc):
    """(pipeline group, data-parallel group) of this rank. Every rank must call it (it creates
    every group). With dp = 1 the pipeline group is the default group and the other None."""
    if desc["dp"] == 1:
        return None, None
    pp_rank, replica = placement(desc, dist.get_rank())
    by_place = {(e["pp_rank"], e["replica"]): e["rank"] for e in desc["ranks"]}
    mine = [None, None]
    for r in range(desc["dp"]):
        group = dist.new_group([by_place[(s, r)] for s in range(desc["pp"])])
        if r == replica:
            mine[0] = group
    for s in range(desc["pp"]):
        group = dist.new_group([by_place[(s, r)] for r in range(desc["dp"])])
        if s == pp_rank:
            mine[1] = group
    return mine[0], mine[1]


def stage_indices(desc, pp_rank):
    """The stages `pp_rank` runs: s, s + pp, ... (loop placement, one per chunk)."""
    return [s["stage_index"] for s in desc["stages"] if s["pp_rank"] == pp_rank]


def _holds_state(module):
    return any(True for _ in module.parameters()) or any(True for _ in module.buffers())


def _drop(parent, name):
    # Containers lose the item and keep the others' names (layers.3 stays layers.3); other
    # modules' attributes become None, as torchtitan does.
    if isinstance(parent, _CONTAINERS):
        del parent._modules[name]
    else:
        setattr(parent, name, None)


def _prune(module, prefix, kept):
    for name, child in list(module.named_children()):
        fqn = f"{prefix}{name}"
        if fqn in kept:
            continue
        # A container stays, emptied of the items the stage does not hold, so that the forward
        # can still iterate over it.
        if isinstance(child, _CONTAINERS) or any(k.startswith(fqn + ".") for k in kept):
            _prune(child, fqn + ".", kept)
        elif _holds_state(child):
            _drop(module, name)


def split_module(model, modules):
    """A deep copy of `model` holding only the modules named in `modules` (FQNs), their
    ancestors, and the modules that hold no parameters or buffers. Raises ValueError for a name
    that is no module of `model`."""
    names = dict(model.named_modules())
    missing = [m for m in modules if m not in names]
    if missing:
        raise ValueError(f"modules {missing} of the export are not in the model "
                         f"(its children: {[n for n, _ in model.named_children()]})")
    part = copy.deepcopy(model)
    _prune(part, "", set(modules))
    return part


def check_coverage(model, desc):
    """Raises ValueError unless every parameter and buffer of `model` belongs to exactly one
    stage's modules: an export of another model, or of a split that drops a module, fails here
    rather than training a different network."""
    owners = {}
    for stage in desc["stages"]:
        for fqn in stage["modules"]:
            owners[fqn] = stage["stage_index"]
    state = [n for n, _ in model.named_parameters()] + [n for n, _ in model.named_buffers()]
    for name in state:
        holders = {owners[p] for p in owners if name == p or name.startswith(p + ".")}
        if len(holders) != 1:
            where = "no stage" if not holders else f"stages {sorted(holders)}"
            raise ValueError(f"{name} of the model is held by {where} of the export")


class CheckpointedStage(nn.Module):
    """A stage that keeps only its input per micro-batch and recomputes its forward during the
    backward (the plan's per-stage checkpoint flag)."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, *args):
        return torch.utils.checkpoint.checkpoint(self.module, *args, use_reentrant=False)


class _CopiedViewOutput(nn.Module):
    """The last stage on torch < 2.7: a view output becomes a copy, which the schedule can
    detach in place."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, *args):
        output = self.module(*args)
        if isinstance(output, torch.Tensor) and output._is_view():
            return output.clone()
        return output


class _Stage(PipelineStage):
    """A PipelineStage whose shape-inference forward (on zeros) leaves the buffers as they were,
    so that a pipelined run's BatchNorm statistics are those of the same steps in one process."""

    def _shape_inference(self, *args, **kwargs):
        buffers = [(b, b.clone()) for b in self.submod.buffers()]
        try:
            return super()._shape_inference(*args, **kwargs)
        finally:
            for buffer, saved in buffers:
                buffer.copy_(saved)


def build_stages(model, desc, pp_rank, device, group=None):
    """(PipelineStage list, module list) for the stages `pp_rank` runs, in stage order. The
    modules are the pruned copies (parameters under the model's own FQNs), for the optimizer,
    gradient all-reduce and checkpoints; a checkpointed stage runs them inside
    CheckpointedStage."""
    check_coverage(model, desc)
    stages, modules = [], []
    num_stages = len(desc["stages"])
    for index in stage_indices(desc, pp_rank):
        entry = desc["stages"][index]
        part = split_module(model, entry["modules"]).to(device)
        submodule = CheckpointedStage(part) if entry["checkpoint"] else part
        if index == num_stages - 1 and not _last_stage_skips_views():
            submodule = _CopiedViewOutput(submodule)
        stages.append(_Stage(submodule, index, num_stages, device, group=group))
        modules.append(part)
    return stages, modules


def _last_stage_skips_views():
    """Whether the installed pipelining leaves view outputs of the last stage attached."""
    try:
        source = inspect.getsource(_stage_module._PipelineStageBase.backward_one_chunk)
    except (AttributeError, OSError, TypeError):
        return False
    return "_is_view" in source


def _torch_version():
    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


class _WaitAll:
    """Every work of one batch_isend_irecv, waited for together."""

    def __init__(self, works):
        self._works = works

    def wait(self):
        for work in self._works:
            work.wait()
        return True


def _batch_p2p_waiting_all(p2p_ops, desc=None):
    if len(p2p_ops) == 0:
        return None
    return _WaitAll(dist.batch_isend_irecv(p2p_ops))


def apply_gloo_batch_p2p_fix(group=None):
    """On torch < 2.8 with Gloo, make pipelining wait for every work of its batched sends and
    receives (the change of pytorch PR #152938). Returns whether it patched."""
    if _torch_version() >= (2, 8) or dist.get_backend(group) != "gloo":
        return False
    schedules._batch_p2p = _batch_p2p_waiting_all
    return True


def _mean_over_microbatches(loss_fn, n_microbatches):
    def loss(output, target):
        return loss_fn(output, target) / n_microbatches
    return loss


def build_schedule(desc, stages, loss_fn=None):
    """The schedule the plan chose over `stages` (from build_stages), with desc's
    n_microbatches. zb-h1 (and any description run by its actions) loads the per-rank actions
    into _PipelineScheduleRuntime through a CSV, as torchtitan's pipeline_parallel_schedule_csv
    does. `loss_fn(output, target)` is the per-micro-batch loss; None for inference plans."""
    group = stages[0].group
    apply_gloo_batch_p2p_fix(group)
    n = desc["n_microbatches"]
    name = desc["schedule_class"]
    cls = getattr(schedules, name)
    kwargs = {}
    if loss_fn is not None:
        kwargs["loss_fn"] = _mean_over_microbatches(loss_fn, n)
    if "scale_grads" in inspect.signature(cls.__init__).parameters:
        kwargs["scale_grads"] = False
    # Interleaved, zero-bubble and runtime (CSV) schedules take every stage of the rank.
    multi = issubclass(cls, schedules.PipelineScheduleMulti)
    schedule = cls(stages if multi else stages[0], n_microbatches=n, **kwargs)
    if name == "_PipelineScheduleRuntime":
        _load_actions_csv(schedule, desc["actions"])
    return schedule


def _load_actions_csv(schedule, actions):
    fd, path = tempfile.mkstemp(suffix=".csv", prefix="pipeplan_actions_")
    try:
        with os.fdopen(fd, "w", newline="") as f:
            csv.writer(f).writerows(actions)
        schedule._load_csv(path)
    finally:
        os.unlink(path)


def all_reduce_gradients(modules, dp_group):
    """Averages the gradients of `modules` over the replicas of their stages (dp > 1); does
    nothing without a data-parallel group."""
    if dp_group is None:
        return
    size = dist.get_world_size(dp_group)
    for module in modules:
        for param in module.parameters():
            if param.grad is not None:
                dist.all_reduce(param.grad, group=dp_group)
                param.grad.div_(size)
