"""What crosses the links of a sharded replica, per micro-batch: four GCL collectives.

Each runs over every replica at once, a replica's ``K`` IPUs one group (CommGroup
CONSECUTIVE of ``K`` over the replicas' IPUs, replica after replica, IPU 0 first):

========================  ==============  ==================================  =============
exchange                  collective      values per IPU (per block)          when
========================  ==============  ==================================  =============
the layer's input         broadcast       ``micro_batch x fan_in``            forward
the output slices         all-gather      ``micro_batch x width``             forward
the output's gradient     reduce-scatter  ``micro_batch x width``             backward
the partial input grads   allreduce       ``micro_batch x fan_in``            backward, if
                                                                              the layer is
                                                                              not the first
========================  ==============  ==================================  =============

Each is the other's adjoint: the backward of a broadcast is a sum (the allreduce), of an
all-gather a reduce-scatter, in which only IPU 0 holds non-zero values, so that each IPU
receives its columns of the gradient (a scatter). GCL has no gather or reduce to one
rank, so IPU 0's all-gather and allreduce leave copies on the others too, which they
free. Phantom mode costs these records (:mod:`.cost`), real mode runs them
(:mod:`cluster.training.engines.sharded`), with the same sizes, groups and algorithm: the
two agree by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.training.sharding.columns import ColumnSplit
from gcl import CommGroup
from gcl.collectives import CollectiveName

LAYER_IN = "shard.in"
OUT, GATHERED = "shard.out", "shard.gathered"
DELTA, DELTA_COLUMNS = "shard.delta", "shard.delta.columns"
PARTIAL, PARTIAL_SUM = "shard.partial", "shard.partial.sum"
ALGORITHM = "auto"  # the planner picks the fastest, in both modes


@dataclass(frozen=True)
class Exchange:
    """One collective of a micro-batch: GCL's ``collective`` on tensor ``tensor``, its
    result in ``output``; ``values`` per IPU (per block, for all-gather and
    reduce-scatter) is ``micro_batch`` rows of ``fan_in`` or of ``width`` values."""

    label: str
    collective: CollectiveName
    tensor: str
    output: str
    rows_of_fan_in: bool

    def count(self, split: ColumnSplit, micro_batch: int) -> int:
        """Elements each IPU contributes (per block) for a micro-batch."""
        return micro_batch * (split.fan_in if self.rows_of_fan_in else split.width)


BROADCAST = Exchange("broadcast", CollectiveName.BROADCAST, LAYER_IN, LAYER_IN, True)
ALL_GATHER = Exchange("all_gather", CollectiveName.ALL_GATHER, OUT, GATHERED, False)
REDUCE_SCATTER = Exchange("reduce_scatter", CollectiveName.REDUCE_SCATTER, DELTA, DELTA_COLUMNS,
                          False)
ALLREDUCE = Exchange("allreduce", CollectiveName.ALLREDUCE, PARTIAL, PARTIAL_SUM, True)


def forward_exchanges() -> tuple[Exchange, ...]:
    """The forward pass's collectives, in order."""
    return BROADCAST, ALL_GATHER


def backward_exchanges(split: ColumnSplit) -> tuple[Exchange, ...]:
    """The backward pass's collectives, in order (no partial sums below the first layer:
    nothing there needs them)."""
    return (REDUCE_SCATTER, ALLREDUCE) if split.layer > 0 else (REDUCE_SCATTER,)


def shard_group(split: ColumnSplit) -> CommGroup:
    """Each replica's ``K`` IPUs one group."""
    return CommGroup.consecutive(split.shards)
