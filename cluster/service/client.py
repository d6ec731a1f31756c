"""A client of a running ``ipupod serve``.

It finds the service through ``host``/``port`` or ``IPUOF_VIPU_API_HOST`` /
``IPUOF_VIPU_API_PORT`` (V-IPU's variables; default 127.0.0.1:8090), reads the token from
``token_file`` (default: :func:`cluster.service.token_auth.default_token_file`, the token of the
service on that port), speaks TLS when given a CA (``tls_ca`` or ``IPUPOD_TLS_CA``;
:mod:`cluster.service.control_tls`) and turns every refusal into a :class:`ServiceError` a
person can act on, a failed TLS handshake included (:mod:`cluster.service.tls_diagnosis`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc

from cluster.errors import UserError, quoted
from cluster.service.control_tls import ClientTLS, client_channel
from cluster.service.tls_diagnosis import tls_problem
from cluster.service.token_auth import bearer_metadata, default_token_file, read_token
from ipupod_proto import control_pb2_grpc

DEFAULT_PORT = 8090
HOST_VARIABLE, PORT_VARIABLE = "IPUOF_VIPU_API_HOST", "IPUOF_VIPU_API_PORT"


class ServiceError(UserError):
    """The service refused a request (the status code and its message)."""


def service_address(host: str | None, port: int | None) -> tuple[str, int]:
    """The host and port given, else from the environment, else 127.0.0.1:8090."""
    host = host or os.environ.get(HOST_VARIABLE, "127.0.0.1")
    if not host.isprintable() or any(c.isspace() for c in host):
        raise UserError(f"the service host {quoted(host)} is not a host name or address: "
                        f"give one with --host or {HOST_VARIABLE}")
    try:
        port = port or int(os.environ.get(PORT_VARIABLE, DEFAULT_PORT))
    except ValueError:
        raise UserError(f"{PORT_VARIABLE} must be a port number") from None
    return host, port


class Client:
    """A connection to a running service, with the token attached to every call."""

    def __init__(self, host: str | None = None, port: int | None = None,
                 token_file: str | Path | None = None, deadline_seconds: float = 600.0,
                 tls_ca: str | None = None) -> None:
        self.host, self.port = service_address(host, port)
        token = read_token(Path(token_file) if token_file else default_token_file(self.port))
        self.metadata = bearer_metadata(token)
        self.tls = ClientTLS.given(tls_ca)
        self.channel = client_channel(f"{self.host}:{self.port}", self.tls)
        self.stub = control_pb2_grpc.ControlStub(self.channel)
        self.deadline_seconds = deadline_seconds

    def stream(self, method: str, request: Any) -> Iterator[Any]:
        """Call server-streaming ``method``; its answers as they come, then a
        :class:`ServiceError` if the stream ended with one."""
        try:
            yield from getattr(self.stub, method)(request, metadata=self.metadata,
                                                  timeout=self.deadline_seconds)
        except grpc.RpcError as error:
            raise self._refusal(error) from None

    def _refusal(self, error: grpc.RpcError) -> ServiceError:
        """The :class:`ServiceError` a failed call becomes: a connection that failed for a
        reason of TLS's says which (:mod:`cluster.service.tls_diagnosis`)."""
        code = error.code()
        if code == grpc.StatusCode.UNAVAILABLE and "connect" in (error.details() or "").lower():
            return ServiceError(
                tls_problem(self.host, self.port, self.tls)
                or f"cannot reach the service at {self.host}:{self.port}: is `ipupod serve` "
                f"running? (--host/--port or {HOST_VARIABLE}/PORT)")
        return ServiceError(f"{code.name}: {error.details()}")

    def call(self, method: str, request: Any) -> Any:
        """Call ``method`` of the control API with ``request``; its answer, or a
        :class:`ServiceError` saying why not."""
        try:
            return getattr(self.stub, method)(request, metadata=self.metadata,
                                              timeout=self.deadline_seconds)
        except grpc.RpcError as error:
            raise self._refusal(error) from None
