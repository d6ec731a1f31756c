"""The control API's method handlers, with requests decoded so that bytes which are not the
method's message get INVALID_ARGUMENT (grpcio alone answers them with INTERNAL)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from ipupod_proto import control_pb2

SERVICE_NAME = "ipupod.control.v1.Control"


class Undecodable:
    """Stands for request bytes that did not decode; says why (for the message)."""

    def __init__(self, kind: str, reason: str) -> None:
        self.kind, self.reason = kind, reason


def _lenient(message: Any) -> Callable[[bytes], Any]:
    """A deserializer of ``message`` that returns :class:`Undecodable` instead of raising."""

    def decode(data: bytes) -> Any:
        try:
            return message.FromString(data)
        except Exception as error:  # noqa: BLE001 - DecodeError, or bad UTF-8 in a string
            return Undecodable(message.DESCRIPTOR.name, type(error).__name__)

    return decode


Behaviour = Callable[[Any, grpc.ServicerContext], Any]
Refused = Callable[[str, str, grpc.ServicerContext], None]
"""Told of a refused request: the method's name, the message sent back, the call."""


def _checked(behaviour: Behaviour, method: str,
             refused: Refused | None) -> Callable[..., Any]:
    """``behaviour``, refusing an undecodable request with INVALID_ARGUMENT first (and
    telling ``refused``, the audit log, about it)."""

    def call(request: Any, context: grpc.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            message = (f"the request is not a valid {request.kind} message "
                       f"({request.reason}): send the message control.proto defines")
            if refused is not None:
                refused(method, message, context)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)
        return behaviour(request, context)

    return call


def control_handler(behaviour_of: Callable[[str, bool], Behaviour],
                    refused: Refused | None = None) -> grpc.GenericRpcHandler:
    """The handler of every method of the Control service: ``behaviour_of(name,
    server_streaming)`` serves method ``name``; ``refused`` hears of every request refused
    here, before that behaviour sees it."""
    service = control_pb2.DESCRIPTOR.services_by_name["Control"]
    handlers = {}
    for method in service.methods:
        request = getattr(control_pb2, method.input_type.name)
        response = getattr(control_pb2, method.output_type.name)
        make = (grpc.unary_stream_rpc_method_handler if method.server_streaming
                else grpc.unary_unary_rpc_method_handler)
        behaviour = behaviour_of(method.name, method.server_streaming)
        handlers[method.name] = make(_checked(behaviour, method.name, refused),
                                     request_deserializer=_lenient(request),
                                     response_serializer=response.SerializeToString)
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)
