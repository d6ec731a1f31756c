"""Which emulated device owns which node and port, and which device a chunk goes to next.

Cards and machines own their IPUs and the nodes whose IPUs are all theirs (a C2 card's
PCIe endpoint, an IPU-M2000's IPU-Gateway). A server's host owns the nodes under it that
serve several cards (its PCIe switch fabric, itself), so that its PCIe uplinks and
InfiniBand adapters belong to the server, as on the real machine. Switches belong to no
device. A directed link is counted by the device that owns its transmitting node (or, out
of a switch, by the device it leads to).

Data between devices travels the way the route does: a transfer that crosses a host on
its way (between DSS 8440 servers) is relayed by that host's device, card to host to host
to card; everything else goes straight to the device owning the destination IPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cluster.model.routing import router_of
from cluster.model.topology import Topology


@dataclass(frozen=True)
class Ownership:
    """``node_owner[node]``: index of the owning device, -1 for none. ``host_of_ipu[ipu]``:
    the host device the IPU's traffic leaves its server through, -1 where none relays."""

    node_owner: np.ndarray
    host_of_ipu: np.ndarray
    link_owner: np.ndarray  # per directed link: the device that counts it
    owner_of_ipu: np.ndarray
    hosts: frozenset[int]
    host_of_device: dict[int, int]  # card or machine -> the host its traffic leaves through

    def next_device(self, here: int, dst_ipu: int) -> int:
        """The device a chunk for ``dst_ipu`` goes to from device ``here``: the destination
        itself, unless the route crosses hosts, which relay it."""
        destination = int(self.owner_of_ipu[dst_ipu])
        target_host = int(self.host_of_ipu[dst_ipu])
        if here in self.hosts:
            return destination if target_host in (here, -1) else target_host
        my_host = self.host_of_device.get(here, -1)
        if my_host < 0 or target_host < 0 or my_host == target_host:
            return destination
        return my_host


def ownership(topology: Topology, owner_of_ipu: np.ndarray,
              host_devices: dict[int, int]) -> Ownership:
    """Work out ownership. ``host_devices`` maps host node ids to their device index."""
    n_nodes = topology.node_count
    tree_nodes, tree_parents = router_of(topology).tree.parents_first()
    node_owner = np.full(n_nodes, -1, dtype=np.int64)
    node_owner[:topology.ipu_count] = owner_of_ipu
    # Nodes up the tree, children first (deepest first): owned by the single device below.
    below: dict[int, set[int]] = {ipu: {int(owner_of_ipu[ipu])}
                                  for ipu in range(topology.ipu_count)}
    for node, parent in zip(tree_nodes[::-1].tolist(), tree_parents[::-1].tolist()):
        if node in below and parent >= 0:
            below.setdefault(parent, set()).update(below[node])
    for node, devices in below.items():
        if node >= topology.ipu_count and len(devices) == 1:
            node_owner[node] = next(iter(devices))
    # Hosts own themselves and the shared nodes under them (the PCIe fabric).
    host_of_node = np.full(n_nodes, -1, dtype=np.int64)
    for host, device in host_devices.items():
        node_owner[host] = device
        host_of_node[host] = device
    for node, parent in zip(tree_nodes.tolist(), tree_parents.tolist()):  # parents first
        if parent >= 0 and host_of_node[node] < 0 and host_of_node[parent] >= 0:
            host_of_node[node] = host_of_node[parent]
    # A node under a host with no single owner below it belongs to the host.
    for node in range(topology.ipu_count, n_nodes):
        if node_owner[node] < 0 and host_of_node[node] >= 0:
            node_owner[node] = host_of_node[node]
    host_of_ipu = host_of_node[:topology.ipu_count].copy()
    src, dst = topology.directed_src, topology.directed_dst
    link_owner = np.where(node_owner[src] >= 0, node_owner[src], node_owner[dst])
    owners = np.asarray(owner_of_ipu)
    host_of_device = {int(device): int(host_of_ipu[ipu]) for ipu, device in enumerate(owners)}
    return Ownership(node_owner, host_of_ipu, link_owner, owners,
                     frozenset(host_devices.values()), host_of_device)


def relaying_hosts(topology: Topology) -> list[int]:
    """Host nodes on the fabric above some IPU, in topologies of several IPU-Link domains
    (only then does traffic cross them): the servers of a DSS 8440 cluster."""
    router = router_of(topology)
    if router.domain_count < 2:
        return []
    above = router.tree.nodes_above(range(topology.ipu_count))
    return sorted(n for n in above if topology.node_kinds[n] == "host")
