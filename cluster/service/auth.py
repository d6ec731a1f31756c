"""Bearer-token auth of the control service.

``ipupod serve`` writes a fresh random token to a file only its user can read (mode 0600;
``~/.ipupod/token`` unless ``--token-file`` or ``IPUPOD_TOKEN_FILE`` says otherwise);
clients read it and send ``authorization: Bearer <token>`` with every call; the server
refuses any call without it (UNAUTHENTICATED).
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from cluster.errors import UserError

TOKEN_FILE_VARIABLE = "IPUPOD_TOKEN_FILE"


def default_token_file() -> Path:
    """``IPUPOD_TOKEN_FILE`` if set, else ``~/.ipupod/token``."""
    return Path(os.environ.get(TOKEN_FILE_VARIABLE, Path.home() / ".ipupod" / "token"))


def write_token(path: Path) -> str:
    """A fresh random token in a file only this user can read (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token + "\n")
    os.chmod(path, 0o600)
    return token


def read_token(path: Path) -> str:
    """The token in ``path``; a user error naming the file if there is none."""
    try:
        return path.read_text().strip()
    except OSError:
        raise UserError(f"no token file at {path}: start `ipupod serve` first, or pass "
                        "--token-file") from None


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata that carries ``token``."""
    return (("authorization", f"Bearer {token}"),)


def _deny(request: Any, context: grpc.ServicerContext) -> None:
    """Answer a call without the right token: UNAUTHENTICATED, saying what to send."""
    context.abort(grpc.StatusCode.UNAUTHENTICATED,
                  "missing or wrong token: send 'authorization: Bearer <token>' with the "
                  "token from the file `ipupod serve` printed")


class BearerToken(grpc.ServerInterceptor):
    """Refuse any call without the right ``authorization: Bearer <token>`` metadata."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()
        self._deny = grpc.unary_unary_rpc_method_handler(_deny)

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        """Pass the call on if its token is right (compared in constant time)."""
        given = dict(details.invocation_metadata or ()).get("authorization", "")
        if hmac.compare_digest(str(given).encode(), self._expected):
            return continuation(details)
        return self._deny
