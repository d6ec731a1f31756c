"""TLS on the control API: the server's certificate and key, optionally a CA whose
certificates clients must present (mutual TLS); clients check the server against a CA. Every
file is checked when it is given (:mod:`cluster.service.pem_files`), not at the first
connection.

A service bound beyond loopback without TLS would send every token in clear text, so
:func:`check_exposure` refuses it unless the user says ``--insecure``.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc

from cluster.errors import UserError, quoted
from cluster.service.pem_files import PemFile, read_ca, read_pair

CA_VARIABLE = "IPUPOD_TLS_CA"
CLIENT_CERT_VARIABLE, CLIENT_KEY_VARIABLE = "IPUPOD_TLS_CERT", "IPUPOD_TLS_KEY"


@dataclass(frozen=True)
class ServiceTLS:
    """The server's certificate and key (PEM files) and, for mutual TLS, the CA that signed
    the clients' certificates."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    def server_credentials(self) -> grpc.ServerCredentials:
        """grpcio's credentials for a TLS port (clients must present a certificate signed
        by ``client_ca_file`` when it is set); a user error naming the files if they are
        not a certificate and its own key, or the CA holds no certificate
        (:mod:`cluster.service.pem_files`)."""
        cert, key = read_pair(self.cert_file, "--tls-cert", self.key_file, "--tls-key")
        ca = None
        if self.client_ca_file is not None:
            ca = read_ca(self.client_ca_file, "--tls-client-ca",
                         "the clients' certificates").data
        return grpc.ssl_server_credentials([(key.data, cert.data)], root_certificates=ca,
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


@dataclass(frozen=True)
class ClientTLS:
    """What a client speaks TLS with, read and checked: the CA it checks the service
    against and, for mutual TLS, its own certificate and key."""

    ca: PemFile
    cert: PemFile | None = None
    key: PemFile | None = None

    @classmethod
    def given(cls, ca_file: str | None = None, cert_file: str | None = None,
              key_file: str | None = None) -> ClientTLS | None:
        """From the files given, else ``IPUPOD_TLS_CA`` / ``IPUPOD_TLS_CERT`` /
        ``IPUPOD_TLS_KEY``; None (clear text) without a CA. A user error for a client
        certificate without a CA (it would go unused), or naming the file
        that is not what it should be (a private key given as the CA, a key that is not the
        certificate's)."""
        ca_file = ca_file or os.environ.get(CA_VARIABLE) or None
        cert_file = cert_file or os.environ.get(CLIENT_CERT_VARIABLE) or None
        key_file = key_file or os.environ.get(CLIENT_KEY_VARIABLE) or None
        if not ca_file:
            if cert_file or key_file:  # it would speak plain text, the certificate unused
                raise UserError(f"a client certificate ({CLIENT_CERT_VARIABLE}, "
                                f"{CLIENT_KEY_VARIABLE}) is for TLS: give --tls-ca (or "
                                f"{CA_VARIABLE}) with the CA that signed the service's "
                                "certificate, or unset them")
            return None
        if bool(cert_file) != bool(key_file):
            raise UserError(f"a client certificate needs its key: set both "
                            f"{CLIENT_CERT_VARIABLE} and {CLIENT_KEY_VARIABLE}, or neither")
        ca = read_ca(ca_file, "--tls-ca", "the service's certificate")
        if cert_file and key_file:
            return cls(ca, *read_pair(cert_file, CLIENT_CERT_VARIABLE, key_file,
                                      CLIENT_KEY_VARIABLE))
        return cls(ca)

    def credentials(self) -> grpc.ChannelCredentials:
        """grpcio's credentials for a channel."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca.data, private_key=self.key.data if self.key else None,
            certificate_chain=self.cert.data if self.cert else None)

    def ssl_context(self) -> ssl.SSLContext:
        """The same checks in Python's ``ssl`` (ALPN ``h2``, as gRPC): to tell why a
        handshake failed (:mod:`cluster.service.tls_diagnosis`)."""
        context = ssl.create_default_context(cadata=self.ca.data.decode("ascii", "replace"))
        context.set_alpn_protocols(["h2"])
        if self.cert and self.key:
            context.load_cert_chain(self.cert.path, self.key.path, password=b"")
        return context


def client_channel(target: str, tls: ClientTLS | None) -> grpc.Channel:
    """A channel to ``target``: TLS if ``tls``, else clear text."""
    if tls is None:
        return grpc.insecure_channel(target)
    return grpc.secure_channel(target, tls.credentials())


def bind(server: grpc.Server, address: str, tls: ServiceTLS | None) -> int:
    """Add a port at ``address`` (TLS if ``tls``); the port bound, 0 if it could not be."""
    try:
        if tls is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, tls.server_credentials())
    except RuntimeError:  # grpcio raises where it once returned 0
        return 0
