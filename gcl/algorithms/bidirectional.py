"""``bidirectional_ring_pair``: half of every chunk goes clockwise, half anticlockwise.

Both rings run in the same supersteps over opposite directions of the same full-duplex
links, so each link carries half as much each way: on a ring topology the time of the
bandwidth term halves against one ring, with the same number of supersteps.
"""

from __future__ import annotations

import numpy as np

from gcl.algorithms import Algorithm, GroupContext, register
from gcl.algorithms.ring import ring_collective
from gcl.collectives import CollectiveName
from gcl.rings import Ring
from gcl.schedule import Phase


@register
class BidirectionalRingPair(Algorithm):
    """Two rings in opposite directions, half of every chunk each."""

    name = "bidirectional_ring_pair"
    auto_order = 20
    collectives = frozenset({CollectiveName.ALLREDUCE, CollectiveName.REDUCE_SCATTER,
                             CollectiveName.ALL_GATHER, CollectiveName.BROADCAST})
    granularity = 2

    def build(self, ctx: GroupContext) -> tuple[list[Phase], np.ndarray]:
        half = ctx.chunk // 2
        clockwise = Ring(ctx.ipus[ctx.ring], ctx.ring, stride=ctx.chunk, count=half)
        anticlockwise = Ring(ctx.ipus[ctx.ring], ctx.ring, stride=ctx.chunk, count=half,
                             base=half).reversed()
        return ring_collective(ctx, [clockwise, anticlockwise]), np.arange(ctx.size)
