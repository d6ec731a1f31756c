"""What a replay found, as plain data (``ipupod replay`` prints it; ``--json`` is it): each
rank's compute, communication, memory and idle seconds and its end, the time spent in each
collective kind, the critical path, and the bytes each link carried, busiest first. All
times are simulated seconds."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from cluster.model.topology import Topology
from cluster.training.chakra.et_nodes import ChakraNode, Collective, NodeKind, PeerToPeer
from cluster.training.chakra.replay_engine import RankRun, ReplayRecord
from cluster.training.chakra.replay_pairs import Endpoint

PATH_STEPS_KEPT = 1000  # critical-path steps --json lists (the last ones)
COMMUNICATION = (NodeKind.COMM_COLL, NodeKind.COMM_SEND, NodeKind.COMM_RECV)
MEMORY = (NodeKind.MEM_LOAD, NodeKind.MEM_STORE)


def node_label(node: ChakraNode) -> str:
    """What a node does, in a word: ``compute``, the collective (``all-reduce``), ``send``,
    ``receive``, ``memory`` or ``metadata``."""
    if isinstance(node.detail, Collective):
        return str(node.detail.comm_type)
    return {NodeKind.COMP: "compute", NodeKind.COMM_SEND: "send",
            NodeKind.COMM_RECV: "receive", NodeKind.METADATA: "metadata"}.get(node.kind,
                                                                              "memory")


def covered_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by the union of ``(start, end)`` intervals."""
    total, reach = 0.0, -np.inf
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def rank_totals(run: RankRun, topology: Topology) -> dict[str, Any]:
    """One rank's totals: compute (its IPU busy), communication and memory (time covered
    by such nodes), idle (covered by none) and its end."""
    spans = [(s, e, node.kind) for s, e, node in zip(run.start, run.end, run.nodes)]
    end = max((e for _, e, _ in spans), default=0.0)
    return {"rank": run.rank, "ipu": topology.ipu_name(run.rank), "nodes": len(spans),
            "compute_seconds": sum(e - s for s, e, k in spans if k is NodeKind.COMP),
            "communication_seconds": covered_seconds((s, e) for s, e, k in spans
                                                     if k in COMMUNICATION),
            "memory_seconds": covered_seconds((s, e) for s, e, k in spans if k in MEMORY),
            "idle_seconds": end - covered_seconds((s, e) for s, e, _ in spans if e > s),
            "end_seconds": end}


def collective_kinds(record: ReplayRecord) -> dict[str, dict[str, Any]]:
    """Per collective kind, and for sends: how many ran, their bytes and their simulated
    seconds (each collective counted once, not once per rank)."""
    kinds: dict[str, dict[str, Any]] = {}
    for done in record.collectives:
        entry = kinds.setdefault(str(done.detail.comm_type),
                                 {"count": 0, "bytes": 0, "sim_seconds": 0.0})
        entry["count"] += 1
        entry["bytes"] += done.detail.size_bytes
        entry["sim_seconds"] += done.seconds
    for run in record.runs:
        for node, start, end in zip(run.nodes, run.start, run.end):
            if node.kind is NodeKind.COMM_SEND and isinstance(node.detail, PeerToPeer):
                entry = kinds.setdefault("send", {"count": 0, "bytes": 0, "sim_seconds": 0.0})
                entry["count"] += 1
                entry["bytes"] += node.detail.size_bytes
                entry["sim_seconds"] += end - start
    return kinds


def critical_path(record: ReplayRecord) -> list[Endpoint]:
    """The chain of nodes that ends last, first node first: from the node that ends last,
    back through what each waited for last."""
    last: Endpoint | None = None
    latest = -np.inf
    for run in record.runs:
        if run.end:
            index = int(np.argmax(run.end))
            if run.end[index] > latest:
                latest, last = run.end[index], (run.rank, index)
    path: list[Endpoint] = []
    while last is not None:
        path.append(last)
        last = record.runs[last[0]].cause[last[1]]
    return path[::-1]


def path_summary(record: ReplayRecord) -> dict[str, Any]:
    """The critical path: its nodes, the seconds it spends in each kind of node and
    waiting between them, and its steps (the last :data:`PATH_STEPS_KEPT`)."""
    steps = []
    by_kind: dict[str, float] = {}
    waiting, previous_end = 0.0, 0.0
    for rank, index in critical_path(record):
        run = record.runs[rank]
        node, start, end = run.nodes[index], run.start[index], run.end[index]
        label = node_label(node)
        by_kind[label] = by_kind.get(label, 0.0) + end - start
        waiting += max(0.0, start - previous_end)
        previous_end = end
        steps.append({"rank": rank, "node": node.id, "name": node.name, "kind": label,
                      "start_seconds": start, "end_seconds": end})
    return {"nodes": len(steps), "end_seconds": previous_end, "seconds_by_kind": by_kind,
            "waiting_seconds": waiting, "steps": steps[-PATH_STEPS_KEPT:]}


def link_bytes(record: ReplayRecord, topology: Topology) -> np.ndarray:
    """Bytes carried by each directed link over the whole replay."""
    total = np.zeros(len(topology.directed_bandwidth_Bps))
    for priced, count in record.link_uses.values():
        total[priced.links] += priced.link_bytes * count
    return total


def link_rows(record: ReplayRecord, topology: Topology, end_seconds: float) -> list[dict[str, Any]]:
    """Every directed link that carried bytes, busiest first: its name, type, bytes, and
    the fraction of the replay it would be busy at its full bandwidth."""
    carried = link_bytes(record, topology)
    order = np.argsort(-carried, kind="stable")
    rows = []
    for link in order[:np.count_nonzero(carried)].tolist():
        seconds = carried[link] / topology.directed_bandwidth_Bps[link]
        rows.append({"link": topology.link_label(link),
                     "type": topology.link_types[topology.directed_type[link]].name,
                     "bytes": round(float(carried[link])),
                     "busy_fraction": seconds / end_seconds if end_seconds > 0 else 0.0})
    return rows


def replay_summary(record: ReplayRecord, topology: Topology) -> dict[str, Any]:
    """The whole replay as plain data (see the module docstring)."""
    ranks = [rank_totals(run, topology) for run in record.runs]
    end = max((r["end_seconds"] for r in ranks), default=0.0)
    return {"clock": "simulated", "ranks": len(ranks),
            "source_ranks": record.layout.source_ranks, "end_seconds": end,
            "assumed": list(record.layout.assumed),
            "groups": {name: list(members) for name, members in record.layout.groups.items()},
            "no_duration_nodes": record.no_duration, "per_rank": ranks,
            "collectives": collective_kinds(record), "critical_path": path_summary(record),
            "links": link_rows(record, topology, end)}
