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

A :class:`Router` is a value built from a topology by the pure function
:func:`build_router`; :func:`router_of` gives a topology's router, built once per topology
object and kept while the topology lives (the topology itself holds no reference to it).
The tree part is :mod:`cluster.model.network_tree`.

Everything here is vectorised over the flows of a superstep: routing 65,536 flows is a
handful of NumPy passes, not a Python loop per flow.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field

import numpy as np

from cluster.model.graph import (
    all_pairs_predecessors,
    bfs_distances,
    bfs_predecessor_table,
    connected_components,
)
from cluster.model.ipu_link_domains import IpuLinkDomains, index_domains
from cluster.model.link_faults import LinkDown, describe_links, link_name
from cluster.model.network_tree import NetworkTree, build_network_tree, check_reachable
from cluster.model.topology import FABRIC, ROLES, Topology

_ALL_PAIRS_LIMIT = 2048  # domains up to this many IPUs get an all-pairs table
_LANDMARKS = 8  # per domain shape, for the hop bound of min_hops
_DENSE_LINKS_LIMIT = 1024  # topologies up to this many IPUs: an IPU x IPU link table


@dataclass(frozen=True)
class Routes:
    """The routes of a set of flows, as (flow, directed link) incidence pairs.

    ``pair_flow[i]`` crosses ``pair_link[i]``; ``latency_seconds[f]`` is the sum of the latencies
    of flow ``f``'s links; ``crosses_domains[f]`` says it left its IPU-Link domain.
    """

    pair_flow: np.ndarray
    pair_link: np.ndarray
    latency_seconds: np.ndarray
    crosses_domains: np.ndarray


@dataclass(frozen=True, eq=False)
class _Cuts:
    """What :meth:`Router.route` needs on a topology with cut links: which directed links
    are cut, and the cut links' names for its messages (by physical link)."""

    directed: np.ndarray
    described: str
    names: dict[int, str]


@dataclass(frozen=True, eq=False)
class _Latency:
    """Seconds per crossing of a link, as ``Topology.directed_latency_seconds`` gives them (its
    type's latency, plus its fault's ``added_latency_seconds``), looked up per route: a router
    built with its topology does not make that array for a topology that never routes."""

    per_type: np.ndarray  # by index into the topology's link_types
    link_type: np.ndarray  # the topology's, per physical link
    fault_links: np.ndarray  # physical links with a fault, sorted
    added_seconds: np.ndarray  # their faults' added latency

    def of(self, directed: np.ndarray) -> np.ndarray:
        """Latency of each directed link in ``directed``, seconds."""
        physical = directed // 2
        latency = self.per_type[self.link_type[physical]]
        if len(self.fault_links):
            pos = np.minimum(np.searchsorted(self.fault_links, physical),
                             len(self.fault_links) - 1)
            hit = self.fault_links[pos] == physical
            latency[hit] += self.added_seconds[pos[hit]]
        return latency


class _Memo:
    """Tables a router builds on first use and keeps (an IPU x IPU direct-link table on
    small topologies; per domain shape, all-pairs predecessors and landmark distances).
    They are caches: what the router answers never depends on whether they are built."""

    def __init__(self) -> None:
        self.dense_links: np.ndarray | None = None
        self.shape_pred: dict[int, np.ndarray] = {}
        self.landmarks: dict[int, np.ndarray] = {}


@dataclass(frozen=True, eq=False)
class Router:
    """Routing tables of one topology: a value built (and checked) once by
    :func:`build_router`, queried per superstep. It holds the topology's arrays it needs,
    not the topology.

    ``domain_of_ipu[i]`` is IPU ``i``'s IPU-Link domain (``0 .. domain_count-1``);
    ``tree`` is the network between domains, with the walks up it that callers need.
    """

    ipu_count: int
    domain_count: int
    domain_of_ipu: np.ndarray
    tree: NetworkTree
    _names: tuple[str, ...]
    _link_ends: tuple[np.ndarray, np.ndarray]  # the topology's link_a, link_b
    _latency: _Latency
    _ipu_keys: np.ndarray  # directed IPU-Links, keyed src * ipu_count + dst, sorted
    _ipu_links: np.ndarray  # their directed link ids
    _domains: IpuLinkDomains
    _cuts: _Cuts | None  # None on a topology with no cut link
    _memo: _Memo = field(default_factory=_Memo, repr=False)

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
        local_index = self._domains.local_index
        shapes = self._domains.shape_of_domain[self.domain_of_ipu[src[local]]]
        inside = np.flatnonzero(local)
        for shape in np.unique(shapes).tolist():
            flows = inside[shapes == shape]
            dist = self._landmark_distances(shape)
            gap = np.abs(dist[:, local_index[src[flows]]]
                         - dist[:, local_index[dst[flows]]]).max(axis=0)
            hops[flows] = np.maximum(gap, 1)
        return hops

    def _landmark_distances(self, shape: int) -> np.ndarray:
        """Hops from a few landmarks (spread over the local numbering) to every IPU of a
        domain of ``shape`` (a domain is connected; a landmark that could not reach every
        IPU would prove nothing, and is dropped)."""
        landmarks = self._memo.landmarks
        if shape not in landmarks:
            graph = self._domains.shape_graph[shape]
            chosen = np.unique(np.linspace(0, graph.n - 1, min(_LANDMARKS, graph.n)
                                           ).astype(np.int64))
            dist = bfs_distances(graph, chosen)
            landmarks[shape] = dist[(dist >= 0).all(axis=1)].astype(np.int64)
        return landmarks[shape]

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
        if self._cuts is not None:
            self._refuse_unreachable(self._cuts, src[~local], dst[~local])
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
        if self._cuts is not None:
            self._refuse_cut(self._cuts, src, dst, pair_flow, pair_link)
        latency = np.bincount(pair_flow, weights=self._latency.of(pair_link),
                              minlength=len(src))
        return Routes(pair_flow, pair_link, latency, ~local)

    def _refuse_unreachable(self, cuts: _Cuts, src: np.ndarray, dst: np.ndarray) -> None:
        """LinkDown if cut IPU-Links left some flow between domains with no tree path."""
        root = self.tree.root
        lost = np.flatnonzero((root[src] < 0) | (root[src] != root[dst]))
        if len(lost):
            f = int(lost[0])
            raise LinkDown(
                f"IPU {self._names[int(src[f])]} -> IPU {self._names[int(dst[f])]} has no "
                f"path left: cut links ({cuts.described}) split their "
                "IPU-Link domain and no other network joins the parts; heal a link with "
                "`ipupod fault heal`, or run on IPUs that stay connected")

    def _refuse_cut(self, cuts: _Cuts, src: np.ndarray, dst: np.ndarray,
                    pair_flow: np.ndarray, pair_link: np.ndarray) -> None:
        """LinkDown if some flow's route crosses a cut link (only tree links can be cut on a
        route: cut IPU-Links are not in the IPU-Link graph)."""
        crossing = np.flatnonzero(cuts.directed[pair_link])
        if len(crossing):
            i = int(crossing[0])
            f = int(pair_flow[i])
            raise LinkDown(
                f"link {cuts.names[int(pair_link[i]) // 2]} is cut and IPU "
                f"{self._names[int(src[f])]} -> IPU {self._names[int(dst[f])]} needs it "
                "(between IPU-Link domains the route is unique); heal the link with "
                "`ipupod fault heal`, or run on IPUs that do not need it")

    def path(self, src: int, dst: int) -> list[int]:
        """The directed links from IPU ``src`` to IPU ``dst``, in the order crossed."""
        routes = self.route(np.array([src]), np.array([dst]))
        links = routes.pair_link.tolist()
        a, b = self._link_ends  # directed link 2l runs a[l] -> b[l], 2l+1 back
        node = src
        ordered: list[int] = []
        while links:
            hop = next(l for l in links if (a, b)[l % 2][l // 2] == node)
            links.remove(hop)
            ordered.append(hop)
            node = int((b, a)[hop % 2][hop // 2])
        return ordered

    def _direct(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Directed IPU-Link id from ``src`` to ``dst``, or -1 where there is none."""
        keys = src * self.ipu_count + dst
        if self.ipu_count <= _DENSE_LINKS_LIMIT:  # a table lookup, no search
            if self._memo.dense_links is None:
                dense = np.full(self.ipu_count ** 2, -1, dtype=np.int64)
                dense[self._ipu_keys] = self._ipu_links
                self._memo.dense_links = dense
            return self._memo.dense_links[keys]
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
        shapes = self._domains.shape_of_domain[self.domain_of_ipu[src[multi]]]
        for shape in np.unique(shapes).tolist():
            sel = multi[shapes == shape]
            f, l = self._walk(shape, flows[sel], src[sel], dst[sel])
            out_flow.append(f)
            out_link.append(l)
        return np.concatenate(out_flow), np.concatenate(out_link)

    def _predecessors(self, shape: int, origin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(flat predecessor table, each flow's row offset in it) of shortest paths from the
        local IPUs ``origin`` inside a domain of ``shape``: all pairs (kept) on domains up to
        ``_ALL_PAIRS_LIMIT`` IPUs, else one BFS per distinct origin."""
        graph = self._domains.shape_graph[shape]
        if graph.n <= _ALL_PAIRS_LIMIT:
            pred = self._memo.shape_pred.get(shape)
            if pred is None:
                pred = all_pairs_predecessors(graph)
                self._memo.shape_pred[shape] = pred
            return pred.ravel(), origin * graph.n  # each flow's row of the flat table
        unique_src, row_of = np.unique(origin, return_inverse=True)
        pred = bfs_predecessor_table(graph, unique_src, directed=True)
        return pred.ravel(), row_of * graph.n

    def _walk(self, shape: int, flows: np.ndarray, src: np.ndarray,
              dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Shortest paths inside domains of one shape, walked back from each destination:
        one NumPy step per hop for all flows at once; the hops' links are looked up once."""
        domains = self._domains
        origin, here = domains.local_index[src], domains.local_index[dst]
        base = domains.start[self.domain_of_ipu[src]]
        table, row = self._predecessors(shape, origin)
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
        members = domains.members
        links = self._direct(members[np.concatenate(hop_from)], members[np.concatenate(hop_to)])
        return np.concatenate(out_flow), links

    def _route_tree(self, flows: np.ndarray, src: np.ndarray,
                    dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Up from ``src`` to the lowest common ancestor, then down to ``dst``."""
        a, b = src.copy(), dst.copy()
        out_flow: list[np.ndarray] = []
        out_link: list[np.ndarray] = []
        tree = self.tree
        depth, parent = tree.depth, tree.parent
        while True:
            up = depth[a] > depth[b]
            down = depth[b] > depth[a]
            both = ~up & ~down & (a != b)
            step_up, step_down = up | both, down | both
            if not (step_up.any() or step_down.any()):
                break
            out_flow += [flows[step_up], flows[step_down]]
            out_link += [tree.up_link[a[step_up]], tree.down_link[b[step_down]]]
            a = np.where(step_up, parent[a], a)
            b = np.where(step_down, parent[b], b)
        return np.concatenate(out_flow), np.concatenate(out_link)


def build_router(topology: Topology) -> Router:
    """The routing tables of ``topology``, which is not changed. A SpecError if the network
    between domains has a loop or, with no link cut, some IPU cannot reach another (with
    cuts, :meth:`Router.route` refuses the flows that have no path)."""
    n_ipu = topology.ipu_count
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
    ipu_keys, ipu_links = keys[order], directed[order]
    domain_count, domain_of_ipu = connected_components(n_ipu, src, dst)
    domains = index_domains(domain_count, domain_of_ipu, src, dst)
    tree = build_network_tree(topology, np.flatnonzero(fabric & ~ipu_link))
    cuts: _Cuts | None = None
    if cut.any():
        cuts = _Cuts(np.repeat(cut, 2), describe_links(topology, topology.cut_links),
                     {l: link_name(topology, l) for l in sorted(topology.cut_links)})
    else:  # checked once here; with cuts, route() refuses the flows that have no path
        check_reachable(topology, domain_count, domain_of_ipu, tree)
    for array in (domain_of_ipu, ipu_keys, ipu_links):
        array.flags.writeable = False
    faults = sorted(topology.faults.items())
    type_latencies = np.array([t.latency_seconds for t in topology.link_types])
    latency = _Latency(type_latencies, topology.link_type,
                       np.array([link for link, _ in faults], dtype=np.int64),
                       np.array([fault.added_latency_seconds for _, fault in faults], dtype=float))
    return Router(n_ipu, domain_count, domain_of_ipu, tree, topology.node_names, (a, b),
                  latency, ipu_keys, ipu_links, domains, cuts)


_ROUTERS: weakref.WeakKeyDictionary[Topology, Router] = weakref.WeakKeyDictionary()
_ROUTERS_LOCK = threading.Lock()


def router_of(topology: Topology) -> Router:
    """``topology``'s router: built by :func:`build_router` at the first call for this
    topology object, then the same value while the topology lives. A copy of a topology
    (pickled, or made by ``dataclasses.replace``) is another object and builds its own."""
    router = _ROUTERS.get(topology)
    if router is None:
        built = build_router(topology)
        with _ROUTERS_LOCK:
            router = _ROUTERS.setdefault(topology, built)
    return router
