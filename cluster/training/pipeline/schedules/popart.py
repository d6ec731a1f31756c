"""PopART's pipeline (Poplar SDK 2.x): lock-step cycles. Of ``K`` forward stages,
PopART makes ``2K - 1`` pipeline stages: forward stage ``s``, backward stage
``2(K - 1) - s``, the last stage's forward and backward in one. Every pipeline stage
runs once a cycle on the next micro-batch, so stage ``s`` runs the forward of
micro-batch ``m`` in cycle ``m + s`` and its backward in cycle ``m + 2(K - 1) - s``:
``M + 2(K - 1)`` cycles in all, a fill, ``M - 2(K - 1)`` full cycles and a flush. PopART
refuses fewer micro-batches than pipeline stages, ``M < 2K - 1``
(``willow/src/transforms/pipeline.cpp``: "depth (gradient accumulation factor) must equal
at least the number of pipeline stages"), and so does this schedule.
An IPU runs its stages of a cycle one after the other, in pipeline-stage order (the
forward first); then all stages' inter-IPU copies cross at once, every cycle, even in
the fill and the flush (PopART ``willow/src/popx/popprograms.cpp``, SDK 2.1.0 and
2.3.0, ``addPipelineCycle`` and ``getFullProgramFromPipelineFragments``: "Always do all
the copies"). Stage ``s`` keeps ``2(K - 1 - s) + 1`` micro-batches' activations stashed."""

from __future__ import annotations

from cluster.setting_names import SETTING_NAMES
from cluster.training.pipeline.pass_schedule import Op, Pass, PipelineSchedule, TooFewMicroBatches
from cluster.training.pipeline.schedules import schedule

NAME = "popart"


def check_micro_batches(stages: int, micro_batches: int) -> None:
    """A :class:`TooFewMicroBatches` error below PopART's ``2 * stages - 1``."""
    needed = 2 * stages - 1
    if micro_batches < needed:
        raise TooFewMicroBatches(
            f"PopART's pipeline of {stages} stages runs {needed} pipeline stages and needs "
            f"at least as many micro-batches: {SETTING_NAMES['accumulation']} {needed} or "
            f"more (got {micro_batches})", needed)


@schedule(NAME, check_micro_batches)
def popart(stages: int, micro_batches: int) -> PipelineSchedule:
    """PopART's schedule of ``stages`` forward stages and ``micro_batches`` micro-batches;
    a :class:`TooFewMicroBatches` error below ``2 * stages - 1`` micro-batches."""
    check_micro_batches(stages, micro_batches)
    order: list[tuple[Op, ...]] = []
    cycles: list[tuple[int, ...]] = []
    for s in range(stages):
        backward_lag = 2 * (stages - 1 - s)  # cycles from a forward to its backward here
        timed = sorted([(m + s, Op(s, Pass.FORWARD, m)) for m in range(micro_batches)]
                       + [(m + s + backward_lag, Op(s, Pass.BACKWARD, m))
                          for m in range(micro_batches)],
                       key=lambda item: (item[0], item[1].pass_ is Pass.BACKWARD))
        order.append(tuple(op for _, op in timed))
        cycles.append(tuple(cycle for cycle, _ in timed))
    return PipelineSchedule(NAME, stages, micro_batches, tuple(order), tuple(cycles))
