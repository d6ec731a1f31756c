"""Naming a lost Ray node: when devices stop answering, whether it is because the node
they run on is gone, and which cards or machines went with it.

Ray declares a node dead only after its health checks miss several times (15 s or more by
default); a node whose raylet was stopped refuses connections at once. So a device that
does not answer is checked against its node: dead for Ray, or a raylet that refuses a TCP
connection, means the node is lost, and every device on it is named in one line ("node
3f2a9c1e (10.0.0.7) lost: cards s1.card0..s1.card7; host s1.host"). Ray re-places the
node's placement groups on a node with room (or on the node when it returns) and restarts
the devices there; the POD wires them in again (:mod:`ipu_node.roster`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence

import ray

from cluster.model.hardware import DeviceKind
from ipu_node.device_errors import DeviceError
from ipu_node.device_spec import DeviceSpec
from ipu_node.node_placement import RayNode, raylet_answers, short_id

log = logging.getLogger(__name__)
_announced: set[str] = set()  # nodes already logged as lost (once each)


def lost_nodes(node_ids: Iterable[str | None]) -> set[str]:
    """Which of ``node_ids`` are lost: dead for Ray, or their raylet refuses connections."""
    wanted = {node for node in node_ids if node}
    if not wanted:
        return set()
    known = {n["NodeID"]: n for n in ray.nodes()}
    lost = set()
    for node in wanted:
        info = known.get(node)
        if info is None or not info.get("Alive") or not raylet_answers(RayNode(
                node, info["NodeManagerAddress"], 0.0, int(info.get("NodeManagerPort", 0)))):
            lost.add(node)
    return lost


def loss_notes(specs: Sequence[DeviceSpec], nodes: Sequence[str | None],
               node_ips: Sequence[str | None], suspects: Iterable[int]) -> dict[int, str]:
    """For each device of ``suspects`` (indices of devices not answering) whose node is
    lost, the line naming the node and every device on it (none on a single node)."""
    suspects = list(suspects)
    if len({node for node in nodes if node}) < 2:
        return {}  # one node (or none): nothing to tell apart, and nothing to ask Ray
    lost = lost_nodes(nodes[i] for i in suspects)
    notes: dict[int, str] = {}
    for node in lost:
        on_node = [i for i, n in enumerate(nodes) if n == node]
        ip = next((node_ips[i] for i in on_node if node_ips[i]), "?")
        note = f"node {short_id(node)} ({ip}) lost: {devices_phrase([specs[i] for i in on_node])}"
        if node not in _announced:
            _announced.add(node)
            log.warning("%s", note)
        notes.update(dict.fromkeys(on_node, note))
    return notes


def with_lost_nodes(error: DeviceError, specs: Sequence[DeviceSpec],
                    nodes: Sequence[str | None], node_ips: Sequence[str | None]) -> DeviceError:
    """``error`` (a collective failed: a device died, is restarting, or a link went
    quiet), saying first which nodes were lost if that is why; on a single node, ``error``
    as it was."""
    if len(nodes) != len(specs):
        return error
    notes = [note for note in sorted(set(loss_notes(specs, nodes, node_ips,
                                                    range(len(specs))).values()))
             if note not in str(error)]  # a wait that named the node already says so
    return type(error)(f"{'; '.join(notes)}: {error}") if notes else error  # the cause first


def devices_phrase(specs: Sequence[DeviceSpec]) -> str:
    """``'cards s1.card0..s1.card7; host s1.host'``: the devices of a node, by kind."""
    kinds = {DeviceKind.C2: "cards", DeviceKind.IPU_M2000: "machines", "host": "host"}
    parts = []
    for kind in dict.fromkeys(spec.kind for spec in specs):
        names = [spec.name for spec in specs if spec.kind == kind]
        parts.append(f"{kinds.get(kind, 'devices')} {name_range(names)}")
    return "; ".join(parts)


def name_range(names: Sequence[str]) -> str:
    """``'s1.card0..s1.card7'`` for names numbered one after another, else a list."""
    numbered = [re.fullmatch(r"(.*?)(\d+)", name) for name in names]
    if len(names) > 2 and all(numbered):
        prefixes = {m.group(1) for m in numbered if m}
        numbers = [int(m.group(2)) for m in numbered if m]
        if len(prefixes) == 1 and numbers == list(range(numbers[0], numbers[0] + len(numbers))):
            return f"{names[0]}..{names[-1]}"
    return ", ".join(names)
