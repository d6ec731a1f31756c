"""``--trace FILE`` (and ``--trace-detail``), as ``ipupod bench`` and ``ipupod train`` take
them: where a timeline goes (:mod:`cluster.model.trace`), checked before the run starts
and written atomically after it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cluster.cli.paths import CheckedPath
from cluster.errors import UserError, quoted
from cluster.model.trace import Trace, write_trace
from gcl.modes import Mode
from gcl.sweep_trace import DETAILS
from ipu_node.wall_trace import WallRecorder

F = TypeVar("F", bound=Callable[..., Any])

TRACE_HELP = ("Also write a timeline of the simulated time to FILE (Trace Event Format "
              "JSON: open it in ui.perfetto.dev or chrome://tracing; see docs/traces.md); "
              "in real mode also what the devices did, on the wall clock.")


def trace_option(function: F) -> F:
    """The ``--trace FILE`` option (parameter ``trace_path``)."""
    return click.option("--trace", "trace_path", default=None, metavar="FILE",
                        type=CheckedPath(dir_okay=False, path_type=Path),
                        help=TRACE_HELP)(function)


def trace_detail_option(function: F) -> F:
    """The ``--trace-detail`` option (parameter ``trace_detail``)."""
    return click.option("--trace-detail", type=click.Choice(DETAILS), default="auto",
                        show_default=True,
                        help="With --trace: a track per IPU (full), per server (servers) or "
                             "per link type only (link-types); auto: full up to 4,096 IPUs, "
                             "then coarser.")(function)


def check_trace_path(path: Path | None) -> None:
    """Refuse, before any work, a trace path whose folder is missing or not a folder."""
    if path is None:
        return
    folder = path.parent
    if not folder.is_dir():
        raise UserError(f"--trace {quoted(str(path))}: the folder {quoted(str(folder))} "
                        "does not exist; make it or choose another path")


def wall_recorder(mode: Mode, path: Path | None) -> WallRecorder | None:
    """What records the devices' wall clock for ``--trace``: in real mode only."""
    if path is None or mode != Mode.REAL:
        return None
    return WallRecorder()


def save_trace(trace: Trace | bytes, path: Path) -> None:
    """Write ``trace`` (or a trace's JSON, as the service sends it) to ``path`` and say so
    on stderr (stdout stays the output)."""
    try:
        written = write_trace(trace, path)
    except OSError as error:
        raise UserError(f"--trace {quoted(str(path))}: {error.strerror or error}") from None
    clock = f"{trace.clock} time" if isinstance(trace, Trace) else "from the service"
    click.echo(f"note: trace written to {path} ({written:,} bytes, {clock}; "
               "open it in ui.perfetto.dev or chrome://tracing)", err=True)
