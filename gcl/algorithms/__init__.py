"""Collective algorithms, one module each, registered by name.

An algorithm turns one replica group into phases (see :mod:`gcl.schedule`). Adding one is a
new module here with a class decorated by :func:`register`, plus its module name in
``_MODULES``. ``auto`` is not an algorithm but a choice among these, made by the planner
with the cost model (:mod:`gcl.planner`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeVar

import numpy as np

from cluster.errors import ScheduleError, quoted
from cluster.model.plugins import PluginModules
from cluster.model.topology import Topology
from gcl.collectives import Collective
from gcl.schedule import Phase

_MODULES = PluginModules("gcl.algorithms.ring", "gcl.algorithms.bidirectional",
                         "gcl.algorithms.hierarchical", "gcl.algorithms.halving_doubling")
_REGISTRY: dict[str, Algorithm] = {}
_ALIASES = {"ring": "clockwise_ring", "bidirectional": "bidirectional_ring_pair",
            "rhd": "halving_doubling", "recursive_halving_doubling": "halving_doubling"}


@dataclass(frozen=True)
class GroupContext:
    """What an algorithm needs to schedule one replica group.

    ``ipus[r]`` is the IPU of rank ``r``; ``ring`` lists the ranks in the topology's
    preferred ring order; each slot of the buffer holds ``chunk`` elements.
    """

    collective: Collective
    topology: Topology
    ipus: np.ndarray
    ring: np.ndarray
    chunk: int
    root: int

    @property
    def size(self) -> int:
        """Ranks in the group."""
        return len(self.ipus)


class Algorithm:
    """Base class: says which collectives it runs and builds a group's phases."""

    name: ClassVar[str]
    collectives: ClassVar[frozenset[str]]
    granularity: ClassVar[int] = 1  # a slot's element count must be a multiple of this

    def slots(self, collective: Collective, group_size: int) -> int:
        """How many slots each IPU's buffer is cut into."""
        return group_size

    def check(self, ctx: GroupContext) -> None:
        """Raise :class:`ScheduleError` if this group cannot run this algorithm."""

    def build(self, ctx: GroupContext) -> tuple[list[Phase], np.ndarray]:
        """The group's phases, and the slot each rank owns (or sources) at the end."""
        raise NotImplementedError


_A = TypeVar("_A", bound=Algorithm)


def register(cls: type[_A]) -> type[_A]:
    """Class decorator: register one instance of ``cls`` under ``cls.name``."""
    _REGISTRY[cls.name] = cls()
    return cls


def algorithms() -> dict[str, Algorithm]:
    """Every registered algorithm by name (importing their modules once)."""
    _MODULES.load()
    return dict(_REGISTRY)


def algorithm(name: str, collective: Collective) -> Algorithm:
    """The algorithm called ``name`` (or an alias), checked to run ``collective``."""
    known = algorithms()
    key = _ALIASES.get(name, name)
    if key not in known:
        raise ScheduleError(
            f"unknown algorithm {quoted(name)}: use auto, {', '.join(sorted(known))} "
            f"(aliases: {', '.join(sorted(_ALIASES))})")
    chosen = known[key]
    if collective.name not in chosen.collectives:
        able = sorted(n for n, a in known.items() if collective.name in a.collectives)
        raise ScheduleError(
            f"{chosen.name} does not run {collective.name}: use auto or {', '.join(able)}")
    return chosen


def for_collective(collective: Collective) -> list[Algorithm]:
    """The algorithms that run ``collective``, in registration order."""
    return [a for a in algorithms().values() if collective.name in a.collectives]
