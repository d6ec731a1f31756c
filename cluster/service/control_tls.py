"""TLS on the control API: the server's certificate and key, optionally a CA whose
certificates clients must present (mutual TLS); clients check the server against a CA.

A service bound beyond loopback without TLS would send every token in clear text, so
:func:`check_exposure` refuses it unless the user says ``--insecure``.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

import grpc

from cluster.errors import UserError, quoted
from cluster.model.files import open_regular

CA_VARIABLE = "IPUPOD_TLS_CA"
CLIENT_CERT_VARIABLE, CLIENT_KEY_VARIABLE = "IPUPOD_TLS_CERT", "IPUPOD_TLS_KEY"
MAX_PEM_BYTES = 1 << 20


def _pem(path: str | Path, what: str) -> bytes:
    """The PEM file at ``path``; a user error naming ``what`` if it cannot be read."""
    try:
        with open_regular(path) as handle:
            data = handle.read(MAX_PEM_BYTES + 1)
    except (OSError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) else error
        raise UserError(f"cannot read {what} {quoted(str(path))} ({reason})") from None
    if b"-----BEGIN " not in data or len(data) > MAX_PEM_BYTES:
        raise UserError(f"{what} {quoted(str(path))} is not a PEM file")
    return data


@dataclass(frozen=True)
class ServiceTLS:
    """The server's certificate and key (PEM files) and, for mutual TLS, the CA that signed
    the clients' certificates."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    def server_credentials(self) -> grpc.ServerCredentials:
        """grpcio's credentials for a TLS port (clients must present a certificate signed
        by ``client_ca_file`` when it is set)."""
        pair = (_pem(self.key_file, "--tls-key"), _pem(self.cert_file, "--tls-cert"))
        ca = _pem(self.client_ca_file, "--tls-client-ca") if self.client_ca_file else None
        return grpc.ssl_server_credentials([pair], root_certificates=ca,
                                           require_client_auth=ca is not None)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (127.0.0.0/8, ::1 or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, tls: ServiceTLS | None, insecure: bool) -> None:
    """Refuse to serve in clear text beyond loopback, unless ``insecure``."""
    if tls is None and not insecure and not is_loopback(host):
        raise UserError(f"--host {quoted(host)} is reachable from other machines, and without "
                        "TLS every token would cross the network in clear text: give "
                        "--tls-cert and --tls-key (docs/service.md), or --insecure if you "
                        "must")


def client_channel(target: str, ca_file: str | None = None, cert_file: str | None = None,
                   key_file: str | None = None) -> grpc.Channel:
    """A channel to ``target``: TLS checked against ``ca_file`` (default ``IPUPOD_TLS_CA``)
    with the client's certificate for mutual TLS (default ``IPUPOD_TLS_CERT`` /
    ``IPUPOD_TLS_KEY``); clear text when no CA is given."""
    ca_file = ca_file or os.environ.get(CA_VARIABLE) or None
    if not ca_file:
        return grpc.insecure_channel(target)
    cert_file = cert_file or os.environ.get(CLIENT_CERT_VARIABLE) or None
    key_file = key_file or os.environ.get(CLIENT_KEY_VARIABLE) or None
    if bool(cert_file) != bool(key_file):
        raise UserError(f"a client certificate needs its key: set both {CLIENT_CERT_VARIABLE}"
                        f" and {CLIENT_KEY_VARIABLE}, or neither")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_pem(ca_file, "--tls-ca"),
        private_key=_pem(key_file, CLIENT_KEY_VARIABLE) if key_file else None,
        certificate_chain=_pem(cert_file, CLIENT_CERT_VARIABLE) if cert_file else None)
    return grpc.secure_channel(target, credentials)


def bind(server: grpc.Server, address: str, tls: ServiceTLS | None) -> int:
    """Add a port at ``address`` (TLS if ``tls``); the port bound, 0 if it could not be."""
    try:
        if tls is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, tls.server_credentials())
    except RuntimeError:  # grpcio raises where it once returned 0
        return 0
