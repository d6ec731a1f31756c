"""What every device actor answers, card or host: who it is, its links, the POD's link
faults, its counters, shutdown. :class:`ipu_node.card.Card` and
:class:`ipu_node.host.HostRelay` build on :class:`DeviceControl`.

The control methods run in threads of their own (the ``control`` concurrency group), so
they are answered even while collectives fill the others, and an ``abort`` reaches a
collective that waits.
"""

from __future__ import annotations

import ctypes
import os
import threading

import numpy as np
import ray

from cluster.model.faulted import with_faults
from cluster.model.link_faults import LinkFault
from cluster.model.topology import Topology
from ipu_node.answers import DeviceDetails, DeviceInfo, DeviceStats
from ipu_node.counters import Counters
from ipu_node.device_spec import DeviceSpec
from ipu_node.links.endpoint import LinkEndpoint
from ipu_node.ownership import Ownership
from ipu_node.wall_spans import RecordedSpans, WallSpans

CONTROL = "control"  # the concurrency group of the control methods
CONTROL_THREADS = 4
FAULTED_TOPOLOGIES_KEPT = 4


def keep_freed_memory() -> None:
    """Devices allocate and free megabyte chunks all the time; glibc would hand each to
    mmap and back, paying a page fault per 4 KiB on every reuse. Keep them in the heap
    (``mallopt`` M_MMAP_THRESHOLD 32 MiB, M_TRIM_THRESHOLD 1 GiB). No-op off glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)
        libc.mallopt(-1, 1 << 30)
    except (OSError, AttributeError):
        pass


class DeviceControl:
    """The control side of a device actor: identity, wiring, link faults, counters."""

    def __init__(self, spec: DeviceSpec, topology: Topology, endpoint: LinkEndpoint,
                 counters: Counters) -> None:
        self.spec, self.base_topology, self.topology = spec, topology, topology
        self.endpoint, self.counters = endpoint, counters
        self.index = -1
        self.ownership: Ownership | None = None
        self.fault_version = -1  # of the link faults last heard (older news is ignored)
        self._lock = threading.Lock()
        self._faulted: dict[tuple, Topology] = {}  # per fault set, the topology to count on
        self._faulted_lock = threading.Lock()
        self.wall = WallSpans()  # what it did on the wall clock, when a trace asks

    @ray.method(concurrency_group=CONTROL)
    def info(self) -> DeviceInfo:
        """Who this device is, and which process of it answers."""
        node, node_ip = ray_node()
        return DeviceInfo(name=self.spec.name, kind=self.spec.kind, ipus=list(self.spec.ipus),
                          address=self.endpoint.address,
                          link_address=self.endpoint.link_address, node_id=node,
                          node_ip=node_ip, pid=os.getpid())

    @ray.method(concurrency_group=CONTROL)
    def connect(self, names: list[str], addresses: list[str], index: int,
                ownership: Ownership, faults: dict[int, LinkFault] | None = None,
                fault_version: int = 0) -> None:
        """Learn every device's name and link address, this device's index among them, and
        who owns what (which device each IPU's data goes to next, which links to count).
        Called again when a peer restarted on a new port: links to it are reopened."""
        self.endpoint.wire(names, addresses)
        with self._lock:
            self.index, self.ownership = index, ownership
            self._wired(index, ownership)
        self._take_faults(faults or {}, fault_version)

    def _wired(self, index: int, ownership: Ownership) -> None:
        """What a device does once it knows its place (called with the lock held)."""

    @ray.method(concurrency_group=CONTROL)
    def set_link_faults(self, faults: dict[int, LinkFault], version: int = 0) -> None:
        """The POD's link faults (version ``version``; older versions are ignored). A
        collective counts its bytes on the routes of the faults it was planned with."""
        self._take_faults(faults, version)

    def _take_faults(self, faults: dict[int, LinkFault], version: int) -> None:
        topology = self.topology_for(faults)
        with self._lock:
            if version >= self.fault_version:
                self.fault_version, self.topology = version, topology
                self._faults_changed()

    def _faults_changed(self) -> None:
        """Hook: the POD's link faults changed (called with the lock held)."""

    def topology_for(self, faults: dict[int, LinkFault]) -> Topology:
        """The launched topology with ``faults``, built once per fault set (a few kept)."""
        key = tuple(sorted(faults.items()))
        with self._faulted_lock:
            if key not in self._faulted:
                if len(self._faulted) >= FAULTED_TOPOLOGIES_KEPT:
                    self._faulted.pop(next(iter(self._faulted)))
                self._faulted[key] = with_faults(self.base_topology, faults)
            return self._faulted[key]

    @ray.method(concurrency_group=CONTROL)
    def abort(self, collective: str, reason: str) -> None:
        """End ``collective`` here now (a peer died). Nothing waits on a plain device."""

    @ray.method(concurrency_group=CONTROL)
    def tensor_info(self, name: str) -> dict[int, tuple[tuple[int, ...], str]]:
        """Shape and dtype of tensor ``name`` per IPU holding it (a host holds none)."""
        return {}

    @ray.method(concurrency_group=CONTROL)
    def relayed(self, collective: str) -> np.ndarray:
        """Bytes relayed for ``collective`` per directed link: a host relay's count
        (:meth:`ipu_node.host.HostRelay.relayed`); a card relays nothing."""
        return np.zeros(len(self.counters.link_bytes))

    @ray.method(concurrency_group=CONTROL)
    def record_wall(self, capacity: int) -> None:
        """Record wall-clock spans from now on (forgetting older ones), ``capacity`` at
        most (:mod:`ipu_node.wall_spans`)."""
        self.wall.start(capacity)

    @ray.method(concurrency_group=CONTROL)
    def wall_spans(self) -> RecordedSpans:
        """Stop recording; the wall-clock spans recorded since :meth:`record_wall`."""
        return self.wall.take()

    @ray.method(concurrency_group=CONTROL)
    def stats(self) -> DeviceStats:
        """Counters, memory and the bytes sent per directed link, as the POD reads them."""
        counters, link_bytes = self.counters.snapshot()
        stats = DeviceStats(name=self.spec.name, address=self.endpoint.address,
                            link_address=self.endpoint.link_address, pid=os.getpid(),
                            counters=counters, link_bytes=link_bytes, memory={},
                            collectives_running=0, dropped_chunks=0)
        stats.update(self._details())
        stats["node_id"], stats["node_ip"] = ray_node()
        return stats

    def _details(self) -> DeviceDetails:
        """What this kind of device adds to its counters."""
        return DeviceDetails(memory={}, collectives_running=0, dropped_chunks=0)

    def shutdown(self) -> None:
        """Close the links (the server first stops taking chunks)."""
        self.endpoint.close()


def ray_node() -> tuple[str | None, str | None]:
    """The id and address of the Ray node this device runs on. Outside Ray (a plain object
    in a test) there is none, and asking would start Ray."""
    if not ray.is_initialized():
        return None, None
    return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()


def directed_links(topology: Topology) -> int:
    return 2 * topology.link_count_physical

