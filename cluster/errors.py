"""The errors of ipupod, under one root: :class:`IpupodError`.

Every mistake in user input (a topology spec, a size, an algorithm name) raises a
:class:`UserError` whose message says what was wrong and what to do. The CLI prints the
message without a traceback and exits with status 2; programs can catch the class. Failures
of the emulated devices and links are :class:`ipu_node.errors.DeviceError`, also an
``IpupodError``: ``except IpupodError`` catches everything the emulator raises on purpose.
"""

from __future__ import annotations

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
