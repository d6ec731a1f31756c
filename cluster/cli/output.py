"""What every command prints, and how: errors, messages, progress, Ray's chatter.

User mistakes print one ``error:`` line (what was wrong, what to do) and exit with status 2,
never a traceback; a device or link failure exits with status 1; Ctrl-C with 130.
"""

from __future__ import annotations

import io
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from typing import Any, TextIO

import click

from cluster.errors import UserError
from ipu_node.device_errors import DeviceError

Progress = Callable[[int, int], None]


@contextmanager
def errors_as_lines() -> Iterator[None]:
    """Turn what goes wrong in a command into one line on standard error and an exit
    status: 2 for a user error (and click's usage errors), 1 for a failed device, 130 for
    an interrupt."""
    try:
        yield
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as error:
        _show(error)
        sys.exit(error.exit_code)
    except UserError as error:
        click.echo(f"error: {one_line(str(error))}", err=True)
        sys.exit(2)
    except DeviceError as error:  # a device or link failed: say which
        click.echo(f"error: {one_line(str(error))}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)


def _show(error: click.ClickException) -> None:
    """What click's ``error.show()`` prints (a usage error's usage and hint, then the
    error), with the message cut short: click quotes the value given, which may be huge."""
    ctx = error.ctx if isinstance(error, click.UsageError) else None
    if ctx is not None:
        hint = f"Try '{ctx.command_path} {ctx.help_option_names[0]}' for help.\n"
        click.echo(f"{ctx.get_usage()}\n{hint}", err=True)
    click.echo(f"Error: {one_line(_short(error.format_message()))}", err=True)


def one_line(message: str) -> str:
    """``message`` with its control characters (newlines, escapes) written as Python
    writes them in a string (``\\n``): an error is one line, and a value quoted from the
    command line cannot move the cursor or clear the screen."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


def _short(message: str, limit: int = 300) -> str:
    """``message`` cut to about ``limit`` characters (an input can be megabytes)."""
    if len(message) <= limit:
        return message
    return f"{message[:limit]}… ({len(message):,} characters in all)"


def message_json(message: Any) -> str:
    """A protobuf message as indented JSON, with the .proto's field names and every field
    (zeros and empty strings too)."""
    # protobuf: only the service's commands print messages; bench and topology start
    # without it
    from google.protobuf.json_format import MessageToDict

    return json.dumps(MessageToDict(message, preserving_proto_field_name=True,
                                    always_print_fields_with_no_presence=True), indent=2)


def echo_message(message: Any, as_json: bool, text: str) -> None:
    """Print the service's answer: ``message`` as JSON (``--json``), else ``text``."""
    click.echo(message_json(message) if as_json else text)


GRPC_VERBOSITY = "GRPC_VERBOSITY"


def grpc_logging_off() -> None:
    """Keep gRPC's C core from writing its own log lines to standard error ("E1127 ...
    ssl_transport_security.cc ...": a failed call becomes one ``error:`` line of ours):
    ``GRPC_VERBOSITY=NONE`` unless the user chose a verbosity. It counts only if grpc is not
    imported yet, and it reaches what the command starts (Ray's processes); call it inside
    :func:`cluster.cli.main.environment_kept`, so a program that runs ``main`` keeps its own
    setting afterwards."""
    os.environ.setdefault(GRPC_VERBOSITY, "NONE")


@contextmanager
def ray_chatter_to_stderr() -> Iterator[TextIO]:
    """Ray prints its own warnings to standard output; while devices run, send anything
    printed there to standard error, and yield the real standard output for our results
    (so ``--json`` output stays parseable)."""
    real = sys.stdout
    with redirect_stdout(sys.stderr):
        yield real


class MainThreadStdout(io.TextIOBase):
    """Standard output that only the command itself reaches: what Ray prints (its listener
    thread relays raylet warnings such as "... PYTHON worker processes have been started
    ...", and ``ray.shutdown`` flushes them again from the main thread) and what any thread
    but the main one prints go to standard error, so ``--json`` output stays one document
    however busy the machine is."""

    def __init__(self, results: TextIO, chatter: TextIO) -> None:
        super().__init__()
        self.results = results
        self.chatter = chatter

    def _target(self) -> TextIO:
        if threading.current_thread() is not threading.main_thread():
            return self.chatter
        writer = sys._getframe(2).f_globals.get("__name__", "")  # who called print/write
        return self.chatter if writer.split(".")[0] == "ray" else self.results

    def write(self, text: str) -> int:
        """Write ``text`` where the calling thread's output belongs."""
        return self._target().write(text)

    def flush(self) -> None:
        """Flush both streams."""
        self.results.flush()
        self.chatter.flush()

    def writable(self) -> bool:
        """Always: this is an output stream."""
        return True

    def isatty(self) -> bool:
        """Whether the results go to a terminal."""
        return self.results.isatty()

    def fileno(self) -> int:
        """The results' file descriptor."""
        return self.results.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """The results' encoding (click checks it before writing)."""
        return self.results.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        """The results' error handler."""
        return self.results.errors


def results_only_on_stdout() -> None:
    """From now on, for this process, standard output reaches only what the main thread
    prints. Never undone: Ray's threads live until the interpreter exits, after ``main``."""
    if sys.stdout is not None and not isinstance(sys.stdout, MainThreadStdout):
        sys.stdout = MainThreadStdout(sys.stdout, sys.stderr)


def _ignore(done: int, total: int) -> None:
    """The progress callback off a terminal: nothing to show."""


@contextmanager
def progress(label: str, total: int | None = None, min_total: int = 0) -> Iterator[Progress]:
    """A progress bar on standard error, only on a terminal so that piped output stays
    clean; yields the callback ``update(done, total)``.

    With ``total`` the bar shows at once; else it appears at the first update. Updates with
    a ``total`` below ``min_total`` are not shown (short runs need no bar), and an update
    whose count goes back (``done`` below the last) starts a fresh bar: the next size of a
    sweep, the next run of a report."""
    if not sys.stderr.isatty():
        yield _ignore
        return
    # rich: only when a bar is actually shown
    from rich.console import Console
    from rich.progress import Progress as Bar

    with Bar(console=Console(stderr=True), transient=True) as bar:
        task = None if total is None else bar.add_task(label, total=total)
        last = 0

        def update(done: int, total: int) -> None:
            """Show ``done`` of ``total``."""
            nonlocal task, last
            if total < min_total:
                return
            if task is None or done < last:
                if task is not None:
                    bar.remove_task(task)
                task = bar.add_task(label, total=total)
            bar.update(task, completed=done)
            last = done

        yield update
