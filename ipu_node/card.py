"""One emulated card (C2, 2 IPUs) or machine (IPU-M2000, 4 IPUs): the body of a Ray actor.

Per IPU it keeps In-Processor-Memory accounting, named tensors (NumPy arrays) and counters
(bytes in and out, supersteps, simulated clock); per directed link of the topology, the
bytes its IPUs sent over it. It serves the gRPC ``Link`` service its peers push chunks to,
and runs its share of a schedule: IPUs of this device exchange in memory, others over
the links, every wait with a deadline.

The actor is threaded (the launcher gives it a few threads): collectives of disjoint
partitions can run on it at once. The control methods (info, stats, connect, abort, link
faults) have threads of their own (the ``control`` concurrency group), so they are answered
even while collectives wait, and an ``abort`` reaches a collective that is waiting.
Ray restarts it when it dies; it comes back empty, on a new port, and the launcher wires
it in again (:meth:`connect`).
"""

from __future__ import annotations

import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

import numpy as np
import ray

from cluster.model.faulted import with_faults
from cluster.model.link_faults import LinkFault
from cluster.model.topology import Topology
from cluster.training.replica import ReplicaHost
from gcl.collectives import DTYPES
from gcl.local_executor import extract, land, layout
from gcl.schedule import WORK, Schedule
from ipu_node.errors import DeviceError, LinkTimeout
from ipu_node.links.channel import LinkServer, PeerLinks, Transfer, encode_transfers
from ipu_node.links.mailbox import Mailbox, TransferKey
from ipu_node.memory import IpuMemory
from ipu_node.ownership import Ownership

CONTROL = "control"  # the concurrency group of the control methods
CONTROL_THREADS = 4


@dataclass(frozen=True)
class DeviceSpec:
    """What one actor emulates: a unit of the topology (card or machine) and its IPUs."""

    name: str
    kind: str
    ipus: tuple[int, ...]
    server: str
    streaming_bytes_per_ipu: int = 0


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


def _fills_work(schedule: Schedule, tensor: np.ndarray) -> bool:
    """Whether an allreduce can work in ``tensor`` itself: one flat, contiguous array of
    the buffer's exact size and dtype (no padding to lay out)."""
    return (schedule.collective == "allreduce" and tensor.ndim == 1
            and tensor.flags.c_contiguous and tensor.flags.writeable
            and tensor.size == schedule.buffer_elements == schedule.count
            and tensor.dtype == np.dtype(DTYPES[schedule.dtype]))


class Device(ReplicaHost):
    """The state and behaviour of one emulated card or machine (wrapped by ``ray.remote``)."""

    def __init__(self, spec: DeviceSpec, topology: Topology, host: str = "127.0.0.1") -> None:
        keep_freed_memory()
        self.spec, self.topology, self.base_topology = spec, topology, topology
        self._lock = threading.Lock()  # link_bytes, counters, peers: collectives run in threads
        self.memory = {ipu: IpuMemory(topology.ipu_name(ipu), int(topology.ipu_memory_bytes[ipu]),
                                      spec.streaming_bytes_per_ipu) for ipu in spec.ipus}
        self.tensors: dict[int, dict[str, np.ndarray]] = {ipu: {} for ipu in spec.ipus}
        self.counters = {ipu: {"bytes_out": 0, "bytes_in": 0, "supersteps": 0,
                               "sim_seconds": 0.0} for ipu in spec.ipus}
        self.link_bytes = np.zeros(2 * topology.link_count_physical)
        self.mailbox = Mailbox()
        self.server = LinkServer(spec.name, self.mailbox, host)
        self.address = self.server.start()
        self.index = -1
        self.ownership: Ownership | None = None
        self.peers = PeerLinks()
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix=f"{spec.name}-push")
        self.spare: dict[tuple[int, str], list[np.ndarray]] = {}  # buffers to reuse
        self.running: set[str] = set()  # collectives in progress here
        self.fault_version = -1  # of the link faults last heard (older news is ignored)
        self._faulted: dict[tuple, Topology] = {}  # per fault set, the topology to count on
        self._faulted_lock = threading.Lock()

    def _empty(self, elements: int, dtype) -> np.ndarray:
        """A collective buffer, reused from an earlier collective when one fits (fresh
        memory costs page faults on every first touch)."""
        try:
            return self.spare[(elements, np.dtype(dtype).name)].pop()
        except (KeyError, IndexError):  # none spare (another thread may have just taken it)
            return np.empty(elements, dtype)

    def _recycle(self, buffers: dict[str, np.ndarray]) -> None:
        for array in buffers.values():
            if not array.flags.writeable:  # a tensor that arrived read-only (from Ray)
                continue
            stack = self.spare.setdefault((array.size, array.dtype.name), [])
            if len(stack) < 4:
                stack.append(array)

    # -- control (own threads: answered even while collectives fill the others) ----------
    @ray.method(concurrency_group=CONTROL)
    def info(self) -> dict:
        try:
            import ray

            node = ray.get_runtime_context().get_node_id()
        except Exception:  # outside Ray (unit use)
            node = None
        return {"name": self.spec.name, "kind": self.spec.kind, "ipus": list(self.spec.ipus),
                "address": self.address, "link_address": self.server.link_address,
                "node_id": node, "pid": os.getpid()}

    @ray.method(concurrency_group=CONTROL)
    def connect(self, names: list[str], addresses: list[str], index: int,
                ownership: Ownership, faults: dict[int, LinkFault] | None = None,
                fault_version: int = 0) -> None:
        """Learn every device's name and link address, this device's index among them, and
        who owns what (which device each IPU's data goes to next, which links to count).
        Called again when a peer restarted on a new port: links to it are reopened."""
        self.peers.wire(names, addresses)
        with self._lock:
            self.index, self.ownership = index, ownership
            hosts = np.array(sorted(ownership.hosts), dtype=np.int64)
            self._counted = ~np.isin(ownership.link_owner, hosts)  # host-owned: hosts count
        self.set_link_faults(faults or {}, fault_version)

    @ray.method(concurrency_group=CONTROL)
    def set_link_faults(self, faults: dict[int, LinkFault], version: int = 0) -> None:
        """The POD's link faults (version ``version``; older versions are ignored). A
        collective counts its bytes on the routes of the faults it was planned with."""
        with self._lock:
            if version >= self.fault_version:
                self.fault_version = version
                self.topology = self._topology_for(faults)

    def _topology_for(self, faults: dict[int, LinkFault]) -> Topology:
        key = tuple(sorted(faults.items()))
        with self._faulted_lock:
            if key not in self._faulted:
                if len(self._faulted) >= 4:
                    self._faulted.pop(next(iter(self._faulted)))
                self._faulted[key] = with_faults(self.base_topology, faults)
            return self._faulted[key]

    @ray.method(concurrency_group=CONTROL)
    def abort(self, collective: str, reason: str) -> None:
        """End ``collective`` here now (a peer died): its waits raise ``reason``."""
        self.mailbox.abort(collective, reason)

    def _device_of(self, ipu: int) -> str:
        return self.peers.names[int(self.ownership.owner_of_ipu[ipu])]

    def put(self, ipu: int, name: str, array: np.ndarray) -> None:
        """Store a named tensor on one of this device's IPUs (memory is accounted)."""
        self.memory[ipu].allocate(name, array.nbytes)
        self.tensors[ipu][name] = array

    def get(self, ipu: int, name: str) -> np.ndarray:
        if name not in self.tensors[ipu]:
            raise DeviceError(f"IPU {self.topology.ipu_name(ipu)} holds no tensor {name!r}")
        return self.tensors[ipu][name]

    def free(self, ipu: int, name: str) -> None:
        self.tensors[ipu].pop(name, None)
        self.memory[ipu].release(name)

    @ray.method(concurrency_group=CONTROL)
    def stats(self) -> dict:
        with self._lock:
            counters = {ipu: dict(c) for ipu, c in self.counters.items()}
            link_bytes = self.link_bytes.copy()
        return {"name": self.spec.name, "address": self.address,
                "link_address": self.server.link_address, "pid": os.getpid(),
                "counters": counters, "collectives_running": len(self.running),
                "memory": {ipu: {"used_bytes": m.used_bytes, "capacity_bytes": m.capacity_bytes,
                                 "free_bytes": m.free_bytes} for ipu, m in self.memory.items()},
                "link_bytes": link_bytes}

    def shutdown(self) -> None:
        self.peers.close()
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.server.stop()

    # -- a collective --------------------------------------------------------------------
    @ray.method(concurrency_group=CONTROL)
    def tensor_info(self, name: str) -> dict[int, tuple[tuple[int, ...], str]]:
        """Shape and dtype of tensor ``name`` on each of this device's IPUs that holds it."""
        return {ipu: (held[name].shape, held[name].dtype.name)
                for ipu, held in self.tensors.items() if name in held}

    def run(self, schedule: Schedule, collective: str, ranks: dict[int, tuple[int, int]],
            inputs: dict[int, np.ndarray] | str, output: str | None, op: str,
            deadline_s: float, sim_seconds: float,
            faults: dict[int, LinkFault] | None = None) -> tuple[dict[int, np.ndarray] | None, np.ndarray]:
        """Run this device's share of ``schedule``; ``ranks[ipu] = (group, rank)``.

        ``inputs`` are arrays per IPU, or the name of a tensor each IPU holds. With
        ``output`` the results stay on the IPUs as that tensor and nothing is returned but
        the bytes sent per directed link; otherwise the results are returned too. An
        allreduce whose output is its input works in the tensor itself (no copy; if the
        collective fails, the tensor holds partial sums, as with NCCL or gloo). The
        collective's buffers are accounted in IPU memory while it runs. Bytes are counted
        on the routes of ``faults``, the link faults the schedule was planned with.
        """
        if self.ownership is None:
            raise DeviceError(f"device {self.spec.name} has restarted and is not wired in yet: "
                              "run the collective again in a moment")
        topology = self._topology_for(faults or {})
        tag = f"collective:{collective}"
        itemsize = np.dtype(DTYPES[schedule.dtype]).itemsize
        sent = np.zeros_like(self.link_bytes)
        data = {ipu: self.get(ipu, inputs) for ipu in ranks} if isinstance(inputs, str) else inputs
        buffers, in_place = {}, set()
        self.running.add(collective)
        try:
            for ipu, (group, rank) in ranks.items():
                if (output is not None and output == inputs and _fills_work(schedule, data[ipu])
                        and not any(np.may_share_memory(data[ipu], buffers[other][WORK])
                                    for other in in_place)):
                    laid = {WORK: data[ipu]}  # in place: the tensor is the work buffer
                    in_place.add(ipu)
                else:
                    laid = layout(schedule, group, rank, data[ipu], self._empty)
                self.memory[ipu].allocate(tag, 0 if ipu in in_place else
                                          sum(b.nbytes for b in laid.values()))
                buffers[ipu] = laid
            for index, phase in enumerate(schedule.phases):
                sent += self._run_phase(collective, index, phase, buffers, op, deadline_s,
                                        itemsize, topology)
            results = {}
            for ipu, (g, r) in ranks.items():
                into = self.tensors[ipu].get(output) if output else None
                work = buffers[ipu][WORK]
                if (into is not None and schedule.collective in ("allreduce", "broadcast")
                        and op != "mean" and len(buffers[ipu]) == 1
                        and work.size == schedule.count and into.shape == work.shape
                        and into.dtype == work.dtype):
                    # the result is the whole work buffer: it becomes the output tensor and
                    # the old output array goes back to the pool (no copy)
                    results[ipu], buffers[ipu] = work, {WORK: into}
                else:
                    writable = into if into is not None and into.flags.writeable else None
                    results[ipu] = extract(schedule, g, r, buffers[ipu], op, writable)
        except Exception as error:  # late chunks of it are dropped from now on
            self.mailbox.abort(collective, f"{self.spec.name} failed: {error}")
            # pushes still in flight may read the buffers until their deadline: not spare
            buffers = {}
            raise
        finally:
            self.running.discard(collective)
            for ipu in ranks:
                self.memory[ipu].release(tag)
            for ipu, laid in buffers.items():
                if ipu not in in_place:  # an in-place work buffer is the tensor: not spare
                    self._recycle(laid)
        with self._lock:
            self.link_bytes += sent
            for ipu in ranks:
                self.counters[ipu]["sim_seconds"] += sim_seconds
        if output is not None:
            for ipu, result in results.items():
                self.put(ipu, output, result)
            return None, sent
        return results, sent

    def _run_phase(self, collective, index, phase, buffers, op, deadline_s,
                   itemsize, topology: Topology) -> np.ndarray:
        """Run one phase's supersteps; return the bytes sent per directed link."""
        mine = np.array(self.spec.ipus)
        outgoing = np.flatnonzero(np.isin(phase.src, mine))
        incoming = np.flatnonzero(np.isin(phase.dst, mine))
        dtype = next(iter(buffers.values()))["work"].dtype if buffers else None
        for step in range(phase.steps):
            moves = phase.transfers(step)
            local, remote = {}, {}
            written_end = moves.dst_offset + moves.count
            for t in outgoing.tolist():
                src, dst = int(moves.src[t]), int(moves.dst[t])
                start, count = int(moves.src_offset[t]), int(moves.count[t])
                payload = buffers[src][moves.src_buffer][start:start + count]
                # the superstep's snapshot: a copy, unless nothing lands on that range of the
                # source during this superstep (then the range itself is the snapshot, and
                # links send it from there: the push ends before the superstep does)
                overwritten = src == dst or (
                    moves.src_buffer == moves.dst_buffer and bool(np.any(
                        (moves.dst == src) & (moves.dst_offset < start + count)
                        & (written_end > start))))
                if overwritten:
                    payload = payload.copy()
                if dst in buffers:
                    local[t] = payload
                else:
                    hop = self.ownership.next_device(self.index, dst)
                    remote.setdefault(hop, []).append(Transfer(t, src, dst, payload))
                self.counters[src]["bytes_out"] += count * itemsize
            encoded = {peer: list(encode_transfers(collective, index, step, transfers))
                       for peer, transfers in remote.items()}  # views, no copies
            pushes = [self.pool.submit(self.peers.to(peer).push, messages, deadline_s)
                      for peer, messages in encoded.items()]
            for t in incoming.tolist():
                src, dst = int(moves.src[t]), int(moves.dst[t])
                target, offset = buffers[dst][moves.dst_buffer], int(moves.dst_offset[t])
                if t in local:
                    pieces = [(0, local.pop(t))]
                else:  # chunks land as they arrive, in place: no reassembly
                    sender = f"IPU {self.topology.ipu_name(src)} ({self._device_of(src)})"
                    pieces = ((at // itemsize, np.frombuffer(data, dtype=dtype)) for at, data in
                              self.mailbox.chunks(TransferKey(collective, index, step, t),
                                                  deadline_s, sender))
                for at, piece in pieces:
                    land(target, offset + at, piece, moves.reduce, op)
                    self.counters[dst]["bytes_in"] += piece.nbytes
            for peer, push in zip(encoded, pushes):
                try:
                    push.result(timeout=deadline_s)
                except FutureTimeout:
                    raise LinkTimeout(f"the link to {self.peers.names[peer]} did not take step {step} "
                                      f"of phase {index} within {deadline_s:g} s") from None
        for ipu in buffers:
            self.counters[ipu]["supersteps"] += phase.steps
        if not len(outgoing):
            return np.zeros_like(self.link_bytes)
        routes = topology.router.route(phase.src[outgoing], phase.dst[outgoing])
        sent = (phase.count[outgoing] * itemsize * phase.steps)[routes.pair_flow]
        # Host-owned links are counted by the host relaying the data; data that goes
        # straight to its device (no relay on the way) counts them here.
        dst = phase.dst[outgoing]
        relayed = np.array([self.ownership.next_device(self.index, int(d))
                            != self.ownership.owner_of_ipu[d] for d in dst.tolist()])
        counted = self._counted[routes.pair_link] | ~relayed[routes.pair_flow]
        return np.bincount(routes.pair_link[counted], weights=sent[counted],
                           minlength=len(self.link_bytes)).astype(np.float64)
