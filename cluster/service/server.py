"""The POD service: one long-running gRPC control service per emulated POD.

V-IPU's vocabulary (partitions, devices, links) over the contract in
``proto/ipupod_proto/control.proto``, plus grpc.health.v1 and server reflection. Every call
needs ``authorization: Bearer <token>``; the service binds to 127.0.0.1 unless told
otherwise. A bad request gets INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS or
RESOURCE_EXHAUSTED with a message a person can act on, and never takes the service down.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import threading
import time
from concurrent import futures
from importlib.metadata import version
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from cluster.errors import UserError
from cluster.model.link_faults import LinkDown
from cluster.service.partitions import PartitionError, PartitionTable
from ipupod_proto import control_pb2, control_pb2_grpc

SERVICE = "ipupod.control.v1.Control"
DEFAULT_PORT = 8090


def write_token(path: Path) -> str:
    """A fresh random token in a file only this user can read (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(token + "\n")
    os.chmod(path, 0o600)
    return token


def default_token_file() -> Path:
    return Path(os.environ.get("IPUPOD_TOKEN_FILE", Path.home() / ".ipupod" / "token"))


class _BearerToken(grpc.ServerInterceptor):
    """Refuse any call without the right ``authorization: Bearer <token>`` metadata."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

        def deny(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          "missing or wrong token: send 'authorization: Bearer <token>' with the "
                          "token from the file `ipupod serve` printed")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation, details):
        given = dict(details.invocation_metadata or ()).get("authorization", "")
        if hmac.compare_digest(str(given).encode(), self._expected):
            return continuation(details)
        return self._deny


def _abort_for(context, error: Exception) -> None:
    if isinstance(error, PartitionError):
        context.abort(getattr(grpc.StatusCode, error.code), str(error))
    if isinstance(error, LinkDown):  # the request is fine, the POD's state is not
        context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(error))
    if isinstance(error, UserError):
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
    context.abort(grpc.StatusCode.UNAVAILABLE, f"{type(error).__name__}: {error}")


def _guarded(method):
    """Map user errors to their status codes; anything else becomes UNAVAILABLE with the
    reason, and the service carries on."""

    def call(self, request, context):
        try:
            return method(self, request, context)
        except Exception as error:
            if isinstance(error, grpc.RpcError):
                raise
            _abort_for(context, error)

    call.__name__ = method.__name__
    return call


def _partition_message(partition, health=None) -> control_pb2.Partition:
    return control_pb2.Partition(name=partition.name, ipus=list(partition.ipus),
                                 size=partition.size, gcds=partition.gcds,
                                 health=health.state if health else "",
                                 health_detail=health.detail if health else "")


class ControlService(control_pb2_grpc.ControlServicer):
    """The control API of one launched POD."""

    def __init__(self, pod, metrics_for=None) -> None:
        self.pod, self.topology = pod, pod.topology
        self.partitions = PartitionTable(self.topology)
        self.metrics = metrics_for(pod, self.partitions) if metrics_for else None
        self.started = time.monotonic()
        self._bench_lock = threading.Lock()  # one benchmark at a time on the devices

    @_guarded
    def GetStatus(self, request, context):
        return control_pb2.Status(
            topology=self.topology.name, ipus=self.topology.ipu_count,
            devices=len(self.pod.specs), partitions=len(self.partitions.list()),
            free_ipus=len(self.partitions.free_ipus()),
            uptime_seconds=time.monotonic() - self.started, version=version("ipupod"))

    def _health_of(self, partitions: list) -> list:
        """Each partition's health, from one round of device answers."""
        from cluster.service.health import partition_health
        from ipu_node.pod import describe

        down = {}
        for index, device in enumerate(self.pod.health()):
            if device.state != "healthy":
                for ipu in device.ipus:
                    down[ipu] = f"{describe(self.pod.specs[index])} is {device.state}"
        topology, faults = self.pod.topology, dict(self.pod.link_faults)
        return [partition_health(topology, p.ipus, faults, down) for p in partitions]

    @_guarded
    def CreatePartition(self, request, context):
        partition = self.partitions.create(request.name, request.size, request.gcds or 1)
        return _partition_message(partition, self._health_of([partition])[0])

    @_guarded
    def ListPartitions(self, request, context):
        table = self.partitions.list()
        return control_pb2.PartitionList(partitions=[
            _partition_message(p, h) for p, h in zip(table, self._health_of(table))])

    @_guarded
    def GetPartition(self, request, context):
        partition = self.partitions.get(request.name)
        return _partition_message(partition, self._health_of([partition])[0])

    @_guarded
    def RemovePartition(self, request, context):
        return _partition_message(self.partitions.remove(request.name))

    @_guarded
    def ListDevices(self, request, context):
        states = {ipu: d.state for d in self.pod.health() for ipu in d.ipus}
        memory, reachable = {}, True
        try:
            for stats in self.pod.stats(deadline_s=10):
                memory.update(stats["memory"])
        except Exception:
            reachable = False
        devices = []
        for ipu in range(self.topology.ipu_count):
            spec = self.pod.specs[self.pod.owner[ipu]]
            held = memory.get(ipu)
            health = states.get(ipu, "unreachable")
            devices.append(control_pb2.Device(
                id=ipu, name=self.topology.ipu_name(ipu),
                ipu_type=self.topology.ipu_processors[ipu].name, unit=spec.name,
                server=spec.server, partition=self.partitions.partition_of(ipu) or "",
                health=health if health != "healthy" or held is not None else "unreachable",
                memory_used_bytes=held["used_bytes"] if held else 0,
                memory_free_bytes=held["free_bytes"] if held else 0,
                memory_capacity_bytes=int(self.topology.ipu_memory_bytes[ipu])))
        if not reachable and not memory:
            context.set_trailing_metadata((("devices", "unreachable"),))
        return control_pb2.DeviceList(devices=devices)

    @_guarded
    def ListLinks(self, request, context):
        topo, faults = self.pod.topology, dict(self.pod.link_faults)
        carried = self.pod.link_bytes()
        links = []
        for index in range(topo.link_count_physical):
            kind = topo.link_types[topo.link_type[index]]
            fault = faults.get(index)
            state = "up" if fault is None else "cut" if fault.cut else "degraded"
            links.append(control_pb2.Link(
                source=topo.node_names[topo.link_a[index]],
                target=topo.node_names[topo.link_b[index]], type=kind.name,
                count=int(topo.link_count[index]),
                bandwidth_bytes_per_second=float(topo.directed_bandwidth_Bps[2 * index]),
                latency_seconds=float(topo.directed_latency_s[2 * index]), state=state,
                bytes_carried=float(carried[2 * index] + carried[2 * index + 1])))
        return control_pb2.LinkList(links=links)

    @_guarded
    def GetTopology(self, request, context):
        from cluster.model.topology_show import summarize

        return control_pb2.TopologySummary(json=json.dumps(summarize(self.topology)))

    @_guarded
    def RunBenchmark(self, request, context):
        from gcl.bench import run_phantom, sizes
        from gcl.collectives import collective
        from gcl.groups import CommGroup
        from ipu_node.bench import run_real

        partition = self.partitions.get(request.partition)
        coll = collective(request.collective or "allreduce")
        mode = request.mode or "phantom"
        if mode not in ("phantom", "real"):
            raise UserError(f"unknown mode {mode!r}: use phantom or real")
        if not request.min_bytes:
            raise UserError("min_bytes must be 1 or more")
        byte_sizes = sizes(request.min_bytes, request.max_bytes or request.min_bytes,
                           request.factor or 2.0)
        options = dict(dtype=request.dtype or "float32", op=request.op or "sum",
                       algorithm_name=request.algorithm or "auto",
                       group=CommGroup.parse(request.group or "all"), root=request.root,
                       ipus=list(partition.ipus))
        if mode == "real":
            with self._bench_lock:
                rows = list(run_real(self.pod, coll, byte_sizes, **options))
        else:
            rows = list(run_phantom(coll, self.pod.topology, byte_sizes, **options))
        if self.metrics is not None:
            for row in rows:
                self.metrics.observe(row, partition.name)
        return control_pb2.BenchmarkResult(
            partition=partition.name, ipus=partition.size, collective=coll.name, mode=mode,
            rows=[control_pb2.BenchmarkRow(
                bytes=r.bytes, count=r.count, type=r.type, op=r.op, algorithm=r.algorithm,
                sim_seconds=r.sim_seconds, algbw_GBps=r.algbw_GBps, busbw_GBps=r.busbw_GBps,
                wall_seconds=r.wall_seconds, wrong=-1 if r.wrong is None else r.wrong)
                for r in rows])

    # -- faults -------------------------------------------------------------------------
    def _fault_state(self, message: str = "") -> control_pb2.FaultState:
        from cluster.model.link_faults import link_name

        links = [control_pb2.LinkFault(link=link_name(self.topology, i),
                                       bandwidth_factor=f.bandwidth_factor,
                                       added_latency_seconds=f.added_latency_s, cut=f.cut)
                 for i, f in sorted(dict(self.pod.link_faults).items())]
        cards = [control_pb2.CardState(card=d.name, ipus=list(d.ipus), health=d.state,
                                       restarts=d.restarts, detail=d.detail)
                 for d in self.pod.health() if d.ipus and (d.state != "healthy" or d.restarts)]
        return control_pb2.FaultState(links=links, cards=cards, message=message)

    @_guarded
    def KillCard(self, request, context):
        killed = self.pod.kill_card(request.card)
        return self._fault_state(killed.detail)

    @_guarded
    def DegradeLink(self, request, context):
        self.pod.degrade_link(request.link, request.bandwidth_factor or 1.0,
                              request.added_latency_seconds)
        return self._fault_state(f"degraded {request.link}")

    @_guarded
    def CutLink(self, request, context):
        self.pod.cut_link(request.link)
        return self._fault_state(f"cut {request.link}")

    @_guarded
    def HealLink(self, request, context):
        healed = self.pod.heal(request.link or None)
        return self._fault_state("healed " + (", ".join(healed) if healed else "nothing: no "
                                              "link faults were in force"))

    @_guarded
    def ListFaults(self, request, context):
        return self._fault_state()


def start_server(pod, token: str, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 metrics_port: int | None = None):
    """Serve the control API, health and reflection, and (with ``metrics_port``) the
    Prometheus endpoint; return (server, bound port, metrics port or None)."""
    from cluster.service.metrics import ServiceMetrics

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16),
                         interceptors=[_BearerToken(token)],
                         options=[("grpc.max_receive_message_length", 4 << 20)])
    control = ControlService(pod, ServiceMetrics if metrics_port is not None else None)
    control_pb2_grpc.add_ControlServicer_to_server(control, server)
    checker = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    reflection.enable_server_reflection(
        (SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise UserError(f"cannot listen on {host}:{port}: is the port in use? choose "
                        "another with --port")
    bound_metrics = None
    if metrics_port is not None:
        try:
            metrics_server, bound_metrics = control.metrics.serve(host, metrics_port)
        except OSError as error:
            raise UserError(f"cannot serve metrics on {host}:{metrics_port} ({error}): choose "
                            "another --metrics-port") from None
        server.metrics_server = metrics_server
    server.start()
    checker.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
    checker.set("", health_pb2.HealthCheckResponse.SERVING)
    return server, bound, bound_metrics
