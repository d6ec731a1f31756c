"""Replica groups, as GCL's ``CommGroup``: ALL, CONSECUTIVE or ORTHOGONAL with a group size.

For ``R`` replicas and group size ``k``:

- ``ALL``: one group, ``{0, ..., R-1}``;
- ``CONSECUTIVE``: ``{0..k-1}, {k..2k-1}, ...``;
- ``ORTHOGONAL``: ``R/k`` groups of ``k`` replicas strided by ``R/k``:
  ``{0, R/k, 2R/k, ...}, {1, R/k+1, ...}, ...``.

All groups of one collective run at the same time and share the network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

import numpy as np

from cluster.errors import ScheduleError, quoted

_GROUP_SIZE = re.compile(r"[0-9]{1,9}")  # replicas per group, as typed

class CommGroupType(str, Enum):
    """How replicas are partitioned into groups (see the module docstring)."""

    ALL = "all"
    CONSECUTIVE = "consecutive"
    ORTHOGONAL = "orthogonal"


@dataclass(frozen=True)
class CommGroup:
    """A partition of the replicas into equal groups; ``size`` is replicas per group."""

    type: CommGroupType = CommGroupType.ALL
    size: int = 0

    @classmethod
    def parse(cls, text: str) -> CommGroup:
        """Read ``all``, ``consecutive:4`` or ``orthogonal:4``."""
        name, _, size = text.strip().lower().partition(":")
        try:
            kind = CommGroupType(name)
        except ValueError:
            raise ScheduleError(
                f"unknown replica group {quoted(text)}: use all, consecutive:K or "
                "orthogonal:K (K replicas per group)") from None
        if kind is CommGroupType.ALL:
            if size:
                raise ScheduleError("the group 'all' takes no size")
            return cls()
        if not _GROUP_SIZE.fullmatch(size) or int(size) < 1:
            raise ScheduleError(f"replica group {quoted(text)} needs a positive size (digits "
                                f"0-9, at most 9 of them), e.g. {name}:4")
        return cls._sized(kind, int(size))

    @classmethod
    def consecutive(cls, size: int) -> CommGroup:
        """Groups of ``size`` consecutive replicas (``consecutive:size``), built without
        text."""
        return cls._sized(CommGroupType.CONSECUTIVE, size)

    @classmethod
    def orthogonal(cls, size: int) -> CommGroup:
        """Groups of ``size`` replicas strided across the rest (``orthogonal:size``), built
        without text."""
        return cls._sized(CommGroupType.ORTHOGONAL, size)

    @classmethod
    def _sized(cls, kind: CommGroupType, size: int) -> CommGroup:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ScheduleError(f"a {kind.value} replica group needs a positive whole size, "
                                f"not {size!r}")
        return cls(kind, size)

    def __str__(self) -> str:
        if self.type is CommGroupType.ALL:
            return self.type.value
        return f"{self.type.value}:{self.size}"

    def ranks(self, replicas: int) -> list[np.ndarray]:
        """The replica indices of each group, each in rank order."""
        if replicas < 1:
            raise ScheduleError("a collective needs at least one replica")
        if self.type is CommGroupType.ALL:
            return [np.arange(replicas)]
        if self.size > replicas or replicas % self.size:
            raise ScheduleError(
                f"replica group {self} does not divide {replicas} replicas into equal groups: "
                f"choose a size that divides {replicas}")
        if self.type is CommGroupType.CONSECUTIVE:
            return list(np.arange(replicas).reshape(-1, self.size))
        stride = replicas // self.size
        return list(np.arange(replicas).reshape(self.size, stride).T.copy())
