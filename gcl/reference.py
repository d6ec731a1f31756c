"""What each collective should give, computed plainly with NumPy (for checking results)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gcl.collectives import CollectiveName, ReduceOp

_REDUCE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sum": lambda xs: np.sum(xs, axis=0, dtype=xs[0].dtype),
    "max": lambda xs: np.max(xs, axis=0), "min": lambda xs: np.min(xs, axis=0)}


def expected(collective: CollectiveName, inputs: list[np.ndarray], op: ReduceOp = ReduceOp.SUM,
             root: int = 0) -> list[np.ndarray]:
    """The result of each rank of one group, given the group's inputs in rank order.
    (``mean`` is left to the caller: sum, then divide by the group size.)"""
    n = len(inputs)
    stacked = np.stack(inputs)
    if collective == CollectiveName.ALLREDUCE:
        return [_REDUCE[op](stacked)] * n
    if collective == CollectiveName.REDUCE_SCATTER:
        total, block = _REDUCE[op](stacked), len(inputs[0]) // n
        return [total[r * block:(r + 1) * block] for r in range(n)]
    if collective == CollectiveName.ALL_GATHER:
        return [np.concatenate(inputs)] * n
    if collective == CollectiveName.BROADCAST:
        return [inputs[root]] * n
    block = len(inputs[0]) // n
    return [np.concatenate([inputs[j][r * block:(r + 1) * block] for j in range(n)])
            for r in range(n)]
