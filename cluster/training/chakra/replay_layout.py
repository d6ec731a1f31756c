"""Where a replayed trace runs: rank ``r`` on IPU ``r`` of the topology, each rank's nodes
taken from a rank of the trace (itself, or ``r mod R`` when ``--ranks-to`` re-scales a
trace of ``R`` ranks), and each process group's ranks: the default group (``pg_name``
``""``) is every rank; a named group is the ranks whose files call collectives on it (a
Chakra trace names groups but does not list their members), replicated with the
data-parallel replicas when re-scaled."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cluster.errors import UserError
from cluster.model.topology import Topology
from cluster.model.units import plural
from cluster.training.chakra.et_nodes import ChakraTrace, Collective


@dataclass(frozen=True)
class ReplayLayout:
    """``ranks`` ranks replaying a trace of ``source_ranks`` ranks (rank ``r`` runs the
    nodes of ``r % source_ranks`` on IPU ``r``); ``groups``: each process group's ranks,
    ascending; ``assumed``: what was assumed, in words, for the output."""

    source_ranks: int
    ranks: int
    groups: Mapping[str, tuple[int, ...]]
    assumed: tuple[str, ...]

    @property
    def replicas(self) -> int:
        """How many copies of the trace's ranks run (``ranks / source_ranks``)."""
        return self.ranks // self.source_ranks


def trace_groups(trace: ChakraTrace) -> dict[str, tuple[int, ...]]:
    """Each process group the trace's collectives use and its ranks: every rank for the
    default group, the ranks that call collectives on it for a named one."""
    callers: dict[str, set[int]] = {}
    for rank in trace.ranks:
        for node in rank.nodes:
            if isinstance(node.detail, Collective):
                callers.setdefault(node.detail.pg_name, set()).add(rank.rank)
    everyone = tuple(range(len(trace.ranks)))
    return {name: everyone if name == "" else tuple(sorted(members))
            for name, members in sorted(callers.items())}


def replay_layout(trace: ChakraTrace, topology: Topology,
                  ranks_to: int | None = None) -> ReplayLayout:
    """The layout of ``trace`` on ``topology`` (re-scaled to ``ranks_to`` ranks if given),
    or a UserError saying why it does not fit."""
    source = len(trace.ranks)
    ranks = source if ranks_to is None else ranks_to
    if ranks_to is not None and (ranks_to < source or ranks_to % source):
        raise UserError(f"--ranks-to {ranks_to:,}: a trace of {plural(source, 'rank')} "
                        f"re-scales to a multiple of {source:,} ranks (replicas of it), "
                        f"e.g. {source * max(2, ranks_to // source):,}")
    if ranks > topology.ipu_count:
        raise UserError(f"the trace has {plural(ranks, 'rank')} (one IPU each) but "
                        f"{topology.name} has {plural(topology.ipu_count, 'IPU')}: replay it "
                        "on a bigger --topology")
    replicas = ranks // source
    groups = {name: tuple(sorted(m + k * source for k in range(replicas) for m in members))
              for name, members in trace_groups(trace).items()}
    assumed = [f"rank r runs on IPU r of {topology.name} (ranks 0-{ranks - 1})"]
    named = [name for name in groups if name]
    if named:
        assumed.append(f"process group members are the ranks that call collectives on it "
                       f"(named groups: {', '.join(repr(n) for n in named)}); the default "
                       "group is every rank")
    if replicas > 1:
        assumed.append(f"re-scaled from {plural(source, 'rank')} to {ranks:,}: rank r replays "
                       f"rank r mod {source}'s nodes ({replicas} data-parallel replicas); "
                       f"each process group is {replicas} times larger (its ranks in every "
                       "replica), collective sizes as traced; sends stay in their replica")
    return ReplayLayout(source, ranks, groups, tuple(assumed))
