"""The collectives, one record each, as nccl-tests has them.

A record says how a benchmark size in bytes becomes per-replica element counts, how many
buffer slots the collective needs, and the bus-bandwidth factor that turns algorithm
bandwidth (``bytes / time``) into bus bandwidth, comparable with the links' speed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from cluster.errors import ScheduleError
from cluster.model.text_enum import TextEnum

DTYPES: dict[str, type[np.generic]] = {"float32": np.float32, "float16": np.float16,
                                      "int32": np.int32}


class DType(TextEnum):
    """An element type a collective moves (nccl-tests' ``-d``; :data:`DTYPES` its NumPy
    type)."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    INT32 = "int32"

    @classmethod
    def parse(cls, text: str) -> DType:
        """The type named ``text``, or a ScheduleError naming the choices."""
        if text not in DTYPES:
            raise ScheduleError(f"unknown dtype {text!r}: use one of {', '.join(DTYPES)}")
        return cls(text)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return np.dtype(DTYPES[self.value]).itemsize


class CollectiveName(TextEnum):
    """The collectives GCL runs (each compares equal to its name as a string)."""

    ALLREDUCE = "allreduce"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_GATHER = "all-gather"
    BROADCAST = "broadcast"
    ALL_TO_ALL = "all-to-all"


class ReduceOp(TextEnum):
    """How a reducing collective combines its inputs (``mean``: the sum over the group,
    divided by its size)."""

    SUM = "sum"
    MEAN = "mean"
    MAX = "max"
    MIN = "min"


OPS = tuple(op.value for op in ReduceOp)


@dataclass(frozen=True)
class Collective:
    """One collective.

    ``count_for_bytes(size, n)`` is the element count per replica that the buffer of a
    ``size``-byte benchmark holds (nccl-tests' convention: for reduce-scatter, all-gather
    and all-to-all, ``size`` is the whole buffer of ``n`` blocks; the count returned is one
    block). ``bus_factor(n)`` is nccl-tests' factor for ``n`` ranks.
    """

    name: CollectiveName
    reduces: bool
    blocks_per_size: bool  # size covers n blocks (reduce-scatter, all-gather, all-to-all)
    bus_factor: Callable[[int], float]

    def count_for_bytes(self, size: int, n: int, itemsize: int) -> int:
        """Elements per replica (per block, for block collectives) of a ``size``-byte
        benchmark over ``n`` ranks, at least 1."""
        elements = size // itemsize
        per = elements // n if self.blocks_per_size else elements
        return max(per, 1)

    def bytes_for_count(self, count: int, n: int, itemsize: int) -> int:
        """The benchmark size in bytes that ``count`` elements per replica (per block) make:
        the inverse of :meth:`count_for_bytes`."""
        return count * itemsize * (n if self.blocks_per_size else 1)


ALLREDUCE = Collective(CollectiveName.ALLREDUCE, True, False, lambda n: 2 * (n - 1) / n)
REDUCE_SCATTER = Collective(CollectiveName.REDUCE_SCATTER, True, True, lambda n: (n - 1) / n)
ALL_GATHER = Collective(CollectiveName.ALL_GATHER, False, True, lambda n: (n - 1) / n)
BROADCAST = Collective(CollectiveName.BROADCAST, False, False, lambda n: 1.0)
ALL_TO_ALL = Collective(CollectiveName.ALL_TO_ALL, False, True, lambda n: (n - 1) / n)

COLLECTIVES = {c.name.value: c
               for c in (ALLREDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, ALL_TO_ALL)}
_ALIASES = {"reducescatter": "reduce-scatter", "reduce_scatter": "reduce-scatter",
            "allgather": "all-gather", "all_gather": "all-gather",
            "alltoall": "all-to-all", "all_to_all": "all-to-all", "all-reduce": "allreduce"}


def collective(name: str) -> Collective:
    """Look a collective up by name (``allreduce``, ``reduce-scatter``, ``all-gather``,
    ``broadcast``, ``all-to-all``; underscores and no hyphen are accepted too)."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in COLLECTIVES:
        raise ScheduleError(f"unknown collective {name!r}: use one of {', '.join(COLLECTIVES)}")
    return COLLECTIVES[key]


def check_op(op: str) -> ReduceOp:
    """``op`` as a :class:`ReduceOp`, if it is one this project knows (sum, mean, max,
    min)."""
    if op not in OPS:
        raise ScheduleError(f"unknown reduction op {op!r}: use one of {', '.join(OPS)}")
    return ReduceOp(op)
