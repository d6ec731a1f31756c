"""The topology: IPUs, hosts, switches and the links between them, with routes.

A :class:`Topology` is built once (by a preset in :mod:`cluster.model.presets` or from a YAML
file by :mod:`cluster.model.topology_yaml`) through a
:class:`~cluster.model.builder.TopologyBuilder`, then used read-only. It holds no routes:
:func:`cluster.model.routing.router_of` gives its router, a value derived from it. IPUs are
numbered ``0 .. ipu_count-1`` and are also nodes ``0 .. ipu_count-1``; other nodes (cards'
PCIe endpoints, hosts, switches, IPU-Gateways) follow them.

Links are physical and full duplex: physical link ``l`` joining nodes ``a`` and ``b`` is the
two *directed links* ``2l`` (a to b) and ``2l+1`` (b to a), each with the link's bandwidth
per direction. Parallel links between two nodes (two InfiniBand adapters, two GW-Links) are
one *bundle* whose bandwidth is their sum: traffic is striped over them.

Every link has a role: ``fabric`` links carry IPU-to-IPU traffic; ``host`` links only join a
host to the system (an IPU-M2000's RoCE NIC) and carry no collective traffic.

A topology may carry link faults (:class:`LinkFault`, by physical link; what they mean:
:mod:`cluster.model.link_faults`): they scale the link's bandwidth, add to its latency, or
cut it.
:func:`cluster.model.faulted.with_faults` makes such a topology from a healthy one; the
properties below already include the faults.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from cluster.errors import UserError
from cluster.model.hardware import LinkType, Processor

FABRIC = "fabric"
HOST = "host"
ROLES = (FABRIC, HOST)


@dataclass(frozen=True)
class Unit:
    """A card (C2) or machine (IPU-M2000): the hardware one emulator actor stands for;
    ``kind`` a :class:`~cluster.model.hardware.DeviceKind` (a YAML file's text compares
    equal to it, and may name another kind)."""

    name: str
    kind: str
    ipus: tuple[int, ...]
    server: int


@dataclass(frozen=True)
class Server:
    """A server (DSS 8440) or rack (POD64): the scope of one IPU-Link domain in presets."""

    name: str
    kind: str
    units: tuple[int, ...]


@dataclass(frozen=True)
class LinkFault:
    """A fault on one physical link (bundle), the same in both directions.

    ``bandwidth_factor`` (0 < f <= 1) multiplies its bandwidth, bytes/s; ``added_latency_seconds``
    (seconds, >= 0) is added to each crossing; ``cut`` takes the link away altogether.
    ``LinkFault()`` is a healthy link.
    """

    bandwidth_factor: float = 1.0
    added_latency_seconds: float = 0.0
    cut: bool = False

    def __post_init__(self) -> None:
        factor, latency = self.bandwidth_factor, self.added_latency_seconds
        if not _is_number(factor) or not 0 < factor <= 1:
            hint = " (a link with no bandwidth is cut: give cut=True)" if factor == 0 else ""
            raise UserError(
                f"bandwidth_factor must be a number more than 0 and at most 1, the share of "
                f"the link's bandwidth left, not {factor!r}{hint}: e.g. 0.5 halves it")
        if not _is_number(latency) or not math.isfinite(latency) or latency < 0:
            raise UserError(
                f"added_latency_seconds must be a finite number of seconds, 0 or more, not "
                f"{latency!r}: e.g. 2e-6 adds 2 us to every crossing of the link")
        if not isinstance(self.cut, (bool, np.bool_)):
            raise UserError(f"cut must be True or False, not {self.cut!r}")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_))


@dataclass(eq=False)
class Topology:
    """A built, read-only topology. See the module docstring for numbering conventions."""

    name: str
    node_names: tuple[str, ...]
    node_kinds: tuple[str, ...]
    ipu_count: int
    ipu_processors: tuple[Processor, ...]
    link_types: tuple[LinkType, ...]
    link_a: np.ndarray
    link_b: np.ndarray
    link_type: np.ndarray
    link_count: np.ndarray
    link_role: np.ndarray
    units: tuple[Unit, ...]
    servers: tuple[Server, ...]
    ring_order: np.ndarray
    sync_local_seconds: float
    sync_global_seconds: float
    memory_bandwidth_override_Bps: float | None = None
    faults: Mapping[int, LinkFault] = field(default_factory=dict)  # by physical link

    @property
    def node_count(self) -> int:
        """Nodes of every kind: IPUs first, then cards, hosts, switches, gateways."""
        return len(self.node_names)

    @property
    def link_count_physical(self) -> int:
        """Physical links (bundles); each is two directed links."""
        return len(self.link_a)

    @cached_property
    def directed_src(self) -> np.ndarray:
        """Source node of every directed link (``2l``: a to b, ``2l+1``: b to a)."""
        return np.stack([self.link_a, self.link_b], axis=1).ravel()

    @cached_property
    def directed_dst(self) -> np.ndarray:
        """Destination node of every directed link (``2l``: b, ``2l+1``: a)."""
        return np.stack([self.link_b, self.link_a], axis=1).ravel()

    @cached_property
    def directed_bandwidth_Bps(self) -> np.ndarray:
        """Bandwidth of every directed link: the bundle's count times its type's bandwidth,
        times its fault's ``bandwidth_factor``."""
        per_type = np.array([t.bandwidth_Bps for t in self.link_types])
        bandwidth = per_type[self.link_type] * self.link_count
        if self.faults:
            bandwidth[list(self.faults)] *= [f.bandwidth_factor for f in self.faults.values()]
        return np.repeat(bandwidth, 2)

    @cached_property
    def directed_latency_seconds(self) -> np.ndarray:
        """Latency per crossing of every directed link, its fault's ``added_latency_seconds`` in."""
        per_type = np.array([t.latency_seconds for t in self.link_types])
        latency = per_type[self.link_type]
        if self.faults:
            latency[list(self.faults)] += [f.added_latency_seconds for f in self.faults.values()]
        return np.repeat(latency, 2)

    @cached_property
    def cut_links(self) -> frozenset[int]:
        """Physical links that are cut (they carry nothing); empty on a healthy topology."""
        return frozenset(link for link, fault in self.faults.items() if fault.cut)

    @cached_property
    def ring_position(self) -> np.ndarray:
        """Per IPU, its position in ``ring_order`` (worked out once: the planner looks up
        every replica group's ring order in it)."""
        position = np.empty(self.ipu_count, dtype=np.int64)
        position[self.ring_order] = np.arange(self.ipu_count)
        return position

    @cached_property
    def directed_type(self) -> np.ndarray:
        """Index into ``link_types`` of every directed link."""
        return np.repeat(self.link_type, 2)

    @cached_property
    def ipu_memory_bandwidth_Bps(self) -> np.ndarray:
        """Per IPU, the tiles' memory bandwidth (reductions are timed against it)."""
        if self.memory_bandwidth_override_Bps is not None:
            return np.full(self.ipu_count, float(self.memory_bandwidth_override_Bps))
        return np.array([p.memory_bandwidth_Bps for p in self.ipu_processors])

    @cached_property
    def ipu_memory_bytes(self) -> np.ndarray:
        """Per IPU, its In-Processor-Memory in bytes (int64)."""
        return np.array([p.in_processor_memory_bytes for p in self.ipu_processors], dtype=np.int64)

    def ipu_name(self, ipu: int) -> str:
        """The node name of IPU ``ipu`` (e.g. ``'s0.card1.ipu0'``)."""
        return self.node_names[ipu]

    def link_label(self, directed_link: int) -> str:
        """``'ipu3 -> ipu5 (ipu-link-rail)'`` for a directed link id."""
        src, dst = self.directed_src[directed_link], self.directed_dst[directed_link]
        kind = self.link_types[self.directed_type[directed_link]].name
        return f"{self.node_names[src]} -> {self.node_names[dst]} ({kind})"
