"""Collectives of one kind in a step, priced: what the model-parallel parts are made of.

Tensor parallelism's all-reduces (:mod:`.tensor_parallel_time`) and expert parallelism's
all-to-alls (:mod:`.expert_parallel_time`) are each counted by kind: the same collective
of the same size over groups of the same size, priced once and run ``count`` times.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class PricedCollectives:
    """``count`` collectives a step of ``what``, over groups of ``group_size`` IPUs,
    ``nbytes`` each per IPU, ``seconds`` each (simulated)."""

    what: str
    group_size: int
    nbytes: int
    count: int
    seconds: float

    @property
    def total_seconds(self) -> float:
        """All of them: ``count x seconds``."""
        return self.count * self.seconds
