"""Every value a run assumed, given or by default, as a report shows it.

A :class:`Setting` is one command-line option with the value the run used: what the user
gave, or the default (:mod:`cluster.training.defaults`) and why. Reports print them as a
"Made by" command line that reruns the same thing with nothing left to a default, as a
settings table, and under ``settings`` in ``--json``.
"""

from __future__ import annotations

import inspect
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cluster.training.config import TrainConfig
from cluster.training.defaults import RULES
from cluster.training.kinds import ModelKind
from cluster.training.workloads.registry import BUILTINS


def _sequence_length(config: TrainConfig) -> int | None:
    """The tokens per sample of the run: given, or the built-in model's default."""
    if config.sequence_length is not None or config.model not in BUILTINS:
        return config.sequence_length
    parameter = inspect.signature(BUILTINS[config.model].build).parameters.get(
        "sequence_length")
    return None if parameter is None else int(parameter.default)


VALUES: dict[str, Callable[[TrainConfig], Any]] = {
    "--model": lambda c: c.model,
    "--topology": lambda c: c.topology,
    "--servers": lambda c: None if c.topology else c.servers,
    "--mode": lambda c: str(c.mode),
    "--replicas-per-server": lambda c: c.replicas_per_server,
    "--ipus-per-replica": lambda c: c.ipus_per_replica,
    "--split": lambda c: c.split,
    "--pipeline-schedule": lambda c: c.pipeline_schedule,
    "--recompute": lambda c: c.recomputes,
    "--sequence-length": _sequence_length,
    "--gradient-dtype": lambda c: str(c.workload().gradient_dtype),
    "--optimizer-state": lambda c: c.optimizer_state,
    "--micro-batch": lambda c: c.micro_batch,
    "--gradient-accumulation": lambda c: c.accumulation,
    "--steps": lambda c: c.steps,
    "--algorithm": lambda c: c.algorithm,
    "--seed": lambda c: c.seed,
    "--lr": lambda c: c.lr,
    "--momentum": lambda c: c.momentum,
    "--hidden": lambda c: ",".join(map(str, c.hidden_widths)) if c.kind is ModelKind.MLP else None,
    "--layers-per-ipu": lambda c: (None if c.layers_per_ipu is None
                                   else ",".join(map(str, c.layers_per_ipu))),
    "--final-stage-on-first-ipu": lambda c: c.final_stage_on_first_ipu,
    "--efficiency-scale": lambda c: c.efficiency_scale,
}
"""How to read each training option's value off a (resolved) run configuration."""


@dataclass(frozen=True)
class Setting:
    """One option as the run used it: ``value`` (None: the option left out, as with a
    balanced ``--layers-per-ipu``), whether the user ``given`` it, else ``rule``."""

    option: str
    value: Any
    given: bool
    rule: str = ""

    def words(self) -> list[str]:
        """The option as it is typed: ``--micro-batch 16``, a flag, or nothing."""
        if self.value is None or (self.value is False and self.option != "--recompute"):
            return []
        if isinstance(self.value, bool):
            return [self.option if self.value else "--no-" + self.option.removeprefix("--")]
        return [self.option, str(self.value)]

    def as_record(self) -> dict[str, Any]:
        """For ``--json``: the option, its value, and given or the default's rule."""
        return {"option": self.option, "value": self.value, "given": self.given,
                **({} if self.given else {"rule": self.rule})}


def setting(option: str, value: Any, given: bool, rule: str | None = None) -> Setting:
    """A :class:`Setting`; a default's ``rule`` is :data:`RULES`' unless given."""
    if given:
        return Setting(option, value, given)
    return Setting(option, value, given, rule or RULES.get(option, "the command's default"))


def config_value(option: str, config: TrainConfig) -> Any:
    """The value ``config`` runs with for ``option`` (one of :data:`VALUES`)."""
    return VALUES[option](config)


def made_by(command: str, settings: Iterable[Setting]) -> str:
    """The command line that reruns ``command`` with every setting spelt out."""
    words = [word for item in settings for word in item.words()]
    return " ".join(["ipupod", command, *map(shlex.quote, words)])


def markdown(settings: Iterable[Setting]) -> str:
    """A Markdown table: each option, its value, and given or why the default."""
    lines = ["| option | value | chosen |", "|---|---|---|"]
    for item in settings:
        value = ("(left out)" if item.value is None else
                 ("on" if item.value else "off") if isinstance(item.value, bool) else
                 str(item.value))
        lines.append(f"| `{item.option}` | {value} | "
                     f"{'given' if item.given else 'default: ' + item.rule} |")
    return "\n".join(lines)
