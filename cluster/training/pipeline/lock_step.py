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

from cluster.training.pipeline.schedule import Pass, PipelineSchedule
from cluster.training.pipeline.timing import PipelineTime


def lock_step_time(schedule: PipelineSchedule, forward_seconds: Sequence[float],
                   backward_seconds: Sequence[float], copy_seconds: float,
                   stage_ipus: Sequence[int]) -> PipelineTime:
    """Cost lock-step ``schedule``: ``forward_seconds[s]`` and ``backward_seconds[s]`` one
    micro-batch's passes on stage ``s`` (backward with any recomputation),
    ``copy_seconds`` one cycle's copies of every stage boundary, both ways, at once;
    ``stage_ipus[s]`` the IPU that runs stage ``s``."""
    if schedule.cycles is None:
        raise ValueError(f"pipeline schedule {schedule.name!r} is not lock-step")
    if len(stage_ipus) != schedule.stages or min(stage_ipus, default=0) < 0:
        raise ValueError(f"stage_ipus needs {schedule.stages} IPU indices of 0 or more")
    for name, values in (("forward_seconds", forward_seconds),
                         ("backward_seconds", backward_seconds), ("copy_seconds", [copy_seconds])):
        if len(values) != (1 if name == "copy_seconds" else schedule.stages) or any(
                not v >= 0 for v in values):
            raise ValueError(f"{name} needs durations of 0 s or more, one per stage")
    count = 1 + max(max(c, default=0) for c in schedule.cycles)
    work = np.zeros((count, max(stage_ipus) + 1))  # work[c, i]: IPU i's seconds in cycle c
    for stage, (ops, cycles) in enumerate(zip(schedule.order, schedule.cycles)):
        for op, cycle in zip(ops, cycles):
            work[cycle, stage_ipus[stage]] += (forward_seconds if op.pass_ is Pass.FORWARD
                                               else backward_seconds)[stage]
    compute = float(work.sum(axis=0).max())
    busy = tuple(schedule.micro_batches * (f + b)
                 for f, b in zip(forward_seconds, backward_seconds))
    return PipelineTime(compute, max(0.0, float(work.max(axis=1).sum()) - compute),
                        count * copy_seconds, busy)
