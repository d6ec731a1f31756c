"""One round of card tasks over every replica's IPUs: what split engines share.

A replica of several IPUs (a layer's columns, a tensor group) runs each step as rounds:
every IPU of every replica runs the same task at once, each with its own rank's input.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ipu_node.pod import EmulatedPod


def rank_round(pod: EmulatedPod, chains: np.ndarray, task: Callable[..., Any], split: Any,
               given: Callable[[int, int], Any]) -> dict[int, Any]:
    """Run ``task(split, work)`` on every IPU ``chains[r, k]`` at once, rank ``k`` of
    replica ``r`` given ``given(r, k)`` (each device's IPUs in one call); the IPUs'
    answers merged."""
    work: dict[int, dict[int, tuple[int, Any]]] = {}
    for (r, k), ipu in np.ndenumerate(chains):
        work.setdefault(pod.owner[int(ipu)], {})[int(ipu)] = (k, given(r, k))
    merged: dict[int, Any] = {}
    for answer in pod.call("execute", {d: (task, split, w) for d, w in work.items()}).values():
        merged.update(answer or {})
    return merged
