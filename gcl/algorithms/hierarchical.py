"""``hierarchical``: local over IPU-Links, global across domains, local again.

The white paper's data-parallel allreduce (000, 001): a reduce-scatter inside each
IPU-Link domain (a DSS 8440 server, a POD64 rack), leaving each IPU 1/L of the buffer
reduced over its domain; an allreduce of those pieces across domains, among the IPUs with
the same local index, over InfiniBand or GW-Links; an all-gather inside each domain.
Every domain must hold the same number of the group's IPUs.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from cluster.errors import ScheduleError
from cluster.model.routing import router_of
from gcl.algorithms import Algorithm, GroupContext, register
from gcl.collectives import CollectiveName
from gcl.rings import Ring, ring_phase
from gcl.schedule import GLOBAL, LOCAL, Phase


def domain_grid(ctx: GroupContext) -> np.ndarray:
    """Ranks as a grid ``[domain, local index]``: domains ordered by their lowest rank,
    IPUs inside a domain in ring order."""
    domain = router_of(ctx.topology).domain_of_ipu[ctx.ipus].tolist()
    # In plain Python: groups are mostly a few IPUs, thousands of them (numpy's unique
    # cost more than the rest of the build).
    rows: dict[int, list[int]] = {d: [] for d in domain}  # domains by their lowest rank
    for rank in ctx.ring.tolist():  # ring order kept inside each domain
        rows[domain[rank]].append(rank)
    sizes = [len(row) for row in rows.values()]
    if len(set(sizes)) != 1:
        raise ScheduleError(
            f"hierarchical needs the same number of the group's IPUs in every IPU-Link domain; "
            f"this group has {', '.join(map(str, sizes))}: use a ring algorithm, or a group "
            "that fills domains evenly")
    return np.array(list(rows.values()), dtype=np.int64)


@register
class Hierarchical(Algorithm):
    """Local rings in each IPU-Link domain, global rings across them."""

    name = "hierarchical"
    auto_order = 30
    collectives = frozenset({CollectiveName.ALLREDUCE, CollectiveName.REDUCE_SCATTER,
                             CollectiveName.ALL_GATHER})

    # No check of its own: build starts with domain_grid, which refuses an uneven group
    # with the same error (working the grid out twice a group cost 10 s on pod65536).

    def build(self, ctx: GroupContext) -> tuple[list[Phase], np.ndarray]:
        grid = domain_grid(ctx)
        key = grid.tobytes()  # int64
        phases, slot_of_rank = _rank_phases(ctx.collective.name, key, grid.shape, ctx.chunk)
        # The groups of a group of groups mostly share a grid: its phases are built once,
        # between ranks, and each group's are those with its IPUs put in.
        return ([Phase(**{**vars(p), 'src': ctx.ipus[p.src], 'dst': ctx.ipus[p.dst]})
                 for p in phases],
                slot_of_rank.copy())


@lru_cache(maxsize=64)
def _rank_phases(name: CollectiveName, grid_bytes: bytes, shape: tuple[int, ...],
                 chunk: int) -> tuple[tuple[Phase, ...], np.ndarray]:
    """The phases of a group whose ranks form ``grid`` (:func:`domain_grid`, given as its
    bytes and shape to be a cache key), with ranks where IPUs go; and each rank's slot."""
    grid = np.frombuffer(grid_bytes, dtype=np.int64).reshape(shape)
    domains, local = shape[0], shape[1]
    block = domains * chunk
    local_rings = [Ring(row, np.arange(local), stride=block, count=block) for row in grid]
    global_rings = [Ring(grid[:, i], np.arange(domains), stride=chunk, count=chunk,
                         base=i * block) for i in range(local)]
    phases: list[Phase | None] = []
    if name in (CollectiveName.ALLREDUCE, CollectiveName.REDUCE_SCATTER):
        phases.append(ring_phase(local_rings, True, "reduce-scatter (local)", LOCAL))
        phases.append(ring_phase(global_rings, True, "reduce-scatter (global)", GLOBAL))
    if name in (CollectiveName.ALLREDUCE, CollectiveName.ALL_GATHER):
        phases.append(ring_phase(global_rings, False, "all-gather (global)", GLOBAL))
        phases.append(ring_phase(local_rings, False, "all-gather (local)", LOCAL))
    slot_of_rank = np.empty(domains * local, dtype=np.int64)
    slot_of_rank[grid] = np.arange(local)[None, :] * domains + np.arange(domains)[:, None]
    return tuple(p for p in phases if p is not None), slot_of_rank
