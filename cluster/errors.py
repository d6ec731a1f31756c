"""Errors a user can act on.

Every mistake in user input (a topology spec, a size, an algorithm name) raises a
:class:`UserError` whose message says what was wrong and what to do. The CLI prints the
message without a traceback and exits with status 2; programs can catch the class.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input from a person or a program: the message says what to change."""


class SpecError(UserError):
    """A topology spec (preset name or YAML file) that cannot be built."""


class ScheduleError(UserError):
    """A collective that cannot be scheduled as asked (group, algorithm, sizes)."""
