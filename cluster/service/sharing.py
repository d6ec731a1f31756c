"""A POD several people share: the control API with users, owners and quotas.

:class:`SharedControl` stands in front of :class:`cluster.service.control_server.ControlService`:
it records who owns each partition (persisted by :mod:`cluster.service.state` before the
call answers), keeps users within their quota, shows each user their own partitions and
serves the user calls. Every call is authenticated by the interceptor
(:mod:`cluster.service.authentication`) and passes the gate (:mod:`cluster.service.gate`:
the rules, the expensive-call limits, the audit log) as its method's rule says
(:data:`cluster.service.access.METHODS`). Someone who never adds a user is the
administrator in every call and sees the service as before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from cluster.service.access import Reach, Role, Verb
from cluster.service.audit import AuditLog
from cluster.service.authentication import Authenticator
from cluster.service.control_api import Context, Control
from cluster.service.control_tls import ServiceTLS
from cluster.service.decoding import control_handler
from cluster.service.gate import CallerOf, Gate
from cluster.service.rate_limits import CallLimiter, Limits
from cluster.service.restore import Restored, bring_back
from cluster.service.service_error import ServiceError, Status
from cluster.service.users import ADMIN, Caller, UserBook, UserRecord
from ipupod_proto import control_pb2

OTHERS_PARTITION = "(another user's)"  # what a user sees of a device in another's partition


@dataclass(frozen=True)
class ShareOptions:
    """How a shared service runs: TLS, where the audit log and the state go, user limits."""

    tls: ServiceTLS | None = None
    audit_log: Path | None = None
    state_file: Path | None = None
    limits: Limits = field(default_factory=Limits)
    fresh_state: bool = False  # move an earlier state file aside and start empty


class SharedControl:
    """The control API of a shared POD: each call of ``control``'s with what users add
    (who owns each partition, persisted before the call answers; quotas; each user shown
    their own) and the user calls. The gate (:class:`~cluster.service.gate.Gate`) stands
    in front of every method here."""

    def __init__(self, control: Control, book: UserBook, audit: AuditLog,
                 caller_of: CallerOf, restored: Restored | None = None) -> None:
        self.control, self.book, self.audit, self._caller_of = control, book, audit, caller_of
        self.partitions = control.partitions  # with their owners (kept in the state file)
        self.restored = restored  # what the start brought back from the state file
        self._changes = threading.Lock()  # creates and removes, one at a time

    def open_audit(self, path: Path) -> None:
        """Write the audit log to ``path`` from now on."""
        self.audit.reopen(path)

    def reach(self, verb: Verb, caller: Caller, target: str) -> Reach:
        """Whose partition (or hardware) a call of ``verb`` to ``target`` touches, seen
        from ``caller``."""
        if verb is Verb.PARTITION:
            owners = {self.partitions.owner_of(target)} - {""}
        elif verb is Verb.KILL_CARD:
            owners = self._card_owners(target)
        else:
            return Reach.NONE
        if not owners:
            return Reach.NONE
        return Reach.OWN if owners == {caller.name} else Reach.OTHERS

    def _card_owners(self, card: str) -> set[str]:
        """The owners of the partitions on ``card``'s IPUs."""
        names = {self.partitions.partition_of(i) for i in self.control.card_ipus(card)}
        return {self._owner(n) for n in names if n is not None}

    def _owner(self, partition: str) -> str:
        """Who owns ``partition``: a user, else the administrator."""
        return self.partitions.owner_of(partition) or ADMIN

    # -- calls as the POD answers them ---------------------------------------------------
    def GetStatus(self, request: control_pb2.StatusRequest,
                  context: Context) -> control_pb2.Status:
        return self.control.GetStatus(request, context)

    def ListLinks(self, request: control_pb2.ListLinksRequest,
                  context: Context) -> control_pb2.LinkList:
        return self.control.ListLinks(request, context)

    def GetTopology(self, request: control_pb2.TopologyRequest,
                    context: Context) -> control_pb2.TopologySummary:
        return self.control.GetTopology(request, context)

    def RunBenchmark(self, request: control_pb2.BenchmarkRequest,
                     context: Context) -> control_pb2.BenchmarkResult:
        return self.control.RunBenchmark(request, context)

    def StreamBenchmark(self, request: control_pb2.BenchmarkRequest,
                        context: Context) -> Iterator[control_pb2.BenchmarkResult]:
        return self.control.StreamBenchmark(request, context)

    def KillCard(self, request: control_pb2.KillCardRequest,
                 context: Context) -> control_pb2.FaultState:
        return self.control.KillCard(request, context)

    def DegradeLink(self, request: control_pb2.DegradeLinkRequest,
                    context: Context) -> control_pb2.FaultState:
        return self.control.DegradeLink(request, context)

    def CutLink(self, request: control_pb2.LinkRef, context: Context) -> control_pb2.FaultState:
        return self.control.CutLink(request, context)

    def HealLink(self, request: control_pb2.LinkRef,
                 context: Context) -> control_pb2.FaultState:
        return self.control.HealLink(request, context)

    def ListFaults(self, request: control_pb2.ListFaultsRequest,
                   context: Context) -> control_pb2.FaultState:
        return self.control.ListFaults(request, context)

    # -- calls with owners -----------------------------------------------------------------
    def CreatePartition(self, request: control_pb2.CreatePartitionRequest,
                        context: Context) -> control_pb2.Partition:
        """A partition of the caller's, within their quota (saved before it answers)."""
        caller = self._caller_of(context)
        with self._changes:
            self._check_caller(caller)
            self._check_quota(caller, request)
            answer = self.control.CreatePartition(request, context)
            self.partitions.claim(answer.name, caller.name)
        answer.owner = caller.name
        return answer

    def RemovePartition(self, request: control_pb2.PartitionRef,
                        context: Context) -> control_pb2.Partition:
        with self._changes:
            answer = self.control.RemovePartition(request, context)
        answer.owner = self._owner(answer.name)
        return answer

    def GetPartition(self, request: control_pb2.PartitionRef,
                     context: Context) -> control_pb2.Partition:
        answer = self.control.GetPartition(request, context)
        answer.owner = self._owner(answer.name)
        return answer

    def ListPartitions(self, request: control_pb2.ListPartitionsRequest,
                       context: Context) -> control_pb2.PartitionList:
        """Every partition, to the administrator; a user's own, to a user."""
        caller = self._caller_of(context)
        answer = self.control.ListPartitions(request, context)
        shown = [p for p in answer.partitions
                 if caller.role is Role.ADMIN or self.partitions.owner_of(p.name) == caller.name]
        del answer.partitions[:]
        answer.partitions.extend(shown)
        for partition in answer.partitions:
            partition.owner = self._owner(partition.name)
        return answer

    def ListDevices(self, request: control_pb2.ListDevicesRequest,
                    context: Context) -> control_pb2.DeviceList:
        """Every IPU; to a user, another's partition is in use but not named."""
        answer = self.control.ListDevices(request, context)
        if self._caller_of(context).role is Role.USER:
            mine = self._caller_of(context).name
            for device in answer.devices:
                if device.partition and self.partitions.owner_of(device.partition) != mine:
                    device.partition = OTHERS_PARTITION
        return answer

    # -- partitions and their owners ----------------------------------------------------
    def _check_caller(self, caller: Caller) -> None:
        """Refuse a user removed while their call waited for :attr:`_changes`: what they
        made would have no owner."""
        if caller.role is Role.USER and not self.book.exists(caller.name):
            raise ServiceError(Status.FAILED_PRECONDITION, f"user {caller.name!r} was removed "
                                                           "while this call waited")

    def _owned_by(self, user: str) -> list[str]:
        """The names of ``user``'s partitions, in creation order."""
        return [p.name for p in self.partitions.owned_by(user)]

    def _held(self, user: str) -> tuple[int, int]:
        """The IPUs and partitions ``user`` holds now."""
        return self.partitions.held_by(user)

    def _check_quota(self, caller: Caller,
                     request: control_pb2.CreatePartitionRequest) -> None:
        """Refuse a create past the caller's ``--max-ipus`` (RESOURCE_EXHAUSTED): the
        partition table checks what the caller holds against the user book's quota."""
        quota = self.book.max_ipus(caller.name) if caller.role is Role.USER else 0
        self.partitions.check_quota(caller.name, request.name, request.size, quota)

    # -- users --------------------------------------------------------------------------
    def _user_message(self, record: UserRecord) -> control_pb2.User:
        ipus, count = self._held(record.name)
        return control_pb2.User(name=record.name, max_ipus=record.max_ipus, ipus_used=ipus,
                                partitions=count)

    def AddUser(self, request: control_pb2.AddUserRequest,
                context: Context) -> control_pb2.UserCredential:
        record, credential = self.book.add(request.name, request.max_ipus)
        return control_pb2.UserCredential(user=self._user_message(record),
                                          credential=credential)

    def RotateUser(self, request: control_pb2.UserRef,
                   context: Context) -> control_pb2.UserCredential:
        record, credential = self.book.rotate(request.name)
        return control_pb2.UserCredential(user=self._user_message(record),
                                          credential=credential)

    def RemoveUser(self, request: control_pb2.RemoveUserRequest,
                   context: Context) -> control_pb2.User:
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
                self.audit.record(ADMIN, "RemovePartition", partition, "ok",
                                  f"with user {record.name}")
            self.book.remove(record.name)
            return message

    def ListUsers(self, request: control_pb2.ListUsersRequest,
                  context: Context) -> control_pb2.UserList:
        return control_pb2.UserList(users=[self._user_message(r) for r in self.book.list()])


def open_shared(control: Control, token: str,
                options: ShareOptions) -> tuple[SharedControl, grpc.GenericRpcHandler,
                                                Authenticator]:
    """The shared servicer in front of ``control`` for ``options``, the handler of every
    control method (each behind the gate) and the interceptor that authenticates calls."""
    brought = bring_back(control, token, options.state_file, options.fresh_state)
    audit = AuditLog(options.audit_log)
    authenticator = Authenticator(brought.book.identify, refused=lambda method: audit.record(
        "unknown", method.rsplit("/", 1)[-1], "", "UNAUTHENTICATED"))
    shared = SharedControl(control, brought.book, audit, authenticator.caller_of,
                           brought.restored)
    gate = Gate(audit, CallLimiter(options.limits), authenticator.caller_of, shared.reach)
    handler = control_handler(
        lambda name, streaming: gate.guard(name, getattr(shared, name), streaming),
        gate.refused_undecodable)
    return shared, handler, authenticator
