"""A replay's Perfetto timeline (:class:`cluster.model.trace.Trace`, simulated clock): a
process per rank, named by its IPU, with a track for its compute, one for its
communication and one for its memory traffic; a span per node that took time, named by the
node, its kind and sizes in its args."""

from __future__ import annotations

from cluster.model.topology import Topology
from cluster.model.trace import Trace
from cluster.training.chakra.et_nodes import Collective, Memory, NodeKind, PeerToPeer
from cluster.training.chakra.replay_engine import ReplayRecord
from cluster.training.chakra.replay_summary import COMMUNICATION, node_label

TRACKS = ("compute", "communication", "memory")


def replay_trace(record: ReplayRecord, topology: Topology, source: str) -> Trace:
    """The timeline of ``record`` (a replay of the trace ``source`` on ``topology``)."""
    trace = Trace(metadata={"replay_of": source, "topology": topology.name,
                            "ranks": record.layout.ranks})
    for run in record.runs:
        process = f"rank {run.rank} ({topology.ipu_name(run.rank)})"
        for track in TRACKS:
            trace.track(process, track)
        for node, start, end in zip(run.nodes, run.start, run.end):
            if end <= start:
                continue
            args: dict[str, object] = {"node": node.id, "kind": node_label(node)}
            detail = node.detail
            if isinstance(detail, Collective):
                args["pg_name"] = detail.pg_name
            if isinstance(detail, (Collective, PeerToPeer, Memory)):
                args["bytes"] = detail.size_bytes
            track = ("compute" if node.kind is NodeKind.COMP
                     else "communication" if node.kind in COMMUNICATION else "memory")
            trace.span(process, track, node.name or node_label(node), start, end - start,
                       **args)
    return trace
