"""The errors of ipupod, under one root: :class:`IpupodError`.

Every mistake in user input (a topology spec, a size, an algorithm name) raises a
:class:`UserError` whose message says what was wrong and what to do. The CLI prints the
message without a traceback and exits with status 2; programs can catch the class. Failures
of the emulated devices and links are :class:`ipu_node.device_errors.DeviceError`, also an
``IpupodError``: ``except IpupodError`` catches everything the emulator raises on purpose.
"""

from __future__ import annotations

from typing import Any

from cluster.setting_names import SETTING_NAMES

QUOTE_LIMIT = 100  # characters of a user's input repeated in a message


def quoted(text: object, limit: int = QUOTE_LIMIT) -> str:
    """``repr(text)``, cut to about ``limit`` characters: error messages quote what the
    user gave without repeating a megabyte of it."""
    shown = repr(text)
    if len(shown) <= limit:
        return shown
    return f"{shown[:limit]}… ({len(str(text)):,} characters)"


class IpupodError(Exception):
    """The root of every error ipupod raises on purpose."""


class UserError(IpupodError, ValueError):
    """Bad input from a person or a program: the message says what to change."""


class SpecError(UserError):
    """A topology spec (preset name or YAML file) that cannot be built."""


class ScheduleError(UserError):
    """A collective that cannot be scheduled as asked (group, algorithm, sizes)."""


class SettingError(UserError):
    """One setting that cannot be used as given. ``field`` names it as the code does (a
    :class:`~cluster.training.config.TrainConfig` field, e.g. ``micro_batch``), so a
    program can tell which without reading the message; the message's ``{field}``
    placeholders are worded as people name each setting
    (:data:`cluster.setting_names.SETTING_NAMES`: its command-line option)."""

    def __init__(self, field: str, template: str, **values: object) -> None:
        self.field = field
        self.template = template
        self.values = values
        super().__init__(template.format_map({**SETTING_NAMES, **values}))

    def __reduce__(self) -> tuple[Any, tuple[type[SettingError], str, str, dict[str, object]]]:
        return _setting_error, (type(self), self.field, self.template, self.values)


def _setting_error(kind: type[SettingError], field: str, template: str,
                   values: dict[str, object]) -> SettingError:
    """A :class:`SettingError` again (across processes, Ray, whole)."""
    return kind(field, template, **values)
