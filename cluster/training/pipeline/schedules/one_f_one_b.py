"""One-forward-one-backward (PipeDream-flush, 1F1B): stage ``s`` of ``K`` runs
``min(K - 1 - s, M)`` forward passes to fill the pipeline, then alternates one forward
and one backward, then drains the remaining backward passes. Same bubble as fill-drain
for equal stages, but stage ``s`` keeps at most ``K - s`` micro-batches' activations
instead of ``M``: it is the schedule that saves memory."""

from __future__ import annotations

from cluster.training.pipeline.pass_schedule import Op, Pass, PipelineSchedule
from cluster.training.pipeline.schedules import schedule

NAME = "1f1b"


@schedule(NAME)
def one_f_one_b(stages: int, micro_batches: int) -> PipelineSchedule:
    """The 1F1B schedule of ``stages`` stages and ``micro_batches`` micro-batches."""
    order = []
    for s in range(stages):
        warm_up = min(stages - 1 - s, micro_batches)
        ops = [Op(s, Pass.FORWARD, m) for m in range(warm_up)]
        forward, backward = warm_up, 0
        while backward < micro_batches:
            if forward < micro_batches:
                ops.append(Op(s, Pass.FORWARD, forward))
                forward += 1
            ops.append(Op(s, Pass.BACKWARD, backward))
            backward += 1
        order.append(tuple(ops))
    return PipelineSchedule(NAME, stages, micro_batches, tuple(order))
