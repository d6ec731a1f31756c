"""A trace replayed as a discrete-event simulation in simulated seconds.

Every rank runs its nodes in dependency order (``data_deps`` and ``ctrl_deps``): a node
is ready when the last node it depends on ends. Then

- a COMP node waits for its rank's IPU: one compute node runs at a time, in the order they
  became ready (communication and memory nodes run beside it);
- a COMM_COLL node waits for every rank of its process group to reach the same collective
  (the n-th each issues on that group), and all of them run it together; collectives that
  start at one time are priced together where GCL would run them as replica groups
  (:mod:`.replay_collectives`);
- a COMM_SEND starts at once and ends when its bytes arrive; its paired COMM_RECV ends
  when the bytes have arrived and it is ready, whichever is later;
- MEM_LOAD, MEM_STORE and METADATA nodes run at once.

The costs are :class:`~.replay_pricing.ReplayPricer`'s. A node that never runs (ranks
waiting for each other) ends the replay with one error naming the rank and node.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from cluster.errors import UserError, quoted
from cluster.training.chakra.et_nodes import (
    ChakraNode,
    ChakraRank,
    ChakraTrace,
    Collective,
    Memory,
    NodeKind,
    PeerToPeer,
)
from cluster.training.chakra.replay_collectives import Gathered, price_together
from cluster.training.chakra.replay_layout import ReplayLayout
from cluster.training.chakra.replay_pairs import Endpoint, pair_sends
from cluster.training.chakra.replay_pricing import Priced, ReplayPricer

NOT_RUN = -1.0  # a node's end before it is scheduled


@dataclass(frozen=True)
class Program:
    """One rank's nodes as the engine walks them: each node's count of distinct
    dependencies and the nodes that depend on it, by index in the file."""

    rank: ChakraRank
    dep_counts: tuple[int, ...]
    dependents: tuple[tuple[int, ...], ...]


def program(rank: ChakraRank) -> Program:
    """``rank``'s nodes with their dependencies as indices (the reader checked them)."""
    index = {node.id: i for i, node in enumerate(rank.nodes)}
    dependents: list[list[int]] = [[] for _ in rank.nodes]
    counts = []
    for i, node in enumerate(rank.nodes):
        deps = {index[d] for d in (*node.data_deps, *node.ctrl_deps)}
        counts.append(len(deps))
        for dep in deps:
            dependents[dep].append(i)
    return Program(rank, tuple(counts), tuple(tuple(d) for d in dependents))


@dataclass
class RankRun:
    """When each node of one replayed rank became ready, started and ended (simulated
    seconds), and what it waited for last (``cause``: the node whose end let it start)."""

    rank: int
    program: Program
    ready: list[float]
    start: list[float]
    end: list[float]
    cause: list[Endpoint | None]

    @property
    def nodes(self) -> tuple[ChakraNode, ...]:
        """The nodes this rank replays."""
        return self.program.rank.nodes


@dataclass(frozen=True)
class CollectiveRun:
    """One collective as it ran: its group, its n-th call there, what it is, its ranks,
    when it started and its seconds, and GCL's algorithm."""

    pg_name: str
    call: int
    detail: Collective
    ranks: tuple[int, ...]
    start: float
    seconds: float
    algorithm: str


@dataclass
class ReplayRecord:
    """Everything the replay did: each rank's node times, each collective, the priced
    communications with how many times each ran, and the COMP nodes without a time."""

    layout: ReplayLayout
    runs: list[RankRun]
    collectives: list[CollectiveRun] = field(default_factory=list)
    link_uses: dict[int, tuple[Priced, int]] = field(default_factory=dict)
    no_duration: int = 0

    def use(self, priced: Priced) -> None:
        """Count one more run of ``priced`` (for its link bytes)."""
        _, count = self.link_uses.get(id(priced), (priced, 0))
        self.link_uses[id(priced)] = (priced, count + 1)


class ReplayEngine:
    """The simulation of one trace on one layout (see the module docstring)."""

    def __init__(self, trace: ChakraTrace, layout: ReplayLayout, pricer: ReplayPricer) -> None:
        self.layout = layout
        self.pricer = pricer
        self.pairs = pair_sends(trace.ranks)
        programs = [program(rank) for rank in trace.ranks]
        self.runs = [_rank_run(r, programs[r % layout.source_ranks]) for r in range(layout.ranks)]
        self.record = ReplayRecord(layout, self.runs)
        self.waiting = [list(run.program.dep_counts) for run in self.runs]
        self.queue: list[deque[int]] = [deque() for _ in self.runs]
        self.busy = [False] * layout.ranks
        self.last_compute: list[int | None] = [None] * layout.ranks
        self.issued: list[dict[str, int]] = [{} for _ in self.runs]
        self.gathering: dict[tuple[str, int], list[Endpoint]] = {}
        self.arrivals: dict[Endpoint, tuple[float, float, Endpoint]] = {}
        self.posted: dict[Endpoint, float] = {}
        self.pending: list[Gathered] = []  # collectives ready to start at pending_time
        self.pending_time = 0.0
        self.events: list[tuple[float, int, int, int]] = []
        self.sequence = 0

    def run(self) -> ReplayRecord:
        """Replay every rank to its end, or raise the deadlock's error."""
        for rank, run in enumerate(self.runs):
            for index, count in enumerate(run.program.dep_counts):
                if count == 0:
                    run.ready[index] = 0.0
                    self._ready(rank, index, 0.0)
        while self.events or self.pending:
            if self.pending and (not self.events or self.events[0][0] > self.pending_time):
                self._start_pending()  # every event of their time is done
                continue
            time, _, rank, index = heapq.heappop(self.events)
            self._complete(rank, index, time)
        for run in self.runs:
            if NOT_RUN in run.end:
                raise UserError(self._deadlock())
        return self.record

    def _finish(self, rank: int, index: int, start: float, end: float) -> None:
        """Node ``index`` of ``rank`` runs from ``start`` to ``end``."""
        run = self.runs[rank]
        run.start[index] = start
        run.end[index] = end
        self.sequence += 1
        heapq.heappush(self.events, (end, self.sequence, rank, index))

    def _complete(self, rank: int, index: int, time: float) -> None:
        """Node ``index`` of ``rank`` ended at ``time``: free the IPU if it computed, and
        make ready what waited for it."""
        run = self.runs[rank]
        if run.nodes[index].kind is NodeKind.COMP:
            self.busy[rank] = False
            self.last_compute[rank] = index
            if self.queue[rank]:
                self._start_compute(rank, time)
        waiting = self.waiting[rank]
        for later in run.program.dependents[index]:
            waiting[later] -= 1
            if waiting[later] == 0:
                run.ready[later] = time
                run.cause[later] = (rank, index)
                self._ready(rank, later, time)

    def _ready(self, rank: int, index: int, time: float) -> None:
        node = self.runs[rank].nodes[index]
        kind = node.kind
        if kind is NodeKind.COMP:
            self.queue[rank].append(index)
            if not self.busy[rank]:
                self._start_compute(rank, time)
        elif kind is NodeKind.COMM_COLL:
            self._arrive(rank, index, time)
        elif kind is NodeKind.COMM_SEND:
            self._send(rank, index, time)
        elif kind is NodeKind.COMM_RECV:
            self._receive(rank, index, time)
        elif isinstance(node.detail, Memory):
            seconds = self.pricer.memory_seconds(rank, node.detail.size_bytes)
            self._finish(rank, index, time, time + seconds)
        else:
            self._finish(rank, index, time, time)

    def _start_compute(self, rank: int, time: float) -> None:
        """Run the next COMP node waiting for ``rank``'s IPU."""
        run = self.runs[rank]
        index = self.queue[rank].popleft()
        self.busy[rank] = True
        seconds, timed = self.pricer.compute_seconds(run.nodes[index], rank)
        if not timed:
            self.record.no_duration += 1
        previous = self.last_compute[rank]
        if run.ready[index] < time and previous is not None:
            run.cause[index] = (rank, previous)
        self._finish(rank, index, time, time + seconds)

    def _arrive(self, rank: int, index: int, time: float) -> None:
        """``rank`` reached a collective; when the whole group has, it runs."""
        detail = self.runs[rank].nodes[index].detail
        assert isinstance(detail, Collective)
        calls = self.issued[rank]
        call = calls.get(detail.pg_name, 0)
        calls[detail.pg_name] = call + 1
        arrived = self.gathering.setdefault((detail.pg_name, call), [])
        arrived.append((rank, index))
        members = self.layout.groups[detail.pg_name]
        if len(arrived) < len(members):
            return
        del self.gathering[(detail.pg_name, call)]
        self.pending.append(Gathered(detail, call, members, tuple(arrived), rank,
                                     self.runs[rank].nodes[index]))
        self.pending_time = time

    def _start_pending(self) -> None:
        """Start the collectives whose groups all arrived at ``pending_time``, priced
        together where they can be (:func:`~.replay_collectives.price_together`)."""
        batch, self.pending, time = self.pending, [], self.pending_time
        used: dict[int, Priced] = {}
        for gathered, priced in price_together(self.pricer, batch):
            last = gathered.arrived[-1]
            cause = self.runs[last[0]].cause[last[1]]
            for other, other_index in gathered.arrived:
                _check_same(self.runs[other], other_index, self.runs[last[0]], last[1],
                            gathered.call)
                self.runs[other].cause[other_index] = cause
                self._finish(other, other_index, time, time + priced.seconds)
            self.record.collectives.append(CollectiveRun(
                gathered.detail.pg_name, gathered.call, gathered.detail, gathered.members,
                time, priced.seconds, priced.algorithm))
            used[id(priced)] = priced
        for priced in used.values():
            self.record.use(priced)

    def _peer(self, rank: int, index: int) -> Endpoint:
        """The replayed rank and node paired with node ``index`` of ``rank`` (in the same
        replica of the trace)."""
        source = self.layout.source_ranks
        peer_rank, peer_index = self.pairs[(rank % source, index)]
        return peer_rank + rank - rank % source, peer_index

    def _send(self, rank: int, index: int, time: float) -> None:
        detail = self.runs[rank].nodes[index].detail
        assert isinstance(detail, PeerToPeer)
        receiver = self._peer(rank, index)
        priced = self.pricer.transfer(rank, receiver[0], detail.size_bytes)
        self.record.use(priced)
        arrival = time + priced.seconds
        self._finish(rank, index, time, arrival)
        if receiver in self.posted:
            self._deliver(receiver, self.posted.pop(receiver), time, arrival, (rank, index))
        else:
            self.arrivals[receiver] = (time, arrival, (rank, index))

    def _receive(self, rank: int, index: int, time: float) -> None:
        if (rank, index) in self.arrivals:
            sent, arrival, sender = self.arrivals.pop((rank, index))
            self._deliver((rank, index), time, sent, arrival, sender)
        else:
            self.posted[(rank, index)] = time

    def _deliver(self, receiver: Endpoint, ready: float, sent: float, arrival: float,
                 sender: Endpoint) -> None:
        """A receive ready at ``ready`` gets bytes sent at ``sent`` that arrive at
        ``arrival``."""
        rank, index = receiver
        if arrival > ready:
            self.runs[rank].cause[index] = sender
        self._finish(rank, index, max(ready, sent), max(ready, arrival))

    def _deadlock(self) -> str:
        """The error for nodes left that can never start, naming the first stuck node."""
        left = sum(run.end.count(NOT_RUN) for run in self.runs)
        for (pg_name, call), arrived in sorted(self.gathering.items()):
            rank, index = min(arrived)
            there = {r for r, _ in arrived}
            missing = [r for r in self.layout.groups[pg_name] if r not in there]
            verb = "reach" if len(missing) > 1 else "reaches"
            return _stuck(self.runs[rank], index, left,
                          f"collective {call} of {_group(pg_name)} waits for "
                          f"{_ranks(missing)}, which never {verb} it")
        for (rank, index) in sorted(self.posted):
            sender = self.runs[rank].nodes[index].detail
            src = sender.src if isinstance(sender, PeerToPeer) else None
            return _stuck(self.runs[rank], index, left, f"a receive waits for rank {src}'s "
                          "send, which never starts")
        run = next(run for run in self.runs if NOT_RUN in run.end)
        return _stuck(run, run.end.index(NOT_RUN), left, "it waits for nodes that never end")


def _rank_run(rank: int, prog: Program) -> RankRun:
    count = len(prog.rank.nodes)
    return RankRun(rank, prog, [NOT_RUN] * count, [NOT_RUN] * count, [NOT_RUN] * count,
                   [None] * count)


def _check_same(one: RankRun, one_index: int, other: RankRun, other_index: int,
                call: int) -> None:
    """Refuse ranks that reach the n-th collective of a group as different collectives
    (the order they issue them in differs from their files' order)."""
    a, b = one.nodes[one_index].detail, other.nodes[other_index].detail
    assert isinstance(a, Collective) and isinstance(b, Collective)
    if (a.comm_type, a.size_bytes) != (b.comm_type, b.size_bytes):
        raise UserError(f"cannot replay: ranks {one.rank} and {other.rank} issue collective "
                        f"{call} of {_group(a.pg_name)} as different collectives ({a.comm_type} "
                        f"of {a.size_bytes:,} bytes, {b.comm_type} of {b.size_bytes:,}): their "
                        "dependencies order the group's collectives differently")


def _stuck(run: RankRun, index: int, left: int, why: str) -> str:
    node = run.nodes[index]
    return (f"cannot replay: deadlock: rank {run.rank}'s node {node.id} ({quoted(node.name)}) "
            f"cannot finish: {why} ({left:,} nodes never ran)")


def _group(pg_name: str) -> str:
    return f"process group {quoted(pg_name)}" if pg_name else "the default process group"


def _ranks(ranks: Sequence[int]) -> str:
    shown = ", ".join(str(r) for r in ranks[:8])
    more = f" and {len(ranks) - 8} more" if len(ranks) > 8 else ""
    return f"rank{'s' if len(ranks) > 1 else ''} {shown}{more}"
