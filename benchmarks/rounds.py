"""Figures of alternated rounds: each reported as the median of the rounds and their range,
so one noisy round neither makes nor breaks a target."""

from __future__ import annotations

import statistics


def spread(values: list[float]) -> tuple[float, float, float]:
    """Median, lowest and highest of one figure's values over the rounds."""
    if not values:
        raise ValueError("no rounds to summarise")
    return statistics.median(values), min(values), max(values)
