"""The gate around each method of a shared POD's control API, as its rule says.

For every call the gate takes the caller the interceptor found
(:mod:`cluster.service.authentication`), asks the rules (:mod:`cluster.service.access`)
whether they may make it to what its request names, holds one of their expensive-call
slots for a user's real-mode benchmark (:mod:`cluster.service.rate_limits`), turns a
:class:`~cluster.service.service_error.ServiceError` into its status, and writes the audit
log (:mod:`cluster.service.audit`): every refusal, and every outcome of a method that
changes the POD's state. What a method does is the servicer's; when it is done, here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import grpc

from cluster.service.access import METHODS, MethodRule, Reach, Role, Verb, allowed, denial
from cluster.service.audit import AuditLog
from cluster.service.rate_limits import CallLimiter
from cluster.service.service_error import ServiceError
from cluster.service.users import Caller
from gcl.modes import Mode

Behaviour = Callable[[Any, grpc.ServicerContext], Any]
CallerOf = Callable[[grpc.ServicerContext], Caller]
ReachOf = Callable[[Verb, Caller, str], Reach]
"""Whose things a call of this verb to this target touches, seen from the caller."""


def _text(details: Any) -> str:
    """A status's message as text (grpc hands an aborted call's back as bytes)."""
    if isinstance(details, bytes):
        return details.decode("utf-8", "replace")
    return str(details or "")


def _is_real(request: Any) -> bool:
    return str(getattr(request, "mode", "")).strip().lower() == Mode.REAL


class Gate:
    """Admits, limits and audits the calls of each method by its :class:`MethodRule`."""

    def __init__(self, audit: AuditLog, limiter: CallLimiter, caller_of: CallerOf,
                 reach: ReachOf) -> None:
        self.audit, self.limiter = audit, limiter
        self._caller_of, self._reach = caller_of, reach

    def guard(self, name: str, behaviour: Behaviour, streaming: bool) -> Behaviour:
        """``behaviour`` (method ``name``'s servicer) behind the gate."""
        rule = METHODS[name]
        return (self._guard_stream if streaming else self._guard_unary)(name, rule, behaviour)

    def refused_undecodable(self, method: str, message: str,
                            context: grpc.ServicerContext) -> None:
        """Audit a call refused because its bytes are not the method's message."""
        self.audit.record(self._caller_of(context).name, method, "", "INVALID_ARGUMENT",
                          message)

    def _admit(self, name: str, rule: MethodRule, target: str,
               context: grpc.ServicerContext) -> Caller:
        """The caller, if they may make this call; else end it (PERMISSION_DENIED)."""
        caller = self._caller_of(context)
        if not allowed(rule.verb, caller.role, self._reach(rule.verb, caller, target)):
            message = denial(rule.verb, caller.name, target)
            self.audit.record(caller.name, name, target, "PERMISSION_DENIED", message)
            context.abort(grpc.StatusCode.PERMISSION_DENIED, message)
        return caller

    def _guard_unary(self, name: str, rule: MethodRule, behaviour: Behaviour) -> Behaviour:
        def call(request: Any, context: grpc.ServicerContext) -> Any:
            target = str(getattr(request, rule.target)) if rule.target else ""
            caller = self._admit(name, rule, target, context)
            try:
                with self._limited(rule, caller, request):
                    answer = behaviour(request, context)
            except ServiceError as error:
                self._refuse(caller, name, target, context, error)
            except Exception:
                self._ended(caller, name, target, context)
                raise
            if rule.audited:
                self.audit.record(caller.name, name, target, "ok")
            return answer

        return call

    def _guard_stream(self, name: str, rule: MethodRule, behaviour: Behaviour) -> Behaviour:
        def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            target = str(getattr(request, rule.target)) if rule.target else ""
            caller = self._admit(name, rule, target, context)
            try:
                with self._limited(rule, caller, request):
                    yield from behaviour(request, context)
            except ServiceError as error:
                self._refuse(caller, name, target, context, error)
            except Exception:
                self._ended(caller, name, target, context)
                raise

        return stream

    def _limited(self, rule: MethodRule, caller: Caller,
                 request: Any) -> AbstractContextManager[None]:
        """A slot of the caller's expensive calls, for a user's real-mode benchmark."""
        if rule.expensive and caller.role is Role.USER and _is_real(request):
            return self.limiter.expensive(caller.name)
        return nullcontext()

    def _refuse(self, caller: Caller, name: str, target: str,
                context: grpc.ServicerContext, error: ServiceError) -> None:
        """Audit and end a call the gate refuses (a quota, a limit, a user mistake)."""
        self.audit.record(caller.name, name, target, error.code.value, str(error))
        context.abort(grpc.StatusCode[error.code.name], str(error))

    def _ended(self, caller: Caller, name: str, target: str,
               context: grpc.ServicerContext) -> None:
        """Audit a call that raised: its status code and message, if it was refused."""
        code = context.code() if hasattr(context, "code") else None
        if code is not None and code != grpc.StatusCode.OK:
            self.audit.record(caller.name, name, target, code.name, _text(context.details()))
