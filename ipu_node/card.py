"""One emulated card (C2, 2 IPUs) or machine (IPU-M2000, 4 IPUs): a thin Ray actor over
parts that work without Ray.

- :class:`~ipu_node.store.TensorStore`: per IPU, named tensors and In-Processor-Memory
  accounting (and spare collective buffers);
- :class:`~ipu_node.counters.Counters`: bytes in and out, supersteps, simulated clock,
  bytes per directed link;
- :class:`~ipu_node.links.endpoint.LinkEndpoint` and a
  :class:`~ipu_node.links.mailbox.Mailbox`: the gRPC ``Link`` service its peers push chunks
  to, and its clients to them;
- :class:`~ipu_node.runner.ScheduleRunner`: its share of a collective's schedule.

The control methods come from :class:`~ipu_node.control.DeviceControl`. Work for a model
replica is given to the card as a task (:meth:`Card.execute`), not built in. The actor is
threaded (the launcher gives it a few threads): collectives of disjoint partitions can run
on it at once. Ray restarts it when it dies; it comes back empty, on a new port, and the
POD wires it in again (:meth:`connect`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import ray

from cluster.model.link_faults import LinkFault
from cluster.model.topology import Topology
from gcl.collectives import ReduceOp
from gcl.schedule import Schedule
from ipu_node.answers import DeviceDetails, RunAnswer
from ipu_node.control import CONTROL, DeviceControl, directed_links, keep_freed_memory
from ipu_node.counters import Counters
from ipu_node.device_spec import DeviceSpec
from ipu_node.links.endpoint import LinkEndpoint
from ipu_node.links.link_tls import LinkTLS
from ipu_node.links.mailbox import Mailbox
from ipu_node.links.shared_slots import shared_memory_asked
from ipu_node.node_placement import resolve_link_host
from ipu_node.ownership import Ownership
from ipu_node.runner import ScheduleRunner
from ipu_node.store import TensorStore
from ipu_node.wall_spans import COMPUTE

PUSH_THREADS = 8
T = TypeVar("T")


class Card(DeviceControl):
    """The state and behaviour of one emulated card or machine (wrapped by ``ray.remote``)."""

    def __init__(self, spec: DeviceSpec, topology: Topology, host: str = "127.0.0.1",
                 link_secret: str | None = None, link_tls: LinkTLS | None = None,
                 link_shared_memory: bool = True) -> None:
        """``link_secret``: the POD's, which its links carry and check (never logged);
        ``link_tls``: TLS for its links (off by default); ``link_shared_memory``: chunks
        to and from devices on this machine may go through shared memory."""
        keep_freed_memory()
        self.mailbox = Mailbox()
        host, node_socket = resolve_link_host(host)
        super().__init__(spec, topology, LinkEndpoint(spec.name, self.mailbox, host,
                                                      PUSH_THREADS, secret=link_secret,
                                                      tls=link_tls, local_socket=node_socket,
                                                      shared_memory=link_shared_memory),
                         Counters(spec.ipus, directed_links(topology)))
        self.store = TensorStore(topology, spec.ipus, spec.streaming_bytes_per_ipu,
                                 shared_buffers=link_shared_memory
                                 and shared_memory_asked(None))
        self.runner = ScheduleRunner(spec.name, spec.ipus, topology, self.store,
                                     self.counters, self.endpoint, self.mailbox, self.wall)

    def _wired(self, index: int, ownership: Ownership) -> None:
        self.runner.wire(index, ownership)

    @ray.method(concurrency_group=CONTROL)
    def abort(self, collective: str, reason: str) -> None:
        """End ``collective`` here now (a peer died): its waits raise ``reason``."""
        self.mailbox.abort(collective, reason)

    @ray.method(concurrency_group=CONTROL)
    def tensor_info(self, name: str) -> dict[int, tuple[tuple[int, ...], str]]:
        return self.store.info(name)

    def _details(self) -> DeviceDetails:
        self.mailbox.sweep()  # chunks nobody waits on: dropped and counted now
        slots = getattr(self.endpoint.server, "slots", None)  # shared memory, if it has any
        if slots is not None:
            slots.buffers.drop_gone()  # peers' buffers mapped here: those of dead processes go
        return DeviceDetails(memory=self.store.memory_stats(),
                             collectives_running=len(self.runner.running),
                             dropped_chunks=self.mailbox.dropped_chunks)

    def put(self, ipu: int, name: str, array: np.ndarray) -> None:
        """Store a named tensor on one of this card's IPUs (memory is accounted)."""
        self.store.put(ipu, name, array)

    def get(self, ipu: int, name: str) -> np.ndarray:
        return self.store.get(ipu, name)

    def free(self, ipu: int, name: str) -> None:
        self.store.free(ipu, name)

    def run(self, schedule: Schedule, collective: str, ranks: dict[int, tuple[int, int]],
            inputs: dict[int, np.ndarray] | str, output: str | None, op: ReduceOp,
            deadline_seconds: float, sim_seconds: float,
            faults: dict[int, LinkFault] | None = None) -> RunAnswer:
        """Run this card's share of ``schedule``; ``ranks[ipu] = (group, rank)``.

        ``inputs`` are arrays per IPU, or the name of a tensor each IPU holds. With
        ``output`` the results stay on the IPUs as that tensor and are not returned;
        the answer always holds the bytes sent per directed link, and the IPUs' memory and
        output tensor after the collective (what the POD keeps: :mod:`ipu_node.known_facts`). An
        allreduce whose output is its input works in the tensor itself (no copy; if the
        collective fails, the tensor holds partial sums, as with NCCL or gloo). The
        collective's buffers are accounted in IPU memory while it runs. Bytes are counted
        on the routes of ``faults``, the link faults the schedule was planned with.
        """
        return self.runner.run(schedule, collective, ranks, inputs, output, op, deadline_seconds,
                               sim_seconds, self.topology_for(faults or {}))

    def execute(self, task: Callable[..., T], *args: Any) -> T:
        """Run ``task(store, *args)`` on this card's tensors: how training (or any other
        work) is given to a card without the card knowing it. A wall-clock trace sees it
        as compute."""
        started = self.wall.begin()
        try:
            return task(self.store, *args)
        finally:
            self.wall.end(COMPUTE, started, task=getattr(task, "__name__", "task"))
