"""Ring building blocks shared by the ring-based algorithms.

A ring of ``n`` IPUs does a reduce-scatter in ``n-1`` supersteps: at step ``k`` the IPU at
position ``p`` sends the chunk owned by position ``p-k-1`` to position ``p+1``, which
reduces it into its own copy; after the last step position ``p`` holds its own chunk fully
reduced. An all-gather is the same walk with copies, starting from each IPU's own chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gcl.schedule import FixedOffsets, Phase, RingOffsets


@dataclass(frozen=True)
class Ring:
    """IPUs in ring order; ``slots[p]`` is the chunk position ``p`` owns. A chunk is
    ``count`` elements at ``base + slot * stride``."""

    ipus: np.ndarray
    slots: np.ndarray
    stride: int
    count: int
    base: int = 0

    def reversed(self) -> Ring:
        """The same ring walked the other way (each IPU keeps its slot)."""
        return Ring(self.ipus[::-1].copy(), self.slots[::-1].copy(), self.stride, self.count,
                    self.base)


def ring_phase(rings: list[Ring], reduce: bool, label: str, scope: str) -> Phase | None:
    """One phase running a reduce-scatter (``reduce``) or all-gather walk on every ring at
    once. All rings must have the same length. ``None`` for rings of one IPU."""
    n = len(rings[0].ipus)
    if n < 2:
        return None
    parts: list[Phase] = []
    for ring in rings:
        flows = np.arange(n)
        parts.append(Phase(
            label=label, scope=scope, steps=n - 1,
            src=ring.ipus, dst=np.roll(ring.ipus, -1),
            count=np.full(n, ring.count, dtype=np.int64), reduce=reduce,
            offsets=RingOffsets(
                slot=ring.slots.astype(np.int64), start=np.zeros(n, dtype=np.int64), pos=flows,
                length=np.full(n, n, dtype=np.int64), base=np.full(n, ring.base, dtype=np.int64),
                chunk=np.full(n, ring.stride, dtype=np.int64), shift=1 if reduce else 0),
        ))
    return Phase.concurrent(parts)


def scatter_phase(ipus: np.ndarray, root: int, slot_of_rank: np.ndarray, chunk: int,
                  label: str = "scatter") -> Phase:
    """The root sends every other rank the chunk that rank owns, in one superstep."""
    others = np.array([r for r in range(len(ipus)) if r != root], dtype=np.int64)
    offsets = slot_of_rank[others].astype(np.int64) * chunk
    return Phase(label=label, scope="flat", steps=1, src=np.full(len(others), ipus[root]),
                 dst=ipus[others], count=np.full(len(others), chunk, dtype=np.int64),
                 reduce=False, offsets=FixedOffsets(offsets, offsets))
