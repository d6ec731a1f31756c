"""TLS for links that listen beyond loopback: the standard library's ``ssl``, ALPN ``h2``
(gRPC's wire protocol over TLS), TLS 1.2 at least, the peer checked against a CA. Off
unless asked for: on one machine the link secret is enough, and TLS costs CPU per byte."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from cluster.errors import UserError

ALPN = "h2"


@dataclass(frozen=True)
class LinkTLS:
    """A device's certificate and key (PEM files), and the CA that signed its peers'.
    ``server_name`` is the name peers' certificates are checked against."""

    cert_file: str
    key_file: str
    ca_file: str
    server_name: str = "localhost"

    def __post_init__(self) -> None:
        for name in ("cert_file", "key_file", "ca_file"):
            path = Path(getattr(self, name))
            if not path.is_file():
                raise UserError(f"link TLS: {name} {str(path)!r} is not a file")

    def server_context(self) -> ssl.SSLContext:
        """What a link server wraps accepted connections in."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        return self._common(context)

    def client_context(self) -> ssl.SSLContext:
        """What a link client wraps its connections in (it checks the server's name)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        return self._common(context)

    def _common(self, context: ssl.SSLContext) -> ssl.SSLContext:
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols([ALPN])
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
            context.load_verify_locations(self.ca_file)
        except (ssl.SSLError, OSError) as error:
            raise UserError(f"link TLS: cannot load the certificate, key or CA: {error}") \
                from None
        context.verify_mode = ssl.CERT_REQUIRED  # both ways: peers are devices of the POD
        return context
