"""The one error of the control service: a refusal carrying its status.

:class:`Status` names gRPC's status codes (their names are the wire's); the service raises
:class:`ServiceError` with one of them where a request cannot be done (a partition, a user,
a quota, a limit) and answers with that code and the message, and the client raises it for
a call that ended with one. Pure: :mod:`grpc` appears only where the status meets the wire
(``grpc.StatusCode[status.name]``).
"""

from __future__ import annotations

from enum import Enum

from cluster.errors import UserError


class Status(str, Enum):
    """A gRPC status code other than OK, by its name (the value compares equal to it)."""

    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    UNIMPLEMENTED = "UNIMPLEMENTED"
    INTERNAL = "INTERNAL"
    UNAVAILABLE = "UNAVAILABLE"
    DATA_LOSS = "DATA_LOSS"
    UNAUTHENTICATED = "UNAUTHENTICATED"


class ServiceError(UserError):
    """A request the service refuses (or refused): ``code`` is the status it answers with,
    the message what was wrong and what to do. A code that is not a :class:`Status` (given
    as text) is a ValueError."""

    def __init__(self, code: Status | str, message: str) -> None:
        try:
            status = Status(code)
        except ValueError:
            raise ValueError(f"unknown status {code!r}: use one of "
                             f"{', '.join(s.value for s in Status)}") from None
        super().__init__(message)
        self.code = status
