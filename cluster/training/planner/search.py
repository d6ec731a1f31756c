"""The search of ``ipupod plan``: every layout of :mod:`.space` checked for memory first
(the same check ``ipupod train`` refuses with, :func:`~cluster.training.memory_plan.unfit_stage`),
and each that fits priced by the same :func:`~cluster.training.step_timing.step_time`.

Pruning: a run of layouts that differ only in the micro-batch stops at the first that does
not fit (a larger micro-batch of the same global batch keeps as much stashed and a larger
working set), and nothing that does not fit is priced. The first that does not fit of each
run is kept as a near miss, with the stage that overflows. Of those that fit, each step's
compute part is found first (:func:`compute_seconds`, the very figure ``step_time`` reports:
the busiest IPU's passes, priced from the same stage costs), and they are priced in its
order; pricing stops once ``top`` are priced and the next one's compute alone is slower
than the ``top``-th step: every other part of a step is 0 s or more, so no layout left
unpriced could be among the fastest ``top``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace

from cluster.errors import ScheduleError, UserError
from cluster.training.memory_plan import StageMemory, stage_memory, unfit_stage
from cluster.training.pipeline.timing import stage_busy_seconds
from cluster.training.plan import TrainPlan, check
from cluster.training.planner.space import (
    Layout,
    layouts,
    optimizer_states,
    replica_shapes,
)
from cluster.training.step_parts import StepTime
from cluster.training.step_timing import pipeline_costs, step_time


@dataclass(frozen=True)
class Priced:
    """A layout that fits: its plan, its step priced by part, each IPU's memory."""

    layout: Layout
    plan: TrainPlan
    step: StepTime
    stages: list[StageMemory]


@dataclass(frozen=True)
class Fitting:
    """A layout that fits, not yet priced: its plan, each IPU's memory, and its step's
    compute part (simulated seconds: a lower bound on its step)."""

    layout: Layout
    plan: TrainPlan
    stages: list[StageMemory]
    compute_seconds: float


@dataclass(frozen=True)
class Miss:
    """A layout that does not fit: its plan and the first IPU it overflows."""

    layout: Layout
    plan: TrainPlan
    stage: StageMemory

    @property
    def over_by(self) -> float:
        """How many times its IPU's In-Processor-Memory the stage needs (above 1)."""
        return self.stage.use.total_bytes / self.stage.capacity_bytes


@dataclass
class Search:
    """What a search found: the layouts that fit (``fitting``), those priced, fastest
    first; the near misses, nearest first; how many layouts it tried and how many the
    settings' own checks refused (``invalid``: e.g. tensor groups of a model without
    tensor shapes) and how many that fit were not priced because a collective could not
    be scheduled (``unschedulable``)."""

    fitting: list[Fitting] = field(default_factory=list)
    priced: list[Priced] = field(default_factory=list)
    misses: list[Miss] = field(default_factory=list)
    tried: int = 0
    invalid: int = 0
    unschedulable: int = 0  # fitting, but a collective's buffer does not: not priced


def layout_plan(base: TrainPlan, layout: Layout) -> TrainPlan:
    """``base`` (its model and topology) laid out as ``layout``: the same settings
    ``ipupod train`` resolves its options to (not checked)."""
    shape = layout.shape
    return base.with_config(replace(
        base.config, ipus_per_replica=shape.ipus, tensor_parallel=shape.tensor_parallel,
        expert_parallel=shape.expert_parallel,
        replicas_per_server=layout.replicas_per_server, micro_batch=layout.micro_batch,
        accumulation=layout.accumulation, recompute=layout.recompute,
        optimizer_state=layout.optimizer_state, phased=layout.phased))


def search(base: TrainPlan, global_batch: int, top: int) -> Search:
    """Every layout of ``base``'s model on its topology with ``global_batch`` samples a
    step, checked as ``ipupod train`` checks it (tensor groups of a model tensor
    parallelism cannot split are refused by the check, as train refuses them); at least
    the fastest ``top`` of those that fit priced as train prices them."""
    found = Search()
    config = base.config
    states = optimizer_states(base.topology)
    for shape in replica_shapes(base.server_size, len(base.workload.layers),
                                experts_per_layer(base)):
        for run in layouts(shape, config.servers, base.server_size, global_batch, states):
            for layout in run:
                found.tried += 1
                if not _tried(base, layout, found):
                    break
    found.misses.sort(key=lambda m: (m.over_by, -m.plan.config.replicas))
    found.fitting.sort(key=lambda f: f.compute_seconds)
    _price_fastest(found, top)
    return found


def experts_per_layer(base: TrainPlan) -> int:
    """Experts of ``base``'s mixture-of-experts layers (the most of any; 1: none)."""
    return max((layer.experts.count for layer in base.workload.layers
                if layer.experts is not None), default=1)


def _price_fastest(found: Search, top: int) -> None:
    """Price ``found``'s fitting layouts, least compute first, until the next one's
    compute alone is slower than the ``top``-th fastest step priced. A layout whose
    collectives cannot be scheduled (a tensor-parallel all-reduce's buffer larger than an
    IPU, as a phased layout's large micro-batch makes it) is not priced."""
    steps: list[float] = []
    for fit in found.fitting:
        if len(steps) >= top and fit.compute_seconds > steps[top - 1]:
            break
        try:
            step = step_time(fit.plan)
        except ScheduleError:
            found.unschedulable += 1
            continue
        bisect.insort(steps, step.sim_seconds)
        found.priced.append(Priced(fit.layout, fit.plan, step, fit.stages))
    found.priced.sort(key=lambda p: (p.step.sim_seconds, p.layout.shape.ipus))


def compute_seconds(plan: TrainPlan) -> float:
    """The compute part of ``plan``'s step as :func:`step_time` prices it (the busiest
    IPU's passes over the step's micro-batches, from the same stage costs); 0 for a
    lock-step schedule, whose compute is its cycles'."""
    config = plan.config
    costs = pipeline_costs(config, plan.topology, plan.rank_workload, plan.chains)
    if costs.schedule.cycles is not None:
        return 0.0
    per_ipu: dict[int, float] = {}
    for ipu, busy in zip(config.stage_ipus,
                         stage_busy_seconds(costs.schedule, costs.forward, costs.backward)):
        per_ipu[ipu] = per_ipu.get(ipu, 0.0) + busy
    return max(per_ipu.values())


def _tried(base: TrainPlan, layout: Layout, found: Search) -> bool:
    """Check ``layout`` and keep it as fitting or a near miss, into ``found``; whether a
    larger micro-batch of its run could still fit."""
    plan = layout_plan(base, layout)
    try:
        check(plan)
        stages = stage_memory(plan)
        unfit = unfit_stage(plan, stages)
    except UserError:
        found.invalid += 1
        return True
    if unfit is not None:
        found.misses.append(Miss(layout, plan, unfit))
        return False
    found.fitting.append(Fitting(layout, plan, stages, compute_seconds(plan)))
    return True
