"""Real-mode options given to a phantom bench: named in one ``note:`` line with why phantom
mode has no use for them (the run goes on; nothing is refused)."""

from __future__ import annotations

from collections.abc import Sequence

import click

REAL_ONLY_WHY = {  # a real-mode option phantom mode has no use for, and why
    "-n": "simulated time is exact, nothing to repeat",
    "-w": "simulated time is exact, nothing to warm up",
    "-c": "no data moves, nothing to check",
    "--ray-address": "no devices are launched",
    "--allow-split-server": "no devices are placed",
    "--devices-per-process": "no devices are started",
}


def phantom_note(given: Sequence[str]) -> list[str]:
    """A ``note:`` line naming the real-mode options given (of :data:`REAL_ONLY_WHY`) that
    phantom mode does not use, and why."""
    if not given:
        return []
    why = "; ".join(f"{option}: {REAL_ONLY_WHY[option]}" for option in given)
    verb = "applies" if len(given) == 1 else "apply"
    return [f"note: {' and '.join(given)} {verb} only in real mode (--mode real), not in "
            f"phantom mode ({why})"]


def options_given(*options: tuple[str, str]) -> tuple[str, ...]:
    """The flags of ``options`` (parameter name, flag) given on the command line."""
    ctx = click.get_current_context()
    return tuple(flag for name, flag in options
                 if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT)
