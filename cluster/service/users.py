"""The users of a shared POD and their credentials.

A credential is ``NAME:SECRET``, the secret 256 random bits: the name finds the user in one
look-up, and the service keeps only ``sha256(salt + secret)`` with a random salt of its own
per credential (the secret is random, so a fast hash is enough: nothing to guess from a
dictionary). Credentials are compared in constant time. Removing or rotating a user takes
effect on the next call: every call looks the caller up again. The administrator is whoever
holds the token ``ipupod serve`` wrote (``cluster.service.token_auth``).

Names are unique without regard to case (``ALICE`` and ``alice`` are one name, as people read
them): a name is kept as typed, for display, and compared case-folded. A state file written
before this rule may hold two names differing only in case: both are loaded and keep working
(each credential carries its exact name), and a command naming one of them needs its exact
spelling; refusing to start would lock the administrator out of every user and partition
for a mistake the service no longer lets anyone make.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass

from cluster.errors import quoted
from cluster.service.access import Role
from cluster.service.service_error import ServiceError, Status

ADMIN = "admin"  # the administrator's name, in ownership and the audit log; no user's
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}", re.ASCII)
_NAME_RULE = ("a user name is 1 to 32 characters from ASCII letters, digits, '-', '_' and "
              f"'.', starting with a letter or digit, and not {ADMIN!r}")
MAX_IPUS = 1 << 20


@dataclass(frozen=True)
class Caller:
    """Who is calling: a name and a role."""

    name: str
    role: Role


ADMINISTRATOR = Caller(ADMIN, Role.ADMIN)


@dataclass(frozen=True)
class UserRecord:
    """A user as the service keeps it: the salted hash of their credential, their quota
    (``max_ipus``, 0: no limit)."""

    name: str
    salt: bytes
    digest: bytes
    max_ipus: int = 0


def _digest(salt: bytes, secret: str) -> bytes:
    return hashlib.sha256(salt + secret.encode()).digest()


def _issue(name: str, max_ipus: int) -> tuple[UserRecord, str]:
    """A fresh credential for ``name`` and the record that recognises it."""
    secret, salt = secrets.token_urlsafe(32), secrets.token_bytes(16)
    return UserRecord(name, salt, _digest(salt, secret), max_ipus), f"{name}:{secret}"


Saver = Callable[[UserRecord], None]
Deleter = Callable[[str], None]


class UserBook:
    """The administrator's token and the users' records (thread-safe); ``save`` and
    ``delete`` (when given) persist a change before it is answered."""

    def __init__(self, admin_token: str, records: list[UserRecord] | None = None,
                 save: Saver | None = None, delete: Deleter | None = None) -> None:
        self._admin = admin_token.encode()
        self._users = {r.name: r for r in records or []}
        self._lock = threading.Lock()
        self._save, self._delete = save, delete

    def identify(self, token: str) -> Caller | None:
        """The caller ``token`` belongs to, or None (compared in constant time)."""
        if hmac.compare_digest(token.encode(), self._admin):
            return ADMINISTRATOR
        name, colon, secret = token.partition(":")
        with self._lock:
            record = self._users.get(name) if colon else None
        if record is None or not hmac.compare_digest(_digest(record.salt, secret),
                                                     record.digest):
            return None
        return Caller(record.name, Role.USER)

    def add(self, name: str, max_ipus: int = 0) -> tuple[UserRecord, str]:
        """A new user and their credential (returned once, never kept)."""
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name.casefold() == ADMIN:
            raise ServiceError(Status.INVALID_ARGUMENT,
                               f"invalid user name {quoted(name)}: {_NAME_RULE}")
        if not 0 <= max_ipus <= MAX_IPUS:
            raise ServiceError(Status.INVALID_ARGUMENT, f"max_ipus must be 0 (no limit) to "
                                                        f"{MAX_IPUS}, not {max_ipus}")
        with self._lock:
            same = self._same_name(name)
            if same:
                raise ServiceError(Status.ALREADY_EXISTS, (
                    f"user {same[0]!r} already exists (names are compared without regard to "
                    "case): rotate their credential, remove them first, or choose another "
                    "name"))
            record, credential = _issue(name, max_ipus)
            self._keep(record)
            return record, credential

    def rotate(self, name: str) -> tuple[UserRecord, str]:
        """A new credential for ``name``; the old one stops working now."""
        with self._lock:
            old = self._get(name)
            record, credential = _issue(old.name, old.max_ipus)
            self._keep(record)
            return record, credential

    def remove(self, name: str) -> UserRecord:
        """Revoke ``name``: their credential stops working now."""
        with self._lock:
            record = self._get(name)
            if self._delete is not None:
                self._delete(record.name)
            del self._users[record.name]
            return record

    def find(self, name: str) -> UserRecord:
        """The user ``name`` means (:meth:`_get`): NOT_FOUND, naming the users, if none."""
        with self._lock:
            return self._get(name)

    def exists(self, name: str) -> bool:
        """Whether ``name`` (exactly as a credential carries it) is a user now."""
        with self._lock:
            return name in self._users

    def list(self) -> list[UserRecord]:
        """Every user, by name."""
        with self._lock:
            return sorted(self._users.values(), key=lambda r: r.name)

    def max_ipus(self, name: str) -> int:
        """``name``'s quota in IPUs (0: no limit; the administrator has none)."""
        with self._lock:
            record = self._users.get(name)
            return record.max_ipus if record else 0

    def _same_name(self, name: str) -> builtins.list[str]:
        """The users whose name is ``name`` without regard to case, by name."""
        folded = name.casefold()
        return sorted(n for n in self._users if n.casefold() == folded)

    def _get(self, name: str) -> UserRecord:
        """The user called exactly ``name``, else the one user whose name is ``name``
        without regard to case; INVALID_ARGUMENT if two are (an old state file's)."""
        if not isinstance(name, str):
            name = ""
        if name in self._users:
            return self._users[name]
        same = self._same_name(name)
        if len(same) > 1:
            raise ServiceError(Status.INVALID_ARGUMENT, f"{quoted(name)} names users "
                                                        f"{', '.join(map(repr, same))}: give "
                                                        "the one you mean exactly as it is "
                                                        "spelt")
        if not same:
            known = ", ".join(sorted(self._users)) or "there are none"
            raise ServiceError(Status.NOT_FOUND, f"no user named {quoted(name)}; users: {known}")
        return self._users[same[0]]

    def _keep(self, record: UserRecord) -> None:
        """Persist ``record`` (if a saver is set), then hold it."""
        if self._save is not None:
            self._save(record)
        self._users[record.name] = record
