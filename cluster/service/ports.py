"""Whether a port is free to listen on: ``ipupod serve`` checks its ports before it launches
Ray, so a second service on a taken port fails in seconds and touches nothing."""

from __future__ import annotations

import errno
import socket

from cluster.errors import UserError


def check_port_free(host: str, port: int, option: str) -> None:
    """A user error naming ``option`` if ``host:port`` is taken (or ``host`` unknown): a
    second service never shares a port with the first (no SO_REUSEPORT). Port 0 (any free
    port) is bound too: that checks ``host`` is an address of this machine."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError):
        raise UserError(f"cannot listen on host {host[:100]!r}: no such address; use "
                        "--host 127.0.0.1 or another address of this machine") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            if error.errno == errno.EADDRNOTAVAIL:
                raise UserError(f"cannot listen on host {host[:100]!r}: not an address of "
                                "this machine; use --host 127.0.0.1 or one of its "
                                "addresses") from None
            raise UserError(f"cannot listen on {host}:{port} ({error.strerror}): is another "
                            f"service using it? choose another {option}") from None
