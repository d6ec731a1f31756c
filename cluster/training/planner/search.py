"""The search of ``ipupod plan``: every layout of :mod:`.space` checked for memory first
(the same check ``ipupod train`` refuses with, :func:`~cluster.training.memory_plan.unfit_stage`),
and each that fits priced by the same :func:`~cluster.training.step_timing.step_time`.

Pruning: a run of layouts that differ only in the micro-batch stops at the first that does
not fit (a larger micro-batch of the same global batch keeps as much stashed and a larger
working set), and nothing that does not fit is priced. The first that does not fit of each
run is kept as a near miss, with the stage that overflows.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from cluster.errors import UserError
from cluster.training.memory_plan import StageMemory, stage_memory, unfit_stage
from cluster.training.plan import TrainPlan, check
from cluster.training.planner.space import (
    Layout,
    layouts,
    optimizer_states,
    replica_shapes,
)
from cluster.training.step_parts import StepTime
from cluster.training.step_timing import step_time


@dataclass(frozen=True)
class Priced:
    """A layout that fits: its plan, its step priced by part, each IPU's memory."""

    layout: Layout
    plan: TrainPlan
    step: StepTime
    stages: list[StageMemory]


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
    """What a search found: the layouts that fit, fastest first; the near misses, nearest
    first; and how many layouts it tried, checked for memory and priced."""

    priced: list[Priced] = field(default_factory=list)
    misses: list[Miss] = field(default_factory=list)
    tried: int = 0
    invalid: int = 0


def layout_plan(base: TrainPlan, layout: Layout) -> TrainPlan:
    """``base`` (its model and topology) laid out as ``layout``: the same settings
    ``ipupod train`` resolves its options to (not checked)."""
    shape = layout.shape
    return base.with_config(replace(
        base.config, ipus_per_replica=shape.ipus, tensor_parallel=shape.tensor_parallel,
        replicas_per_server=layout.replicas_per_server, micro_batch=layout.micro_batch,
        accumulation=layout.accumulation, recompute=layout.recompute,
        optimizer_state=layout.optimizer_state))


def search(base: TrainPlan, global_batch: int) -> Search:
    """Every layout of ``base``'s model on its topology with ``global_batch`` samples a
    step, checked and priced as ``ipupod train`` checks and prices it (tensor groups of a
    model tensor parallelism cannot split are refused by the check, as train refuses
    them)."""
    found = Search()
    config = base.config
    states = optimizer_states(base.topology)
    for shape in replica_shapes(base.server_size, len(base.workload.layers)):
        for run in layouts(shape, config.servers, base.server_size, global_batch, states):
            for layout in run:
                found.tried += 1
                if not _tried(base, layout, found):
                    break
    found.priced.sort(key=lambda p: (p.step.sim_seconds, p.layout.shape.ipus))
    found.misses.sort(key=lambda m: (m.over_by, -m.plan.config.replicas))
    return found


def _tried(base: TrainPlan, layout: Layout, found: Search) -> bool:
    """Check ``layout`` and price it if it fits, into ``found``; whether a larger
    micro-batch of its run could still fit."""
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
    found.priced.append(Priced(layout, plan, step_time(plan), stages))
    return True

