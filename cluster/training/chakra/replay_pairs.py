"""Sends matched with receives: the n-th ``COMM_SEND`` from rank ``s`` to rank ``d`` with
tag ``t`` (in ``s``'s file order) pairs with the n-th ``COMM_RECV`` on ``d`` from ``s``
with tag ``t`` (in ``d``'s file order); where a send or receive between ``s`` and ``d``
gives no ``comm_tag``, their sends and receives pair in file order whatever the tags. A
send's source is its own rank, a receive's destination its own rank; a send without
``comm_dst``, a receive without ``comm_src``, or one left without a partner is refused by
name; the send's bytes are what moves."""

from __future__ import annotations

from collections.abc import Sequence

from cluster.errors import UserError, quoted
from cluster.training.chakra.et_nodes import ChakraRank, NodeKind, PeerToPeer

Endpoint = tuple[int, int]  # (rank, index of the node in the rank's file)
PairKey = tuple[int, int, int | None]  # (src rank, dst rank, tag)


def pair_sends(ranks: Sequence[ChakraRank]) -> dict[Endpoint, Endpoint]:
    """Each send's receive and each receive's send, by (rank, node index), both ways."""
    sends: dict[PairKey, list[Endpoint]] = {}
    receives: dict[PairKey, list[Endpoint]] = {}
    for rank in ranks:
        for index, node in enumerate(rank.nodes):
            detail = node.detail
            if node.kind is NodeKind.COMM_SEND and isinstance(detail, PeerToPeer):
                if detail.dst is None:
                    raise _unpaired(rank, index, "is a send without comm_dst: it cannot be "
                                    "paired with a receive")
                sends.setdefault((rank.rank, detail.dst, detail.tag), []).append((rank.rank, index))
            elif node.kind is NodeKind.COMM_RECV and isinstance(detail, PeerToPeer):
                if detail.src is None:
                    raise _unpaired(rank, index, "is a receive without comm_src: it cannot be "
                                    "paired with a send")
                receives.setdefault((detail.src, rank.rank, detail.tag), []).append(
                    (rank.rank, index))
    sends, receives = _untagged_channels(sends, receives)
    pairs: dict[Endpoint, Endpoint] = {}
    for key in sorted({*sends, *receives}, key=str):
        _pair_key(ranks, key, sends.get(key, []), receives.get(key, []), pairs)
    return pairs


def _untagged_channels(sends: dict[PairKey, list[Endpoint]],
                       receives: dict[PairKey, list[Endpoint]],
                       ) -> tuple[dict[PairKey, list[Endpoint]], dict[PairKey, list[Endpoint]]]:
    """The sends and receives keyed again so that between two ranks where any send or
    receive has no tag, all pair in file order whatever their tags (key tag ``None``)."""
    untagged = {(src, dst) for src, dst, tag in (*sends, *receives) if tag is None}
    if not untagged:
        return sends, receives
    out: list[dict[PairKey, list[Endpoint]]] = []
    for keyed in (sends, receives):
        merged: dict[PairKey, list[Endpoint]] = {}
        for (src, dst, tag), ends in keyed.items():
            key = (src, dst, None) if (src, dst) in untagged else (src, dst, tag)
            merged.setdefault(key, []).extend(ends)
        out.append({key: sorted(ends) for key, ends in merged.items()})
    return out[0], out[1]


def _pair_key(ranks: Sequence[ChakraRank], key: PairKey, sends: list[Endpoint],
              receives: list[Endpoint], pairs: dict[Endpoint, Endpoint]) -> None:
    """Pair one key's sends and receives in order, or refuse the first left over."""
    src, dst, tag = key
    for send, receive in zip(sends, receives):
        pairs[send] = receive
        pairs[receive] = send
    tagged = "" if tag is None else f" with tag {tag}"
    if len(sends) > len(receives):
        rank, index = sends[len(receives)]
        raise _unpaired(ranks[rank], index, f"sends to rank {dst}{tagged}, which has no "
                        f"receive from rank {src}{tagged} left to pair it with "
                        f"({len(sends):,} sends, {len(receives):,} receives): an unpaired send")
    if len(receives) > len(sends):
        rank, index = receives[len(sends)]
        raise _unpaired(ranks[rank], index, f"receives from rank {src}{tagged}, which has no "
                        f"send to rank {dst}{tagged} left to pair it with "
                        f"({len(sends):,} sends, {len(receives):,} receives): an unpaired "
                        "receive")


def _unpaired(rank: ChakraRank, index: int, problem: str) -> UserError:
    node = rank.nodes[index]
    return UserError(f"cannot replay: rank {rank.rank}'s node {node.id} ({quoted(node.name)}) "
                     f"{problem}")
