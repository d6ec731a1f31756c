"""Where a pipelined replica's time goes: each stage's compute, the bubble, and what the
transfers between stages add, for a schedule whose ops run as soon as they can (a
lock-step schedule's cycles are costed by :mod:`.lock_step`).

The schedule fixes each stage's order; an op starts once its IPU is free and its input
has arrived (the op it depends on, plus the transfer across the boundary). Two stages on
one IPU take it in turns: with free transfers, of the ops that can run next the one that
can start soonest goes first, and that order on the IPU is kept when the transfers are
costed. The span of the pipeline splits exactly into three parts:

- ``compute_seconds``: the busiest IPU's compute (every micro-batch, forward and
  backward, recomputation included, of each stage it runs: one stage, or two when the
  last stage goes back to the first IPU);
- ``bubble_seconds``: what the pipeline adds to that with free transfers: stages waiting
  for each other (``(K - 1) / (M + K - 1)`` of the span for fill-drain with ``K`` equal
  stages, ``M`` micro-batches, and free transfers);
- ``inter_stage_seconds``: what the transfers add on top (span with them minus span
  without, every IPU taking its ops in the same order: delaying an input then never
  makes an op finish sooner, so it is never negative).

All simulated seconds; no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from cluster.training.pipeline.pass_schedule import Op, Pass, PipelineSchedule, describe


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
                  backward_transfer_seconds: Sequence[float],
                  stage_ipus: Sequence[int] | None = None) -> PipelineTime:
    """Cost ``schedule``: ``forward_seconds[s]`` and ``backward_seconds[s]`` are one
    micro-batch's passes on stage ``s`` (backward with any recomputation);
    ``*_transfer_seconds[b]`` one micro-batch's activation (or its gradient) across
    boundary ``b``, between stages ``b`` and ``b + 1``; ``stage_ipus[s]`` the IPU that
    runs stage ``s`` (default: a stage per IPU)."""
    stages = schedule.stages
    ipus = checked_stage_ipus(stages, stage_ipus)
    check_durations(stages, forward_seconds=forward_seconds, backward_seconds=backward_seconds)
    check_durations(stages - 1, forward_transfer_seconds=forward_transfer_seconds,
                    backward_transfer_seconds=backward_transfer_seconds)
    return _costed(schedule, tuple(forward_seconds), tuple(backward_seconds),
                   tuple(forward_transfer_seconds), tuple(backward_transfer_seconds),
                   tuple(ipus))


@lru_cache(maxsize=64)
def _costed(schedule: PipelineSchedule, forward_seconds: tuple[float, ...],
            backward_seconds: tuple[float, ...], forward_transfer_seconds: tuple[float, ...],
            backward_transfer_seconds: tuple[float, ...],
            ipus: tuple[int, ...]) -> PipelineTime:
    """:func:`pipeline_time` of checked inputs, worked out once for the same ones (a
    search of layouts, ``ipupod plan``, asks again for every optimiser-state placement)."""
    order, span_free = _earliest_start_order(schedule, ipus, forward_seconds,
                                             backward_seconds)
    span = _span(schedule, order, ipus, forward_seconds, backward_seconds,
                 forward_transfer_seconds, backward_transfer_seconds)
    busy = stage_busy_seconds(schedule, forward_seconds, backward_seconds)
    per_ipu = [0.0] * (max(ipus) + 1)
    for ipu, seconds in zip(ipus, busy):
        per_ipu[ipu] += seconds
    compute = max(per_ipu)
    return PipelineTime(compute, max(0.0, span_free - compute), max(0.0, span - span_free),
                        busy)


def checked_stage_ipus(stages: int, stage_ipus: Sequence[int] | None) -> list[int]:
    """The IPU of each stage (default: a stage per IPU), or a ValueError."""
    ipus = list(range(stages)) if stage_ipus is None else list(stage_ipus)
    if len(ipus) != stages or min(ipus, default=0) < 0:
        raise ValueError(f"stage_ipus needs {stages} IPU indices of 0 or more")
    return ipus


def check_durations(size: int, **durations: Sequence[float]) -> None:
    """ValueError unless each named sequence holds ``size`` durations of 0 s or more."""
    for name, values in durations.items():
        if len(values) != size or any(not v >= 0 for v in values):
            raise ValueError(f"{name} needs {size} durations of 0 s or more")


def stage_busy_seconds(schedule: PipelineSchedule, forward_seconds: Sequence[float],
                       backward_seconds: Sequence[float]) -> tuple[float, ...]:
    """Each stage's compute over the step: every micro-batch's forward and backward."""
    return tuple(schedule.micro_batches * (f + b)
                 for f, b in zip(forward_seconds, backward_seconds))


def _earliest_start_order(schedule: PipelineSchedule, stage_ipus: Sequence[int],
                          forward: Sequence[float],
                          backward: Sequence[float]) -> tuple[list[Op], float]:
    """Every op in the order it starts with free transfers, and when the last ends: each
    stage keeps its order, and of the ops that can run next the one that can start
    soonest goes first (the lower stage on a tie), so two stages on one IPU take it in
    the order their work arrives. With a stage per IPU any order that runs dependencies
    first gives the same times."""
    free = [0.0] * (schedule.stages - 1)
    finish: dict[Op, float] = {}
    ipu_free = [0.0] * (max(stage_ipus) + 1)
    next_index = [0] * schedule.stages
    order: list[Op] = []
    for _ in range(2 * schedule.stages * schedule.micro_batches):
        best: tuple[float, int] | None = None  # (start, stage)
        for stage, ops in enumerate(schedule.order):
            if next_index[stage] == len(ops):
                continue
            arrived = _input_ready(schedule, ops[next_index[stage]], finish, free, free)
            if arrived is None:
                continue
            start = max(ipu_free[stage_ipus[stage]], arrived)
            if best is None or start < best[0]:
                best = (start, stage)
        if best is None:
            raise ValueError(f"pipeline schedule {schedule.name!r} deadlocks")
        start, stage = best
        op = schedule.order[stage][next_index[stage]]
        duration = (forward if op.pass_ is Pass.FORWARD else backward)[stage]
        finish[op] = ipu_free[stage_ipus[stage]] = start + duration
        next_index[stage] += 1
        order.append(op)
    return order, max(finish.values())


def op_times(schedule: PipelineSchedule, forward_seconds: Sequence[float],
             backward_seconds: Sequence[float], forward_transfer_seconds: Sequence[float],
             backward_transfer_seconds: Sequence[float],
             stage_ipus: Sequence[int] | None = None) -> dict[Op, tuple[float, float]]:
    """When each op of ``schedule`` starts and ends (seconds from the first forward), as
    :func:`pipeline_time` runs them with the transfers (same arguments): what a timeline
    draws. The last end is the span that :func:`pipeline_time` splits into parts."""
    ipus = checked_stage_ipus(schedule.stages, stage_ipus)
    order, _ = _earliest_start_order(schedule, ipus, forward_seconds, backward_seconds)
    return _times(schedule, order, ipus, forward_seconds, backward_seconds,
                  forward_transfer_seconds, backward_transfer_seconds)


def _span(schedule: PipelineSchedule, order: Sequence[Op], stage_ipus: Sequence[int],
          forward: Sequence[float], backward: Sequence[float],
          forward_transfer: Sequence[float], backward_transfer: Sequence[float]) -> float:
    """When the last op ends, the ops taken in ``order`` (:func:`_times`)."""
    times = _times(schedule, order, stage_ipus, forward, backward, forward_transfer,
                   backward_transfer)
    return max(end for _, end in times.values())


def _times(schedule: PipelineSchedule, order: Sequence[Op], stage_ipus: Sequence[int],
           forward: Sequence[float], backward: Sequence[float],
           forward_transfer: Sequence[float],
           backward_transfer: Sequence[float]) -> dict[Op, tuple[float, float]]:
    """(start, end) of each op taken in ``order`` (each after the ops it needs, and each
    IPU's in the order they run there), each starting once its IPU is free and its input
    has arrived."""
    finish: dict[Op, float] = {}
    times: dict[Op, tuple[float, float]] = {}
    ipu_free = [0.0] * (max(stage_ipus) + 1)
    for op in order:
        arrived = _input_ready(schedule, op, finish, forward_transfer, backward_transfer)
        if arrived is None:
            raise ValueError(f"{describe(op)} comes before the op it needs")
        duration = (forward if op.pass_ is Pass.FORWARD else backward)[op.stage]
        start = max(ipu_free[stage_ipus[op.stage]], arrived)
        finish[op] = ipu_free[stage_ipus[op.stage]] = start + duration
        times[op] = (start, finish[op])
    return times


def _input_ready(schedule: PipelineSchedule, op: Op, finish: dict[Op, float],
                 forward_transfer: Sequence[float],
                 backward_transfer: Sequence[float]) -> float | None:
    """When ``op``'s input has arrived: the op it depends on finished, plus the transfer
    across their boundary (0 for stage 0's forward and the last stage's first backward);
    None while that op has not run."""
    dependency = schedule.dependency(op)
    if dependency is None:
        return 0.0
    if dependency not in finish:
        return None
    transfer = forward_transfer if op.pass_ is Pass.FORWARD else backward_transfer
    return finish[dependency] + transfer[min(op.stage, dependency.stage)]
