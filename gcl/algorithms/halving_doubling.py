"""``halving_doubling``: recursive halving and doubling (Rabenseifner), and binomial trees.

Reduce-scatter by recursive halving: at distance d = n/2, n/4, ..., 1 each rank swaps half
of the range it still holds with rank XOR d and reduces the half it keeps; log2(n)
supersteps, the bandwidth term of a ring, far fewer latencies. All-gather by recursive
doubling mirrors it. Allreduce is one then the other. Broadcast is a binomial tree from
the root (log2(n) supersteps of the whole buffer). Needs a power-of-two group except for
broadcast. Partners far apart share links: the cost model charges for it.
"""

from __future__ import annotations

import numpy as np

from cluster.errors import ScheduleError
from gcl.algorithms import Algorithm, GroupContext, register
from gcl.collectives import Collective
from gcl.schedule import FLAT, FixedOffsets, Phase


def _exchange(ctx: GroupContext, distance: int, first_slot: np.ndarray, reduce: bool,
              label: str) -> Phase:
    ranks = np.arange(ctx.size)
    offsets = first_slot * ctx.chunk
    return Phase(label=label, scope=FLAT, steps=1, src=ctx.ipus[ranks],
                 dst=ctx.ipus[ranks ^ distance],
                 count=np.full(ctx.size, distance * ctx.chunk, dtype=np.int64), reduce=reduce,
                 offsets=FixedOffsets(offsets, offsets))


@register
class HalvingDoubling(Algorithm):
    name = "halving_doubling"
    collectives = frozenset({"allreduce", "reduce-scatter", "all-gather", "broadcast"})

    def slots(self, collective: Collective, group_size: int) -> int:
        return 1 if collective.name == "broadcast" else group_size

    def check(self, ctx: GroupContext) -> None:
        n = ctx.size
        if ctx.collective.name != "broadcast" and n & (n - 1):
            raise ScheduleError(
                f"halving_doubling needs a power-of-two group; this group has {n} IPUs: use a "
                "ring algorithm or hierarchical")

    def build(self, ctx: GroupContext) -> tuple[list[Phase], np.ndarray]:
        self.check(ctx)
        n, name = ctx.size, ctx.collective.name
        ranks = np.arange(n)
        if name == "broadcast":
            return self._binomial(ctx), ranks
        phases = []
        if name in ("allreduce", "reduce-scatter"):
            distance = n // 2
            while distance >= 1:
                start = ranks & ~(2 * distance - 1)
                partner_half = start + ((ranks ^ distance) & distance)
                phases.append(_exchange(ctx, distance, partner_half, True,
                                        f"reduce-scatter (distance {distance})"))
                distance //= 2
        if name in ("allreduce", "all-gather"):
            distance = 1
            while distance < n:
                own = ranks & ~(distance - 1)
                phases.append(_exchange(ctx, distance, own, False,
                                        f"all-gather (distance {distance})"))
                distance *= 2
        return phases, ranks

    def _binomial(self, ctx: GroupContext) -> list[Phase]:
        n, phases, reach = ctx.size, [], 1
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
