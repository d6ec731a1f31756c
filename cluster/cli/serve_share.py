"""``ipupod serve``'s options for a shared POD: TLS, ``--insecure``, the audit log, the
state file and the users' limits (:mod:`cluster.service.sharing`; docs/service.md,
"Sharing a POD")."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cluster.cli.paths import CheckedPath
from cluster.errors import UserError
from cluster.service.auth import TOKEN_FILE_VARIABLE, default_token_file, state_dir
from cluster.service.limits import Limits
from cluster.service.sharing import ShareOptions
from cluster.service.tls import ServiceTLS, check_exposure

Command = TypeVar("Command", bound=Callable[..., Any])
_FILE = CheckedPath(dir_okay=False, path_type=Path)

SHARE_OPTIONS = [
    click.option("--tls-cert", type=_FILE, default=None,
                 help="Serve TLS with this certificate (PEM; with --tls-key)."),
    click.option("--tls-key", type=_FILE, default=None, help="The certificate's key (PEM)."),
    click.option("--tls-client-ca", type=_FILE, default=None,
                 help="Mutual TLS: clients must present a certificate this CA signed."),
    click.option("--insecure", is_flag=True,
                 help="Allow a --host beyond loopback without TLS (tokens in clear text)."),
    click.option("--audit-log", type=_FILE, default=None,
                 help="The audit log (JSON lines; default audit-PORT.jsonl beside the token)."),
    click.option("--state", "state_file", type=_FILE, default=None,
                 help="Users and partitions kept across restarts (SQLite; default "
                      "state-PORT.sqlite beside the token; with --port 0, only if given)."),
    click.option("--bench-per-minute", type=click.FloatRange(1, 1e6), default=30.0,
                 show_default=True,
                 help="Real-mode benchmarks a user may start per minute (one at a time)."),
]


def share_options(command: Command) -> Command:
    """Add the options of :data:`SHARE_OPTIONS` to ``command``."""
    for option in reversed(SHARE_OPTIONS):
        command = option(command)
    return command


def default_state_file(port: int, token_file: Path | None) -> Path | None:
    """``state-PORT.sqlite`` beside the token file (the token file's name plus
    ``.state.sqlite`` if --token-file names it); None when neither is known yet."""
    if token_file is not None:  # with no name ('.'), writing the token will say so
        return token_file.with_name(token_file.name + ".state.sqlite") \
            if token_file.name else None
    if os.environ.get(TOKEN_FILE_VARIABLE):
        named = default_token_file(port)
        return named.with_name(named.name + ".state.sqlite")
    return state_dir() / f"state-{port}.sqlite" if port else None


def share_from(host: str, port: int, token_file: Path | None, tls_cert: Path | None,
               tls_key: Path | None, tls_client_ca: Path | None, insecure: bool,
               audit_log: Path | None, state_file: Path | None,
               bench_per_minute: float) -> ShareOptions:
    """The options checked: TLS needs a certificate and its key; a --host beyond loopback
    needs TLS or --insecure; the state file defaults to one beside the token."""
    if (tls_cert is None) != (tls_key is None):
        raise UserError("TLS needs both --tls-cert and --tls-key")
    if tls_client_ca is not None and tls_cert is None:
        raise UserError("--tls-client-ca needs --tls-cert and --tls-key")
    tls = ServiceTLS(tls_cert, tls_key, tls_client_ca) if tls_cert and tls_key else None
    if tls is not None:
        tls.server_credentials()  # a user error now if a file is not PEM
    check_exposure(host, tls, insecure)
    return ShareOptions(tls=tls, audit_log=audit_log,
                        state_file=state_file or default_state_file(port, token_file),
                        limits=Limits(per_minute=bench_per_minute))
