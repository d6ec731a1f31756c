"""Whether a run fits its IPUs, the defaults that make it fit, and a hint that was tried.

:func:`resolve` fills the defaults that depend on the run (the micro-batch and the IPUs
per replica, :data:`~cluster.training.defaults.DEFAULTS`) with the first that fits the
IPUs' In-Processor-Memory. :func:`check_fits` refuses a run that does not fit with a hint
naming only configurations it has checked fit (:func:`fits`), so following the hint
runs.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import product
from typing import Any

from cluster.errors import UserError
from cluster.model.hardware import DeviceKind
from cluster.setting_names import SETTING_NAMES
from cluster.training.accumulation import default_accumulation, fewest_taken, pipelined
from cluster.training.config import IPUS_PER_REPLICA, OPTIMIZER_STATE, TrainConfig
from cluster.training.defaults import DEFAULTS
from cluster.training.kinds import ModelKind
from cluster.training.memory_plan import (
    StageMemory,
    decimal,
    out_of_memory,
    stage_memory,
    unfit_stage,
)
from cluster.training.model_ref import ModelRef
from cluster.training.optimizer_state import OptimizerState
from cluster.training.placement import server_ipus, topology_for
from cluster.training.plan import TrainPlan, build_workload, check, placed, plan_for
from cluster.training.tensor_parallel.layout import GROUP_SIZES, TensorParallel
from cluster.training.workloads import Workload

FREE = frozenset({"micro_batch", "ipus_per_replica", "accumulation"})
"""The defaults :func:`resolve` chooses to fit: the IPUs per replica and the micro-batch
each tried in the order DEFAULTS gives, then a pipeline's accumulation
(:mod:`cluster.training.accumulation`)."""
HINTS = 3  # alternatives a hint names at most


def default_topology(model: ModelRef, servers: int | None) -> tuple[str | None, int]:
    """(topology, servers) when neither ``--topology`` nor (for a workload) ``--servers``
    is given: DSS 8440 servers for the MLP, an IPU-POD16 for a workload (the system of the
    published recipes its efficiencies come from)."""
    if servers is None and model.kind is ModelKind.WORKLOAD:
        return DEFAULTS.workload_topology, 1
    return None, DEFAULTS.servers if servers is None else servers


def fits(plan: TrainPlan) -> bool:
    """Whether ``plan`` runs: valid, and every stage fits its IPU."""
    try:
        check(plan)
        return unfit_stage(plan, stage_memory(plan)) is None
    except UserError:
        return False


def resolve(config: TrainConfig, free: frozenset[str] = frozenset(),
            given: Workload | None = None) -> TrainPlan:
    """``config`` planned on its topology (:func:`~cluster.training.plan.plan_for`), with
    each default in ``free`` (of :data:`FREE`) the first of DEFAULTS' that fits: the
    fewest IPUs per replica (a tensor group's with tensor parallelism), then the largest
    micro-batch, then for a pipeline the
    accumulation that keeps its bubble small
    (:func:`~cluster.training.accumulation.default_accumulation`). If none fits, the
    first, so the run refuses with :func:`check_fits`'s hint. ``given``: the workload,
    already built (a workload's, not the MLP's, whose widths follow the IPUs)."""
    topology = topology_for(config)
    size = server_ipus(topology)[0].size
    ks = ([k for k in DEFAULTS.ipus_per_replica if k <= size]
          if "ipus_per_replica" in free and not config.tensor_parallel.on
          else [config.ipus_per_replica])
    batches = DEFAULTS.micro_batches if "micro_batch" in free else (config.micro_batch,)
    asked = [placed(replace(config, ipus_per_replica=k, micro_batch=m), topology)
             for k in ks for m in batches]
    try:
        first = (TrainPlan(asked[0], topology, build_workload(asked[0])) if given is None
                 else TrainPlan(asked[0], topology, given, fixed=True))
    except UserError:  # no workload, so nothing fits: plan_for says why, in its order
        return plan_for(asked[0], topology)
    candidates = [first.with_config(candidate) for candidate in asked]
    if "accumulation" in free:  # as few micro-batches as each schedule takes, to start
        candidates = [fewest_taken(candidate) for candidate in candidates]
    fitting = [c for c in candidates if fits(c)]
    if not fitting:
        picked = plan_for(candidates[0].config, topology, candidates[0].workload,
                          fixed=candidates[0].fixed)
    elif "accumulation" not in free or not pipelined(fitting[0].config):
        picked = fitting[0]
    else:
        k = fitting[0].config.ipus_per_replica
        picked = _accumulating([c for c in fitting if c.config.ipus_per_replica == k])
    return replace(picked, chosen=free)


def _accumulating(candidates: list[TrainPlan]) -> TrainPlan:
    """Of ``candidates`` (one replica shape, the largest micro-batch first), the first
    whose default accumulation keeps its pipeline's bubble small, with it; if none does,
    the one whose bubble is smallest."""
    tried = []
    for plan in candidates:
        choice = default_accumulation(plan, fits)
        tried.append((choice, plan))
        if choice.reached:
            break
    choice, plan = min(tried, key=lambda pair: (not pair[0].reached, pair[0].bubble_share))
    return plan.changed(accumulation=choice.accumulation)


def check_fits(plan: TrainPlan, stages: list[StageMemory]) -> None:
    """OutOfMemory naming the first of the ``plan``'s ``stages`` that does not fit, its
    IPU, what fills it and configurations that would fit (each checked)."""
    stage = unfit_stage(plan, stages)
    if stage is not None:
        raise out_of_memory(plan.config, stage, hint(plan))


def hint(plan: TrainPlan) -> str:
    """Up to :data:`HINTS` changes that make ``plan`` fit, fewest options changed first
    (each checked with :func:`fits`); else an IPU-POD16's if this is no POD; else why
    nothing will."""
    found = _fitting_changes(plan)
    if found:
        return "try " + ", or ".join(_as_options(changes) for changes in found) + \
            " (each checked: it fits)"
    if not any(unit.kind == DeviceKind.IPU_M2000 for unit in plan.topology.units):
        pod = _on_a_pod(plan)
        if pod is not None and fits(pod):
            memory = decimal(int(pod.topology.ipu_processors[0].in_processor_memory_bytes))
            return ("nothing tried fits these IPUs; on an IPU-POD16 ({memory} each) it "
                    "fits with {topology} {pod} {ipus_per_replica} {ipus} {micro_batch} "
                    "{micro}").format_map({**SETTING_NAMES, "memory": memory,
                                           "pod": DEFAULTS.workload_topology,
                                           "ipus": pod.config.ipus_per_replica,
                                           "micro": pod.config.micro_batch})
    beyond = ("; a transformer this size needs pipeline stages of tensor groups over more "
              "than 16 IPUs, not in the emulator yet, or its weights streamed in phase by "
              "phase ({phased}) on IPU-M2000s".format_map(SETTING_NAMES)
              if _splits(plan) else "")
    return ("nothing tried fits (up to 16 IPUs per replica, micro-batch 1, recomputation, "
            "every {optimizer_state}, {tensor_parallel} up to 16 for a transformer): make "
            "the model smaller (a shorter {sequence_length}, a workload file) or use IPUs "
            "with more memory").format_map(SETTING_NAMES) + beyond


def _on_a_pod(plan: TrainPlan) -> TrainPlan | None:
    """``plan`` resolved on an IPU-POD16 with the IPUs per replica and micro-batch that
    fit it, or None if it cannot run there."""
    try:
        return resolve(replace(plan.config, topology=DEFAULTS.workload_topology,
                               replicas_per_server=0), FREE,
                       plan.workload if plan.fixed or plan.kind is ModelKind.WORKLOAD
                       else None)
    except UserError:
        return None


def _fitting_changes(plan: TrainPlan) -> list[dict[str, Any]]:
    """The fitting changes of the fewest options, best first (fewer IPUs per replica, a
    larger micro-batch, the optimiser state nearer the chip), one for each set of
    options."""
    choices = _choices(plan)
    if not any(_could_fit(_changed(plan, lean)) for lean in _leanest(choices)):
        return []  # not even with every option at its leanest
    combos = sorted(product(*choices.values()), key=lambda combo: (
        sum(value != options[0] for value, options in zip(combo, choices.values())),
        combo[0], combo[5], combo[4].size, combo[6], -combo[1],
        OPTIMIZER_STATE.index(combo[3]), combo[2], combo[4].t2))
    found: list[dict[str, Any]] = []
    for combo in combos:
        changes = {name: value for (name, options), value in zip(choices.items(), combo)
                   if value != options[0]}
        if found and len(changes) > len(found[0]):
            break
        if (changes and len(found) < HINTS and set(changes) not in [set(f) for f in found]
                and fits(_changed(plan, changes))):
            found.append(changes)
    return [_spelt(plan, changes) for changes in found]


def _spelt(plan: TrainPlan, changes: dict[str, Any]) -> dict[str, Any]:
    """``changes`` as a command line takes them: a tensor-parallel layout with the IPUs
    per replica it makes when the ``plan`` was given others (not when it chose them)."""
    layout = changes.get("tensor_parallel")
    if (layout is None or layout.size == plan.config.ipus_per_replica
            or "ipus_per_replica" in plan.chosen):
        return changes
    return {"ipus_per_replica": layout.size, **changes}


def _leanest(choices: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The changes that leave the least in In-Processor-Memory: each option's last (an
    optimiser state in Streaming Memory if one is offered), with each tensor-parallel
    layout offered (none of them always holds the least)."""
    lean = dict(zip(choices, (options[-1] for options in choices.values())))
    lean["optimizer_state"] = next((state for state in choices["optimizer_state"]
                                    if OptimizerState(state).offchip), lean["optimizer_state"])
    return [{**lean, "tensor_parallel": layout} for layout in choices["tensor_parallel"]]


def _could_fit(plan: TrainPlan) -> bool:
    """Whether ``plan``'s stages fit their IPUs, or it cannot tell (its stages cannot
    be laid out as asked)."""
    try:
        return unfit_stage(plan, stage_memory(plan)) is None
    except UserError:
        return True


MOST_HINTED = 16
"""IPUs a replica has, at most, in a layout a hint proposes: tensor groups and pipelines
of 32 and 64 IPUs run when asked for, but the hints keep to those they named before
(more layouts to check would slow every refusal)."""


def _choices(plan: TrainPlan) -> dict[str, list[Any]]:
    """Each option a hint may change: the run's value first, then the others to try
    (more IPUs per replica as pipeline stages, or as a tensor group for a transformer;
    not both; a mixture-of-experts model's experts over more replicas)."""
    config, size = plan.config, plan.server_size
    hinted = min(size, MOST_HINTED)
    streams = all(unit.kind == DeviceKind.IPU_M2000 for unit in plan.topology.units)
    halves = [config.micro_batch >> i for i in range(config.micro_batch.bit_length())]
    states = [state for state in OPTIMIZER_STATE if state != config.optimizer_state
              and (streams or not state.offchip)]
    layout = config.tensor_parallel
    return {"ipus_per_replica": [config.ipus_per_replica] + ([] if layout.on else [
                k for k in IPUS_PER_REPLICA if config.ipus_per_replica < k <= hinted]),
            "micro_batch": halves,
            "recomputes": [config.recomputes] + ([] if config.recomputes else [True]),
            "optimizer_state": [config.optimizer_state, *states],
            "tensor_parallel": [layout] + [
                other for other in _layouts(hinted) if other.size >= layout.size
                and other != layout and _splits(plan)],
            "phased": [config.phased] + ([True] if streams and not config.phased
                                         and plan.kind is ModelKind.WORKLOAD else []),
            "expert_parallel": [config.expert_parallel] + [
                e for e in IPUS_PER_REPLICA if config.expert_parallel < e <= hinted
                and _divides_experts(plan, e)]}


def _divides_experts(plan: TrainPlan, degree: int) -> bool:
    """Whether ``degree`` divides the experts of every mixture-of-experts layer of the
    ``plan``'s model (False when it has none)."""
    counts = [layer.experts.count for layer in plan.workload.layers if layer.experts]
    return bool(counts) and all(count % degree == 0 for count in counts)


def _layouts(server_size: int) -> list[TensorParallel]:
    """Every tensor-parallel layout of 2 IPUs or more that a server or rack of
    ``server_size`` IPUs holds: 1-D, then 2-D, the smallest first."""
    sizes = [n for n in GROUP_SIZES if 1 < n <= server_size]
    return ([TensorParallel(n) for n in sizes]
            + [TensorParallel(n // t2, t2) for n in sizes for t2 in sizes if 1 < t2 < n])


def _splits(plan: TrainPlan) -> bool:
    """Whether tensor parallelism could split the ``plan``'s model (a workload with a
    layer that has a tensor shape, and every layer of experts one)."""
    layers = plan.workload.layers
    return (plan.kind is ModelKind.WORKLOAD and any(layer.tensor for layer in layers)
            and not any(layer.experts and not layer.tensor for layer in layers))


def _changed(plan: TrainPlan, changes: dict[str, Any]) -> TrainPlan:
    """``plan`` with ``changes`` (replicas per server no more than now, nor than fit)."""
    fields = {("recompute" if name == "recomputes" else name): value
              for name, value in changes.items()}
    if "tensor_parallel" in changes:  # a replica is its tensor group
        fields["ipus_per_replica"] = changes["tensor_parallel"].size
    new = plan.changed(**fields)
    per = plan.server_size // new.config.ipus_per_replica
    return new.changed(replicas_per_server=max(1, min(plan.config.replicas_per_server, per)))


def _as_options(changes: dict[str, Any]) -> str:
    """The settings of ``changes`` as people name them: ``--micro-batch 16 --recompute``."""
    named = {name: SETTING_NAMES["recompute" if name == "recomputes" else name]
             for name in changes}
    return " ".join(named[name] if value is True else f"{named[name]} {value}"
                    for name, value in changes.items())


def sweep_micro_batch(base: TrainPlan, runs: list[TrainConfig]) -> int:
    """The micro-batch of DEFAULTS' at which the most of a sweep's ``runs`` (on the
    topology of ``base``, the plan they vary) fit, the largest of those."""
    fitting = {m: sum(fits(base.with_config(placed(replace(run, micro_batch=m),
                                                   base.topology)))
                      for run in runs) for m in DEFAULTS.micro_batches}
    return max(DEFAULTS.micro_batches, key=lambda m: (fitting[m], m))
