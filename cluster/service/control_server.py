"""The POD service: one long-running gRPC control service per emulated POD.

V-IPU's vocabulary (partitions, devices, links) over the contract in
``proto/ipupod_proto/control.proto``, plus grpc.health.v1 and server reflection. Every call
needs ``authorization: Bearer <token>`` (:mod:`cluster.service.token_auth`); the service binds to
127.0.0.1 unless told otherwise. A bad request gets INVALID_ARGUMENT, NOT_FOUND,
ALREADY_EXISTS or RESOURCE_EXHAUSTED with a message a person can act on, and never takes the
service down.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from importlib.metadata import version
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from cluster.errors import UserError
from cluster.model.link_faults import LinkDown, link_name
from cluster.model.topology_show import summarize
from cluster.service.bench_run import (
    check_fits,
    free_bench_tensors,
    rank_messages,
    read_request,
    real_rows,
    row_message,
)
from cluster.service.bench_trace import BenchTrace, bench_trace
from cluster.service.client import DEFAULT_PORT
from cluster.service.control_tls import bind
from cluster.service.error_messages import first_line, short_message
from cluster.service.metrics import ServiceMetrics
from cluster.service.partition_health import Health, partition_health
from cluster.service.partitions import Partition, PartitionTable
from cluster.service.service_error import ServiceError
from cluster.service.sharing import ShareOptions, open_shared
from gcl.bench_rows import BenchRow
from gcl.bench_spec import PlacedBench
from gcl.modes import Mode
from ipu_node.answers import HealthState, IpuMemoryStats
from ipu_node.bench import run_bench
from ipu_node.device_spec import describe
from ipu_node.pod import EmulatedPod
from ipupod_proto import control_pb2, control_pb2_grpc

SERVICE = "ipupod.control.v1.Control"

__all__ = ["DEFAULT_PORT", "SERVICE", "ControlService", "start_server"]

log = logging.getLogger(__name__)

Handler = Callable[["ControlService", Any, grpc.ServicerContext], Any]


def _abort_for(context: grpc.ServicerContext, error: Exception, request: Any) -> None:
    """End the call with the status code that fits ``error`` and a short message (``abort``
    raises); what is not the user's mistake is logged here, with its traceback."""
    if isinstance(error, ServiceError):
        code = grpc.StatusCode[error.code.name]
    elif isinstance(error, LinkDown):  # the request is fine, the POD's state is not
        code = grpc.StatusCode.FAILED_PRECONDITION
    elif isinstance(error, (UserError, ValueError, OverflowError)):  # parsing the input
        code = grpc.StatusCode.INVALID_ARGUMENT
    else:
        log.error("request %s failed", type(request).__name__, exc_info=error)
        context.abort(grpc.StatusCode.UNAVAILABLE,
                      f"the service could not serve this request ({type(error).__name__}: "
                      f"{first_line(str(error), 200)}); the service's log has the details")
    context.abort(code, short_message(str(error), request))


@contextlib.contextmanager
def _statuses(context: grpc.ServicerContext, request: Any) -> Iterator[None]:
    """Map user errors to their status codes; anything else becomes UNAVAILABLE with a
    short reason (logged in full), and the service carries on. A status already set (an
    ``abort``) passes through."""
    try:
        yield
    except grpc.RpcError:
        raise
    except Exception as error:  # noqa: BLE001 - each becomes a status; the unexpected logged
        _abort_for(context, error, request)


def _guarded(method: Handler) -> Handler:
    """A servicer method whose errors become statuses (:func:`_statuses`)."""

    @functools.wraps(method)
    def call(self: ControlService, request: Any, context: grpc.ServicerContext) -> Any:
        with _statuses(context, request):
            return method(self, request, context)

    return call


def _partition_message(partition: Partition,
                       health: Health | None = None) -> control_pb2.Partition:
    """A partition (and its health, if known) as the API sends it."""
    return control_pb2.Partition(name=partition.name, ipus=list(partition.ipus),
                                 size=partition.size, gcds=partition.gcds,
                                 health=health.state if health else "",
                                 health_detail=health.detail if health else "",
                                 ild_size=partition.ild_size, units=list(partition.units))


class ControlService(control_pb2_grpc.ControlServicer):
    """The control API of one launched POD."""

    def __init__(self, pod: EmulatedPod, with_metrics: bool = False) -> None:
        self.pod, self.topology = pod, pod.topology
        self.partitions = PartitionTable(self.topology)
        self.metrics = ServiceMetrics(pod, self.partitions) if with_metrics else None
        self.started = time.monotonic()
        self._bench_lock = threading.Lock()  # one benchmark at a time on the devices

    @_guarded
    def GetStatus(self, request: control_pb2.StatusRequest,
                  context: grpc.ServicerContext) -> control_pb2.Status:
        """The topology, how many devices and partitions, free IPUs, uptime, version."""
        return control_pb2.Status(
            topology=self.topology.name, ipus=self.topology.ipu_count,
            devices=len(self.pod.specs), partitions=len(self.partitions.list()),
            free_ipus=len(self.partitions.free_ipus()),
            uptime_seconds=time.monotonic() - self.started, version=version("ipupod"))

    def card_ipus(self, card: str) -> list[int]:
        """The IPUs of card (or machine) ``card``; none if there is no such card."""
        return [ipu for spec in self.pod.specs if spec.name == card for ipu in spec.ipus]

    def _health_of(self, partitions: list[Partition]) -> list[Health]:
        """Each partition's health, from one round of device answers."""
        down = {}
        for device in self.pod.health():
            if device.state != HealthState.HEALTHY:
                for ipu in device.ipus:
                    down[ipu] = device.lost_node or f"{describe(device)} is {device.state}"
        topology, faults = self.pod.topology, dict(self.pod.link_faults)
        return [partition_health(topology, p.ipus, faults, down) for p in partitions]

    @_guarded
    def CreatePartition(self, request: control_pb2.CreatePartitionRequest,
                        context: grpc.ServicerContext) -> control_pb2.Partition:
        """Carve a partition out of the free IPUs."""
        partition = self.partitions.create(request.name, request.size, request.gcds or 1)
        return _partition_message(partition, self._health_of([partition])[0])

    @_guarded
    def ListPartitions(self, request: control_pb2.ListPartitionsRequest,
                       context: grpc.ServicerContext) -> control_pb2.PartitionList:
        """Every partition, with its health."""
        table = self.partitions.list()
        return control_pb2.PartitionList(partitions=[
            _partition_message(p, h) for p, h in zip(table, self._health_of(table))])

    @_guarded
    def GetPartition(self, request: control_pb2.PartitionRef,
                     context: grpc.ServicerContext) -> control_pb2.Partition:
        """One partition, with its health."""
        partition = self.partitions.get(request.name)
        return _partition_message(partition, self._health_of([partition])[0])

    @_guarded
    def RemovePartition(self, request: control_pb2.PartitionRef,
                        context: grpc.ServicerContext) -> control_pb2.Partition:
        """Give a partition's IPUs back, with what the benches left on them freed."""
        partition = self.partitions.remove(request.name)
        try:
            with self._bench_lock:
                free_bench_tensors(self.pod, partition.ipus)
        except Exception:
            log.exception("freeing the tensors of partition %s", partition.name)
        return _partition_message(partition)

    @_guarded
    def ListDevices(self, request: control_pb2.ListDevicesRequest,
                    context: grpc.ServicerContext) -> control_pb2.DeviceList:
        """Every IPU: its card or machine, partition, health and memory."""
        states = {ipu: d.state for d in self.pod.health() for ipu in d.ipus}
        memory: dict[int, IpuMemoryStats] = {}
        reachable = True
        try:
            for stats in self.pod.stats(deadline_seconds=10):
                memory.update(stats["memory"])
        except Exception:  # noqa: BLE001 - whatever the devices did, list them as unreachable
            reachable = False
        devices = [self._device_message(ipu, states.get(ipu, HealthState.UNREACHABLE),
                                        memory.get(ipu))
                   for ipu in range(self.topology.ipu_count)]
        if not reachable and not memory:
            context.set_trailing_metadata((("devices", HealthState.UNREACHABLE.value),))
        return control_pb2.DeviceList(devices=devices)

    def _device_message(self, ipu: int, health: HealthState,
                        held: IpuMemoryStats | None) -> control_pb2.Device:
        """IPU ``ipu`` as the API sends it; without memory figures it is unreachable."""
        spec = self.pod.specs[self.pod.owner[ipu]]
        node_id, node_ip = self.pod.node_of(self.pod.owner[ipu])
        return control_pb2.Device(
            id=ipu, name=self.topology.ipu_name(ipu),
            ipu_type=self.topology.ipu_processors[ipu].name, unit=spec.name,
            server=spec.server, partition=self.partitions.partition_of(ipu) or "",
            health=(health if health != HealthState.HEALTHY or held is not None
                    else HealthState.UNREACHABLE),
            memory_used_bytes=held["used_bytes"] if held else 0,
            memory_free_bytes=held["free_bytes"] if held else 0,
            memory_capacity_bytes=int(self.topology.ipu_memory_bytes[ipu]),
            node_id=node_id, node_ip=node_ip)

    @_guarded
    def ListLinks(self, request: control_pb2.ListLinksRequest,
                  context: grpc.ServicerContext) -> control_pb2.LinkList:
        """Every physical link: endpoints, type, bandwidth, latency, state, bytes carried."""
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
                latency_seconds=float(topo.directed_latency_seconds[2 * index]), state=state,
                bytes_carried=float(carried[2 * index] + carried[2 * index + 1])))
        return control_pb2.LinkList(links=links)

    @_guarded
    def GetTopology(self, request: control_pb2.TopologyRequest,
                    context: grpc.ServicerContext) -> control_pb2.TopologySummary:
        """The topology's summary, as ``ipupod topology show --format json`` prints it."""
        return control_pb2.TopologySummary(json=json.dumps(summarize(self.topology)))

    def _sweep(self, request: control_pb2.BenchmarkRequest) -> tuple[
            Partition, PlacedBench, Iterator[BenchRow], BenchTrace | None]:
        """Check a benchmark request (sizes and memory before anything is built) and return
        its partition, what it runs, the rows to come and its trace (if asked)."""
        partition = self.partitions.get(request.partition)
        bench = read_request(request, partition, self.pod.topology)
        traced = bench_trace(request, self.pod.topology, partition.name)
        if bench.spec.mode is not Mode.REAL:
            rows = run_bench(bench, on_costed=traced.add if traced else None)
            return partition, bench, rows, traced
        check_fits(self.pod, bench)
        return partition, bench, real_rows(self.pod, self._bench_lock, bench, traced), traced

    def _results(self, request: control_pb2.BenchmarkRequest) -> Iterator[
            control_pb2.BenchmarkResult]:
        """A result of one row per size, as each finishes (recorded in the metrics); the
        first also says which IPU each rank runs on."""
        partition, bench, rows, traced = self._sweep(request)
        ranks = rank_messages(bench)
        spec = bench.spec
        common: dict[str, Any] = dict(partition=partition.name, ipus=partition.size,
                                      collective=spec.collective.name, mode=spec.mode.value,
                                      group=str(spec.group))
        for row in rows:
            if self.metrics is not None:
                self.metrics.observe(row, partition.name, spec.mode)
            yield control_pb2.BenchmarkResult(rows=[row_message(row)], ranks=ranks, **common)
            ranks = []
        if traced is not None:
            yield from traced.results(**common)

    @_guarded
    def RunBenchmark(self, request: control_pb2.BenchmarkRequest,
                     context: grpc.ServicerContext) -> control_pb2.BenchmarkResult:
        """Sweep a collective's sizes on a partition's IPUs (phantom or real mode)."""
        if request.trace:
            raise UserError("a trace comes in pieces after the rows: ask StreamBenchmark "
                            "for it (as `ipupod bench --partition NAME --trace FILE` does)")
        answer: control_pb2.BenchmarkResult | None = None
        for result in self._results(request):
            if answer is None:
                answer = result
            else:
                answer.rows.extend(result.rows)
        return answer or control_pb2.BenchmarkResult()

    def StreamBenchmark(self, request: control_pb2.BenchmarkRequest,
                        context: grpc.ServicerContext) -> Iterator[control_pb2.BenchmarkResult]:
        """The same sweep, a result of one row sent as each size finishes; a failure ends
        the stream with its status after the rows sent."""
        with _statuses(context, request):
            yield from self._results(request)

    # -- faults -------------------------------------------------------------------------
    def _fault_state(self, message: str = "") -> control_pb2.FaultState:
        """Link faults in force, and cards that are down or have restarted."""
        links = [control_pb2.LinkFault(link=link_name(self.topology, i),
                                       bandwidth_factor=f.bandwidth_factor,
                                       added_latency_seconds=f.added_latency_seconds, cut=f.cut)
                 for i, f in sorted(dict(self.pod.link_faults).items())]
        cards = [control_pb2.CardState(card=d.name, ipus=list(d.ipus), health=d.state,
                                       restarts=d.restarts, detail=d.detail)
                 for d in self.pod.health()
                 if d.ipus and (d.state != HealthState.HEALTHY or d.restarts)]
        return control_pb2.FaultState(links=links, cards=cards, message=message)

    @_guarded
    def KillCard(self, request: control_pb2.KillCardRequest,
                 context: grpc.ServicerContext) -> control_pb2.FaultState:
        """Kill a card's (or machine's) actor, as a crash would."""
        killed = self.pod.kill_card(request.card)
        return self._fault_state(killed.detail)

    @_guarded
    def DegradeLink(self, request: control_pb2.DegradeLinkRequest,
                    context: grpc.ServicerContext) -> control_pb2.FaultState:
        """Slow a link down: a bandwidth factor, added latency."""
        self.pod.degrade_link(request.link, request.bandwidth_factor or 1.0,
                              request.added_latency_seconds)
        return self._fault_state(f"degraded {request.link}")

    @_guarded
    def CutLink(self, request: control_pb2.LinkRef,
                context: grpc.ServicerContext) -> control_pb2.FaultState:
        """Take a link away."""
        self.pod.cut_link(request.link)
        return self._fault_state(f"cut {request.link}")

    @_guarded
    def HealLink(self, request: control_pb2.LinkRef,
                 context: grpc.ServicerContext) -> control_pb2.FaultState:
        """Undo a link's fault (every link's, if none is named)."""
        healed = self.pod.heal(request.link or None)
        return self._fault_state("healed " + (", ".join(healed) if healed else "nothing: no "
                                              "link faults were in force"))

    @_guarded
    def ListFaults(self, request: control_pb2.ListFaultsRequest,
                   context: grpc.ServicerContext) -> control_pb2.FaultState:
        """The faults in force."""
        return self._fault_state()


def _add_health_and_reflection(server: grpc.Server) -> Any:
    """grpc.health.v1 and server reflection on ``server``; return the health servicer."""
    checker = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    reflection.enable_server_reflection(
        (SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    return checker


def _serve_metrics(metrics: ServiceMetrics, host: str, port: int) -> tuple[Any, int]:
    """Start the Prometheus endpoint; a user error if it cannot listen there."""
    try:
        return metrics.serve(host, port)
    except OSError as error:
        raise UserError(f"cannot serve metrics on {host}:{port} ({error}): choose "
                        "another --metrics-port") from None


def start_server(pod: EmulatedPod, token: str, host: str = "127.0.0.1",
                 port: int = DEFAULT_PORT,
                 metrics_port: int | None = None,
                 share: ShareOptions | None = None) -> tuple[grpc.Server, int, int | None]:
    """Serve the control API, health and reflection, and (with ``metrics_port``) the
    Prometheus endpoint; return (server, bound port, metrics port or None). ``share``:
    TLS, the audit log, the state file and users' limits (:mod:`cluster.service.sharing`);
    the gate is ``server.shared``."""
    control = ControlService(pod, with_metrics=metrics_port is not None)
    shared, handler, authenticator = open_shared(control, token, share or ShareOptions())
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16),
                         interceptors=[authenticator],
                         options=[("grpc.max_receive_message_length", 4 << 20),
                                  ("grpc.so_reuseport", 0)])
    server.shared = shared
    server.add_generic_rpc_handlers((handler,))
    checker = _add_health_and_reflection(server)
    bound = bind(server, f"{host}:{port}", (share or ShareOptions()).tls)
    if bound == 0:
        raise UserError(f"cannot listen on {host}:{port}: is the port in use? choose "
                        "another with --port")
    bound_metrics = None
    if control.metrics is not None and metrics_port is not None:
        server.metrics_server, bound_metrics = _serve_metrics(control.metrics, host,
                                                              metrics_port)
    server.start()
    checker.set(SERVICE, health_pb2.HealthCheckResponse.SERVING)
    checker.set("", health_pb2.HealthCheckResponse.SERVING)
    return server, bound, bound_metrics
