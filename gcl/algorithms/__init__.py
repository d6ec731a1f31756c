"""Collective algorithms, one module each, registered by name.

An algorithm turns one replica group into phases (see :mod:`gcl.schedule`). Adding one is a
new module here with a class decorated by :func:`register` (the registry finds the module
itself: :class:`~cluster.model.plugins.Registry`). ``auto`` is not an algorithm but a
choice among these, made by the planner with the cost model (:mod:`gcl.planner`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeVar

import numpy as np

from cluster.errors import ScheduleError, quoted
from cluster.model.plugins import Registry
from cluster.model.topology import Topology
from gcl.collectives import Collective
from gcl.schedule import Phase

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
    auto_order: ClassVar[int]  # auto tries lower first; of equal times the first tried wins

    def slots(self, collective: Collective, group_size: int) -> int:
        """How many slots each IPU's buffer is cut into."""
        return group_size

    def check(self, ctx: GroupContext) -> None:
        """Raise :class:`ScheduleError` if this group cannot run this algorithm."""

    def build(self, ctx: GroupContext) -> tuple[list[Phase], np.ndarray]:
        """The group's phases, and the slot each rank owns (or sources) at the end."""
        raise NotImplementedError


_A = TypeVar("_A", bound=Algorithm)


def _check(entry: Algorithm) -> None:
    """A TypeError unless ``entry`` is an :class:`Algorithm` that says what it runs."""
    if not isinstance(entry, Algorithm):
        raise TypeError(f"an algorithm subclasses Algorithm, not {type(entry).__name__}")
    kind = type(entry).__name__
    if not entry.collectives or not isinstance(getattr(entry, "auto_order", None), int):
        raise TypeError(f"{kind} needs its collectives and its auto_order")
    if entry.name in _ALIASES:
        raise TypeError(f"{kind}'s name {entry.name!r} is an alias of {_ALIASES[entry.name]}")


_REGISTRY: Registry[Algorithm] = Registry("algorithm", __name__, check=_check,
                                          order=lambda entry: entry.auto_order)


def register(cls: type[_A]) -> type[_A]:
    """Class decorator: register one instance of ``cls`` under ``cls.name``."""
    _REGISTRY.register(cls.name, cls(), cls.__module__)
    return cls


def algorithms() -> dict[str, Algorithm]:
    """Every registered algorithm by name, in the order ``auto`` tries them (importing
    their modules once)."""
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
    """The algorithms that run ``collective``, in the order ``auto`` tries them."""
    return [a for a in algorithms().values() if collective.name in a.collectives]
