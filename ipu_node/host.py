"""The host of a DSS 8440 server as an actor: it owns the server's PCIe switch fabric and
InfiniBand adapters, so traffic between servers passes through it.

A card sends its chunks for another server to its own host; the host forwards them to
the destination server's host, which hands them to the destination card (see
:mod:`ipu_node.ownership`). Each host counts the bytes on the links it owns. It holds no
IPUs, no tensors and no memory of its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import ray

from cluster.model.faulted import with_faults
from cluster.model.link_faults import LinkDown, LinkFault
from cluster.model.topology import Topology
from ipu_node.card import CONTROL, DeviceSpec, keep_freed_memory
from ipu_node.links.channel import LinkServer, PeerLinks
from ipu_node.links.wire import decode_chunk
from ipu_node.ownership import Ownership

RELAY_DEADLINE_S = 60.0


class HostRelay:
    """One server's host: forwards chunks between its cards and the other servers."""

    def __init__(self, spec: DeviceSpec, topology: Topology, host: str = "127.0.0.1") -> None:
        keep_freed_memory()
        self.spec, self.topology, self.base_topology = spec, topology, topology
        self.fault_version = -1
        self._lock = threading.Lock()
        self.link_bytes = np.zeros(2 * topology.link_count_physical)
        self.relayed_bytes = 0
        self.server = LinkServer(spec.name, self._deliver, host)
        self.address = self.server.start()
        self.pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix=f"{spec.name}-relay")
        self.peers = PeerLinks()
        self.index = -1
        self.ownership: Ownership | None = None
        self._owned_links: dict[tuple[int, int], np.ndarray] = {}

    @ray.method(concurrency_group=CONTROL)
    def info(self) -> dict:
        import ray

        return {"name": self.spec.name, "kind": self.spec.kind, "ipus": [],
                "address": self.address, "link_address": self.server.link_address,
                "pid": os.getpid(),
                "node_id": ray.get_runtime_context().get_node_id()}

    @ray.method(concurrency_group=CONTROL)
    def connect(self, names: list[str], addresses: list[str], index: int,
                ownership: Ownership, faults: dict[int, LinkFault] | None = None,
                fault_version: int = 0) -> None:
        """As :meth:`ipu_node.card.Device.connect`: links to restarted peers reopen."""
        self.peers.wire(names, addresses)
        with self._lock:
            self.index, self.ownership = index, ownership
        self.set_link_faults(faults or {}, fault_version)

    @ray.method(concurrency_group=CONTROL)
    def set_link_faults(self, faults: dict[int, LinkFault], version: int = 0) -> None:
        """Count relayed bytes on the routes of the POD's link faults (newest version)."""
        topology = with_faults(self.base_topology, faults)
        with self._lock:
            if version >= self.fault_version:
                self.fault_version, self.topology, self._owned_links = version, topology, {}

    @ray.method(concurrency_group=CONTROL)
    def abort(self, collective: str, reason: str) -> None:
        """Nothing waits here: a host only forwards."""

    def _count(self, src_ipu: int, dst_ipu: int, nbytes: int) -> None:
        """Add ``nbytes`` to the links this host owns on the route ``src -> dst``."""
        key = (src_ipu, dst_ipu)
        with self._lock:  # the link server delivers on many threads
            if key not in self._owned_links:
                try:
                    links = self.topology.router.route(np.array([src_ipu]),
                                                       np.array([dst_ipu])).pair_link
                except LinkDown:  # cut since the collective was planned: count nothing
                    links = np.zeros(0, dtype=np.int64)
                self._owned_links[key] = links[self.ownership.link_owner[links] == self.index]
            self.link_bytes[self._owned_links[key]] += nbytes

    def _deliver(self, messages: Iterable[bytes]) -> tuple[int, int]:
        """Take a stream of chunks, pass each on towards its IPU, answer once all arrived."""
        onward: dict[int, list[bytes]] = {}
        total = count = 0
        for message in messages:
            header, payload = decode_chunk(message)
            nxt = self.ownership.next_device(self.index, header.dst_ipu)
            onward.setdefault(nxt, []).append(message)
            self._count(header.src_ipu, header.dst_ipu, len(payload))
            total += len(payload)
            count += 1
        pushes = [self.pool.submit(self.peers.to(d).push, batch, RELAY_DEADLINE_S)
                  for d, batch in onward.items()]
        for push in pushes:
            push.result(timeout=RELAY_DEADLINE_S)
        self.relayed_bytes += total
        return total, count

    @ray.method(concurrency_group=CONTROL)
    def tensor_info(self, name: str) -> dict:
        return {}

    @ray.method(concurrency_group=CONTROL)
    def stats(self) -> dict:
        with self._lock:
            link_bytes = self.link_bytes.copy()
        return {"name": self.spec.name, "address": self.address,
                "link_address": self.server.link_address, "pid": os.getpid(),
                "counters": {}, "memory": {}, "collectives_running": 0,
                "link_bytes": link_bytes, "relayed_bytes": self.relayed_bytes}

    def shutdown(self) -> None:
        self.peers.close()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.server.stop()
