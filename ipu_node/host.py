"""The host of a DSS 8440 server as an actor: it owns the server's PCIe switch fabric and
InfiniBand adapters, so traffic between servers passes through it.

A card sends its chunks for another server to its own host; the host forwards them to
the destination server's host, which hands them to the destination card (see
:mod:`ipu_node.ownership`). Each host counts the bytes on the links it owns. It holds no
IPUs, no tensors and no memory of its own.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator

import numpy as np
import ray

from cluster.model.link_faults import LinkDown
from cluster.model.routing import router_of
from cluster.model.topology import Topology
from ipu_node.answers import DeviceDetails
from ipu_node.control import CONTROL, DeviceControl, directed_links, keep_freed_memory
from ipu_node.counters import Counters
from ipu_node.device_spec import DeviceSpec
from ipu_node.links.endpoint import LinkEndpoint
from ipu_node.links.link_tls import LinkTLS
from ipu_node.links.shared_link import Arrival, Relay
from ipu_node.node_placement import resolve_link_host
from ipu_node.relay_stream import OnwardPush
from ipu_node.wall_spans import RECEIVE, SEND

RELAY_DEADLINE_SECONDS = 60.0
RELAY_THREADS = 16
COLLECTIVES_KEPT = 64  # per-collective counts not yet asked for (a failed one is never)


class HostRelay(DeviceControl):
    """One server's host: forwards chunks between its cards and the other servers."""

    def __init__(self, spec: DeviceSpec, topology: Topology, host: str = "127.0.0.1",
                 link_secret: str | None = None, link_tls: LinkTLS | None = None,
                 link_shared_memory: bool = True) -> None:
        """``link_secret``: the POD's, which its links carry and check (never logged);
        ``link_tls``: TLS for its links (off by default); ``link_shared_memory``: chunks
        to and from devices on this machine through shared memory (on by default)."""
        keep_freed_memory()
        self.relayed_bytes = 0
        self.relayed_shared_bytes = 0  # of those, the bytes it read from shared memory
        self._owned_links: dict[tuple[int, int], np.ndarray] = {}
        self._by_collective: OrderedDict[str, np.ndarray] = OrderedDict()
        host, node_socket = resolve_link_host(host)
        super().__init__(spec, topology,
                         LinkEndpoint(spec.name, Relay(self._deliver), host, RELAY_THREADS,
                                      secret=link_secret, tls=link_tls, local_socket=node_socket,
                                      shared_memory=link_shared_memory, relaying=True),
                         Counters((), directed_links(topology)))

    def _faults_changed(self) -> None:
        self._owned_links = {}  # routes may have changed

    def _details(self) -> DeviceDetails:
        return DeviceDetails(memory={}, collectives_running=0, relayed_bytes=self.relayed_bytes,
                             relayed_shared_bytes=self.relayed_shared_bytes, dropped_chunks=0)

    @ray.method(concurrency_group=CONTROL)
    def relayed(self, collective: str) -> np.ndarray:
        """Bytes relayed for ``collective`` per directed link this host owns (zeros
        elsewhere), forgotten once asked: the POD asks once the collective ended, so it
        needs no count before it, and concurrent collectives are told apart."""
        with self._lock:
            counted = self._by_collective.pop(collective, None)
        return np.zeros(len(self.counters.link_bytes)) if counted is None else counted

    def _count(self, collective: str, src_ipu: int, dst_ipu: int, nbytes: int) -> None:
        """Add ``nbytes`` to the links this host owns on the route ``src -> dst``, in all
        and for ``collective``."""
        assert self.ownership is not None
        key = (src_ipu, dst_ipu)
        with self._lock:  # the link server delivers on many threads
            if key not in self._owned_links:
                try:
                    links = router_of(self.topology).route(np.array([src_ipu]),
                                                       np.array([dst_ipu])).pair_link
                except LinkDown:  # cut since the collective was planned: count nothing
                    links = np.zeros(0, dtype=np.int64)
                self._owned_links[key] = links[self.ownership.link_owner[links] == self.index]
            owned = self._owned_links[key]
            mine = self._by_collective.get(collective)
            if mine is None:
                mine = self._by_collective[collective] = np.zeros(len(self.counters.link_bytes))
                while len(self._by_collective) > COLLECTIVES_KEPT:
                    self._by_collective.popitem(last=False)
            np.add.at(mine, owned, nbytes)
        self.counters.add_at_links(owned, nbytes)

    def _deliver(self, arrivals: Iterator[Arrival]) -> tuple[int, int]:
        """Take a stream of chunks and pass each on towards its IPU as it arrives (a push
        per next hop, :mod:`ipu_node.relay_stream`); answer once all were passed on."""
        assert self.ownership is not None
        onward: dict[int, OnwardPush] = {}
        total = count = shared = 0
        started = self.wall.begin()  # receive: the stream's chunks as they arrive
        try:
            for arrival in arrivals:
                push = self._onward(onward, arrival)
                size = len(arrival.payload)
                total, count = total + size, count + 1
                shared += size if arrival.release is not None else 0
                push.put(arrival, time.monotonic() + RELAY_DEADLINE_SECONDS)
        except BaseException:
            for push in onward.values():
                push.abandon()
            raise
        started = self.wall.end(RECEIVE, started, bytes=total, chunks=count, relay=True)
        limit = time.monotonic() + RELAY_DEADLINE_SECONDS
        try:
            for push in onward.values():
                push.finish(limit)
        except BaseException:
            for push in onward.values():
                push.abandon()
            raise
        self.wall.end(SEND, started, bytes=total, chunks=count, relay=True)
        self.relayed_bytes += total
        self.relayed_shared_bytes += shared
        return total, count

    def _onward(self, pushes: dict[int, OnwardPush], arrival: Arrival) -> OnwardPush:
        """The push that takes ``arrival`` on (opened on its first chunk), its bytes
        counted on the links this host owns; the arrival is handed back if that fails."""
        assert self.ownership is not None
        header = arrival.header
        try:
            nxt = self.ownership.next_device(self.index, header.dst_ipu)
            if nxt not in pushes:
                pushes[nxt] = OnwardPush(self.endpoint.peers.to(nxt).push,
                                         RELAY_DEADLINE_SECONDS)
            self._count(header.collective, header.src_ipu, header.dst_ipu,
                        len(arrival.payload))
        except BaseException:
            if arrival.release is not None:
                arrival.release()
            raise
        return pushes[nxt]
