"""Who is calling: the server interceptor that authenticates every call.

A call must carry ``authorization: Bearer <token>``: the administrator's token (the one
``ipupod serve`` wrote, :mod:`cluster.service.token_auth`) or a user's credential
(:mod:`cluster.service.users`). Without one the call is refused with UNAUTHENTICATED
before any servicer sees it. With one, the caller is found again when the call runs (a
credential revoked in between no longer counts) and kept for the call's servicer, which
asks :meth:`Authenticator.caller_of` rather than reading the metadata itself.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import grpc

from cluster.service.users import Caller

Identify = Callable[[str], Caller | None]
"""The caller a token belongs to, or None."""
Refused = Callable[[str], None]
"""Told the name of each method a call was refused for want of a known token."""


def bearer_of(metadata: Any) -> str:
    """The token in a call's ``authorization: Bearer`` metadata ('' if none)."""
    given = str(dict(metadata or ()).get("authorization", ""))
    return given[len("Bearer "):] if given.startswith("Bearer ") else ""


def _deny(request: Any, context: grpc.ServicerContext) -> None:
    """Answer a call without the right token: UNAUTHENTICATED, saying what to send."""
    context.abort(grpc.StatusCode.UNAUTHENTICATED,
                  "missing or wrong token: send 'authorization: Bearer <token>' with the "
                  "token from the file `ipupod serve` printed")


class Authenticator(grpc.ServerInterceptor):
    """Refuse any call whose token ``identify`` does not know (telling ``refused``); pass
    the others on, their caller found again when the call runs and held for
    :meth:`caller_of` while it lasts."""

    def __init__(self, identify: Identify, refused: Refused) -> None:
        self._identify, self._refused = identify, refused
        self._deny = grpc.unary_unary_rpc_method_handler(_deny)
        self._callers: weakref.WeakKeyDictionary[Any, Caller] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def intercept_service(self, continuation: Callable[[Any], Any], details: Any) -> Any:
        """The method's handler, for a call with a known token; else the refusal."""
        token = bearer_of(details.invocation_metadata)
        if self._identify(token) is None:
            self._refused(str(details.method))
            return self._deny
        handler = continuation(details)
        if handler is None or handler.request_streaming:  # not ours: reflection, unknown
            return handler
        method = str(details.method).rsplit("/", 1)[-1]
        codec = {"request_deserializer": handler.request_deserializer,
                 "response_serializer": handler.response_serializer}
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(handler.unary_stream, token, method), **codec)
        return grpc.unary_unary_rpc_method_handler(
            self._unary(handler.unary_unary, token, method), **codec)

    def caller_of(self, context: grpc.ServicerContext) -> Caller:
        """The caller of the call ``context`` belongs to (one this interceptor passed)."""
        with self._lock:
            return self._callers[context]

    def _admit(self, token: str, method: str, context: grpc.ServicerContext) -> None:
        """Hold the caller of ``token`` for this call; end it (UNAUTHENTICATED) if the
        token no longer identifies anyone (revoked since the call came in)."""
        caller = self._identify(token)
        if caller is None:
            self._refused(method)
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")
        assert caller is not None  # abort raises
        with self._lock:
            self._callers[context] = caller

    def _unary(self, behaviour: Callable[[Any, Any], Any], token: str,
               method: str) -> Callable[[Any, Any], Any]:
        def call(request: Any, context: grpc.ServicerContext) -> Any:
            self._admit(token, method, context)
            return behaviour(request, context)

        return call

    def _streaming(self, behaviour: Callable[[Any, Any], Any], token: str,
                   method: str) -> Callable[[Any, Any], Any]:
        def stream(request: Any, context: grpc.ServicerContext) -> Any:
            self._admit(token, method, context)
            yield from behaviour(request, context)

        return stream
