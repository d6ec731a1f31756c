"""The pipeline schedules by name: one file each, registered here."""

from __future__ import annotations

from collections.abc import Callable

from cluster.errors import UserError
from cluster.training.pipeline.schedule import PipelineSchedule, check_shape
from cluster.training.pipeline.schedules import fill_drain, one_f_one_b, popart

Builder = Callable[[int, int], PipelineSchedule]

SCHEDULES: dict[str, Builder] = {
    fill_drain.NAME: fill_drain.fill_drain,
    one_f_one_b.NAME: one_f_one_b.one_f_one_b,
    popart.NAME: popart.popart,
}
DEFAULT = fill_drain.NAME
# Limits a schedule puts on its shape beyond one stage and one micro-batch, checked
# before anything is built.
SHAPE_CHECKS: dict[str, Callable[[int, int], None]] = {
    popart.NAME: popart.check_micro_batches,
}


def schedule_names() -> list[str]:
    """The names ``--pipeline-schedule`` takes."""
    return list(SCHEDULES)


def pipeline_schedule(name: str, stages: int, micro_batches: int) -> PipelineSchedule:
    """Schedule ``name`` for ``stages`` stages and ``micro_batches`` micro-batches, or a
    UserError naming the schedules there are. One stage is no pipeline: its micro-batches
    run one after another, forward then backward (1f1b's order for one stage), whatever
    the name."""
    check_schedule_shape(name, stages, micro_batches)
    builder = SCHEDULES[name]
    return (one_f_one_b.one_f_one_b if stages == 1 else builder)(stages, micro_batches)


def check_schedule_shape(name: str, stages: int, micro_batches: int) -> None:
    """UserError if there is no schedule ``name`` or it cannot run ``micro_batches``
    micro-batches through ``stages`` stages (one stage runs any count)."""
    check_shape(stages, micro_batches)
    if name not in SCHEDULES:
        raise UserError(f"unknown pipeline schedule {name[:40]!r}: choose "
                        f"{' or '.join(SCHEDULES)}")
    if stages > 1 and name in SHAPE_CHECKS:
        SHAPE_CHECKS[name](stages, micro_batches)
