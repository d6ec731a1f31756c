"""The network outside the IPU-Link domains (PCIe, hosts, InfiniBand, IPU-Gateways,
GW-Links, switches) as a rooted forest: the part of a route between two domains.

That network must be a tree (parallel links are one bundle), so a path in it is unique: up
from one end to the lowest common ancestor and down to the other. :func:`build_network_tree`
roots each of its components (at a switch if there is one, else a host) and records per
node its parent and depth and the directed links up to and down from that parent. The
result, a :class:`NetworkTree`, is a value: it never changes once built.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from cluster.errors import SpecError
from cluster.model.graph import Graph, breadth_first_order, connected_components
from cluster.model.topology import Topology

_ROOT_PREFERENCE = ("gw-switch", "ib-switch", "switch", "host")


@dataclass(frozen=True, eq=False)
class NetworkTree:
    """Per node (arrays indexed by node id, read-only): ``parent`` (-1 at a root and off the
    tree), ``depth`` (0 at a root, -1 off the tree), ``up_link`` and ``down_link`` (directed
    links node -> parent and parent -> node, -1 where there is no parent) and ``root`` (the
    root of its component, -1 off the tree)."""

    parent: np.ndarray
    depth: np.ndarray
    up_link: np.ndarray
    down_link: np.ndarray
    root: np.ndarray

    def ancestors(self, node: int) -> Iterator[tuple[int, int]]:
        """The nodes above ``node``, nearest first, each with the directed link from it one
        step down towards ``node``: ``(parent, parent -> node), (grandparent, grandparent
        -> parent), ...``; none at a root and off the tree. Lazy: a walk up that stops at
        the node it looks for goes no further."""
        parent, down_link = self.parent, self.down_link
        while parent[node] >= 0:
            yield int(parent[node]), int(down_link[node])
            node = int(parent[node])

    def nodes_above(self, nodes: Iterable[int]) -> set[int]:
        """Every node above some of ``nodes`` (their ancestors, not themselves unless one is
        above another), found a level at a time."""
        parent = self.parent
        frontier = {int(parent[n]) for n in nodes if parent[n] >= 0}
        above: set[int] = set()
        while frontier:
            above |= frontier
            frontier = {int(parent[n]) for n in frontier if parent[n] >= 0} - above
        return above

    def parents_first(self) -> tuple[np.ndarray, np.ndarray]:
        """``(nodes, parents)``: every node of the tree, a parent before its children (roots
        first, their parent -1); read backwards, children come before their parents."""
        nodes = np.flatnonzero(self.depth >= 0)
        nodes = nodes[np.argsort(self.depth[nodes], kind="stable")]
        return nodes, self.parent[nodes]


def build_network_tree(topology: Topology, tree_links: np.ndarray) -> NetworkTree:
    """The tree of physical links ``tree_links`` of ``topology``, rooted; a SpecError if
    those links hold a loop (routes between domains would not be unique)."""
    n_node = topology.node_count
    a, b = topology.link_a[tree_links], topology.link_b[tree_links]
    parent, depth, up_link, down_link, root = (np.full(n_node, -1, dtype=np.int64)
                                               for _ in range(5))
    if len(tree_links):
        graph = Graph(n_node, a, b)
        in_tree = np.zeros(n_node, dtype=bool)
        in_tree[a] = in_tree[b] = True
        _, component = connected_components(n_node, a, b)
        if len(tree_links) != int(in_tree.sum()) - len(np.unique(component[in_tree])):
            raise SpecError(
                f"topology {topology.name!r}: the network outside the IPU-Link domains (PCIe, "
                "hosts, InfiniBand, GW-Links, switches) has a loop, so routes between domains "
                "would not be unique; make it a tree (parallel links between two nodes are "
                "fine: declare them as one link with a count)"
            )
        key_to_link: dict[tuple[int, int], int] = {}
        for l, x, y in zip(tree_links.tolist(), a.tolist(), b.tolist()):
            key_to_link[(x, y)] = 2 * l
            key_to_link[(y, x)] = 2 * l + 1
        for top in _roots(component, in_tree, topology.node_kinds):
            nodes, pred = breadth_first_order(graph, top, directed=False)
            root[nodes] = top
            depth[top] = 0
            for node in nodes[1:].tolist():  # BFS order: a parent comes before its children
                above = int(pred[node])
                parent[node] = above
                depth[node] = depth[above] + 1
                up_link[node] = key_to_link[(node, above)]
                down_link[node] = key_to_link[(above, node)]
    for array in (parent, depth, up_link, down_link, root):
        array.flags.writeable = False
    return NetworkTree(parent, depth, up_link, down_link, root)


def check_reachable(topology: Topology, domain_count: int, domain_of_ipu: np.ndarray,
                     tree: NetworkTree) -> None:
    """A SpecError naming two IPUs that cannot reach each other, if there are such: IPUs of
    different IPU-Link domains (``domain_of_ipu``) reach each other only through the tree."""
    if domain_count == 1:
        return
    ipus = np.arange(topology.ipu_count)
    outside = ipus[tree.root[ipus] < 0]
    if len(outside):
        ipu = int(outside[0])
        other = int(ipus[domain_of_ipu != domain_of_ipu[ipu]][0])
        raise SpecError(
            f"topology {topology.name!r}: IPU {topology.ipu_name(ipu)!r} cannot reach IPU "
            f"{topology.ipu_name(other)!r}: it has no IPU-Link path to it and no link to the "
            "host/switch network; connect it (e.g. to its card, host or a switch)"
        )
    roots = tree.root[ipus]
    if (roots != roots[0]).any():
        ipu = int(ipus[roots != roots[0]][0])
        raise SpecError(
            f"topology {topology.name!r}: IPU {topology.ipu_name(ipu)!r} cannot reach IPU "
            f"{topology.ipu_name(0)!r}: their networks are not joined; add a link between them"
        )


def _roots(component: np.ndarray, in_tree: np.ndarray, kinds: tuple[str, ...]) -> list[int]:
    """One root per tree component (a switch if any, else a host, else any node but an IPU,
    else its first node).

    The root does not change any route (paths in a tree are unique); it keeps depths small.
    """
    roots: list[int] = []
    for comp in np.unique(component[in_tree]).tolist():
        nodes = np.flatnonzero((component == comp) & in_tree)
        ranked = sorted(nodes.tolist(), key=lambda n: (
            _ROOT_PREFERENCE.index(kinds[n]) if kinds[n] in _ROOT_PREFERENCE
            else (98 if kinds[n] != "ipu" else 99), n))
        roots.append(ranked[0])
    return roots
