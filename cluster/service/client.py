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
from cluster.service.service_error import ServiceError, Status
from cluster.service.tls_diagnosis import tls_problem
from cluster.service.token_auth import bearer_metadata, default_token_file, read_token
from ipupod_proto import control_pb2, control_pb2_grpc

__all__ = ["DEFAULT_PORT", "Client", "ServiceError", "service_address"]

DEFAULT_PORT = 8090
HOST_VARIABLE, PORT_VARIABLE = "IPUOF_VIPU_API_HOST", "IPUOF_VIPU_API_PORT"


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

    def _refusal(self, error: grpc.RpcError) -> ServiceError:
        """The :class:`ServiceError` a failed call becomes: a connection that failed for a
        reason of TLS's says which (:mod:`cluster.service.tls_diagnosis`)."""
        code = error.code()
        if code == grpc.StatusCode.UNAVAILABLE and "connect" in (error.details() or "").lower():
            return ServiceError(Status.UNAVAILABLE,
                tls_problem(self.host, self.port, self.tls)
                or f"cannot reach the service at {self.host}:{self.port}: is `ipupod serve` "
                f"running? (--host/--port or {HOST_VARIABLE}/PORT)")
        return ServiceError(Status[code.name], f"{code.name}: {error.details()}")

    def _ask(self, rpc: Any, request: Any) -> Any:
        """Call unary stub method ``rpc`` with ``request`` (the token and the deadline
        attached); its answer, or a :class:`ServiceError` saying why not."""
        try:
            return rpc(request, metadata=self.metadata, timeout=self.deadline_seconds)
        except grpc.RpcError as error:
            raise self._refusal(error) from None

    def call(self, method: str, request: Any) -> Any:
        """Call the control API's ``method``, named as control.proto names it (for scripts
        and tests that name methods; ipupod's commands call the typed methods below)."""
        return self._ask(getattr(self.stub, method), request)

    # -- the control API, one typed method per call --------------------------------------
    def status(self) -> control_pb2.Status:
        return self._ask(self.stub.GetStatus, control_pb2.StatusRequest())

    def create_partition(self, name: str, size: int, gcds: int = 1) -> control_pb2.Partition:
        return self._ask(self.stub.CreatePartition,
                         control_pb2.CreatePartitionRequest(name=name, size=size, gcds=gcds))

    def list_partitions(self) -> control_pb2.PartitionList:
        return self._ask(self.stub.ListPartitions, control_pb2.ListPartitionsRequest())

    def get_partition(self, name: str) -> control_pb2.Partition:
        return self._ask(self.stub.GetPartition, control_pb2.PartitionRef(name=name))

    def remove_partition(self, name: str) -> control_pb2.Partition:
        return self._ask(self.stub.RemovePartition, control_pb2.PartitionRef(name=name))

    def list_devices(self) -> control_pb2.DeviceList:
        return self._ask(self.stub.ListDevices, control_pb2.ListDevicesRequest())

    def list_links(self) -> control_pb2.LinkList:
        return self._ask(self.stub.ListLinks, control_pb2.ListLinksRequest())

    def run_benchmark(self, request: control_pb2.BenchmarkRequest
                      ) -> control_pb2.BenchmarkResult:
        """The whole sweep's rows in one answer."""
        return self._ask(self.stub.RunBenchmark, request)

    def stream_benchmark(self, request: control_pb2.BenchmarkRequest
                         ) -> Iterator[control_pb2.BenchmarkResult]:
        """The sweep's results as they come (a row each, then the trace's pieces if asked),
        then a :class:`ServiceError` if the stream ended with one."""
        try:
            yield from self.stub.StreamBenchmark(request, metadata=self.metadata,
                                                 timeout=self.deadline_seconds)
        except grpc.RpcError as error:
            raise self._refusal(error) from None

    def kill_card(self, card: str) -> control_pb2.FaultState:
        return self._ask(self.stub.KillCard, control_pb2.KillCardRequest(card=card))

    def degrade_link(self, link: str, bandwidth_factor: float,
                     added_latency_seconds: float) -> control_pb2.FaultState:
        return self._ask(self.stub.DegradeLink, control_pb2.DegradeLinkRequest(
            link=link, bandwidth_factor=bandwidth_factor,
            added_latency_seconds=added_latency_seconds))

    def cut_link(self, link: str) -> control_pb2.FaultState:
        return self._ask(self.stub.CutLink, control_pb2.LinkRef(link=link))

    def heal_link(self, link: str = "") -> control_pb2.FaultState:
        """Heal ``link`` ('': every link)."""
        return self._ask(self.stub.HealLink, control_pb2.LinkRef(link=link))

    def list_faults(self) -> control_pb2.FaultState:
        return self._ask(self.stub.ListFaults, control_pb2.ListFaultsRequest())

    def add_user(self, name: str, max_ipus: int = 0) -> control_pb2.UserCredential:
        return self._ask(self.stub.AddUser,
                         control_pb2.AddUserRequest(name=name, max_ipus=max_ipus))

    def rotate_user(self, name: str) -> control_pb2.UserCredential:
        return self._ask(self.stub.RotateUser, control_pb2.UserRef(name=name))

    def remove_user(self, name: str, with_partitions: bool = False) -> control_pb2.User:
        return self._ask(self.stub.RemoveUser, control_pb2.RemoveUserRequest(
            name=name, with_partitions=with_partitions))

    def list_users(self) -> control_pb2.UserList:
        return self._ask(self.stub.ListUsers, control_pb2.ListUsersRequest())
