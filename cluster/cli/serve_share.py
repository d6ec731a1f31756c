"""``ipupod serve``'s options for a shared POD: TLS, ``--insecure``, the audit log, the
state file and the users' limits (:mod:`cluster.service.sharing`; docs/service.md,
"Sharing a POD")."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from cluster.cli.paths import CheckedPath, check_output_folder
from cluster.errors import UserError
from cluster.service.control_tls import ServiceTLS, check_exposure
from cluster.service.rate_limits import Limits
from cluster.service.sharing import ShareOptions
from cluster.service.token_auth import TOKEN_FILE_VARIABLE, state_dir

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
                 help="Users and partitions kept across restarts (SQLite; default beside the "
                      "token, one per topology; with --port 0 and no token file, none)."),
    click.option("--fresh-state", is_flag=True,
                 help="Start with no users and no partitions: the earlier state file is "
                      "moved aside (a timestamped name, printed), never deleted."),
    click.option("--bench-per-minute", type=click.FloatRange(1, 1e6), default=30.0,
                 show_default=True,
                 help="Real-mode benchmarks a user may start per minute (one at a time)."),
]


def share_options(command: Command) -> Command:
    """Add the options of :data:`SHARE_OPTIONS` to ``command``."""
    for option in reversed(SHARE_OPTIONS):
        command = option(command)
    return command


def default_state_file(port: int, token_file: Path | None, topology: str) -> Path | None:
    """``state-PORT-TOPOLOGY.sqlite`` in the token's folder (``TOKEN.TOPOLOGY.sqlite`` when
    --token-file or ``IPUPOD_TOKEN_FILE`` names the token): one per topology, so serving
    another topology on the same port starts afresh instead of meeting a file it must
    refuse. None when the token's place is not known before binding (``--port 0``)."""
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", Path(topology).name)[:64] or "topology"
    named = token_file or (Path(os.environ[TOKEN_FILE_VARIABLE])
                           if os.environ.get(TOKEN_FILE_VARIABLE) else None)
    if named is not None:  # with no name ('.'), writing the token will say so
        return named.with_name(f"{named.name}.{slug}.sqlite") if named.name else None
    return state_dir() / f"state-{port}-{slug}.sqlite" if port else None


def share_from(host: str, port: int, token_file: Path | None, topology: str,
               tls_cert: Path | None,
               tls_key: Path | None, tls_client_ca: Path | None, insecure: bool,
               audit_log: Path | None, state_file: Path | None, fresh_state: bool,
               bench_per_minute: float) -> ShareOptions:
    """The options checked: TLS needs a certificate and its key; a --host beyond loopback
    needs TLS or --insecure; the files named go in folders that exist; the state file
    defaults to one beside the token (and --fresh-state needs one)."""
    for option, path in (("--token-file", token_file), ("--audit-log", audit_log),
                         ("--state", state_file)):
        if path is not None:
            check_output_folder(path, option)
    if (tls_cert is None) != (tls_key is None):
        raise UserError("TLS needs both --tls-cert and --tls-key")
    if tls_client_ca is not None and tls_cert is None:
        raise UserError("--tls-client-ca needs --tls-cert and --tls-key")
    tls = ServiceTLS(tls_cert, tls_key, tls_client_ca) if tls_cert and tls_key else None
    if tls is not None:
        tls.server_credentials()  # a user error now, before Ray starts, if a file is wrong
    check_exposure(host, tls, insecure)
    state_file = state_file or default_state_file(port, token_file, topology)
    if fresh_state and state_file is None:
        raise UserError("--fresh-state: this service keeps no state (--port 0 with no "
                        "--token-file or --state), so it starts empty anyway")
    return ShareOptions(tls=tls, audit_log=audit_log, state_file=state_file,
                        limits=Limits(per_minute=bench_per_minute), fresh_state=fresh_state)
