"""The options every client of a running service takes: where it is, the token, ``--json``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from cluster.service.client import DEFAULT_PORT, HOST_VARIABLE, PORT_VARIABLE

Command = TypeVar("Command", bound=Callable[..., Any])

CLIENT_OPTIONS = [
    click.option("--host", default=None, help=f"Service host (or {HOST_VARIABLE})."),
    click.option("--port", type=click.IntRange(1, 65535), default=None,
                 help=f"Service port (or {PORT_VARIABLE}; default {DEFAULT_PORT})."),
    click.option("--token-file", default=None, help="Token file (default ~/.ipupod/token-PORT)."),
    click.option("--json", "as_json", is_flag=True, help="Print JSON."),
]


def client_options(command: Command) -> Command:
    """Add ``--host``, ``--port``, ``--token-file`` and ``--json`` to ``command``."""
    for option in reversed(CLIENT_OPTIONS):
        command = option(command)
    return command
