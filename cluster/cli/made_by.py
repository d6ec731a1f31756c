"""What a training command or report assumed, read off its click context and its run.

Each of the command's options becomes a :class:`~cluster.training.reports.settings.Setting`: a
training option with the value the (resolved) run used, any other (``--topologies``,
``--out``) with the value click parsed; given or default as click saw it. Reports print
them as their "Made by" line and settings table, and ``--json`` carries them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from cluster.setting_names import SETTING_NAMES
from cluster.training.plan import TrainPlan
from cluster.training.reports.settings import (
    VALUES,
    Setting,
    config_value,
    default_rule,
    made_by,
)

_LEFT_OUT = {"as_json", "ray_address"}  # how to print and where Ray is: not the run's
_FIELD_OF = {option: field for field, option in SETTING_NAMES.items()}
"""The setting each option spelling stands for (``--gcd``: ``gcd``)."""


def command_settings(plan: TrainPlan, swept: Collection[str] = (),
                     ctx: click.Context | None = None,
                     rules: Mapping[str, str] | None = None) -> list[Setting]:
    """Every visible option of the current command with the value the run used;
    ``swept`` options (a report's lists) keep the text they were given; ``rules`` say
    why a default is what it is where this command differs from RULES."""
    ctx = ctx or click.get_current_context()
    found = []
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.hidden or param.name in _LEFT_OUT:
            continue
        name = str(param.name)
        given = ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE
        negation = param.secondary_opts[0] if param.secondary_opts else None
        option = next((o for o in param.opts
                       if _FIELD_OF.get(o) in VALUES and o not in swept), None)
        if option is not None:
            field = _FIELD_OF[option]
            found.append(_setting(option, config_value(field, plan), given,
                                  (rules or {}).get(option) or default_rule(field), negation))
            continue
        value: Any = ctx.params.get(name)
        if param.is_flag and not value:
            value = None
        option = max(param.opts, key=len)
        found.append(_setting(option, _plain(value), given, default_rule(_FIELD_OF.get(option)),
                              negation))
    return found


def _setting(option: str, value: Any, given: bool, rule: str,
             negation: str | None) -> Setting:
    """A :class:`Setting`: a default's with its ``rule``, a given one's without."""
    return Setting(option, value, given, "" if given else rule, negation)


def _plain(value: Any) -> Any:
    """A parsed value as JSON and a command line take it (a path as text)."""
    return str(value) if isinstance(value, Path) else value


def settings_record(settings: list[Setting], ctx: click.Context | None = None) -> dict[str, Any]:
    """For ``--json``: ``made_by``, the command with every setting, and ``settings``."""
    name = (ctx or click.get_current_context()).command.name or ""
    return {"made_by": made_by(name, settings),
            "settings": [item.as_record() for item in settings]}
