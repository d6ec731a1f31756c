"""Where a POD's devices go on a Ray cluster of one or more nodes, and how they reach
each other across nodes.

Each server's cards (a DSS 8440) or each rack's IPU-M2000s are gang-placed by one Ray
placement group with ``STRICT_PACK``: all on one node, so its IPU-Links stay inside one
machine and only host (PCIe/InfiniBand) or GW-Link traffic crosses the network. A group is
reserved whole or not at all (two servers never deadlock half-placed), and when its node
dies Ray re-places the whole group on one node that has room. A POD whose servers cannot
each fit on one node is refused before anything starts, unless splitting a server is
allowed explicitly (then ``PACK``: one node where possible, spread where not).

On a cluster of several nodes every device's link server listens on its node's address
(:data:`NODE_ADDRESS`), and a device reaches a peer on another node over TCP at that
address; peers on its own node keep the Unix socket (:func:`peer_addresses`).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass

import ray

from cluster.errors import UserError
from cluster.model.hardware import DeviceKind
from cluster.model.units import plural
from ipu_node.device_spec import DeviceSpec

NODE_ADDRESS = "ray-node"  # link host meaning "the address of the Ray node the device is on"
SHORT_ID_CHARS = 8
RAYLET_PROBE_SECONDS = 1.0


@dataclass(frozen=True)
class RayNode:
    """One live node of the Ray cluster: its id, address, ``IPU`` resource and raylet."""

    node_id: str
    ip: str
    ipus: float
    raylet_port: int = 0


def short_id(node_id: str | None) -> str:
    """A node id as people read it (the first hex digits, as ``ray status`` shows)."""
    return (node_id or "")[:SHORT_ID_CHARS]


def live_nodes() -> list[RayNode]:
    """The nodes of the connected Ray cluster that are alive now."""
    return [RayNode(n["NodeID"], n["NodeManagerAddress"], n.get("Resources", {}).get("IPU", 0.0),
                    int(n.get("NodeManagerPort", 0)))
            for n in ray.nodes() if n.get("Alive")]


def strategy(allow_split_server: bool) -> str:
    """The placement group strategy for one server's (or rack's) devices."""
    return "PACK" if allow_split_server else "STRICT_PACK"


def server_ipus(specs: Sequence[DeviceSpec]) -> dict[str, list[DeviceSpec]]:
    """Each server's (or rack's) cards or machines, in order."""
    by_server: dict[str, list[DeviceSpec]] = {}
    for spec in specs:
        if spec.ipus:
            by_server.setdefault(spec.server, []).append(spec)
    return by_server


def check_servers_fit(specs: Sequence[DeviceSpec], nodes: Sequence[RayNode],
                      allow_split_server: bool) -> None:
    """Refuse, before anything starts, a POD one of whose servers (or racks) needs more
    ``IPU`` resource than any single node offers, unless splitting is allowed."""
    if allow_split_server or not nodes:
        return
    largest = max(node.ipus for node in nodes)
    for server, cards in server_ipus(specs).items():
        needed = sum(len(card.ipus) for card in cards)
        if needed > largest:
            kind = "rack" if cards[0].kind == DeviceKind.IPU_M2000 else "server"
            units = plural(len(cards), DeviceKind.IPU_M2000 if kind == "rack" else "card")
            raise UserError(
                f"{kind} {server} needs {needed:g} IPU resources ({units}) on one Ray node; the "
                f"largest of the {plural(len(nodes), 'node')} offers {largest:g}: add a node "
                f"with --resources '{{\"IPU\": {needed}}}' or pass --allow-split-server "
                "(its IPU-Links then cross the network)")


def link_host_for(link_host: str, nodes: Sequence[RayNode]) -> str:
    """The link host the devices get: the one asked for on a single node, their own node's
    address (:data:`NODE_ADDRESS`) when the POD may span several nodes and the host asked
    for is loopback (which peers on other machines could not reach)."""
    if len(nodes) > 1 and is_loopback(link_host):
        return NODE_ADDRESS
    return link_host


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_link_host(host: str) -> tuple[str, bool]:
    """Inside a device actor: the address its link server binds, and whether it also opens
    a Unix socket for peers on its node (it does when bound to its node's address)."""
    if host != NODE_ADDRESS:
        return host, False
    return ray.util.get_node_ip_address(), True


def peer_addresses(nodes: Sequence[str | None], tcp: Sequence[str],
                   local: Sequence[str]) -> list[list[str]]:
    """For each device, the address it uses for every peer: the peer's ``local`` address
    (a Unix socket, on loopback) when both run on one node, its ``tcp`` address (on its
    node's address) otherwise."""
    return [[local[j] if nodes[j] == mine else tcp[j] for j in range(len(nodes))]
            for mine in nodes]


def raylet_answers(node: RayNode) -> bool:
    """Whether the node's raylet still accepts connections (a node whose raylet was
    stopped is lost at once, well before Ray's health checks declare it dead)."""
    if not node.raylet_port:
        return True
    try:
        with socket.create_connection((node.ip, node.raylet_port), timeout=RAYLET_PROBE_SECONDS):
            return True
    except OSError:
        return False
