"""Every value a run assumed, given or by default, as a report shows it.

A :class:`Setting` is one command-line option with the value the run used: what the user
gave, or the default (:mod:`cluster.training.defaults`) and why, as the plan records it
(:mod:`.provenance`). Reports print them as a
"Made by" command line that reruns the same thing with nothing left to a default, as a
settings table, and under ``settings`` in ``--json``. This module speaks in fields (a
:class:`~cluster.training.config.TrainConfig` field, ``micro_batch``); the command spells
each option as it names it (``cluster/cli/made_by.py``).
"""

from __future__ import annotations

import inspect
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cluster.setting_names import SETTING_NAMES
from cluster.training.config import TrainConfig
from cluster.training.defaults import RULES
from cluster.training.kinds import ModelKind
from cluster.training.plan import TrainPlan
from cluster.training.reports.provenance import COMMANDS_DEFAULT, Provenance


def _sequence_length(config: TrainConfig) -> int | None:
    """The tokens per sample of the run: given, or the built-in model's default."""
    entry = config.model.builtin
    if config.sequence_length is not None or entry is None:
        return config.sequence_length
    parameter = inspect.signature(entry.build).parameters.get("sequence_length")
    return None if parameter is None else int(parameter.default)


VALUES: dict[str, Callable[[TrainPlan], Any]] = {
    "model": lambda p: p.config.model.text,
    "topology": lambda p: p.config.topology,
    "servers": lambda p: None if p.config.topology else p.config.servers,
    "mode": lambda p: str(p.config.mode),
    "replicas_per_server": lambda p: p.config.replicas_per_server,
    "ipus_per_replica": lambda p: p.config.ipus_per_replica,
    "split": lambda p: str(p.config.split),
    "pipeline_schedule": lambda p: p.config.pipeline_schedule,
    "recompute": lambda p: p.config.recomputes,
    "sequence_length": lambda p: _sequence_length(p.config),
    "gradient_dtype": lambda p: str(p.workload.gradient_dtype),
    "optimizer_state": lambda p: p.config.optimizer_state,
    "micro_batch": lambda p: p.config.micro_batch,
    "accumulation": lambda p: p.config.accumulation,
    "steps": lambda p: p.config.steps,
    "algorithm": lambda p: p.config.algorithm,
    "seed": lambda p: p.config.seed,
    "lr": lambda p: p.config.lr,
    "momentum": lambda p: p.config.momentum,
    "hidden": lambda p: (",".join(map(str, p.config.hidden_widths))
                           if p.kind is ModelKind.MLP else None),
    "layers_per_ipu": lambda p: (None if p.config.layers_per_ipu is None
                                   else ",".join(map(str, p.config.layers_per_ipu))),
    "final_stage_on_first_ipu": lambda p: p.config.final_stage_on_first_ipu,
    "efficiency_scale": lambda p: p.config.efficiency_scale,
    "tensor_parallel": lambda p: str(p.config.tensor_parallel),
    "expert_parallel": lambda p: p.config.expert_parallel,
}
"""How to read each training setting's value off a resolved run, by field."""


@dataclass(frozen=True)
class Setting:
    """One option as the run used it, spelt ``option`` as its command names it: ``value``
    (None: the option left out, as with balanced layers per IPU), whether the user
    ``given`` it, else ``rule``; ``negation``, the spelling that turns an on-off option
    off, if it has one (a flag without one is off when left out)."""

    option: str
    value: Any
    given: bool
    rule: str = ""
    negation: str | None = None

    def words(self) -> list[str]:
        """The option as it is typed: ``--micro-batch 16``, a flag, or nothing."""
        if self.value is None or (self.value is False and self.negation is None):
            return []
        if isinstance(self.value, bool):
            return [self.option if self.value else str(self.negation)]
        return [self.option, str(self.value)]

    def as_record(self) -> dict[str, Any]:
        """For ``--json``: the option, its value, and given or the default's rule."""
        return {"option": self.option, "value": self.value, "given": self.given,
                **({} if self.given else {"rule": self.rule})}


def default_rule(field: str | None) -> str:
    """Why the default of the setting ``field`` is what it is (:data:`RULES`, its
    placeholders worded as :data:`~cluster.setting_names.SETTING_NAMES` says)."""
    if field is None or field not in RULES:
        return COMMANDS_DEFAULT
    return RULES[field].format_map(SETTING_NAMES)


def setting(option: str, value: Any, origin: Provenance,
            negation: str | None = None) -> Setting:
    """The setting spelt ``option`` with the ``value`` the run used, as ``origin`` says
    it came: a given one's without a rule, a default's (or a chosen one's) with its rule
    worded as :data:`~cluster.setting_names.SETTING_NAMES` says."""
    rule = "" if origin.given else origin.rule.format_map(SETTING_NAMES)
    return Setting(option, value, origin.given, rule, negation)


def config_value(field: str, plan: TrainPlan) -> Any:
    """The value the ``plan`` runs with for the setting ``field`` (one of :data:`VALUES`)."""
    return VALUES[field](plan)


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
