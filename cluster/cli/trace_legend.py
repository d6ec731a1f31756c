"""The colours and legend of ``ipupod trace show``'s chart: the span names that cover the
drawn time, each its own colour and named, the rest one grey ``other`` entry.

A trace may hold many span names (a pod256 bench: 27, most of them phases that each last
a moment); naming the first in order of appearance leaves the phases that fill most of
the chart unnamed. So names are ranked by the time their spans take on the chart (their
durations summed over the rows drawn), and the first :data:`MAX_LEGEND` are named (the
first ``MAX_LEGEND - 1`` and ``other`` when there are more).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

MAX_LEGEND = 16  # entries the legend holds, "other" included
OTHER = "other"
OTHER_COLOUR = (0.72, 0.72, 0.72, 1.0)  # grey: no named span has it
GREYS = (14, 15)  # tab20's greys, left to "other"


@dataclass(frozen=True)
class Legend:
    """Each span name's colour, and the legend's entries (label, colour) in rank order."""

    colours: dict[str, Any]
    entries: list[tuple[str, Any]]

    def colour(self, name: str) -> Any:
        """The colour a span called ``name`` is drawn in."""
        return self.colours.get(name, OTHER_COLOUR)


def ranked(spans: Iterable[tuple[float, float, str]]) -> list[tuple[str, float]]:
    """Each span name and its spans' durations summed, the longest first (ties in the
    order the names first appear)."""
    totals: dict[str, float] = {}
    for _, duration, name in spans:
        totals[name] = totals.get(name, 0.0) + duration
    return sorted(totals.items(), key=lambda item: -item[1])  # sorted() is stable


def legend(plt: Any, spans: Iterable[tuple[float, float, str]]) -> Legend:
    """The legend of a chart drawing ``spans`` ((start, duration, name), every row's):
    up to :data:`MAX_LEGEND` names by time drawn, the others together as ``other``."""
    order = ranked(spans)
    named = order if len(order) <= MAX_LEGEND else order[:MAX_LEGEND - 1]
    tab20 = plt.get_cmap("tab20")
    palette = [tab20(i) for i in [*range(0, 20, 2), *range(1, 20, 2)] if i not in GREYS]
    colours = {name: palette[rank % len(palette)] for rank, (name, _) in enumerate(named)}
    entries = [(name, colours[name]) for name, _ in named]
    rest = order[len(named):]
    if rest:
        whole = sum(total for _, total in order) or 1.0
        share = sum(total for _, total in rest) / whole
        part = f"{share:.0%}" if share >= 0.005 else "under 1%"
        entries.append((f"{OTHER} ({len(rest)} names, {part} of the drawn time)",
                        OTHER_COLOUR))
    return Legend(colours, entries)
