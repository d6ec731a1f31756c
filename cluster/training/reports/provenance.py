"""Where each setting of a run came from: given, chosen to fit, or a default, and why.

The command that made a :class:`~cluster.training.plan.TrainPlan` records once which
settings the user gave (:attr:`~cluster.training.plan.TrainPlan.given`);
:func:`cluster.training.fit.resolve` records the ones it chose to fit
(:attr:`~cluster.training.plan.TrainPlan.chosen`). :func:`provenance` tells the three
apart for any setting, by field, with the reason of a value the user left out
(:data:`~cluster.training.defaults.RULES`), so reports print from the plan alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.model.text_enum import TextEnum
from cluster.training.defaults import RULES
from cluster.training.plan import TrainPlan

COMMANDS_DEFAULT = "the command's default"
"""The reason of a default no rule explains (an option of the command's own)."""


class Source(TextEnum):
    """Where a setting's value came from."""

    GIVEN = "given"  # the user typed it
    CHOSEN = "chosen"  # left out, and chosen to fit the run (fit's resolve)
    DEFAULT = "default"  # left out: the default


@dataclass(frozen=True)
class Provenance:
    """A setting's ``source`` and, unless given, the ``rule`` its value follows (its
    ``{field}`` placeholders stand for other settings, as in RULES)."""

    source: Source
    rule: str = ""

    @property
    def given(self) -> bool:
        """Whether the user gave the value."""
        return self.source is Source.GIVEN


def provenance(plan: TrainPlan, name: str, rule: str | None = None) -> Provenance:
    """Where the setting ``name`` of ``plan`` came from (a field, or a command's own
    option by its name); ``rule`` says why a default is what it is where the command
    differs from RULES."""
    if name in plan.given:
        return Provenance(Source.GIVEN)
    source = Source.CHOSEN if name in plan.chosen else Source.DEFAULT
    return Provenance(source, rule or RULES.get(name, COMMANDS_DEFAULT))
