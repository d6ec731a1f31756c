"""Fill-drain (GPipe): every stage runs the forward of all micro-batches, then their
backward passes in the same order. The seed's figure (000, 001): micro-batches B1, B2, ...
enter one after the other, the pipeline fills, drains, and the backward passes follow.
Every stage keeps all ``M`` micro-batches' activations; with equal stages the idle
fraction of the pipeline is ``(K - 1) / (M + K - 1)``."""

from __future__ import annotations

from cluster.training.pipeline.pass_schedule import Op, Pass, PipelineSchedule
from cluster.training.pipeline.schedules import schedule

NAME = "fill-drain"


@schedule(NAME)
def fill_drain(stages: int, micro_batches: int) -> PipelineSchedule:
    """The fill-drain schedule of ``stages`` stages and ``micro_batches`` micro-batches."""
    order = tuple(
        tuple(Op(s, Pass.FORWARD, m) for m in range(micro_batches))
        + tuple(Op(s, Pass.BACKWARD, m) for m in range(micro_batches))
        for s in range(stages))
    return PipelineSchedule(NAME, stages, micro_batches, order)
