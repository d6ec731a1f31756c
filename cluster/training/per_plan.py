"""Work out a plan's priced parts once a run.

A :class:`~cluster.training.plan.TrainPlan` is frozen, so what a function of the plan alone
prices (its tensor-parallel all-reduces, its phases, ...) is the same every time it is
asked: the step's pricing, ``--json``'s collectives table and the memory check share one
result, kept on the plan (a plan made with other settings starts with none).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, TypeVar, cast

if TYPE_CHECKING:
    from cluster.training.plan import TrainPlan

_Result = TypeVar("_Result")


def per_plan(price: Callable[[TrainPlan], _Result]) -> Callable[[TrainPlan], _Result]:
    """Decorator: ``price(run)`` worked out on the first call for ``run``, then reused
    (its result must not be changed by callers: frozen dataclasses and tuples)."""
    key = f"{price.__module__}.{price.__qualname__}"

    @wraps(price)
    def once(run: TrainPlan) -> _Result:
        found = run.priced
        if key not in found:
            found[key] = price(run)
        return cast(_Result, found[key])

    return once
