"""The options every client of a running service takes: where it is, the token, ``--json``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from cluster.service.client import DEFAULT_PORT, HOST_VARIABLE, PORT_VARIABLE
from cluster.service.control_tls import CA_VARIABLE

Command = TypeVar("Command", bound=Callable[..., Any])

CLIENT_OPTIONS = [
    click.option("--host", default=None, help=f"Service host (or {HOST_VARIABLE})."),
    click.option("--port", type=click.IntRange(1, 65535), default=None,
                 help=f"Service port (or {PORT_VARIABLE}; default {DEFAULT_PORT})."),
    click.option("--token-file", default=None, help="Token file (default ~/.ipupod/token-PORT)."),
    click.option("--json", "as_json", is_flag=True, help="Print JSON."),
    click.option("--tls-ca", default=None, expose_value=False,
                 callback=lambda context, _, value: _tls_ca(context, value),
                 help=f"Speak TLS, checking the service against this CA (or {CA_VARIABLE})."),
]


def _tls_ca(context: click.Context, value: str | None) -> None:
    """Point the client at ``value`` (through ``IPUPOD_TLS_CA``) while the command runs."""
    if value is None:
        return
    if not value or "\x00" in value:
        raise click.BadParameter("give the path of the CA's certificate (a PEM file)")
    before = os.environ.get(CA_VARIABLE)
    os.environ[CA_VARIABLE] = value
    context.call_on_close(lambda: _restore(before))


def _restore(before: str | None) -> None:
    if before is None:
        os.environ.pop(CA_VARIABLE, None)
    else:
        os.environ[CA_VARIABLE] = before


def client_options(command: Command) -> Command:
    """Add ``--host``, ``--port``, ``--token-file``, ``--json`` and ``--tls-ca`` to
    ``command``."""
    for option in reversed(CLIENT_OPTIONS):
        command = option(command)
    return command
