"""The pipeline schedules by name: one module each, which registers its builder with
:func:`schedule` (and the limit it puts on the shape, if any); the registry finds the
modules itself (:class:`~cluster.model.plugins.Registry`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from cluster.errors import UserError
from cluster.model.plugins import Registry
from cluster.training.pipeline.pass_schedule import PipelineSchedule, check_shape

Builder = Callable[[int, int], PipelineSchedule]
ShapeCheck = Callable[[int, int], None]
DEFAULT = "fill-drain"  # the schedule a run uses unless told (registered: a test checks)
ONE_STAGE = "1f1b"  # the order of one stage's passes, whatever the schedule's name


def _no_limit(stages: int, micro_batches: int) -> None:
    """Any stage and micro-batch counts of one or more."""


@dataclass(frozen=True)
class Registered:
    """A schedule's builder ``(stages, micro_batches) -> PipelineSchedule`` and the limit
    it puts on that shape beyond one of each, checked before anything is built (a
    UserError naming the option to change)."""

    build: Builder
    check_shape: ShapeCheck = _no_limit


def _check(entry: Registered) -> None:
    """A TypeError unless the builder and the shape check are callables."""
    if not callable(entry.build) or not callable(entry.check_shape):
        raise TypeError("a pipeline schedule registers a builder and a shape check")


SCHEDULES: Registry[Registered] = Registry("pipeline schedule", __name__, check=_check)


def schedule(name: str, check_shape: ShapeCheck = _no_limit) -> Callable[[Builder], Builder]:
    """Decorator: register ``builder(stages, micro_batches)`` as schedule ``name``, with
    ``check_shape(stages, micro_batches)`` for a schedule that limits its shape."""

    def register(builder: Builder) -> Builder:
        SCHEDULES.register(name, Registered(builder, check_shape), builder.__module__)
        return builder

    return register


def schedule_names() -> list[str]:
    """The names ``--pipeline-schedule`` takes."""
    return list(SCHEDULES)


@lru_cache(maxsize=64)
def pipeline_schedule(name: str, stages: int, micro_batches: int) -> PipelineSchedule:
    """Schedule ``name`` for ``stages`` stages and ``micro_batches`` micro-batches, or a
    UserError naming the schedules there are. One stage is no pipeline: its micro-batches
    run one after another, forward then backward (1f1b's order for one stage), whatever
    the name. Built once per shape (a schedule is immutable): a search asks again and
    again (``ipupod plan``)."""
    check_schedule_shape(name, stages, micro_batches)
    return SCHEDULES[ONE_STAGE if stages == 1 else name].build(stages, micro_batches)


def check_schedule_shape(name: str, stages: int, micro_batches: int) -> None:
    """UserError if there is no schedule ``name`` or it cannot run ``micro_batches``
    micro-batches through ``stages`` stages (one stage runs any count)."""
    check_shape(stages, micro_batches)
    if name not in SCHEDULES:
        raise UserError(f"unknown pipeline schedule {name[:40]!r}: choose "
                        f"{' or '.join(SCHEDULES)}")
    if stages > 1:
        SCHEDULES[name].check_shape(stages, micro_batches)
