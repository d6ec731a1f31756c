"""Build a :class:`~cluster.model.topology.Topology`: collect nodes and links, check them,
renumber (IPUs first), bundle parallel links, and route the result once to check it.

Presets (:mod:`cluster.model.presets`) and YAML files (:mod:`cluster.model.topology_yaml`)
both build through :class:`TopologyBuilder`, so every topology is checked the same way and
its :class:`~cluster.model.routing.Router` (:func:`~cluster.model.routing.router_of`) is
built, and kept, with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from cluster.errors import SpecError
from cluster.model.hardware import GLOBAL_SYNC_SECONDS, LOCAL_SYNC_SECONDS, LinkType, Processor
from cluster.model.routing import router_of
from cluster.model.topology import FABRIC, ROLES, Server, Topology, Unit


@dataclass
class TopologyBuilder:
    """Collects nodes and links, checks them, and builds a :class:`Topology`.

    The bulk methods take NumPy arrays so that a 65,536-IPU POD builds in well under a
    second; node ids returned are builder ids, renumbered (IPUs first) by :meth:`build`.
    """

    name: str
    _names: list[str] = field(default_factory=list)
    _kinds: list[str] = field(default_factory=list)
    _is_ipu: list[bool] = field(default_factory=list)
    _ipu_processor: list[Processor] = field(default_factory=list)
    _link_a: list[np.ndarray] = field(default_factory=list)
    _link_b: list[np.ndarray] = field(default_factory=list)
    _link_type: list[np.ndarray] = field(default_factory=list)
    _link_count: list[np.ndarray] = field(default_factory=list)
    _link_role: list[np.ndarray] = field(default_factory=list)
    _types: list[LinkType] = field(default_factory=list)
    units: list[Unit] = field(default_factory=list)
    servers: list[Server] = field(default_factory=list)
    ring_order: list[int] | None = None  # builder ids of IPUs, the preferred ring
    sync_local_seconds: float = LOCAL_SYNC_SECONDS
    sync_global_seconds: float = GLOBAL_SYNC_SECONDS
    memory_bandwidth_override_Bps: float | None = None

    def add_ipus(self, names: list[str], processor: Processor) -> np.ndarray:
        """Add IPUs of one processor type; return their builder ids."""
        return self._add(names, "ipu", processor)

    def add_nodes(self, names: list[str], kind: str) -> np.ndarray:
        """Add non-IPU nodes (``host``, ``switch``, ``pcie-switch``, ``gateway``, ...)."""
        if kind == "ipu":
            raise SpecError("add IPUs with add_ipus, which needs their processor type")
        return self._add(names, kind, None)

    def _add(self, names: list[str], kind: str, processor: Processor | None) -> np.ndarray:
        start = len(self._names)
        self._names.extend(names)
        self._kinds.extend([kind] * len(names))
        self._is_ipu.extend([processor is not None] * len(names))
        if processor is not None:
            self._ipu_processor.extend([processor] * len(names))
        return np.arange(start, start + len(names), dtype=np.int64)

    def add_links(
        self,
        a: np.ndarray | list[int],
        b: np.ndarray | list[int],
        link_type: LinkType,
        count: int | np.ndarray = 1,
        role: str = FABRIC,
    ) -> None:
        """Join ``a[i]`` and ``b[i]`` by ``count`` parallel links of ``link_type``."""
        a_ids = np.asarray(a, dtype=np.int64).ravel()
        b_ids = np.asarray(b, dtype=np.int64).ravel()
        if a_ids.shape != b_ids.shape:
            raise SpecError("add_links needs as many 'a' endpoints as 'b' endpoints")
        if role not in ROLES:
            raise SpecError(f"unknown link role {role!r}: use one of {', '.join(ROLES)}")
        counts = np.broadcast_to(np.asarray(count, dtype=np.int64), a_ids.shape).copy()
        if (counts < 1).any():
            raise SpecError(f"a {link_type.name} link needs a count of 1 or more")
        if link_type not in self._types:
            self._types.append(link_type)
        type_index = self._types.index(link_type)
        self._link_a.append(a_ids)
        self._link_b.append(b_ids)
        self._link_type.append(np.full(a_ids.shape, type_index, dtype=np.int64))
        self._link_count.append(counts)
        self._link_role.append(np.full(a_ids.shape, ROLES.index(role), dtype=np.int64))

    def build(self) -> Topology:
        """Check the collected spec and build the topology (its routes checked)."""
        names = self._names
        self._check_unique_names()
        is_ipu = np.array(self._is_ipu, dtype=bool)
        ipu_count = int(is_ipu.sum())
        if ipu_count == 0:
            raise SpecError(f"topology {self.name!r} has no IPU: add at least one")
        # Renumber: IPUs first, in the order they were added, then the other nodes.
        order = np.concatenate([np.flatnonzero(is_ipu), np.flatnonzero(~is_ipu)])
        new_id = np.empty(len(names), dtype=np.int64)
        new_id[order] = np.arange(len(names))
        links = self._checked_links(new_id, [names[i] for i in order])
        ring: np.ndarray | None = None
        if self.ring_order is not None:
            ring = new_id[np.asarray(self.ring_order, dtype=np.int64)]
            if sorted(ring.tolist()) != list(range(ipu_count)):
                raise SpecError("ring_order must list every IPU exactly once")
        units = [Unit(u.name, u.kind, tuple(int(new_id[i]) for i in u.ipus), u.server)
                 for u in self.units]
        topology = Topology(
            name=self.name,
            node_names=tuple(names[i] for i in order),
            node_kinds=tuple(self._kinds[i] for i in order),
            ipu_count=ipu_count,
            ipu_processors=tuple(self._ipu_processor),
            link_types=tuple(self._types),
            link_a=links[0], link_b=links[1], link_type=links[2], link_count=links[3],
            link_role=links[4],
            units=tuple(units),
            servers=tuple(self.servers),
            ring_order=ring if ring is not None else np.arange(ipu_count),
            sync_local_seconds=self.sync_local_seconds,
            sync_global_seconds=self.sync_global_seconds,
            memory_bandwidth_override_Bps=self.memory_bandwidth_override_Bps,
        )
        router_of(topology)  # validates reachability (and keeps the router for later)
        return topology

    def _check_unique_names(self) -> None:
        """SpecError naming the first node name given a second time."""
        seen: set[str] = set()
        for name in self._names:
            if name in seen:
                raise SpecError(f"two nodes are named {name!r}: every node needs its own name")
            seen.add(name)

    def _checked_links(self, new_id: np.ndarray, ordered_names: list[str]) -> _Links:
        """The links renumbered by ``new_id`` and bundled; a SpecError if one names a node
        that does not exist or joins a node to itself."""
        empty = np.zeros(0, dtype=np.int64)

        def cat(parts: list[np.ndarray]) -> np.ndarray:
            return np.concatenate(parts) if parts else empty

        names = self._names
        a, b = cat(self._link_a), cat(self._link_b)
        if ((a < 0) | (a >= len(names)) | (b < 0) | (b >= len(names))).any():
            raise SpecError("a link names a node that does not exist")
        if (a == b).any():
            bad = names[int(a[a == b][0])]
            raise SpecError(f"a link joins {bad!r} to itself: links join two different nodes")
        return _bundle(new_id[a], new_id[b], cat(self._link_type), cat(self._link_count),
                       cat(self._link_role), ordered_names)


_Links = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _bundle(a: np.ndarray, b: np.ndarray, types: np.ndarray, counts: np.ndarray,
            roles: np.ndarray, names: list[str]) -> _Links:
    """Merge parallel links between the same two nodes into one bundle (counts add up).

    Returns ``(a, b, types, counts, roles)``, one entry per bundle."""
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    key = lo * (len(names) + 1) + hi
    unique_keys, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    if len(unique_keys) == len(key):
        return a, b, types, counts, roles
    same_kind = (types == types[first][inverse]) & (roles == roles[first][inverse])
    if not same_kind.all():
        i = int(np.flatnonzero(~same_kind)[0])
        raise SpecError(
            f"{names[a[i]]!r} and {names[b[i]]!r} are joined by links of different types or "
            "roles: declare one link between two nodes (use 'count' for parallel links)"
        )
    summed = np.bincount(inverse, weights=counts).astype(np.int64)
    return a[first], b[first], types[first], summed, roles[first]
