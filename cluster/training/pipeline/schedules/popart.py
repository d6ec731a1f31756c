"""PopART's pipeline (Poplar SDK 2.x): lock-step cycles. Of ``K`` forward stages,
PopART makes ``2K - 1`` pipeline stages: forward stage ``s``, backward stage
``2(K - 1) - s``, the last stage's forward and backward in one. Every pipeline stage
runs once a cycle on the next micro-batch, so stage ``s`` runs the forward of
micro-batch ``m`` in cycle ``m + s`` and its backward in cycle ``m + 2(K - 1) - s``:
``M + 2(K - 1)`` cycles in all, a fill, ``M - 2(K - 1)`` full cycles and a flush.
An IPU runs its stages of a cycle one after the other, in pipeline-stage order (the
forward first); then all stages' inter-IPU copies cross at once, every cycle, even in
the fill and the flush (PopART ``willow/src/popx/popprograms.cpp``, SDK 2.1.0 and
2.3.0, ``addPipelineCycle`` and ``getFullProgramFromPipelineFragments``: "Always do all
the copies"). Stage ``s`` keeps ``2(K - 1 - s) + 1`` micro-batches' activations stashed."""

from __future__ import annotations

from cluster.training.pipeline.schedule import Op, Pass, PipelineSchedule

NAME = "popart"


def popart(stages: int, micro_batches: int) -> PipelineSchedule:
    """PopART's schedule of ``stages`` forward stages and ``micro_batches`` micro-batches."""
    order, cycles = [], []
    for s in range(stages):
        timed = sorted([(m + s, 0, Op(s, Pass.FORWARD, m)) for m in range(micro_batches)]
                       + [(m + 2 * (stages - 1) - s, 1, Op(s, Pass.BACKWARD, m))
                          for m in range(micro_batches)],
                       key=lambda item: (item[0], item[1]))
        order.append(tuple(op for _, _, op in timed))
        cycles.append(tuple(cycle for cycle, _, _ in timed))
    return PipelineSchedule(NAME, stages, micro_batches, tuple(order), tuple(cycles))
