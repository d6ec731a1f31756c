"""Ring algorithms: ``clockwise_ring`` and ``anticlockwise_ring`` (GCL's names).

The ring follows the topology's preferred ring order restricted to the group, so that on
the presets every hop is one IPU-Link where the group allows. Allreduce is a ring
reduce-scatter then a ring all-gather, 2(n-1) supersteps of 1/n of the buffer each: the
bandwidth-optimal schedule. Broadcast is a scatter from the root then a ring all-gather;
all-to-all is a pairwise exchange, step k sending to the IPU k places along the ring.
"""

from __future__ import annotations

import numpy as np

from gcl.algorithms import Algorithm, GroupContext, register
from gcl.collectives import COLLECTIVES, CollectiveName
from gcl.rings import Ring, ring_phase, scatter_phase
from gcl.schedule import FLAT, OUT, FixedOffsets, Phase


def ring_collective(ctx: GroupContext, rings: list[Ring]) -> list[Phase]:
    """The phases of ``ctx.collective`` over ``rings`` run together (slot = rank)."""
    name = ctx.collective.name
    phases: list[Phase | None] = []
    if name == CollectiveName.BROADCAST:
        phases.append(scatter_phase(ctx.ipus, ctx.root, np.arange(ctx.size), ctx.chunk))
    if name in (CollectiveName.ALLREDUCE, CollectiveName.REDUCE_SCATTER):
        phases.append(ring_phase(rings, True, CollectiveName.REDUCE_SCATTER.value, FLAT))
    if name in (CollectiveName.ALLREDUCE, CollectiveName.ALL_GATHER, CollectiveName.BROADCAST):
        phases.append(ring_phase(rings, False, CollectiveName.ALL_GATHER.value, FLAT))
    return [p for p in phases if p is not None]


def pairwise_exchange(ctx: GroupContext, ring: np.ndarray) -> list[Phase]:
    """All-to-all: at step k the rank at ring position p sends the block meant for the rank
    at position p+k, which stores it in its output at the sender's block.

    Every step has different transfers, so the schedule holds all n (n-1) of them (the
    planner bounds their number).
    """
    n, chunk = ctx.size, ctx.chunk
    phases: list[Phase] = []
    for k in range(1, n):
        senders, receivers = ring, np.roll(ring, -k)
        phases.append(Phase(
            label=f"exchange (shift {k})", scope=FLAT, steps=1,
            src=ctx.ipus[senders], dst=ctx.ipus[receivers],
            count=np.full(n, chunk, dtype=np.int64), reduce=False,
            offsets=FixedOffsets(receivers * chunk, senders * chunk), dst_buffer=OUT))
    return phases


@register
class ClockwiseRing(Algorithm):
    """One ring in the topology's preferred order, every collective."""

    name = "clockwise_ring"
    auto_order = 10
    collectives = frozenset(COLLECTIVES)
    reverse = False

    def ring_ranks(self, ctx: GroupContext) -> np.ndarray:
        """The group's ranks in the order this ring visits them."""
        return ctx.ring[::-1].copy() if self.reverse else ctx.ring

    def build(self, ctx: GroupContext) -> tuple[list[Phase], np.ndarray]:
        ranks = self.ring_ranks(ctx)
        if ctx.collective.name == CollectiveName.ALL_TO_ALL:
            return pairwise_exchange(ctx, ranks), np.arange(ctx.size)
        ring = Ring(ctx.ipus[ranks], ranks, stride=ctx.chunk, count=ctx.chunk)
        return ring_collective(ctx, [ring]), np.arange(ctx.size)


@register
class AnticlockwiseRing(ClockwiseRing):
    """The clockwise ring walked the other way."""

    name = "anticlockwise_ring"
    auto_order = 11
    reverse = True
