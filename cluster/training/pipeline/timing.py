"""Where a pipelined replica's time goes: each stage's compute, the bubble, and what the
transfers between stages add.

The schedule fixes each stage's order; an op starts once its stage is free and its input
has arrived (the op it depends on, plus the transfer across the boundary). The span of
the pipeline splits exactly into three parts:

- ``compute_seconds``: the busiest stage's compute (every micro-batch, forward and
  backward, recomputation included);
- ``bubble_seconds``: what the pipeline adds to that with free transfers: stages waiting
  for each other (``(K - 1) / (M + K - 1)`` of the span for fill-drain with ``K`` equal
  stages, ``M`` micro-batches, and free transfers);
- ``inter_stage_seconds``: what the transfers add on top (span with them minus span
  without: delaying an input never makes a stage finish sooner, so it is never negative).

All simulated seconds; no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cluster.training.pipeline.schedule import Op, Pass, PipelineSchedule


@dataclass(frozen=True)
class PipelineTime:
    """Simulated seconds of one pass of the pipeline over a step's micro-batches."""

    compute_seconds: float
    bubble_seconds: float
    inter_stage_seconds: float
    stage_compute_seconds: tuple[float, ...]

    @property
    def span_seconds(self) -> float:
        """From the first forward to the last backward: the three parts summed."""
        return self.compute_seconds + self.bubble_seconds + self.inter_stage_seconds


def pipeline_time(schedule: PipelineSchedule, forward_seconds: Sequence[float],
                  backward_seconds: Sequence[float], forward_transfer_seconds: Sequence[float],
                  backward_transfer_seconds: Sequence[float]) -> PipelineTime:
    """Cost ``schedule``: ``forward_seconds[s]`` and ``backward_seconds[s]`` are one
    micro-batch's passes on stage ``s`` (backward with any recomputation);
    ``*_transfer_seconds[b]`` one micro-batch's activation (or its gradient) across
    boundary ``b``, between stages ``b`` and ``b + 1``."""
    stages = schedule.stages
    for name, values, size in (("forward_seconds", forward_seconds, stages),
                               ("backward_seconds", backward_seconds, stages),
                               ("forward_transfer_seconds", forward_transfer_seconds, stages - 1),
                               ("backward_transfer_seconds", backward_transfer_seconds,
                                stages - 1)):
        if len(values) != size or any(not v >= 0 for v in values):
            raise ValueError(f"{name} needs {size} durations of 0 s or more")
    free = [0.0] * (stages - 1)
    span = _span(schedule, forward_seconds, backward_seconds, forward_transfer_seconds,
                 backward_transfer_seconds)
    span_free = _span(schedule, forward_seconds, backward_seconds, free, free)
    busy = tuple(schedule.micro_batches * (f + b)
                 for f, b in zip(forward_seconds, backward_seconds))
    compute = max(busy)
    return PipelineTime(compute, max(0.0, span_free - compute), max(0.0, span - span_free),
                        busy)


def _span(schedule: PipelineSchedule, forward: Sequence[float], backward: Sequence[float],
          forward_transfer: Sequence[float], backward_transfer: Sequence[float]) -> float:
    """When the last op ends, each op starting as soon as its stage and its input allow."""
    finish: dict[Op, float] = {}
    stage_free = [0.0] * schedule.stages
    for op in schedule.dependency_order():
        ready = stage_free[op.stage]
        dependency = schedule.dependency(op)
        if dependency is not None:
            boundary = min(op.stage, dependency.stage)
            transfer = (forward_transfer if op.pass_ is Pass.FORWARD else backward_transfer)
            ready = max(ready, finish[dependency] + transfer[boundary])
        duration = (forward if op.pass_ is Pass.FORWARD else backward)[op.stage]
        finish[op] = stage_free[op.stage] = ready + duration
    return max(finish.values())
