"""``halving_doubling``: recursive halving and doubling (Rabenseifner), and binomial trees.

Reduce-scatter by recursive halving: at distance d = 1, 2, 4, ..., n/2 each rank swaps
half of the range it still holds with rank XOR d and reduces the half it keeps; log2(n)
supersteps, the bandwidth term of a ring, far fewer latencies. The nearest partners swap
the largest halves (as MPICH's Rabenseifner allreduce does): replicas numbered along the
hardware (the two IPUs of a C2 card, then neighbouring cards) keep the big exchanges on
the short links, and in real mode inside one card actor. Rank r ends up holding slot
bit-reverse(r). All-gather by recursive doubling mirrors it (distance n/2 first).
Allreduce is one then the other. Broadcast is a binomial tree from the root (log2(n)
supersteps of the whole buffer). Needs a power-of-two group except for broadcast. Partners
far apart share links: the cost model charges for it.
"""

from __future__ import annotations

import numpy as np

from cluster.errors import ScheduleError
from gcl.algorithms import Algorithm, GroupContext, register
from gcl.collectives import Collective, CollectiveName
from gcl.schedule import FLAT, FixedOffsets, Phase


def _exchange(ctx: GroupContext, distance: int, first_slot: np.ndarray, slots: int,
              reduce: bool, label: str) -> Phase:
    """Each rank sends ``slots`` slots from ``first_slot`` on to rank XOR ``distance``,
    which lands them at the same offsets."""
    ranks = np.arange(ctx.size)
    offsets = first_slot * ctx.chunk
    return Phase(label=label, scope=FLAT, steps=1, src=ctx.ipus[ranks],
                 dst=ctx.ipus[ranks ^ distance],
                 count=np.full(ctx.size, slots * ctx.chunk, dtype=np.int64), reduce=reduce,
                 offsets=FixedOffsets(offsets, offsets))


def bit_reversed(ranks: np.ndarray, bits: int) -> np.ndarray:
    """Each rank with its lowest ``bits`` bits in reverse order (the slot it ends up with)."""
    out = np.zeros_like(ranks)
    for bit in range(bits):
        out |= ((ranks >> bit) & 1) << (bits - 1 - bit)
    return out


@register
class HalvingDoubling(Algorithm):
    """Recursive halving and doubling; a binomial tree for broadcast."""

    name = "halving_doubling"
    auto_order = 40
    collectives = frozenset({CollectiveName.ALLREDUCE, CollectiveName.REDUCE_SCATTER,
                             CollectiveName.ALL_GATHER, CollectiveName.BROADCAST})

    def slots(self, collective: Collective, group_size: int) -> int:
        return 1 if collective.name == CollectiveName.BROADCAST else group_size

    def check(self, ctx: GroupContext) -> None:
        n = ctx.size
        if ctx.collective.name != CollectiveName.BROADCAST and n & (n - 1):
            raise ScheduleError(
                f"halving_doubling needs a power-of-two group; this group has {n} IPUs: use a "
                "ring algorithm or hierarchical")

    def build(self, ctx: GroupContext) -> tuple[list[Phase], np.ndarray]:
        self.check(ctx)
        n, name = ctx.size, ctx.collective.name
        ranks = np.arange(n)
        if name == CollectiveName.BROADCAST:
            return self._binomial(ctx), ranks
        bits = n.bit_length() - 1
        slot = bit_reversed(ranks, bits)  # rank r's slot at the end of the reduce-scatter
        # before step k (distance 2**k) a rank holds n >> k slots: those whose top k bits
        # match slot's; it keeps the half picked by bit k of its rank, the partner the other
        held_start = [(slot >> (bits - k)) << (bits - k) for k in range(bits)]
        kept_start = [held_start[k] + ((ranks >> k) & 1) * (n >> (k + 1)) for k in range(bits)]
        phases: list[Phase] = []
        if name in (CollectiveName.ALLREDUCE, CollectiveName.REDUCE_SCATTER):
            for k in range(bits):
                given = held_start[k] + (1 - ((ranks >> k) & 1)) * (n >> (k + 1))
                phases.append(_exchange(ctx, 1 << k, given, n >> (k + 1), True,
                                        f"reduce-scatter (distance {1 << k})"))
        if name in (CollectiveName.ALLREDUCE, CollectiveName.ALL_GATHER):
            for k in reversed(range(bits)):
                phases.append(_exchange(ctx, 1 << k, kept_start[k], n >> (k + 1), False,
                                        f"all-gather (distance {1 << k})"))
        return phases, slot

    def _binomial(self, ctx: GroupContext) -> list[Phase]:
        """A binomial tree from the root: the ranks reached double every superstep."""
        n, reach = ctx.size, 1
        phases: list[Phase] = []
        while reach < n:
            relative = np.arange(min(reach, n - reach))
            senders = (relative + ctx.root) % n
            receivers = (relative + reach + ctx.root) % n
            zero = np.zeros(len(relative), dtype=np.int64)
            phases.append(Phase(
                label=f"broadcast (tree level {reach.bit_length()})", scope=FLAT, steps=1,
                src=ctx.ipus[senders], dst=ctx.ipus[receivers],
                count=np.full(len(relative), ctx.chunk, dtype=np.int64), reduce=False,
                offsets=FixedOffsets(zero, zero)))
            reach *= 2
        return phases
