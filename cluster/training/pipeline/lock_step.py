"""Where a lock-step pipeline's time goes (PopART's, :mod:`.schedules.popart`): a cycle
lasts as long as its busiest IPU's ops, run one after the other, and then the cycle's
inter-IPU copies, which cross together every cycle and overlap no compute. The span
splits exactly into three parts:

- ``compute_seconds``: the busiest IPU's compute over the step;
- ``bubble_seconds``: what waiting for the busiest IPU of each cycle adds to that (the
  fill and the flush, and any cycle an IPU other than the busiest one leads);
- ``inter_stage_seconds``: the copies, ``cycles x copy_seconds``.

All simulated seconds; no clock.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cluster.training.pipeline.pass_schedule import Op, Pass, PipelineSchedule
from cluster.training.pipeline.timing import (
    PipelineTime,
    check_durations,
    checked_stage_ipus,
    stage_busy_seconds,
)


def lock_step_time(schedule: PipelineSchedule, forward_seconds: Sequence[float],
                   backward_seconds: Sequence[float], copy_seconds: float,
                   stage_ipus: Sequence[int] | None = None) -> PipelineTime:
    """Cost lock-step ``schedule``: ``forward_seconds[s]`` and ``backward_seconds[s]`` one
    micro-batch's passes on stage ``s`` (backward with any recomputation),
    ``copy_seconds`` one cycle's copies of every stage boundary, both ways, at once;
    ``stage_ipus[s]`` the IPU that runs stage ``s`` (default: a stage per IPU)."""
    if schedule.cycles is None:
        raise ValueError(f"pipeline schedule {schedule.name!r} is not lock-step")
    ipus = checked_stage_ipus(schedule.stages, stage_ipus)
    check_durations(schedule.stages, forward_seconds=forward_seconds,
                    backward_seconds=backward_seconds)
    if not copy_seconds >= 0:
        raise ValueError("copy_seconds must be 0 s or more")
    work = _cycle_work(schedule, schedule.cycles, forward_seconds, backward_seconds, ipus)
    compute = float(work.sum(axis=0).max())
    return PipelineTime(compute, max(0.0, float(work.max(axis=1).sum()) - compute),
                        len(work) * copy_seconds,
                        stage_busy_seconds(schedule, forward_seconds, backward_seconds))


def lock_step_op_times(schedule: PipelineSchedule, forward_seconds: Sequence[float],
                       backward_seconds: Sequence[float], copy_seconds: float,
                       stage_ipus: Sequence[int] | None = None
                       ) -> tuple[dict[Op, tuple[float, float]], list[tuple[float, float]]]:
    """When each op starts and ends (seconds from the pipeline's start) as
    :func:`lock_step_time` prices the cycles, and each cycle's (start, busiest IPU's
    compute); the cycle's copies follow that compute and last ``copy_seconds``. Cycle
    ``c`` starts when every earlier cycle's busiest IPU and copies are done; on each IPU
    its ops of the cycle run one after the other, stage by stage."""
    if schedule.cycles is None:
        raise ValueError(f"pipeline schedule {schedule.name!r} is not lock-step")
    ipus = checked_stage_ipus(schedule.stages, stage_ipus)
    work = _cycle_work(schedule, schedule.cycles, forward_seconds, backward_seconds, ipus)
    longest = work.max(axis=1).tolist()
    starts = [0.0]
    for seconds in longest[:-1]:
        starts.append(starts[-1] + seconds + copy_seconds)
    free: dict[tuple[int, int], float] = {}  # (cycle, IPU): when it is free again
    times = {}
    for stage, (ops, stage_cycles) in enumerate(zip(schedule.order, schedule.cycles)):
        for op, cycle in zip(ops, stage_cycles):
            begin = free.get((cycle, ipus[stage]), starts[cycle])
            end = begin + (forward_seconds if op.pass_ is Pass.FORWARD
                           else backward_seconds)[stage]
            times[op], free[(cycle, ipus[stage])] = (begin, end), end
    return times, list(zip(starts, longest))


def _cycle_work(schedule: PipelineSchedule, cycles: tuple[tuple[int, ...], ...],
                forward_seconds: Sequence[float], backward_seconds: Sequence[float],
                stage_ipus: Sequence[int]) -> np.ndarray:
    """``work[c, i]``: the seconds IPU ``i`` computes in cycle ``c``, its stages' ops of
    that cycle one after the other."""
    work = np.zeros((1 + max(max(c, default=0) for c in cycles), max(stage_ipus) + 1))
    for stage, (ops, stage_cycles) in enumerate(zip(schedule.order, cycles)):
        for op, cycle in zip(ops, stage_cycles):
            work[cycle, stage_ipus[stage]] += (forward_seconds if op.pass_ is Pass.FORWARD
                                               else backward_seconds)[stage]
    return work
