"""Who may use a link: peers that hold the POD's link secret. The POD makes one at launch
(:func:`new_secret`) and hands it to its devices through Ray; every call carries it as
``authorization: Bearer <secret>`` and the server compares it in constant time. Devices
made outside a POD (tests, benchmarks) share one secret per process (:func:`local_secret`).
A secret is never printed or logged."""

from __future__ import annotations

import hmac
import secrets
import threading

HEADER = "authorization"
UNAUTHENTICATED = 16  # the gRPC status of a call without the secret, or with a wrong one
_local: list[str] = []
_local_lock = threading.Lock()


def new_secret() -> str:
    """A fresh link secret: 256 random bits, URL-safe text."""
    return secrets.token_urlsafe(32)


def local_secret() -> str:
    """This process's link secret, made on first use: what links made without a POD's
    secret use, so devices in one process reach each other and nobody else does."""
    with _local_lock:
        if not _local:
            _local.append(new_secret())
        return _local[0]


def bearer(secret: str) -> tuple[str, str]:
    """The header that carries ``secret`` on a call."""
    return HEADER, f"Bearer {secret}"


def authorized(headers: dict[str, str], secret: str) -> bool:
    """Whether ``headers`` carry ``secret`` (compared in constant time)."""
    given = headers.get(HEADER, "").encode()
    return hmac.compare_digest(given, f"Bearer {secret}".encode())
