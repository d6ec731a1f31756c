"""Bearer-token auth of the control service.

``ipupod serve`` writes a fresh random token to a file only its user can read (mode 0600),
one per service: ``token-<port>`` in the state directory (``~/.ipupod``, or
``IPUPOD_STATE_DIR``; mode 0700) unless ``--token-file`` or ``IPUPOD_TOKEN_FILE`` says
otherwise. It is written atomically (a temporary file renamed over the old one), so a
reader never sees half a token and a symlink at the path is replaced, never followed.
Clients read the file for the port they call and send ``authorization: Bearer <token>``
with every call; the server refuses any call without it (UNAUTHENTICATED,
:mod:`cluster.service.authentication`).
"""

from __future__ import annotations

import os
import secrets
import stat
import tempfile
from pathlib import Path

from cluster.errors import UserError, quoted
from cluster.model.files import open_regular

TOKEN_FILE_VARIABLE = "IPUPOD_TOKEN_FILE"
STATE_DIR_VARIABLE = "IPUPOD_STATE_DIR"
MAX_TOKEN_BYTES = 4096  # a token is 43 characters; a file larger than this is not one


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


def _private_dir(folder: Path, option: str, make: bool) -> None:
    """Make ``folder`` if ``make`` (mode 0700); refuse a symlink or someone else's folder,
    naming ``option`` (the one that chose it)."""
    if make:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        info = os.lstat(folder)
    except OSError as error:
        raise UserError(f"cannot write in {folder} ({error.strerror}): choose another "
                        f"{option}") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UserError(f"{folder} is not a directory (a symlink?): choose another "
                        f"{option}")
    if info.st_uid != os.getuid():
        raise UserError(f"{folder} belongs to another user: choose another {option}")


def save_token(path: Path, token: str, private: bool = False,
               option: str = "--token-file or IPUPOD_STATE_DIR") -> None:
    """Write ``token`` to ``path`` atomically (temporary file, then ``os.replace``), mode
    0600; with ``private`` (the state directory) the folder is made (or set to) mode 0700
    first; else it must exist. A refusal names ``option``."""
    _private_dir(path.parent, option, make=private)
    if private:
        os.chmod(path.parent, 0o700)
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=".token-", dir=path.parent)
    except OSError as error:
        raise UserError(f"cannot write the token in {path.parent} ({error.strerror}): choose "
                        f"another {option}") from None
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(token + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as error:
        os.unlink(temporary)
        raise UserError(f"cannot write the token to {path} ({error.strerror}): choose "
                        f"another {option}") from None


def write_token(path: Path) -> str:
    """A fresh random token saved in ``path`` (see :func:`save_token`); the token."""
    token = new_token()
    save_token(path, token)
    return token


def read_token(path: Path) -> str:
    """The token in ``path``; a user error naming the file if there is none, or if it is
    not a file (a directory, a FIFO), or holds something other than a token."""
    try:
        with open_regular(path) as handle:
            raw = handle.read(MAX_TOKEN_BYTES + 1)
    except FileNotFoundError:
        raise UserError(f"no token file at {quoted(str(path))}: start `ipupod serve` first, "
                        "or pass --token-file") from None
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        reason = error.strerror if isinstance(error, OSError) else error
        raise UserError(f"cannot read the token file {quoted(str(path))} ({reason}): pass "
                        "the file `ipupod serve` wrote with --token-file") from None
    token = raw.strip()
    if not token or len(raw) > MAX_TOKEN_BYTES or not all(0x21 <= b < 0x7f for b in token):
        raise UserError(f"{quoted(str(path))} holds no token (one word of printable ASCII): "
                        "pass the file `ipupod serve` wrote with --token-file")
    return token.decode("ascii")


def bearer_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """The call metadata that carries ``token``."""
    return (("authorization", f"Bearer {token}"),)
