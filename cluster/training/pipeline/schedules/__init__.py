"""The pipeline schedules by name: one file each, registered here with their limits."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cluster.errors import UserError
from cluster.training.pipeline.schedule import PipelineSchedule, check_shape
from cluster.training.pipeline.schedules import fill_drain, one_f_one_b, popart

Builder = Callable[[int, int], PipelineSchedule]
ShapeCheck = Callable[[int, int], None]


def _no_limit(stages: int, micro_batches: int) -> None:
    """Any stage and micro-batch counts of one or more."""


@dataclass(frozen=True)
class Registered:
    """A schedule's builder ``(stages, micro_batches) -> PipelineSchedule`` and the limit
    it puts on that shape beyond one of each, checked before anything is built (a
    UserError naming the option to change)."""

    build: Builder
    check_shape: ShapeCheck = _no_limit


SCHEDULES: dict[str, Registered] = {
    fill_drain.NAME: Registered(fill_drain.fill_drain),
    one_f_one_b.NAME: Registered(one_f_one_b.one_f_one_b),
    popart.NAME: Registered(popart.popart, popart.check_micro_batches),
}
DEFAULT = fill_drain.NAME


def schedule_names() -> list[str]:
    """The names ``--pipeline-schedule`` takes."""
    return list(SCHEDULES)


def pipeline_schedule(name: str, stages: int, micro_batches: int) -> PipelineSchedule:
    """Schedule ``name`` for ``stages`` stages and ``micro_batches`` micro-batches, or a
    UserError naming the schedules there are. One stage is no pipeline: its micro-batches
    run one after another, forward then backward (1f1b's order for one stage), whatever
    the name."""
    check_schedule_shape(name, stages, micro_batches)
    build = SCHEDULES[name].build
    return (one_f_one_b.one_f_one_b if stages == 1 else build)(stages, micro_batches)


def check_schedule_shape(name: str, stages: int, micro_batches: int) -> None:
    """UserError if there is no schedule ``name`` or it cannot run ``micro_batches``
    micro-batches through ``stages`` stages (one stage runs any count)."""
    check_shape(stages, micro_batches)
    if name not in SCHEDULES:
        raise UserError(f"unknown pipeline schedule {name[:40]!r}: choose "
                        f"{' or '.join(SCHEDULES)}")
    if stages > 1:
        SCHEDULES[name].check_shape(stages, micro_batches)
