"""Collectives that start at one simulated time, priced: those of one kind and size on
disjoint process groups of one size run as GCL's replica groups do, as one schedule that
shares the network (``ipupod bench --group`` prices them so); any other runs alone on
its group's IPUs. A collective GCL cannot run is one error naming its node."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cluster.errors import UserError, quoted
from cluster.training.chakra.et_nodes import ChakraNode, Collective
from cluster.training.chakra.replay_pairs import Endpoint
from cluster.training.chakra.replay_pricing import Priced, ReplayPricer


@dataclass(frozen=True)
class Gathered:
    """A collective every rank of its group has reached: what it is, its call on the
    group (the n-th), the group's ranks, each rank's node, and the node of the rank that
    arrived last (``last``, on rank ``last_rank``)."""

    detail: Collective
    call: int
    members: tuple[int, ...]
    arrived: tuple[Endpoint, ...]
    last_rank: int
    last: ChakraNode


def price_together(pricer: ReplayPricer,
                   batch: Sequence[Gathered]) -> list[tuple[Gathered, Priced]]:
    """Each collective of ``batch`` (all starting at one time) with its price, those that
    run as one schedule sharing one :class:`Priced`."""
    shapes: dict[tuple[object, int, int], list[Gathered]] = {}
    for gathered in batch:
        key = (gathered.detail.comm_type, gathered.detail.size_bytes, len(gathered.members))
        shapes.setdefault(key, []).append(gathered)
    priced: list[tuple[Gathered, Priced]] = []
    for same in shapes.values():
        ranks = [rank for gathered in same for rank in gathered.members]
        if len(same) > 1 and len(set(ranks)) == len(ranks):
            same = sorted(same, key=lambda gathered: gathered.members)
            together = _price(pricer, same)
            priced += [(gathered, together) for gathered in same]
        else:
            priced += [(gathered, _price(pricer, [gathered])) for gathered in same]
    return priced


def _price(pricer: ReplayPricer, same: Sequence[Gathered]) -> Priced:
    """One schedule for the groups of ``same``, or the error naming the first's node."""
    first = same[0]
    try:
        return pricer.collective(first.detail, tuple(g.members for g in same))
    except UserError as error:
        detail, node = first.detail, first.last
        groups = f" (and {len(same) - 1} more groups at once)" if len(same) > 1 else ""
        raise UserError(f"cannot replay: rank {first.last_rank}'s node {node.id} "
                        f"({quoted(node.name)}: {detail.comm_type} of {detail.size_bytes:,} "
                        f"bytes on {len(first.members):,} ranks{groups}) cannot run: "
                        f"{error}") from None
