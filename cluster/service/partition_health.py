"""A partition's health: can its IPUs run collectives, and at full speed?

- ``unhealthy``: a card or machine owning one of its IPUs is down (restarting or dead), or
  a link its routes need is cut with no way round it;
- ``degraded``: a link on its routes is slowed (bandwidth factor, added latency) or cut and
  routed round;
- ``healthy`` otherwise.

The routes considered are those from the partition's first IPU to each other IPU and back,
and between neighbours in its ring order: together they cross every network-tree link the
partition uses; IPU-Links with both ends in the partition are added. A detour between two
other members over an IPU-Link outside the partition can be missed: health is a summary,
the planner (which routes every transfer) has the last word.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cluster.model.link_faults import LinkDown, LinkFault, link_name
from cluster.model.routing import router_of
from cluster.model.text_enum import TextEnum
from cluster.model.topology import Topology


class PartitionState(TextEnum):
    """A partition's health as the API sends it (compares equal to its string)."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    UNHEALTHY = "unhealthy"


HEALTHY, DEGRADED, UNHEALTHY = (PartitionState.HEALTHY, PartitionState.DEGRADED,
                                PartitionState.UNHEALTHY)


@dataclass(frozen=True)
class Health:
    """A partition's state, and what makes it so (the cards down, the links hit)."""

    state: PartitionState
    detail: str = ""


def describe_fault(fault: LinkFault) -> str:
    """``'cut'`` or ``'bandwidth x0.5, +2 us'``."""
    if fault.cut:
        return "cut"
    parts = []
    if fault.bandwidth_factor != 1.0:
        parts.append(f"bandwidth x{fault.bandwidth_factor:g}")
    if fault.added_latency_seconds:
        parts.append(f"+{fault.added_latency_seconds * 1e6:g} us latency")
    return ", ".join(parts)


def partition_health(topology: Topology, ipus: Sequence[int],
                     link_faults: Mapping[int, LinkFault],
                     down_cards: Mapping[int, str]) -> Health:
    """Health of the partition on ``ipus``; ``topology`` has the faults applied and
    ``down_cards`` maps each IPU whose card is down to a description of it."""
    down = sorted({down_cards[i] for i in ipus if i in down_cards})
    if down:
        return Health(UNHEALTHY, "; ".join(down))
    if len(ipus) < 2 or not link_faults:
        return Health(HEALTHY)
    members = np.asarray(ipus, dtype=np.int64)
    first, rest = members[0], members[1:]
    src = np.concatenate([np.full(len(rest), first), rest, members])
    dst = np.concatenate([rest, np.full(len(rest), first), np.roll(members, -1)])
    try:
        routes = router_of(topology).route(src, dst)
    except LinkDown as error:
        return Health(UNHEALTHY, str(error))
    inside = np.isin(topology.link_a, members) & np.isin(topology.link_b, members)
    used = set((routes.pair_link // 2).tolist()) | set(np.flatnonzero(inside).tolist())
    hit = [f"{link_name(topology, link)} {describe_fault(fault)}"
           + (" (routed round)" if fault.cut else "")
           for link, fault in sorted(link_faults.items()) if link in used]
    return Health(DEGRADED, "; ".join(hit)) if hit else Health(HEALTHY)
