"""Why a client could not connect to the service, when TLS is why.

gRPC reports a plain-text client at a TLS service, a CA that did not sign the service's
certificate and a missing client certificate all alike: UNAVAILABLE, "failed to connect to
all addresses". After such a failure, :func:`tls_problem` makes the connection once more with
Python's ``ssl``, as the client made it, and names what is wrong and what to pass.
"""

from __future__ import annotations

import socket
import ssl

from cluster.errors import quoted
from cluster.service.control_tls import (
    CA_VARIABLE,
    CLIENT_CERT_VARIABLE,
    CLIENT_KEY_VARIABLE,
    ClientTLS,
)

PROBE_SECONDS = 5.0  # the deadline of each connection made to find out
_SETTINGS = 0x4  # HTTP/2 frame type: what a gRPC server sends first
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, _SETTINGS, 0, 0, 0, 0, 0])
# OpenSSL's verify codes (x509_vfy.h): the certificate's issuer is not the CA given ...
_NOT_SIGNED_BY_CA = {2, 7, 18, 19, 20, 21}
_OUT_OF_DATE = {9, 10}  # ... not yet valid, expired
_WRONG_NAME = {62, 64}  # ... not valid for the host name or address connected to


def tls_problem(host: str, port: int, tls: ClientTLS | None) -> str | None:
    """What is wrong with TLS between this client and the service at ``host:port``, as one
    message saying what to pass; None if TLS is not the problem (nothing listens there,
    or both sides agree)."""
    try:
        if tls is None:
            return _plain_client_problem(host, port)
        return _tls_client_problem(host, port, tls)
    except OSError:  # cannot connect at all, or no answer in time: not TLS's doing
        return None


def _connect(host: str, port: int) -> socket.socket:
    """A TCP connection to the service, each wait bounded by :data:`PROBE_SECONDS`."""
    return socket.create_connection((host, port), timeout=PROBE_SECONDS)


def _first_frame(connection: socket.socket) -> bytes:
    """Send HTTP/2's preface and return the first bytes of the answer (a gRPC server sends
    its SETTINGS); empty if the server closed the connection (or sent a TLS alert)."""
    try:
        connection.sendall(_PREFACE)
        return connection.recv(9)
    except (ssl.SSLError, ConnectionError):
        return b""


def _is_settings(frame: bytes) -> bool:
    """Whether ``frame`` starts an HTTP/2 SETTINGS frame (type, the fourth byte)."""
    return len(frame) > 3 and frame[3] == _SETTINGS


def _plain_client_problem(host: str, port: int) -> str | None:
    """The client spoke plain text: does the service speak TLS?"""
    unchecked = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    unchecked.check_hostname, unchecked.verify_mode = False, ssl.CERT_NONE
    unchecked.set_alpn_protocols(["h2"])
    with _connect(host, port) as raw:
        try:
            unchecked.wrap_socket(raw, server_hostname=host).close()
        except ssl.SSLError:
            return None
    return (f"the service at {host}:{port} speaks TLS and this client spoke plain text: "
            f"give --tls-ca with the CA that signed its certificate (or set {CA_VARIABLE})")


def _tls_client_problem(host: str, port: int, tls: ClientTLS) -> str | None:
    """The client spoke TLS: did it trust the service's certificate, does the service
    speak TLS at all, and did it accept the client (mutual TLS)?"""
    context = tls.ssl_context()
    with _connect(host, port) as raw:
        try:
            connection = context.wrap_socket(raw, server_hostname=host)
        except ssl.SSLCertVerificationError as error:
            return _certificate_problem(host, port, tls, error)
        except (ssl.SSLError, ConnectionError):
            return _plain_service_problem(host, port)
        with connection:
            if _first_frame(connection):  # the service took the client: TLS is not why
                return None
    if tls.cert is None:  # it closed the connection after the handshake
        return (f"the service at {host}:{port} wants a client certificate (mutual TLS): "
                f"set {CLIENT_CERT_VARIABLE} and {CLIENT_KEY_VARIABLE} to a certificate "
                "that the CA of its --tls-client-ca signed, and its key")
    return (f"the service at {host}:{port} refused the client certificate "
            f"{tls.cert.named()}: give one that the CA of its --tls-client-ca signed")


def _plain_service_problem(host: str, port: int) -> str | None:
    """The TLS handshake failed: is the service speaking plain text?"""
    with _connect(host, port) as raw:
        if not _is_settings(_first_frame(raw)):
            return None
    return (f"the service at {host}:{port} does not speak TLS: leave out --tls-ca (and "
            f"{CA_VARIABLE}), or serve with --tls-cert and --tls-key")


def _certificate_problem(host: str, port: int, tls: ClientTLS,
                         error: ssl.SSLCertVerificationError) -> str:
    """Why the service's certificate was not trusted, and what to pass."""
    where, reason = f"the certificate of the service at {host}:{port}", error.verify_message
    if error.verify_code in _NOT_SIGNED_BY_CA:
        return (f"{where} is not signed by the CA in {tls.ca.named()} ({reason}): give "
                "--tls-ca the certificate of the CA that signed it")
    if error.verify_code in _OUT_OF_DATE:
        return f"{where} is out of date ({reason}): the service needs a new --tls-cert"
    if error.verify_code in _WRONG_NAME:
        return (f"{where} is not valid for {quoted(host)}: connect with --host set to a "
                "name or address it holds (its subjectAltName)")
    return f"{where} does not check out against {tls.ca.named()} ({reason})"
