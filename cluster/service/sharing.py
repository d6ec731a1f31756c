"""A POD several people share: the control API behind a gate that knows who is calling.

:class:`SharedControl` stands in front of :class:`cluster.service.control_server.ControlService`:
for each call it finds the caller (:mod:`cluster.service.users`), asks the rules
(:mod:`cluster.service.access`) whether they may, checks the quota and the expensive-call
limits (:mod:`cluster.service.rate_limits`), records who owns each partition (persisted by
:mod:`cluster.service.state` before the call answers), shows each user their own partitions,
serves the user calls, and writes the audit log (:mod:`cluster.service.audit`). Someone who
never adds a user is the administrator in every call and sees the service as before.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from cluster.service.access import METHOD_VERBS, STATE_CHANGING, Reach, Role, Verb, allowed, denial
from cluster.service.audit import AuditLog
from cluster.service.control_tls import ServiceTLS
from cluster.service.rate_limits import CallLimiter, Limits
from cluster.service.restore import Restored, bring_back
from cluster.service.service_error import ServiceError, Status
from cluster.service.token_auth import BearerToken
from cluster.service.users import ADMIN, Caller, UserBook, UserRecord
from gcl.modes import Mode
from ipupod_proto import control_pb2

Behaviour = Callable[[Any, grpc.ServicerContext], Any]
OTHERS_PARTITION = "(another user's)"  # what a user sees of a device in another's partition


@dataclass(frozen=True)
class ShareOptions:
    """How a shared service runs: TLS, where the audit log and the state go, user limits."""

    tls: ServiceTLS | None = None
    audit_log: Path | None = None
    state_file: Path | None = None
    limits: Limits = field(default_factory=Limits)
    fresh_state: bool = False  # move an earlier state file aside and start empty


def bearer_of(metadata: Any) -> str:
    """The token in a call's ``authorization: Bearer`` metadata ('' if none)."""
    given = str(dict(metadata or ()).get("authorization", ""))
    return given[len("Bearer "):] if given.startswith("Bearer ") else ""


def _target(request: Any) -> str:
    """What a request names: a partition, card, link or user ('' if nothing)."""
    for name in ("name", "partition", "card", "link"):
        value = getattr(request, name, "")
        if value:
            return str(value)
    return ""


def _text(details: Any) -> str:
    """A status's message as text (grpc hands an aborted call's back as bytes)."""
    if isinstance(details, bytes):
        return details.decode("utf-8", "replace")
    return str(details or "")


def _is_real(request: Any) -> bool:
    return str(getattr(request, "mode", "")).strip().lower() == Mode.REAL


class SharedControl:
    """The control API with users, ownership, quotas, limits and the audit log; attribute
    ``X`` is the guarded behaviour of method ``X`` (what :func:`control_handler` looks up)."""

    def __init__(self, control: Any, book: UserBook, audit: AuditLog, limits: Limits,
                 owners: dict[str, str] | None = None, store: Any = None,
                 restored: Restored | None = None) -> None:
        self.control, self.book, self.audit, self.store = control, book, audit, store
        self.restored = restored  # what the start brought back from the state file
        self.limiter = CallLimiter(limits)
        self.owners: dict[str, str] = dict(owners or {})
        self._changes = threading.Lock()  # creates and removes, one at a time
        self._users: dict[str, Behaviour] = {
            "AddUser": self._add_user, "ListUsers": self._list_users,
            "RemoveUser": self._remove_user, "RotateUser": self._rotate_user}

    def __getattr__(self, name: str) -> Behaviour:
        if name.startswith("_") or name not in METHOD_VERBS:
            raise AttributeError(name)
        inner = self._users.get(name) or getattr(self.control, name)
        if name == "StreamBenchmark":
            return self._guard_stream(name, inner)
        return self._guard(name, inner)

    def open_audit(self, path: Path) -> None:
        """Write the audit log to ``path`` from now on."""
        previous, self.audit = self.audit, AuditLog(path)
        previous.close()

    # -- the gate -----------------------------------------------------------------------
    def refused_unauthenticated(self, method: str) -> None:
        """Audit a call refused for want of a known token or credential."""
        self.audit.record("unknown", method.rsplit("/", 1)[-1], "", "UNAUTHENTICATED")

    def refused_undecodable(self, method: str, message: str,
                            context: grpc.ServicerContext) -> None:
        """Audit a call refused because its bytes are not the method's message."""
        caller = self.book.identify(bearer_of(context.invocation_metadata()))
        self.audit.record(caller.name if caller else "unknown", method, "",
                          "INVALID_ARGUMENT", message)

    def _admit(self, name: str, request: Any, context: grpc.ServicerContext) -> Caller:
        """The caller, if they may make this call; else end it (PERMISSION_DENIED)."""
        caller = self.book.identify(bearer_of(context.invocation_metadata()))
        if caller is None:  # revoked since the interceptor let it in
            self.refused_unauthenticated(name)
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")
        assert caller is not None
        verb, target = METHOD_VERBS[name], _target(request)
        if not allowed(verb, caller.role, self._reach(verb, caller, request)):
            message = denial(verb, caller.name, target)
            self.audit.record(caller.name, name, target, "PERMISSION_DENIED", message)
            context.abort(grpc.StatusCode.PERMISSION_DENIED, message)
        return caller

    def _reach(self, verb: Verb, caller: Caller, request: Any) -> Reach:
        """Whose partition (or hardware) the request touches, seen from ``caller``."""
        if verb is Verb.PARTITION:
            owners = {self.owners.get(_target(request), "")} - {""}
        elif verb is Verb.KILL_CARD:
            owners = self._card_owners(request.card)
        else:
            return Reach.NONE
        if not owners:
            return Reach.NONE
        return Reach.OWN if owners == {caller.name} else Reach.OTHERS

    def _card_owners(self, card: str) -> set[str]:
        """The owners of the partitions on ``card``'s IPUs."""
        ipus = [i for spec in self.control.pod.specs if spec.name == card for i in spec.ipus]
        names = {self.control.partitions.partition_of(ipu) for ipu in ipus} - {None}
        return {self.owners.get(n, ADMIN) for n in names}

    def _ended(self, caller: Caller, name: str, request: Any,
               context: grpc.ServicerContext) -> None:
        """Audit a call that raised: its status code and message, if it was refused."""
        code = context.code() if hasattr(context, "code") else None
        if code is not None and code != grpc.StatusCode.OK:
            self.audit.record(caller.name, name, _target(request), code.name,
                              _text(context.details()))

    def _guard(self, name: str, inner: Behaviour) -> Behaviour:
        def call(request: Any, context: grpc.ServicerContext) -> Any:
            caller = self._admit(name, request, context)
            try:
                with self._limited(caller, request):
                    answer = self._run(name, inner, caller, request, context)
            except ServiceError as error:
                self._refuse(caller, name, request, context, error)
            except Exception:
                self._ended(caller, name, request, context)
                raise
            if name in STATE_CHANGING:
                self.audit.record(caller.name, name, _target(request), "ok")
            return answer

        return call

    def _guard_stream(self, name: str, inner: Behaviour) -> Behaviour:
        def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            caller = self._admit(name, request, context)
            try:
                with self._limited(caller, request):
                    yield from inner(request, context)
            except ServiceError as error:
                self._refuse(caller, name, request, context, error)
            except Exception:
                self._ended(caller, name, request, context)
                raise

        return stream

    def _refuse(self, caller: Caller, name: str, request: Any, context: grpc.ServicerContext,
                error: ServiceError) -> None:
        """Audit and end a call the gate refuses (a quota, a limit, a user mistake)."""
        self.audit.record(caller.name, name, _target(request), error.code.value, str(error))
        context.abort(grpc.StatusCode[error.code.name], str(error))

    def _limited(self, caller: Caller, request: Any) -> AbstractContextManager[None]:
        """A slot of the caller's expensive calls, for a user's real-mode benchmark."""
        if caller.role is Role.USER and _is_real(request):
            return self.limiter.expensive(caller.name)
        return nullcontext()

    # -- partitions and their owners ----------------------------------------------------
    def _run(self, name: str, inner: Behaviour, caller: Caller, request: Any,
             context: grpc.ServicerContext) -> Any:
        """Call ``inner``, with what ownership adds to each call."""
        if name == "CreatePartition":
            with self._changes:
                self._check_caller(caller)
                self._check_quota(caller, request)
                answer = inner(request, context)
                self._keep(answer.name, caller.name)
        elif name == "RemovePartition":
            with self._changes:
                answer = inner(request, context)
                self._forget(answer.name)
        else:
            answer = inner(request, context)
        if name == "ListPartitions":
            shown = [p for p in answer.partitions
                     if caller.role is Role.ADMIN or self.owners.get(p.name) == caller.name]
            del answer.partitions[:]
            answer.partitions.extend(shown)
            for partition in answer.partitions:
                partition.owner = self.owners.get(partition.name, ADMIN)
        elif name == "ListDevices" and caller.role is Role.USER:
            for device in answer.devices:  # another's partition: in use, but not named
                if device.partition and self.owners.get(device.partition) != caller.name:
                    device.partition = OTHERS_PARTITION
        elif isinstance(answer, control_pb2.Partition):
            answer.owner = caller.name if name == "CreatePartition" else self.owners.get(
                answer.name, ADMIN)
        return answer

    def _keep(self, name: str, owner: str) -> None:
        """Record ``owner`` of the partition just made, saved before the call answers; if
        it cannot be saved the partition is undone (never acknowledged half-made)."""
        if self.store is not None:
            try:
                self.store.save_partition(self.control.partitions.get(name), owner)
            except BaseException:
                self.control.partitions.remove(name)
                raise
        self.owners[name] = owner

    def _forget(self, name: str) -> None:
        """Drop the owner of partition ``name``, just removed (from the state file first)."""
        if self.store is not None:
            self.store.delete_partition(name)
        self.owners.pop(name, None)

    def _check_caller(self, caller: Caller) -> None:
        """Refuse a user removed while their call waited for :attr:`_changes`: what they
        made would have no owner."""
        if caller.role is Role.USER and not self.book.exists(caller.name):
            raise ServiceError(Status.FAILED_PRECONDITION, f"user {caller.name!r} was removed "
                                                      "while this call waited")

    def _owned_by(self, user: str) -> list[str]:
        """The names of ``user``'s partitions, in creation order."""
        return [p.name for p in self.control.partitions.list()
                if self.owners.get(p.name) == user]

    def _held(self, user: str) -> tuple[int, int]:
        """The IPUs and partitions ``user`` holds now."""
        mine = [p for p in self.control.partitions.list() if self.owners.get(p.name) == user]
        return sum(p.size for p in mine), len(mine)

    def _check_quota(self, caller: Caller, request: Any) -> None:
        """Refuse a create past the caller's ``--max-ipus`` (RESOURCE_EXHAUSTED)."""
        quota = self.book.max_ipus(caller.name) if caller.role is Role.USER else 0
        held = self._held(caller.name)[0]
        if quota and held + request.size > quota:
            raise ServiceError(Status.RESOURCE_EXHAUSTED, (
                f"cannot create partition {request.name!r} of {request.size} IPUs: "
                f"{caller.name} holds {held} IPUs of a quota of {quota} (--max-ipus), "
                f"so {max(quota - held, 0)} more at most; remove a partition first"))

    # -- users --------------------------------------------------------------------------
    def _user_message(self, record: UserRecord) -> control_pb2.User:
        ipus, count = self._held(record.name)
        return control_pb2.User(name=record.name, max_ipus=record.max_ipus, ipus_used=ipus,
                                partitions=count)

    def _add_user(self, request: Any, context: grpc.ServicerContext) -> Any:
        record, credential = self.book.add(request.name, request.max_ipus)
        return control_pb2.UserCredential(user=self._user_message(record),
                                          credential=credential)

    def _rotate_user(self, request: Any, context: grpc.ServicerContext) -> Any:
        record, credential = self.book.rotate(request.name)
        return control_pb2.UserCredential(user=self._user_message(record),
                                          credential=credential)

    def _remove_user(self, request: Any, context: grpc.ServicerContext) -> Any:
        """Revoke a user; refused while they own partitions, unless ``with_partitions``
        asks to remove those too (each freed on the POD and audited), first."""
        with self._changes:
            record = self.book.find(request.name)
            owned = self._owned_by(record.name)
            if owned and not request.with_partitions:
                raise ServiceError(Status.FAILED_PRECONDITION, (
                    f"user {record.name!r} owns partition{'s' if len(owned) > 1 else ''} "
                    f"{', '.join(owned)}: remove them first, or remove the user with them "
                    f"(ipupod user remove {record.name} --with-partitions)"))
            message = self._user_message(record)
            for partition in owned:
                self.control.RemovePartition(control_pb2.PartitionRef(name=partition),
                                             context)
                self._forget(partition)
                self.audit.record(ADMIN, "RemovePartition", partition, "ok",
                                  f"with user {record.name}")
            self.book.remove(record.name)
            return message

    def _list_users(self, request: Any, context: grpc.ServicerContext) -> Any:
        return control_pb2.UserList(users=[self._user_message(r) for r in self.book.list()])


def open_shared(control: Any, token: str, options: ShareOptions) -> tuple[SharedControl, Any]:
    """The gate in front of ``control`` for ``options``, and the interceptor that refuses
    calls without the administrator's token or a user's credential."""
    brought = bring_back(control, token, options.state_file, options.fresh_state)
    book = brought.book
    shared = SharedControl(control, book, AuditLog(options.audit_log), options.limits,
                           brought.owners, brought.store, brought.restored)
    gate = BearerToken(token, accept=lambda given: book.identify(given) is not None,
                       refused=shared.refused_unauthenticated)
    return shared, gate
