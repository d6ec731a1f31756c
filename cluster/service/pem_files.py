"""The PEM files given for TLS, checked with Python's ``ssl`` before gRPC sees them: a CA
file must hold a certificate (not a private key), and a certificate and its key must belong
together. gRPC would take any of these and fail later, on the first connection, with a line
of its own log and a status that only says the service cannot be reached."""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from pathlib import Path

from cluster.errors import UserError, quoted
from cluster.model.files import open_regular

MAX_PEM_BYTES = 1 << 20
_LABEL = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----")


@dataclass(frozen=True)
class PemFile:
    """A PEM file as read: where it is, what names it to the user (an option or a variable),
    its bytes, and the labels of its blocks (``CERTIFICATE``, ``PRIVATE KEY``, ...)."""

    path: Path
    what: str
    data: bytes
    labels: frozenset[str]

    def named(self) -> str:
        """How a message names the file: ``--tls-ca '/x/ca.pem'``."""
        return f"{self.what} {quoted(str(self.path))}"

    def holds_key(self) -> bool:
        """Whether a block is a private key (``PRIVATE KEY``, ``EC PRIVATE KEY``, ...)."""
        return any(label.endswith("PRIVATE KEY") for label in self.labels)


def read_pem(path: str | Path, what: str) -> PemFile:
    """The PEM file at ``path``; a user error naming ``what`` if it cannot be read or holds
    no PEM block."""
    try:
        with open_regular(path) as handle:
            data = handle.read(MAX_PEM_BYTES + 1)
    except (OSError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) else error
        raise UserError(f"cannot read {what} {quoted(str(path))} ({reason})") from None
    labels = frozenset(label.decode() for label in _LABEL.findall(data))
    if not labels or len(data) > MAX_PEM_BYTES:
        raise UserError(f"{what} {quoted(str(path))} is not a PEM file")
    return PemFile(Path(path), what, data, labels)


def read_ca(path: str | Path, what: str, signed: str) -> PemFile:
    """A CA's certificate(s) to check peers against (the CA that signed ``signed``): a user
    error naming ``what`` if the file holds a private key instead, or certificates OpenSSL
    cannot load."""
    pem = read_pem(path, what)
    if "CERTIFICATE" not in pem.labels:
        kind = "a private key" if pem.holds_key() else "no certificate"
        raise UserError(f"{pem.named()} holds {kind}, not a CA's certificate: give the "
                        f"certificate of the CA that signed {signed} (ca.pem)")
    try:
        ssl.create_default_context(cadata=pem.data.decode("ascii", "replace"))
    except ssl.SSLError as error:
        raise UserError(f"{pem.named()} holds a certificate OpenSSL cannot load "
                        f"({error.reason or error}): give the CA's certificate") from None
    return pem


def read_pair(cert_path: str | Path, cert_what: str, key_path: str | Path,
              key_what: str) -> tuple[PemFile, PemFile]:
    """A certificate and its private key: a user error naming both files if one is the
    wrong kind, the key is encrypted, or the key is not the certificate's."""
    cert, key = read_pem(cert_path, cert_what), read_pem(key_path, key_what)
    if "CERTIFICATE" not in cert.labels:
        kind = "a private key" if cert.holds_key() else "no certificate"
        raise UserError(f"{cert.named()} holds {kind}: give the certificate there and its "
                        f"key as {key_what}")
    if not key.holds_key():
        raise UserError(f"{key.named()} holds no private key: give the key of "
                        f"{cert.named()} there")
    if b"ENCRYPTED" in key.data:
        raise UserError(f"{key.named()} is encrypted with a passphrase, which gRPC cannot "
                        "ask for: give the key unencrypted (openssl pkey -in KEY -out KEY2)")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert.path, key.path,
                                                                password=b"")
    except ssl.SSLError as error:
        if error.reason == "KEY_VALUES_MISMATCH":
            raise UserError(f"{key.named()} is not the key of {cert.named()}: give a "
                            "certificate and its own key") from None
        raise UserError(f"{cert.named()} and {key.named()} cannot be used together "
                        f"({error.reason or error})") from None
    return cert, key
