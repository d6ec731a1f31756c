"""The gradient accumulation a pipelined run takes when none is given.

A pipeline of ``K`` stages fed one micro-batch a step spends most of its time filling and
draining: fill-drain's bubble is ``(K - 1) / (M + K - 1)`` of the pipeline's span for
``M`` micro-batches, so BERT-Large on 8 IPUs idles 7/8 of its pipeline at ``M = 1``.
Graphcore's pipelined recipes run many micro-batches a step for that reason (the MLPerf
Training BERT submissions accumulate hundreds of micro-batches a replica). The default is
therefore the smallest power of two whose bubble is at most :data:`BUBBLE_SHARE` of the
pipeline's span, as the run's own schedule and cost model price it, that fits the IPUs'
memory and the schedule. A run that is not pipelined (one stage, or a column split)
accumulates 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cluster.errors import UserError
from cluster.training.config import TrainConfig
from cluster.training.pipeline.schedules import check_schedule_shape
from cluster.training.plan import TrainPlan
from cluster.training.step_timing import replica_pipeline_time

BUBBLE_SHARE = 0.10
"""The most of a pipeline's span its bubble may take under the default accumulation."""
MOST_DEFAULT_ACCUMULATION = 1 << 12
"""The largest accumulation the default tries: far past where any recipe's bubble is
under 10% (fill-drain needs ``9 (K - 1)``: 135 for 16 stages)."""


@dataclass(frozen=True)
class AccumulationChoice:
    """The accumulation chosen, and the pipeline's bubble share of its span with it."""

    accumulation: int
    bubble_share: float
    reached: bool  # False: memory or MOST_DEFAULT_ACCUMULATION stopped it short of the target


def pipelined(config: TrainConfig) -> bool:
    """Whether a replica of ``config`` runs as a pipeline of more than one stage."""
    return config.pipeline_stages > 1 and not config.splits_columns


def bubble_share(run: TrainPlan) -> float:
    """The pipeline bubble's share of the pipeline's span (simulated seconds over
    simulated seconds) for the ``run`` as it stands."""
    time = replica_pipeline_time(run.config, run.topology, run.workload, run.chains)
    return time.bubble_seconds / time.span_seconds if time.span_seconds > 0 else 0.0


def default_accumulation(run: TrainPlan,
                         fits: Callable[[TrainPlan], bool]) -> AccumulationChoice:
    """The smallest power of two that keeps the ``run``'s bubble at most
    :data:`BUBBLE_SHARE` of its pipeline's span and that ``fits``; if memory runs out
    first, the largest that fits. 1 for a run that is not pipelined."""
    if not pipelined(run.config):
        return AccumulationChoice(1, 0.0, True)
    best: AccumulationChoice | None = None
    count = 1
    while count <= MOST_DEFAULT_ACCUMULATION:
        candidate = run.changed(accumulation=count)
        if _schedule_takes(candidate.config):
            if not fits(candidate):
                if best is not None:
                    break  # more micro-batches in flight only need more memory
            else:
                share = bubble_share(candidate)
                best = AccumulationChoice(count, share, share <= BUBBLE_SHARE)
                if best.reached:
                    return best
        count *= 2
    return best or AccumulationChoice(run.config.accumulation, bubble_share(run), False)


def fewest_taken(run: TrainPlan) -> TrainPlan:
    """The ``run`` with the smallest power of two of micro-batches its pipeline schedule
    runs (PopART's lock-step needs ``2K - 1`` or more for ``K`` stages; the others, 1)."""
    count = 1
    while count < MOST_DEFAULT_ACCUMULATION and not _schedule_takes(
            run.changed(accumulation=count).config):
        count *= 2
    return run.changed(accumulation=count)


def _schedule_takes(config: TrainConfig) -> bool:
    """Whether ``config``'s pipeline schedule runs its accumulation (PopART's lock-step
    needs ``2K - 1`` micro-batches or more for ``K`` stages)."""
    try:
        check_schedule_shape(config.pipeline_schedule, config.pipeline_stages,
                             config.accumulation)
    except UserError:
        return False
    return True
