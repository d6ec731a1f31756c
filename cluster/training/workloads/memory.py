"""Bytes a workload's layers keep in one IPU's In-Processor-Memory during training.

For a set of consecutive layers (a pipeline stage, or the whole model on one IPU):

- weights: parameters in the weight dtype;
- gradients: one accumulator per parameter in the gradient dtype;
- optimiser state: ``optimizer_values_per_parameter`` float32 values per parameter,
  none if the state lives off-chip (``optimizer_offchip``: Graphcore's BERT recipes keep
  it in Streaming Memory and stream it in for the update), 1/``optimizer_shards`` of it
  when that many replicas share it (replicated tensor sharding);
- stashed activations of ``in_flight`` micro-batches of ``micro_batch`` samples (a
  pipeline stage holds a micro-batch from its forward to its backward pass): every
  layer's ``stashed_bytes``; with ``recompute``, checkpoints (Chen et al. 2016, "Training
  Deep Nets with Sublinear Memory Cost"): the stage's ``n`` layers are cut into
  ``ceil(sqrt(n))`` runs of near-equal length, and each micro-batch keeps only the stage's
  input (the previous layer's ``output_bytes``, or the workload's ``input_bytes`` for the
  first stage) and each run's output but the last's; while a micro-batch's backward pass
  recomputes a run, that run's full stash is working memory (the largest run's, for one
  micro-batch).

Not counted: the program's code, exchange buffers and temporaries that Poplar allocates,
often a quarter or more of the memory; ``reserve_bytes`` in :func:`fits` stands for them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from cluster.errors import UserError
from cluster.model.hardware import Processor
from cluster.training.workloads.layers import DType, Layer, Workload


@dataclass(frozen=True)
class MemoryUse:
    """Bytes on one IPU, by what they hold."""

    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    stash_bytes: int  # activations kept for the micro-batches in flight
    recompute_bytes: int  # one micro-batch's full stash, while it is recomputed

    @property
    def total_bytes(self) -> int:
        """Everything counted."""
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.stash_bytes + self.recompute_bytes)


def _stage(workload: Workload, layers: Sequence[Layer] | None) -> tuple[Layer, ...]:
    """``layers`` checked to be a run of consecutive layers of ``workload``, in order."""
    if layers is None:
        return workload.layers
    chosen = tuple(layers)
    if not chosen:
        raise UserError("a pipeline stage needs at least one layer")
    names = [layer.name for layer in workload.layers]
    first = names.index(chosen[0].name) if chosen[0].name in names else -1
    if first < 0 or workload.layers[first:first + len(chosen)] != chosen:
        raise UserError(f"the layers given are not consecutive layers of {workload.name}: a "
                        "stage is a run of the workload's layers, in order")
    return chosen


def stage_input_bytes(workload: Workload, layers: Sequence[Layer] | None = None) -> int:
    """Bytes per sample that enter the stage: the previous layer's output, or the
    workload's input for the first stage."""
    chosen = _stage(workload, layers)
    first = workload.layers.index(chosen[0])
    return workload.input_bytes if first == 0 else workload.layers[first - 1].output_bytes


def checkpoint_runs(layers: Sequence[Layer]) -> list[tuple[Layer, ...]]:
    """``layers`` cut into ``ceil(sqrt(n))`` consecutive runs of near-equal length: what
    recomputation keeps a checkpoint after (all but the last)."""
    count = len(layers)
    runs = math.isqrt(count - 1) + 1 if count > 1 else 1
    bounds = [i * count // runs for i in range(runs + 1)]
    return [tuple(layers[a:b]) for a, b in pairwise(bounds)]


def memory_use(workload: Workload, layers: Sequence[Layer] | None = None,
               micro_batch: int = 1, in_flight: int = 1, recompute: bool = False,
               optimizer_offchip: bool = False, optimizer_shards: int = 1) -> MemoryUse:
    """Bytes that ``layers`` (default: the whole workload) keep on one IPU; with
    ``optimizer_shards`` replicas sharing the optimiser state, 1/shards of it."""
    for name, value in (("micro_batch", micro_batch), ("in_flight", in_flight),
                        ("optimizer_shards", optimizer_shards)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{name} must be a whole number of 1 or more, not {value!r}")
    chosen = _stage(workload, layers)
    parameters = sum(layer.parameters for layer in chosen)
    stash_per_sample = sum(layer.stashed_bytes for layer in chosen)
    optimizer = (0 if optimizer_offchip
                 else -(-parameters * workload.optimizer_values_per_parameter
                        * DType.FLOAT32.itemsize // optimizer_shards))
    if recompute:
        runs = checkpoint_runs(chosen)
        checkpoints = sum(run[-1].output_bytes for run in runs[:-1])
        kept = in_flight * micro_batch * (stage_input_bytes(workload, chosen) + checkpoints)
        working = micro_batch * max(sum(layer.stashed_bytes for layer in run) for run in runs)
    else:
        kept, working = in_flight * micro_batch * stash_per_sample, 0
    return MemoryUse(weights_bytes=parameters * workload.weight_dtype.itemsize,
                     gradients_bytes=parameters * workload.gradient_dtype.itemsize,
                     optimizer_bytes=optimizer, stash_bytes=kept, recompute_bytes=working)


def fits(use: MemoryUse, processor: Processor, reserve_bytes: int = 0) -> bool:
    """Whether ``use`` plus ``reserve_bytes`` (code, exchange buffers) fits the
    processor's In-Processor-Memory (GC2 ~300 MB, GC200 900 MB; docs/hardware.md)."""
    if isinstance(reserve_bytes, bool) or not isinstance(reserve_bytes, int) or reserve_bytes < 0:
        raise UserError(f"reserve_bytes must be a whole number of 0 or more, not "
                        f"{reserve_bytes!r}")
    return use.total_bytes + reserve_bytes <= processor.in_processor_memory_bytes
