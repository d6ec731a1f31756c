"""A device's share of a collective: lay its IPUs' inputs out, run the schedule's phases
superstep by superstep (IPUs of this device exchange in memory, others over the links,
every wait with a deadline), and extract the results. Plain Python: testable without Ray.
"""

from __future__ import annotations

from concurrent.futures import TimeoutError as FutureTimeout

import numpy as np

from cluster.model.routing import router_of
from cluster.model.topology import Topology
from gcl.collectives import DTYPES, CollectiveName, ReduceOp
from gcl.local_executor import extract, input_elements, land, layout
from gcl.schedule import WORK, Phase, Schedule
from gcl.schedule import Transfers as Moves
from ipu_node.answers import RunAnswer
from ipu_node.counters import Counters
from ipu_node.device_errors import DeviceError, LinkTimeout
from ipu_node.links.channel import Transfer, encode_transfers
from ipu_node.links.endpoint import LinkEndpoint
from ipu_node.links.mailbox import Mailbox, TransferKey
from ipu_node.ownership import Ownership
from ipu_node.store import TensorStore
from ipu_node.wall_spans import RECEIVE, REDUCE, SEND, WallSpans

Buffers = dict[int, dict[str, np.ndarray]]  # per IPU, the collective's buffers by name


def fills_work(schedule: Schedule, tensor: np.ndarray) -> bool:
    """Whether an allreduce can work in ``tensor`` itself: one flat, contiguous array of
    the buffer's exact size and dtype (no padding to lay out)."""
    return (schedule.collective == CollectiveName.ALLREDUCE and tensor.ndim == 1
            and tensor.flags.c_contiguous and tensor.flags.writeable
            and tensor.size == schedule.buffer_elements == schedule.count
            and tensor.dtype == np.dtype(DTYPES[schedule.dtype]))


class ScheduleRunner:
    """Runs collectives on the IPUs ``ipus`` of one device."""

    def __init__(self, name: str, ipus: tuple[int, ...], topology: Topology,
                 store: TensorStore, counters: Counters, endpoint: LinkEndpoint,
                 mailbox: Mailbox, wall: WallSpans | None = None) -> None:
        self.name, self.ipus, self.topology = name, ipus, topology
        self.wall = wall or WallSpans()  # spans of a wall-clock trace (off unless asked)
        self.store, self.counters, self.endpoint, self.mailbox = (store, counters, endpoint,
                                                                  mailbox)
        self.index = -1
        self.ownership: Ownership | None = None
        self._counted = np.zeros(0, dtype=bool)  # links this device counts (hosts count theirs)
        self.running: set[str] = set()  # collectives in progress here

    def wire(self, index: int, ownership: Ownership) -> None:
        """This device's index among the POD's devices, and who owns what."""
        self.index, self.ownership = index, ownership
        hosts = np.array(sorted(ownership.hosts), dtype=np.int64)
        self._counted = ~np.isin(ownership.link_owner, hosts)

    def run(self, schedule: Schedule, collective: str, ranks: dict[int, tuple[int, int]],
            inputs: dict[int, np.ndarray] | str, output: str | None, op: ReduceOp,
            deadline_seconds: float, sim_seconds: float, topology: Topology) -> RunAnswer:
        """Run this device's share of ``schedule``; ``ranks[ipu] = (group, rank)``. See
        :meth:`ipu_node.card.Card.run`. Returns the results (None with ``output``), the
        bytes sent per directed link, counted on the routes of ``topology``, and its
        IPUs' memory and output tensor after it."""
        if self.ownership is None:
            raise DeviceError(f"device {self.name} has restarted and is not wired in yet: "
                              "run the collective again in a moment")
        tag = f"collective:{collective}"
        if isinstance(inputs, str):
            data = {ipu: self.store.get(ipu, inputs) for ipu in ranks}
            self._check_held(schedule, data)
        else:
            data = inputs
        buffers: Buffers = {}
        in_place: set[int] = set()
        sent = np.zeros_like(self.counters.link_bytes)
        self.running.add(collective)
        try:
            self._lay_out(schedule, ranks, data, output == inputs and output is not None,
                          tag, buffers, in_place)
            for index, phase in enumerate(schedule.phases):
                sent += self._run_phase(collective, index, phase, buffers, op, deadline_seconds,
                                        schedule.itemsize, topology)
            results = self._results(schedule, ranks, buffers, output, op)
        except Exception as error:  # late chunks of it are dropped from now on
            self.mailbox.abort(collective, f"{self.name} failed: {error}")
            buffers = {}  # pushes still in flight may read them until their deadline
            raise
        finally:
            self.running.discard(collective)
            for ipu in ranks:
                self.store.memory[ipu].release(tag)
            for ipu, laid in buffers.items():
                if ipu not in in_place:  # an in-place work buffer is the tensor: not spare
                    self.store.recycle(laid)
        self.counters.add_link_bytes(sent)
        for ipu in ranks:
            self.counters.add(ipu, "sim_seconds", sim_seconds)
        if output is not None:
            for ipu, result in results.items():
                self.store.put(ipu, output, result)
        return RunAnswer(None if output is not None else results, sent,
                         self.store.memory_stats(),
                         self.store.info(output) if output is not None else {})

    def _check_held(self, schedule: Schedule, data: dict[int, np.ndarray]) -> None:
        """Each input tensor held here has the schedule's element count and dtype (the POD
        planned it from what it knew of them), before anything is laid out or sent."""
        elements, dtype = input_elements(schedule), np.dtype(DTYPES[schedule.dtype])
        for ipu, array in data.items():
            if array.size != elements or array.dtype != dtype:
                raise DeviceError(
                    f"IPU {self.topology.ipu_name(ipu)} holds {array.size} elements of "
                    f"{array.dtype}, but the collective was planned for {elements} of {dtype} "
                    "(the tensor changed since the POD last heard of it): run it again")

    def _lay_out(self, schedule: Schedule, ranks: dict[int, tuple[int, int]],
                 data: dict[int, np.ndarray], same_tensor: bool, tag: str,
                 buffers: Buffers, in_place: set[int]) -> None:
        """Each IPU's buffers (in ``buffers``), accounted in its memory. An allreduce whose
        output is its input works in the tensor itself (``in_place``: no copy; if the
        collective fails, the tensor holds partial sums, as with NCCL or gloo)."""
        for ipu, (group, rank) in ranks.items():
            if (same_tensor and fills_work(schedule, data[ipu])
                    and not any(np.may_share_memory(data[ipu], buffers[other][WORK])
                                for other in in_place)):
                laid = {WORK: data[ipu]}
                in_place.add(ipu)
            else:
                laid = layout(schedule, group, rank, data[ipu], self.store.empty)
            self.store.memory[ipu].allocate(tag, 0 if ipu in in_place else
                                            sum(b.nbytes for b in laid.values()))
            buffers[ipu] = laid

    def _results(self, schedule: Schedule, ranks: dict[int, tuple[int, int]],
                 buffers: Buffers, output: str | None, op: ReduceOp) -> dict[int, np.ndarray]:
        results = {}
        for ipu, (g, r) in ranks.items():
            into = self.store.find(ipu, output) if output else None
            work = buffers[ipu][WORK]
            if (into is not None
                    and schedule.collective in (CollectiveName.ALLREDUCE, CollectiveName.BROADCAST)
                    and op != ReduceOp.MEAN and len(buffers[ipu]) == 1
                    and work.size == schedule.count and into.shape == work.shape
                    and into.dtype == work.dtype):
                # the result is the whole work buffer: it becomes the output tensor and
                # the old output array goes back to the pool (no copy)
                results[ipu], buffers[ipu] = work, {WORK: into}
            else:
                writable = into if into is not None and into.flags.writeable else None
                results[ipu] = extract(schedule, g, r, buffers[ipu], op, writable)
        return results

    def _run_phase(self, collective: str, index: int, phase: Phase, buffers: Buffers,
                   op: ReduceOp, deadline_seconds: float, itemsize: int,
                   topology: Topology) -> np.ndarray:
        """Run one phase's supersteps; return the bytes sent per directed link."""
        mine = np.array(self.ipus)
        outgoing = np.flatnonzero(np.isin(phase.src, mine))
        incoming = np.flatnonzero(np.isin(phase.dst, mine))
        for step in range(phase.steps):
            started = self.wall.begin()
            moves = phase.transfers(step)
            local, remote = self._outgoing(moves, outgoing, buffers, itemsize)
            encoded = {peer: list(encode_transfers(collective, index, step, transfers))
                       for peer, transfers in remote.items()}  # views, no copies
            pushes = [self.endpoint.push(peer, messages, deadline_seconds)
                      for peer, messages in encoded.items()]
            if started:
                self._sent_span(started, collective, index, step, remote)
            self._incoming(TransferKey(collective, index, step, -1), moves, incoming,
                           buffers, local, op, deadline_seconds, itemsize)
            started = self.wall.begin()
            self._wait_pushes(encoded, pushes, step, index, deadline_seconds)
            if started:
                self.wall.end(SEND, started, collective=collective, phase=index, step=step,
                              waiting_for_peers=len(pushes))
        for ipu in buffers:
            self.counters.add(ipu, "supersteps", phase.steps)
        return self._link_bytes(phase, outgoing, itemsize, topology)

    def _sent_span(self, started: int, collective: str, index: int, step: int,
                   remote: dict[int, list[Transfer]]) -> None:
        """The span of a superstep's sending: its payloads taken and handed to the links."""
        self.wall.end(SEND, started, collective=collective, phase=index, step=step,
                      bytes=sum(int(t.payload.nbytes) for ts in remote.values() for t in ts),
                      peers=len(remote))

    def _wait_pushes(self, encoded: dict[int, list], pushes: list, step: int, index: int,
                     deadline_seconds: float) -> None:
        """Wait until each peer has taken this superstep's chunks."""
        for peer, push in zip(encoded, pushes):
            try:
                push.result(timeout=deadline_seconds)
            except FutureTimeout:
                raise LinkTimeout(
                    f"the link to {self.endpoint.name_of(peer)} did not take step {step} "
                    f"of phase {index} within {deadline_seconds:g} s") from None

    def _outgoing(self, moves: Moves, outgoing: np.ndarray, buffers: Buffers,
                  itemsize: int) -> tuple[dict[int, np.ndarray], dict[int, list[Transfer]]]:
        """This superstep's payloads: for IPUs of this device (by transfer), and for
        other devices (by next device on the way)."""
        assert self.ownership is not None
        local: dict[int, np.ndarray] = {}
        remote: dict[int, list[Transfer]] = {}
        sent: dict[int, float] = {}
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
            sent[src] = sent.get(src, 0) + count * itemsize
        self.counters.add_each("bytes_out", sent)  # one lock a superstep, not a transfer
        return local, remote

    def _incoming(self, step_key: TransferKey, moves: Moves, incoming: np.ndarray,
                  buffers: Buffers, local: dict[int, np.ndarray], op: ReduceOp,
                  deadline_seconds: float, itemsize: int) -> None:
        """Land this superstep's transfers into this device's IPUs as they arrive
        (``step_key``: the superstep's key, its transfer left -1)."""
        dtype = next(iter(buffers.values()))[WORK].dtype if buffers else None
        landed: dict[int, float] = {}
        try:
            self._land_all(step_key, moves, incoming, buffers, local, op, deadline_seconds,
                           itemsize, dtype, landed)
        finally:  # what landed counts, even if a later transfer fails
            self.counters.add_each("bytes_in", landed)

    def _land_all(self, step_key: TransferKey, moves: Moves, incoming: np.ndarray,
                  buffers: Buffers, local: dict[int, np.ndarray], op: ReduceOp,
                  deadline_seconds: float,
                  itemsize: int, dtype: np.dtype | None, landed: dict[int, float]) -> None:
        """Land each incoming transfer, chunk by chunk; ``landed`` counts bytes per IPU."""
        for t in incoming.tolist():
            src, dst = int(moves.src[t]), int(moves.dst[t])
            target, offset = buffers[dst][moves.dst_buffer], int(moves.dst_offset[t])
            here = t in local
            if here:
                pieces = iter([(0, local.pop(t))])
            else:  # chunks land as they arrive, in place: no reassembly
                sender = f"IPU {self.topology.ipu_name(src)} ({self._device_of(src)})"
                pieces = ((at // itemsize, np.frombuffer(data, dtype=dtype)) for at, data in
                          self.mailbox.chunks(step_key._replace(transfer=t), deadline_seconds,
                                              sender))
            waited = self.wall.begin()  # receive: waiting for a chunk (and a copy's landing)
            for at, piece in pieces:
                if waited and moves.reduce:
                    waited = self.wall.end(RECEIVE, waited, src_ipu=src, dst_ipu=dst,
                                           bytes=piece.nbytes, local=here)
                land(target, offset + at, piece, moves.reduce, op)
                landed[dst] = landed.get(dst, 0) + piece.nbytes
                if waited:
                    waited = self.wall.end(REDUCE if moves.reduce else RECEIVE, waited,
                                           src_ipu=src, dst_ipu=dst, bytes=piece.nbytes)

    def _device_of(self, ipu: int) -> str:
        assert self.ownership is not None
        return self.endpoint.name_of(int(self.ownership.owner_of_ipu[ipu]))

    def _link_bytes(self, phase: Phase, outgoing: np.ndarray, itemsize: int,
                    topology: Topology) -> np.ndarray:
        """Bytes this phase sent per directed link that this device counts. Host-owned
        links are counted by the host relaying the data; data that goes straight to its
        device (no relay on the way) counts them here."""
        assert self.ownership is not None
        if not len(outgoing):
            return np.zeros_like(self.counters.link_bytes)
        routes = router_of(topology).route(phase.src[outgoing], phase.dst[outgoing])
        sent = (phase.count[outgoing] * itemsize * phase.steps)[routes.pair_flow]
        dst = phase.dst[outgoing]
        relayed = np.array([self.ownership.next_device(self.index, int(d))
                            != self.ownership.owner_of_ipu[d] for d in dst.tolist()])
        counted = self._counted[routes.pair_link] | ~relayed[routes.pair_flow]
        return np.bincount(routes.pair_link[counted], weights=sent[counted],
                           minlength=len(self.counters.link_bytes)).astype(np.float64)
