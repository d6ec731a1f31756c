"""What ``ipupod chakra show`` says of a trace, per rank: its nodes by kind, its compute
time in microseconds (and FLOPs where given), and its collectives by type with their
bytes; and, for the whole trace, the fields and attributes the reader did not use."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cluster.training.chakra.et_nodes import (
    ChakraRank,
    ChakraTrace,
    Collective,
    CommType,
    Compute,
    NodeKind,
)


@dataclass(frozen=True)
class CollectiveTotal:
    """How many collectives of one type a rank calls and their bytes (``comm_size``)."""

    count: int
    size_bytes: int


@dataclass(frozen=True)
class RankSummary:
    """One rank's totals."""

    rank: int
    path: str
    version: str
    nodes_by_kind: Mapping[NodeKind, int]
    compute_micros: int
    compute_num_ops: int
    collectives: Mapping[CommType, CollectiveTotal]


def summarize_rank(rank: ChakraRank) -> RankSummary:
    """``rank``'s totals: every kind and collective type listed, zeros too."""
    kinds = Counter(node.kind for node in rank.nodes)
    counts = dict.fromkeys(CommType, 0)
    sizes = dict.fromkeys(CommType, 0)
    micros = num_ops = 0
    for node in rank.nodes:
        if isinstance(node.detail, Compute):
            micros += node.duration_micros
            num_ops += node.detail.num_ops or 0
        elif isinstance(node.detail, Collective):
            counts[node.detail.comm_type] += 1
            sizes[node.detail.comm_type] += node.detail.size_bytes
    return RankSummary(rank=rank.rank, path=rank.path, version=rank.version,
                       nodes_by_kind={kind: kinds[kind] for kind in NodeKind},
                       compute_micros=micros, compute_num_ops=num_ops,
                       collectives={c: CollectiveTotal(counts[c], sizes[c]) for c in CommType})


def ignored_names(trace: ChakraTrace) -> dict[str, int]:
    """Every field and attribute the trace gives that the reader does not use, with how
    many times, most frequent first."""
    total: Counter[str] = Counter()
    for rank in trace.ranks:
        total.update(rank.ignored)
    return dict(sorted(total.items(), key=lambda item: (-item[1], item[0])))


def summary_json(trace: ChakraTrace) -> dict[str, Any]:
    """The summary as JSON-ready data (``ipupod chakra show --json``)."""
    ranks = [summarize_rank(rank) for rank in trace.ranks]
    return {
        "source": trace.source,
        "ranks": [{
            "rank": s.rank, "file": s.path, "version": s.version,
            "nodes": sum(s.nodes_by_kind.values()),
            "nodes_by_kind": {str(k): n for k, n in s.nodes_by_kind.items()},
            "compute_micros": s.compute_micros, "compute_num_ops": s.compute_num_ops,
            "collectives": {str(c): {"count": t.count, "bytes": t.size_bytes}
                            for c, t in s.collectives.items() if t.count},
        } for s in ranks],
        "ignored": ignored_names(trace),
    }
