"""From a request (collective, topology, element count, algorithm, replica group) to a
:class:`~gcl.schedule.Schedule`; ``auto`` builds every applicable algorithm and keeps the
one the cost model says is fastest."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from cluster.errors import ScheduleError
from cluster.model.link_faults import LinkDown
from cluster.model.topology import Topology
from cluster.setting_names import SETTING_NAMES
from gcl.algorithms import GroupContext, algorithm, for_collective
from gcl.collectives import Collective, CollectiveName, DType
from gcl.collectives import collective as lookup_collective
from gcl.groups import CommGroup
from gcl.phantom import Timing, lower_bound_seconds, simulate
from gcl.schedule import Phase, Schedule

AUTO = "auto"


_PRUNE_MARGIN = 1e-9  # relative: a bound above the best by less may be rounding

def replica_groups(topology: Topology, group: CommGroup,
                   ipus: np.ndarray | Sequence[int] | None = None) -> list[np.ndarray]:
    """The IPUs of each replica group (replica ``r`` runs on ``ipus[r]``)."""
    replicas = np.arange(topology.ipu_count) if ipus is None else np.asarray(ipus, np.int64)
    if len(np.unique(replicas)) != len(replicas):
        raise ScheduleError("each replica needs its own IPU: the IPU list has duplicates")
    if ((replicas < 0) | (replicas >= topology.ipu_count)).any():
        raise ScheduleError(f"IPU ids run from 0 to {topology.ipu_count - 1} on {topology.name}")
    return [replicas[ranks] for ranks in group.ranks(len(replicas))]


def plan(collective: CollectiveName | Collective, topology: Topology, count: int, *,
         dtype: DType = DType.FLOAT32, algorithm_name: str = AUTO, group: CommGroup = CommGroup(),
         ipus: np.ndarray | Sequence[int] | None = None, root: int = 0,
         groups: Sequence[np.ndarray] | None = None) -> Schedule:
    """Schedule ``collective`` on ``count`` elements per replica (per block for
    reduce-scatter, all-gather and all-to-all); ``groups``: the replica groups' IPUs when
    the caller has them (a :class:`gcl.bench_spec.PlacedBench`'s), else worked out from
    ``group`` and ``ipus``."""
    coll, groups = _request(collective, topology, count, group, ipus, root, groups)
    if algorithm_name != AUTO:  # no need to time it
        return _build(coll, topology, count, dtype, algorithm_name, groups, root)
    return _best(coll, topology, count, dtype, groups, root, None)[0]


def plan_timed(collective: CollectiveName | Collective, topology: Topology, count: int, *,
               dtype: DType = DType.FLOAT32, algorithm_name: str = AUTO,
               group: CommGroup = CommGroup(),
               ipus: np.ndarray | Sequence[int] | None = None, root: int = 0,
               on_phase: Callable[[int, int], None] | None = None,
               groups: Sequence[np.ndarray] | None = None,
               ) -> tuple[Schedule, Timing]:
    """Like :func:`plan`, with the schedule's simulated timing (``auto`` has it anyway);
    ``on_phase(done, total)`` hears of progress through the phases."""
    coll, groups = _request(collective, topology, count, group, ipus, root, groups)
    if algorithm_name != AUTO:
        schedule = _build(coll, topology, count, dtype, algorithm_name, groups, root)
        return schedule, simulate(schedule, topology, on_phase)
    return _best(coll, topology, count, dtype, groups, root, on_phase)


def _request(collective: CollectiveName | Collective, topology: Topology, count: int,
             group: CommGroup, ipus: np.ndarray | Sequence[int] | None, root: int,
             given: Sequence[np.ndarray] | None) -> tuple[Collective, list[np.ndarray]]:
    """The collective and its replica groups (``given``, else worked out), or a
    ScheduleError saying what is wrong."""
    coll = lookup_collective(collective) if isinstance(collective, str) else collective
    if count < 1:
        raise ScheduleError(f"a collective needs at least one element per replica, not {count}")
    groups = replica_groups(topology, group, ipus) if given is None else list(given)
    if not 0 <= root < len(groups[0]):
        raise ScheduleError(f"root {root} is not a rank of a group of {len(groups[0])}")
    return coll, groups


def _best(coll: Collective, topology: Topology, count: int, dtype: DType,
          groups: list[np.ndarray], root: int,
          on_phase: Callable[[int, int], None] | None) -> tuple[Schedule, Timing]:
    """``auto``: every algorithm that can run the request, timed; the fastest wins."""
    best: tuple[Schedule, Timing] | None = None
    reasons: dict[str, list[str]] = {}
    cut: list[LinkDown] = []
    for candidate in for_collective(coll):
        try:
            schedule = _build(coll, topology, count, dtype, candidate.name, groups, root)
        except ScheduleError as error:
            reasons.setdefault(str(error), []).append(candidate.name)
            continue
        if best is not None and _cannot_win(schedule, topology, best[1].sim_seconds):
            continue  # no need to route and cost it
        try:
            timing = simulate(schedule, topology, on_phase)
        except LinkDown as error:  # it needs a cut link: another algorithm may not
            cut.append(error)
            continue
        if best is None or timing.sim_seconds < best[1].sim_seconds:
            best = (schedule, timing)
    if best is None and cut:
        raise cut[0]
    if best is None:
        why = "; ".join(f"{', '.join(names)}: {text}" for text, names in reasons.items())
        raise ScheduleError(f"no algorithm can run this {coll.name}: {why}")
    return best


def _cannot_win(schedule: Schedule, topology: Topology, best_seconds: float) -> bool:
    """Whether ``schedule`` is surely slower than ``best_seconds``: its lower bound (no
    routing needed) is above it, by more than rounding could explain."""
    return lower_bound_seconds(schedule, topology) > best_seconds * (1 + _PRUNE_MARGIN)


MAX_TRANSFERS = 1 << 24  # an all-to-all holds all n (n-1) transfers of every group


def _check_memory(topology: Topology, groups: list[np.ndarray], buffer_bytes: int) -> None:
    """Refuse buffers larger than an IPU's In-Processor-Memory (the collective's working set
    lives there on real hardware)."""
    ipus = np.concatenate(groups)
    memory = topology.ipu_memory_bytes[ipus]
    smallest = int(np.argmin(memory))
    if buffer_bytes > memory[smallest]:
        ipu = int(ipus[smallest])
        raise ScheduleError(
            f"each IPU would hold a {buffer_bytes:,}-byte buffer, more than the "
            f"{int(memory[smallest]):,} bytes of In-Processor-Memory of "
            f"{topology.ipu_name(ipu)} ({topology.ipu_processors[ipu].name}): use a smaller size")


def _ring_ranks(topology: Topology, ipus: np.ndarray) -> np.ndarray:
    """The ranks of ``ipus`` in the order of the topology's preferred ring."""
    return np.argsort(topology.ring_position[ipus], kind="stable")


def _build(coll: Collective, topology: Topology, count: int, dtype: DType, name: str,
           groups: list[np.ndarray], root: int) -> Schedule:
    chosen = algorithm(name, coll)
    itemsize = dtype.itemsize
    n = len(groups[0])
    if coll.name == CollectiveName.ALL_TO_ALL and len(groups) * n * (n - 1) > MAX_TRANSFERS:
        raise ScheduleError(
            f"an all-to-all of {len(groups)} x {n:,} IPUs is {len(groups) * n * (n - 1):,} "
            f"distinct transfers, more than the {MAX_TRANSFERS:,} that fit in memory here: use "
            f"smaller replica groups ({SETTING_NAMES['group']} consecutive:K) or fewer IPUs")
    slots = chosen.slots(coll, n)
    per_slot = count if coll.blocks_per_size else -(-count // slots)
    grain = chosen.granularity
    chunk = -(-per_slot // grain) * grain
    copies = 2 if coll.name == CollectiveName.ALL_TO_ALL else 1
    _check_memory(topology, groups, slots * chunk * itemsize * copies)
    group_phases: list[list[Phase]] = []
    owners: list[np.ndarray] = []
    for ipus in groups:
        ctx = GroupContext(coll, topology, ipus, _ring_ranks(topology, ipus), chunk, root)
        chosen.check(ctx)
        phases, slot_of_rank = chosen.build(ctx)
        group_phases.append(phases)
        owners.append(slot_of_rank)
    shapes = {tuple((p.steps, p.reduce) for p in phases) for phases in group_phases}
    if len(shapes) != 1:
        raise ScheduleError(f"{name}: the replica groups differ in shape (their IPU-Link "
                            "domains split them differently); use a ring algorithm")
    merged = tuple(Phase.concurrent(list(same)) for same in zip(*group_phases))
    return Schedule(collective=coll.name, algorithm=chosen.name, dtype=dtype, itemsize=itemsize,
                    count=count, chunk=chunk, slots=slots, groups=tuple(groups),
                    slot_of_rank=tuple(owners), phases=merged, root=root)
