"""Bearer-token auth of the control service.

``ipupod serve`` writes a fresh random token to a file only its user can read (mode 0600),
one per service: ``token-<port>`` in the state directory (``~/.ipupod``, or
``IPUPOD_STATE_DIR``; mode 0700) unless ``--token-file`` or ``IPUPOD_TOKEN_FILE`` says
otherwise. It is written atomically (a temporary file renamed over the old one), so a
reader never sees half a token and a symlink at the path is replaced, never followed.
Clients read the file for the port they call and send ``authorization: Bearer <token>``
with every call; the server refuses any call without it (UNAUTHENTICATED).
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from cluster.errors import UserError

TOKEN_FILE_VARIABLE = "IPUPOD_TOKEN_FILE"
STATE_DIR_VARIABLE = "IPUPOD_STATE_DIR"


def state_dir() -> Path:
    """``IPUPOD_STATE_DIR`` if set, else ``~/.ipupod``: where services keep their tokens."""
    return Path(os.environ.get(STATE_DIR_VARIABLE, Path.home() / ".ipupod"))


def default_token_file(port: int) -> Path:
    """``IPUPOD_TOKEN_FILE`` if set, else ``token-<port>`` in the state directory: each
    service's token is its own."""
    named = os.environ.get(TOKEN_FILE_VARIABLE)
    return Path(named) if named else state_dir() / f"token-{port}"


def new_token() -> str:
    """A fresh random token (256 bits, URL-safe text)."""
    return secrets.token_urlsafe(32)


def _private_dir(folder: Path) -> None:
    """Make ``folder`` (mode 0700 if created); refuse a symlink or someone else's folder."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(folder)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UserError(f"{folder} is not a directory (a symlink?): choose another "
                        "--token-file or IPUPOD_STATE_DIR")
    if info.st_uid != os.getuid():
        raise UserError(f"{folder} belongs to another user: choose another --token-file or "
                        "IPUPOD_STATE_DIR")


def save_token(path: Path, token: str, private: bool = False) -> None:
    """Write ``token`` to ``path`` atomically (temporary file, then ``os.replace``), mode
    0600; with ``private`` the folder is made (or set to) mode 0700 first."""
    _private_dir(path.parent)
    if private:
        os.chmod(path.parent, 0o700)
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=".token-", dir=path.parent)
    except OSError as error:
        raise UserError(f"cannot write the token in {path.parent} ({error.strerror}): choose "
                        "another --token-file") from None
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as error:
        os.unlink(temporary)
        raise UserError(f"cannot write the token to {path} ({error.strerror}): choose "
                        "another --token-file") from None


def write_token(path: Path) -> str:
    """A fresh random token saved in ``path`` (see :func:`save_token`); the token."""
    token = new_token()
    save_token(path, token)
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
