"""What must hold of a trace's nodes beyond each one alone: in a rank, ids unique and
every dependency a node of that rank with no cycle among them (so an order exists); across
ranks, peers that are ranks of the trace, and every rank that calls collectives on a
process group calling the same ones in the same order (the n-th on a group has the same
type and size on each rank)."""

from __future__ import annotations

from collections.abc import Sequence

from cluster.errors import quoted
from cluster.model.units import plural
from cluster.training.chakra.et_errors import ChakraTraceError
from cluster.training.chakra.et_nodes import ChakraNode, ChakraRank, Collective, PeerToPeer

CYCLE_SHOWN = 8  # node ids a cycle's message lists


def check_dependencies(path: str, nodes: Sequence[ChakraNode]) -> None:
    """Refuse a rank whose ids repeat, whose nodes depend on a node it does not hold, or
    whose dependencies form a cycle (named by the ids on it)."""
    by_id: dict[int, ChakraNode] = {}
    for node in nodes:
        if node.id in by_id:
            raise ChakraTraceError(path, f"two nodes have the id {node.id} "
                                   f"({quoted(by_id[node.id].name)} and {quoted(node.name)})")
        by_id[node.id] = node
    for node in nodes:
        for dep in (*node.data_deps, *node.ctrl_deps):
            if dep not in by_id:
                raise ChakraTraceError(path, f"node {node.id} ({quoted(node.name)}) depends "
                                       f"on node {dep}, which is not in this rank's file "
                                       "(a missing dependency)")
    cycle = _a_cycle(by_id)
    if cycle:
        shown = " -> ".join(str(i) for i in cycle[:CYCLE_SHOWN])
        more = " -> ..." if len(cycle) > CYCLE_SHOWN else ""
        raise ChakraTraceError(path, f"its dependencies form a cycle ({shown}{more} -> "
                               f"{cycle[0]}), so no order runs them")


def _a_cycle(by_id: dict[int, ChakraNode]) -> list[int]:
    """The ids of one dependency cycle, empty if there is none (Kahn's order, then a walk
    among the nodes it could not order)."""
    waiting = {i: len(set(n.data_deps) | set(n.ctrl_deps)) for i, n in by_id.items()}
    dependents: dict[int, list[int]] = {}
    for node in by_id.values():
        for dep in set(node.data_deps) | set(node.ctrl_deps):
            dependents.setdefault(dep, []).append(node.id)
    ready = [i for i, count in waiting.items() if count == 0]
    while ready:
        for later in dependents.get(ready.pop(), ()):
            waiting[later] -= 1
            if waiting[later] == 0:
                ready.append(later)
    stuck = {i for i, count in waiting.items() if count > 0}
    if not stuck:
        return []
    walk: list[int] = []
    seen: dict[int, int] = {}
    current = min(stuck)
    while current not in seen:
        seen[current] = len(walk)
        walk.append(current)
        node = by_id[current]
        current = next(d for d in (*node.data_deps, *node.ctrl_deps) if d in stuck)
    return walk[seen[current]:]


def check_peers(ranks: Sequence[ChakraRank], source: str) -> None:
    """Refuse a send or receive whose peer is not a rank of the trace."""
    for rank in ranks:
        for node in rank.nodes:
            detail = node.detail
            if not isinstance(detail, PeerToPeer):
                continue
            for end, peer in (("comm_src", detail.src), ("comm_dst", detail.dst)):
                if peer is not None and peer >= len(ranks):
                    raise ChakraTraceError(rank.path, f"node {node.id} ({quoted(node.name)}) has "
                                           f"{end} {peer}, but the trace {quoted(source)} has "
                                           f"{plural(len(ranks), 'rank')}")


def check_collectives_agree(ranks: Sequence[ChakraRank], source: str) -> None:
    """Refuse ranks that disagree on a process group's collectives: how many they call on
    it, or the n-th one's type or size."""
    first: dict[str, tuple[int, list[Collective]]] = {}
    for rank in ranks:
        for pg_name, calls in _collectives_by_group(rank).items():
            if pg_name not in first:
                first[pg_name] = (rank.rank, calls)
                continue
            _compare(source, pg_name, first[pg_name], (rank.rank, calls))


def _collectives_by_group(rank: ChakraRank) -> dict[str, list[Collective]]:
    """A rank's collectives, by process group, in file order."""
    groups: dict[str, list[Collective]] = {}
    for node in rank.nodes:
        if isinstance(node.detail, Collective):
            groups.setdefault(node.detail.pg_name, []).append(node.detail)
    return groups


def _compare(source: str, pg_name: str, one: tuple[int, list[Collective]],
             other: tuple[int, list[Collective]]) -> None:
    group = f"process group {quoted(pg_name)}" if pg_name else "the default process group"
    (rank_a, calls_a), (rank_b, calls_b) = one, other
    for index, (a, b) in enumerate(zip(calls_a, calls_b)):
        if (a.comm_type, a.size_bytes) != (b.comm_type, b.size_bytes):
            raise ChakraTraceError(source, f"ranks disagree on collective {index} of {group}: "
                                   f"rank {rank_a} has {_call(a)}, rank {rank_b} {_call(b)}")
    if len(calls_a) != len(calls_b):
        raise ChakraTraceError(source, f"ranks disagree on {group}: rank {rank_a} calls "
                               f"{plural(len(calls_a), 'collective')} on it, rank {rank_b} "
                               f"{len(calls_b):,}")


def _call(collective: Collective) -> str:
    return f"{collective.comm_type} of {collective.size_bytes:,} bytes"
