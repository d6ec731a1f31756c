"""What a training command or report assumed: its settings recorded once, then printed.

:func:`given_settings` reads off click, once, where the command makes its plan, which
settings the user typed (by field; the command's own options by name); the plan carries
them (:attr:`~cluster.training.plan.TrainPlan.given`). :func:`command_settings` then
spells each of the command's options as a :class:`~cluster.training.reports.settings.Setting`
with where it came from as the plan says (:mod:`cluster.training.reports.provenance`): a
training option with the value the (resolved) run used, any other (``--topologies``,
``--out``) with the value click parsed. Reports print them as their "Made by" line and
settings table, and ``--json`` carries them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from cluster.setting_names import SETTING_NAMES
from cluster.training.plan import TrainPlan
from cluster.training.reports.provenance import provenance
from cluster.training.reports.settings import VALUES, Setting, config_value, made_by, setting

_LEFT_OUT = {"as_json", "ray_address"}  # how to print and where Ray is: not the run's
_FIELD_OF = {option: field for field, option in SETTING_NAMES.items()}
"""The setting each option spelling stands for (``--gcd``: ``gcd``)."""


def _options(ctx: click.Context) -> Iterator[click.Option]:
    """The command's options a report shows: visible, and about the run."""
    for param in ctx.command.params:
        if isinstance(param, click.Option) and not param.hidden and param.name not in _LEFT_OUT:
            yield param


def _name(param: click.Option) -> str:
    """The setting ``param`` sets: a training field (``--gradient-accumulation``:
    ``accumulation``), else the field its longest spelling names, else its own name."""
    return next((_FIELD_OF[o] for o in param.opts if _FIELD_OF.get(o) in VALUES),
                _FIELD_OF.get(max(param.opts, key=len), str(param.name)))


def given_settings(ctx: click.Context | None = None) -> frozenset[str]:
    """The settings the user typed on the command line (:func:`_name`'s names): read off
    click once, where the command makes its plan."""
    ctx = ctx or click.get_current_context()
    return frozenset(_name(param) for param in _options(ctx)
                     if ctx.get_parameter_source(str(param.name)) == ParameterSource.COMMANDLINE)


def command_settings(plan: TrainPlan, swept: Collection[str] = (),
                     ctx: click.Context | None = None,
                     rules: Mapping[str, str] | None = None) -> list[Setting]:
    """Every visible option of the current command with the value the run used and where
    it came from (the ``plan``'s record); ``swept`` options (a report's lists) keep the
    text they were given; ``rules`` say why a default is what it is where this command
    differs from RULES."""
    ctx = ctx or click.get_current_context()
    found = []
    for param in _options(ctx):
        name = _name(param)
        negation = param.secondary_opts[0] if param.secondary_opts else None
        option = next((o for o in param.opts
                       if _FIELD_OF.get(o) in VALUES and o not in swept), None)
        if option is not None:
            origin = provenance(plan, name, (rules or {}).get(option))
            found.append(setting(option, config_value(name, plan), origin, negation))
            continue
        value: Any = ctx.params.get(str(param.name))
        if param.is_flag and not value:
            value = None
        found.append(setting(max(param.opts, key=len), _plain(value), provenance(plan, name),
                             negation))
    return found


def _plain(value: Any) -> Any:
    """A parsed value as JSON and a command line take it (a path as text)."""
    return str(value) if isinstance(value, Path) else value


def settings_record(settings: list[Setting], ctx: click.Context | None = None) -> dict[str, Any]:
    """For ``--json``: ``made_by``, the command with every setting, and ``settings``."""
    name = (ctx or click.get_current_context()).command.name or ""
    return {"made_by": made_by(name, settings),
            "settings": [item.as_record() for item in settings]}
