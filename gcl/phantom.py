"""Phantom mode: a schedule's simulated time from sizes alone, no actors, no data.

Each phase is costed once (its supersteps share their transfers) and multiplied by its
step count, so the work grows with the number of distinct phases, not with IPUs times
steps. The real-data executor reports its time through the same :func:`simulate`, so both
modes agree by construction.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cluster.model.costmodel import superstep_cost, superstep_lower_bound
from cluster.model.topology import Topology
from gcl.schedule import Schedule


@dataclass(frozen=True)
class PhaseTiming:
    """A phase's simulated seconds: ``steps`` supersteps of ``step_seconds`` each, and the
    bytes one of its steps carries per link type."""

    label: str
    scope: str
    steps: int
    step_seconds: float
    sync_seconds: float
    exchange_seconds: float
    reduce_seconds: float
    step_link_type_bytes: Mapping[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """Simulated seconds of the whole phase: its steps times one step's seconds."""
        return self.steps * self.step_seconds


@dataclass(frozen=True)
class Timing:
    """A collective's simulated time (``sim_seconds``) and what it cost to work it out
    (``wall_seconds``), with per-phase parts and bytes carried per link type."""

    sim_seconds: float
    phases: tuple[PhaseTiming, ...]
    link_type_bytes: dict[str, float]
    wall_seconds: float

    def seconds_by_scope(self) -> dict[str, float]:
        """Simulated seconds summed by phase scope (``local``, ``global``, ``flat``)."""
        out: dict[str, float] = {}
        for phase in self.phases:
            out[phase.scope] = out.get(phase.scope, 0.0) + phase.seconds
        return out


def simulate(schedule: Schedule, topology: Topology,
             on_phase: Callable[[int, int], None] | None = None) -> Timing:
    """Simulated time of ``schedule`` on ``topology`` (a pure function of the two).

    ``on_phase(done, total)``, if given, is called after each phase is costed (progress).
    """
    started = time.perf_counter()
    phases: list[PhaseTiming] = []
    link_bytes: dict[str, float] = {}
    for index, phase in enumerate(schedule.phases):
        cost = superstep_cost(topology, phase.src, phase.dst, phase.count * schedule.itemsize,
                              phase.reduce)
        phases.append(PhaseTiming(phase.label, phase.scope, phase.steps, cost.seconds,
                                  cost.sync_seconds, cost.exchange_seconds, cost.reduce_seconds,
                                  cost.link_type_bytes))
        for name, nbytes in cost.link_type_bytes.items():
            link_bytes[name] = link_bytes.get(name, 0.0) + nbytes * phase.steps
        if on_phase is not None:
            on_phase(index + 1, len(schedule.phases))
    total = sum(p.seconds for p in phases)
    return Timing(total, tuple(phases), link_bytes, time.perf_counter() - started)


def lower_bound_seconds(schedule: Schedule, topology: Topology) -> float:
    """A lower bound on ``simulate(schedule, topology).sim_seconds``, without routing
    (:func:`cluster.model.costmodel.superstep_lower_bound` per phase)."""
    return sum(phase.steps * superstep_lower_bound(topology, phase.src, phase.dst,
                                                   phase.count * schedule.itemsize,
                                                   phase.reduce)
               for phase in schedule.phases)
