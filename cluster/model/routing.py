"""Routes between IPUs: over IPU-Links inside a domain, up and down the network tree across.

Two rules, as GCL's local-then-global traffic runs on real systems:

1. IPUs joined (directly or through other IPUs) by IPU-to-IPU links form an *IPU-Link
   domain* (a DSS 8440's 16 IPUs, a POD64's 64). Between two IPUs of one domain the route
   is a shortest path (fewest hops) over those links; a direct link is always taken.
2. Between domains, traffic leaves through the IPU's host interface and crosses the rest
   of the fabric (PCIe switches, hosts, InfiniBand, IPU-Gateways, GW-Links, switches).
   That part must be a tree (parallel links are one bundle), so the route is the unique
   path up to the lowest common ancestor and down again.

Cut links (:mod:`cluster.model.link_faults`): a cut IPU-Link is left out of the IPU-Link
graph, so routes go round it and a domain it splits becomes two. A cut tree link stays in
the tree (there is no other path); :meth:`Router.route` raises
:class:`~cluster.model.link_faults.LinkDown` for flows that need it, or that cut links leave
with no path at all.

Everything here is vectorised over the flows of a superstep: routing 65,536 flows is a
handful of NumPy passes, not a Python loop per flow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cluster.errors import SpecError
from cluster.model.graph import (
    Graph,
    all_pairs_predecessors,
    bfs_distances,
    bfs_predecessor_table,
    breadth_first_order,
    connected_components,
)
from cluster.model.link_faults import LinkDown, describe_links, link_name
from cluster.model.topology import FABRIC, ROLES, Topology

_ALL_PAIRS_LIMIT = 2048  # domains up to this many IPUs get an all-pairs table
_LANDMARKS = 8  # per domain shape, for the hop bound of min_hops
_DENSE_LINKS_LIMIT = 1024  # topologies up to this many IPUs: an IPU x IPU link table


@dataclass(frozen=True)
class Routes:
    """The routes of a set of flows, as (flow, directed link) incidence pairs.

    ``pair_flow[i]`` crosses ``pair_link[i]``; ``latency_s[f]`` is the sum of the latencies
    of flow ``f``'s links; ``crosses_domains[f]`` says it left its IPU-Link domain.
    """

    pair_flow: np.ndarray
    pair_link: np.ndarray
    latency_s: np.ndarray
    crosses_domains: np.ndarray


class Router:
    """Routing tables of one topology; built (and checked) once, queried per superstep."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        n_ipu, n_node = topology.ipu_count, topology.node_count
        fabric = topology.link_role == ROLES.index(FABRIC)
        a, b = topology.link_a, topology.link_b
        ipu_link = fabric & (a < n_ipu) & (b < n_ipu)
        cut = np.zeros(len(a), dtype=bool)
        cut[sorted(topology.cut_links)] = True
        link_ids = np.flatnonzero(ipu_link & ~cut)
        # Directed IPU-to-IPU links, looked up by key src * n_ipu + dst.
        src = np.concatenate([a[link_ids], b[link_ids]])
        dst = np.concatenate([b[link_ids], a[link_ids]])
        directed = np.concatenate([2 * link_ids, 2 * link_ids + 1])
        keys = src * n_ipu + dst
        order = np.argsort(keys)
        self._ipu_keys, self._ipu_links = keys[order], directed[order]
        self._dense_links: np.ndarray | None = None  # built on first use, small topologies
        self.domain_count, self.domain_of_ipu = connected_components(n_ipu, src, dst)
        self._index_domains(src, dst)
        self._build_tree(np.flatnonzero(fabric & ~ipu_link), n_node)
        # Directed links that are cut, or None on a topology with no cut (checked once here;
        # with cuts, route() refuses the flows that have no path).
        self._directed_cut: np.ndarray | None = np.repeat(cut, 2) if cut.any() else None
        if self._directed_cut is None:
            self._check_reachable()

    # -- the network tree -------------------------------------------------------------
    def _build_tree(self, tree_links: np.ndarray, n_node: int) -> None:
        topo = self.topology
        a, b = topo.link_a[tree_links], topo.link_b[tree_links]
        self.parent = np.full(n_node, -1, dtype=np.int64)
        self.depth = np.full(n_node, -1, dtype=np.int64)
        self.up_link = np.full(n_node, -1, dtype=np.int64)
        self.down_link = np.full(n_node, -1, dtype=np.int64)
        self.tree_component = np.full(n_node, -1, dtype=np.int64)
        if len(tree_links) == 0:
            return
        graph = Graph(n_node, a, b)
        in_tree = np.zeros(n_node, dtype=bool)
        in_tree[a] = in_tree[b] = True
        _, component = connected_components(n_node, a, b)
        components_used = len(np.unique(component[in_tree]))
        if len(tree_links) != int(in_tree.sum()) - components_used:
            raise SpecError(
                f"topology {topo.name!r}: the network outside the IPU-Link domains (PCIe, "
                "hosts, InfiniBand, GW-Links, switches) has a loop, so routes between domains "
                "would not be unique; make it a tree (parallel links between two nodes are "
                "fine: declare them as one link with a count)"
            )
        key_to_link: dict[tuple[int, int], int] = {}
        for l, x, y in zip(tree_links.tolist(), a.tolist(), b.tolist()):
            key_to_link[(x, y)] = 2 * l
            key_to_link[(y, x)] = 2 * l + 1
        for root in _roots(component, in_tree, topo.node_kinds):
            nodes, pred = breadth_first_order(graph, root, directed=False)
            self.tree_component[nodes] = root
            self.depth[root] = 0
            for node in nodes[1:].tolist():  # BFS order: a parent comes before its children
                parent = int(pred[node])
                self.parent[node] = parent
                self.depth[node] = self.depth[parent] + 1
                self.up_link[node] = key_to_link[(node, parent)]
                self.down_link[node] = key_to_link[(parent, node)]

    def _check_reachable(self) -> None:
        if self.domain_count == 1:
            return
        topo = self.topology
        ipus = np.arange(topo.ipu_count)
        outside = ipus[self.tree_component[ipus] < 0]
        if len(outside):
            ipu = int(outside[0])
            other = int(ipus[self.domain_of_ipu != self.domain_of_ipu[ipu]][0])
            raise SpecError(
                f"topology {topo.name!r}: IPU {topo.ipu_name(ipu)!r} cannot reach IPU "
                f"{topo.ipu_name(other)!r}: it has no IPU-Link path to it and no link to the "
                "host/switch network; connect it (e.g. to its card, host or a switch)"
            )
        roots = self.tree_component[ipus]
        if (roots != roots[0]).any():
            ipu = int(ipus[roots != roots[0]][0])
            raise SpecError(
                f"topology {topo.name!r}: IPU {topo.ipu_name(ipu)!r} cannot reach IPU "
                f"{topo.ipu_name(0)!r}: their networks are not joined; add a link between them"
            )

    # -- a bound without routes -----------------------------------------------------
    def min_hops(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Per flow, a lower bound on its route's length in links, found without routing.

        Between domains a route takes at least two links (IPUs of two domains are not
        joined directly). Inside one, IPU-Links run both ways, so by the triangle
        inequality the hops from ``s`` to ``d`` are at least ``|dist(L, s) - dist(L, d)|``
        for any node ``L``: a few landmarks per domain shape, one BFS for all of them.
        """
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        hops = np.full(len(src), 2, dtype=np.int64)
        local = self.same_domain(src, dst)
        shapes = self._shape_of_domain[self.domain_of_ipu[src[local]]]
        inside = np.flatnonzero(local)
        for shape in np.unique(shapes).tolist():
            flows = inside[shapes == shape]
            dist = self._landmark_distances(shape)
            gap = np.abs(dist[:, self._local_index[src[flows]]]
                         - dist[:, self._local_index[dst[flows]]]).max(axis=0)
            hops[flows] = np.maximum(gap, 1)
        return hops

    def _landmark_distances(self, shape: int) -> np.ndarray:
        """Hops from a few landmarks (spread over the local numbering) to every IPU of a
        domain of ``shape`` (a domain is connected; a landmark that could not reach every
        IPU would prove nothing, and is dropped)."""
        if shape not in self._landmarks:
            graph = self._shape_graph[shape]
            landmarks = np.unique(np.linspace(0, graph.n - 1, min(_LANDMARKS, graph.n)
                                              ).astype(np.int64))
            dist = bfs_distances(graph, landmarks)
            self._landmarks[shape] = dist[(dist >= 0).all(axis=1)].astype(np.int64)
        return self._landmarks[shape]

    # -- routes ----------------------------------------------------------------------
    def same_domain(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Per flow, whether IPUs ``src[f]`` and ``dst[f]`` share an IPU-Link domain."""
        return self.domain_of_ipu[src] == self.domain_of_ipu[dst]

    def route(self, src: np.ndarray, dst: np.ndarray) -> Routes:
        """Routes of flows ``src[f] -> dst[f]`` (IPU ids; ``src[f] != dst[f]``)."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        flows = np.arange(len(src))
        local = self.same_domain(src, dst)
        if self._directed_cut is not None:
            self._refuse_unreachable(src[~local], dst[~local])
        parts_flow: list[np.ndarray] = []
        parts_link: list[np.ndarray] = []
        if local.any():
            f, l = self._route_local(flows[local], src[local], dst[local])
            parts_flow.append(f)
            parts_link.append(l)
        if (~local).any():
            f, l = self._route_tree(flows[~local], src[~local], dst[~local])
            parts_flow.append(f)
            parts_link.append(l)
        pair_flow = np.concatenate(parts_flow) if parts_flow else np.zeros(0, np.int64)
        pair_link = np.concatenate(parts_link) if parts_link else np.zeros(0, np.int64)
        if self._directed_cut is not None:
            self._refuse_cut(src, dst, pair_flow, pair_link)
        latency = np.bincount(pair_flow, weights=self.topology.directed_latency_s[pair_link],
                              minlength=len(src))
        return Routes(pair_flow, pair_link, latency, ~local)

    def _refuse_unreachable(self, src: np.ndarray, dst: np.ndarray) -> None:
        """LinkDown if cut IPU-Links left some flow between domains with no tree path."""
        root = self.tree_component
        lost = np.flatnonzero((root[src] < 0) | (root[src] != root[dst]))
        if len(lost):
            topo, f = self.topology, int(lost[0])
            raise LinkDown(
                f"IPU {topo.ipu_name(int(src[f]))} -> IPU {topo.ipu_name(int(dst[f]))} has no "
                f"path left: cut links ({describe_links(topo, topo.cut_links)}) split their "
                "IPU-Link domain and no other network joins the parts; heal a link with "
                "`ipupod fault heal`, or run on IPUs that stay connected")

    def _refuse_cut(self, src: np.ndarray, dst: np.ndarray, pair_flow: np.ndarray,
                    pair_link: np.ndarray) -> None:
        """LinkDown if some flow's route crosses a cut link (only tree links can be cut on a
        route: cut IPU-Links are not in the IPU-Link graph)."""
        if self._directed_cut is None:  # a topology with no cut link
            return
        crossing = np.flatnonzero(self._directed_cut[pair_link])
        if len(crossing):
            topo, i = self.topology, int(crossing[0])
            f = int(pair_flow[i])
            raise LinkDown(
                f"link {link_name(topo, int(pair_link[i]) // 2)} is cut and IPU "
                f"{topo.ipu_name(int(src[f]))} -> IPU {topo.ipu_name(int(dst[f]))} needs it "
                "(between IPU-Link domains the route is unique); heal the link with "
                "`ipupod fault heal`, or run on IPUs that do not need it")

    def path(self, src: int, dst: int) -> list[int]:
        """The directed links from IPU ``src`` to IPU ``dst``, in the order crossed."""
        routes = self.route(np.array([src]), np.array([dst]))
        links = routes.pair_link.tolist()
        topo, node = self.topology, src
        ordered: list[int] = []
        while links:
            hop = next(l for l in links if topo.directed_src[l] == node)
            links.remove(hop)
            ordered.append(hop)
            node = int(topo.directed_dst[hop])
        return ordered

    def _direct(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Directed IPU-Link id from ``src`` to ``dst``, or -1 where there is none."""
        keys = src * self.topology.ipu_count + dst
        if self.topology.ipu_count <= _DENSE_LINKS_LIMIT:  # a table lookup, no search
            if self._dense_links is None:
                self._dense_links = np.full(self.topology.ipu_count ** 2, -1, dtype=np.int64)
                self._dense_links[self._ipu_keys] = self._ipu_links
            return self._dense_links[keys]
        pos = np.searchsorted(self._ipu_keys, keys)
        pos = np.minimum(pos, len(self._ipu_keys) - 1)
        if len(self._ipu_keys) == 0:
            return np.full(len(src), -1, dtype=np.int64)
        found = self._ipu_keys[pos] == keys
        return np.where(found, self._ipu_links[pos], -1)

    def _route_local(self, flows: np.ndarray, src: np.ndarray,
                     dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(flow, directed link) pairs of flows inside one domain: a direct IPU-Link where
        there is one, else a shortest path."""
        direct = self._direct(src, dst)
        hit = direct >= 0
        out_flow, out_link = [flows[hit]], [direct[hit]]
        multi = np.flatnonzero(~hit)
        shapes = self._shape_of_domain[self.domain_of_ipu[src[multi]]]
        for shape in np.unique(shapes).tolist():
            sel = multi[shapes == shape]
            f, l = self._walk(shape, flows[sel], src[sel], dst[sel])
            out_flow.append(f)
            out_link.append(l)
        return np.concatenate(out_flow), np.concatenate(out_link)

    def _index_domains(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Local numbering of each domain's IPUs, and domains grouped by *shape*: domains
        whose IPU-Links join the same local indices share one shortest-path table (all the
        racks of a POD, all the servers of a DSS 8440 cluster)."""
        order = np.argsort(self.domain_of_ipu, kind="stable")
        self._members_flat = order
        sizes = np.bincount(self.domain_of_ipu, minlength=self.domain_count)
        self._domain_start = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        self._local_index = np.empty(len(order), dtype=np.int64)
        self._local_index[order] = np.arange(len(order)) - np.repeat(self._domain_start, sizes)
        domain = self.domain_of_ipu[src]
        edges = np.stack([domain, self._local_index[src], self._local_index[dst]], axis=1)
        edges = edges[np.lexsort((edges[:, 2], edges[:, 1], edges[:, 0]))]
        bounds = np.searchsorted(edges[:, 0], np.arange(self.domain_count + 1))
        shape_ids: dict[bytes, int] = {}
        self._shape_of_domain = np.empty(self.domain_count, dtype=np.int64)
        self._shape_graph: list[Graph] = []
        for d in range(self.domain_count):
            local_edges = edges[bounds[d]:bounds[d + 1], 1:]
            key = bytes(np.int64(sizes[d])) + local_edges.tobytes()
            if key not in shape_ids:
                shape_ids[key] = len(shape_ids)
                n = int(sizes[d])
                self._shape_graph.append(Graph(n, local_edges[:, 0], local_edges[:, 1]))
            self._shape_of_domain[d] = shape_ids[key]
        self._shape_pred: dict[int, np.ndarray] = {}
        self._landmarks: dict[int, np.ndarray] = {}

    def _walk(self, shape: int, flows: np.ndarray, src: np.ndarray,
              dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Shortest paths inside domains of one shape, walked back from each destination:
        one NumPy step per hop for all flows at once; the hops' links are looked up once."""
        graph = self._shape_graph[shape]
        origin, here = self._local_index[src], self._local_index[dst]
        base = self._domain_start[self.domain_of_ipu[src]]
        if graph.n <= _ALL_PAIRS_LIMIT:
            pred = self._shape_pred.get(shape)
            if pred is None:
                pred = all_pairs_predecessors(graph)
                self._shape_pred[shape] = pred
            row = origin * graph.n  # each flow's row of the flat table
        else:
            unique_src, row_of = np.unique(origin, return_inverse=True)
            pred = bfs_predecessor_table(graph, unique_src, directed=True)
            row = row_of * graph.n
        table = pred.ravel()
        out_flow: list[np.ndarray] = []
        hop_from: list[np.ndarray] = []
        hop_to: list[np.ndarray] = []
        while len(here):
            prev = table[row + here]
            out_flow.append(flows)
            hop_from.append(base + prev)
            hop_to.append(base + here)
            going = prev != origin
            if not going.all():  # some flows reached their source: drop them
                flows, base, origin, row, prev = (flows[going], base[going], origin[going],
                                                  row[going], prev[going])
            here = prev
        members = self._members_flat
        links = self._direct(members[np.concatenate(hop_from)], members[np.concatenate(hop_to)])
        return np.concatenate(out_flow), links

    def _route_tree(self, flows: np.ndarray, src: np.ndarray,
                    dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Up from ``src`` to the lowest common ancestor, then down to ``dst``."""
        a, b = src.copy(), dst.copy()
        out_flow: list[np.ndarray] = []
        out_link: list[np.ndarray] = []
        depth, parent = self.depth, self.parent
        while True:
            up = depth[a] > depth[b]
            down = depth[b] > depth[a]
            both = ~up & ~down & (a != b)
            step_up, step_down = up | both, down | both
            if not (step_up.any() or step_down.any()):
                break
            out_flow += [flows[step_up], flows[step_down]]
            out_link += [self.up_link[a[step_up]], self.down_link[b[step_down]]]
            a = np.where(step_up, parent[a], a)
            b = np.where(step_down, parent[b], b)
        return np.concatenate(out_flow), np.concatenate(out_link)


_ROOT_PREFERENCE = ("gw-switch", "ib-switch", "switch", "host")


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
