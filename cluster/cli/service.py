"""``ipupod serve`` and its clients: status, partition, devices, links, bench --partition.

Clients find the service through ``--host/--port`` or ``IPUOF_VIPU_API_HOST`` /
``IPUOF_VIPU_API_PORT`` (V-IPU's variables), and read the token from ``--token-file``
(default ``~/.ipupod/token``, or ``IPUPOD_TOKEN_FILE``).
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import click
import grpc

from cluster.errors import UserError
from cluster.service.server import DEFAULT_PORT, default_token_file

_CLIENT_ERRORS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                  grpc.StatusCode.ALREADY_EXISTS, grpc.StatusCode.RESOURCE_EXHAUSTED}


class ServiceError(UserError):
    """The service refused a request (the status code and its message)."""


def _address(host: str | None, port: int | None) -> tuple[str, int]:
    host = host or os.environ.get("IPUOF_VIPU_API_HOST", "127.0.0.1")
    try:
        port = port or int(os.environ.get("IPUOF_VIPU_API_PORT", DEFAULT_PORT))
    except ValueError:
        raise UserError("IPUOF_VIPU_API_PORT must be a port number") from None
    return host, port


class Client:
    """A connection to a running service, with the token attached to every call."""

    def __init__(self, host: str | None = None, port: int | None = None,
                 token_file: str | Path | None = None, deadline_s: float = 600.0) -> None:
        from ipupod_proto import control_pb2_grpc

        self.host, self.port = _address(host, port)
        path = Path(token_file) if token_file else default_token_file()
        try:
            token = path.read_text().strip()
        except OSError:
            raise UserError(f"no token file at {path}: start `ipupod serve` first, or pass "
                            "--token-file") from None
        self.metadata = (("authorization", f"Bearer {token}"),)
        self.channel = grpc.insecure_channel(f"{self.host}:{self.port}")
        self.stub = control_pb2_grpc.ControlStub(self.channel)
        self.deadline_s = deadline_s

    def call(self, method: str, request):
        try:
            return getattr(self.stub, method)(request, metadata=self.metadata,
                                              timeout=self.deadline_s)
        except grpc.RpcError as error:
            code = error.code()
            if code == grpc.StatusCode.UNAVAILABLE and "connect" in (error.details() or "").lower():
                raise ServiceError(f"cannot reach the service at {self.host}:{self.port}: is "
                                   "`ipupod serve` running? (--host/--port or "
                                   "IPUOF_VIPU_API_HOST/PORT)") from None
            raise ServiceError(f"{code.name}: {error.details()}") from None


def client_options(fn):
    for option in reversed([
        click.option("--host", default=None, help="Service host (or IPUOF_VIPU_API_HOST)."),
        click.option("--port", type=click.IntRange(1, 65535), default=None,
                     help=f"Service port (or IPUOF_VIPU_API_PORT; default {DEFAULT_PORT})."),
        click.option("--token-file", default=None, help="Token file (default ~/.ipupod/token)."),
        click.option("--json", "as_json", is_flag=True, help="Print JSON."),
    ]):
        fn = option(fn)
    return fn


def _echo(message, as_json: bool, text: str) -> None:
    from google.protobuf.json_format import MessageToDict

    if as_json:
        click.echo(json.dumps(MessageToDict(message, preserving_proto_field_name=True,
                                            always_print_fields_with_no_presence=True), indent=2))
    else:
        click.echo(text)


@click.command("serve")
@click.option("--topology", "topology_spec", default="dss8440x2", show_default=True)
@click.option("--ray-address", default=None)
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (loopback unless you say otherwise).")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port to listen on (0: any free port, printed).")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the access token (default ~/.ipupod/token).")
@click.option("--metrics-port", type=click.IntRange(-1, 65535), default=9464, show_default=True,
              help="Prometheus endpoint port (on --host); -1 to switch it off.")
def serve_command(topology_spec, ray_address, host, port, token_file, metrics_port) -> None:
    """Launch the emulated POD and serve its control API until SIGTERM or Ctrl-C."""
    from cluster.cli.main import ray_chatter_to_stderr
    from cluster.service.server import start_server, write_token
    from ipu_node.pod import EmulatedPod

    path = token_file or default_token_file()
    with ray_chatter_to_stderr() as out:
        pod = EmulatedPod.launch(topology_spec, ray_address=ray_address)
        try:
            token = write_token(path)
            server, bound, metrics = start_server(
                pod, token, host, port, None if metrics_port < 0 else metrics_port)
            stop = threading.Event()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
            print(f"ipupod serve: {pod.topology.name} ({pod.topology.ipu_count} IPUs, "
                  f"{len(pod.specs)} devices) on {host}:{bound}; token in {path}"
                  + (f"; metrics on http://{host}:{metrics}/metrics" if metrics else ""),
                  file=out, flush=True)
            stop.wait()
            server.stop(grace=2).wait(5)
            if metrics:
                server.metrics_server.shutdown()
        finally:
            pod.shutdown(stop_ray=True)
        print("ipupod serve: stopped", file=out, flush=True)


@click.command("status")
@client_options
def status_command(host, port, token_file, as_json) -> None:
    """The service's topology, devices and partitions."""
    from ipupod_proto import control_pb2

    status = Client(host, port, token_file).call("GetStatus", control_pb2.StatusRequest())
    _echo(status, as_json, f"{status.topology}: {status.ipus} IPUs on {status.devices} devices, "
                           f"{status.partitions} partitions, {status.free_ipus} IPUs free; "
                           f"up {status.uptime_seconds:.0f} s (ipupod {status.version})")


@click.group("partition")
def partition_group() -> None:
    """Create, list, show and remove partitions (as `vipu` does)."""


def _partition_line(p) -> str:
    health = p.health + (f" ({p.health_detail})" if p.health_detail else "")
    return f"{p.name:<24} {p.size:>5} {p.gcds:>5}  {','.join(map(str, p.ipus)):<24} {health}"


@partition_group.command("create")
@click.argument("name")
@click.option("--size", type=int, required=True, help="IPUs, a power of two.")
@click.option("--gcds", type=int, default=1, show_default=True)
@client_options
def partition_create(name, size, gcds, host, port, token_file, as_json) -> None:
    from ipupod_proto import control_pb2

    if size < 0 or gcds < 0:
        raise UserError("--size and --gcds are positive numbers")
    made = Client(host, port, token_file).call(
        "CreatePartition", control_pb2.CreatePartitionRequest(name=name, size=size, gcds=gcds))
    _echo(made, as_json, f"created partition {made.name}: IPUs {','.join(map(str, made.ipus))}")


@partition_group.command("list")
@client_options
def partition_list(host, port, token_file, as_json) -> None:
    from ipupod_proto import control_pb2

    listed = Client(host, port, token_file).call("ListPartitions",
                                                 control_pb2.ListPartitionsRequest())
    lines = [f"{'name':<24} {'size':>5} {'gcds':>5}  {'ipus':<24} health"] + [
        _partition_line(p) for p in listed.partitions]
    _echo(listed, as_json, "\n".join(lines))


@partition_group.command("show")
@click.argument("name")
@client_options
def partition_show(name, host, port, token_file, as_json) -> None:
    from ipupod_proto import control_pb2

    found = Client(host, port, token_file).call("GetPartition",
                                                control_pb2.PartitionRef(name=name))
    _echo(found, as_json, _partition_line(found))


@partition_group.command("remove")
@click.argument("name")
@client_options
def partition_remove(name, host, port, token_file, as_json) -> None:
    from ipupod_proto import control_pb2

    gone = Client(host, port, token_file).call("RemovePartition",
                                               control_pb2.PartitionRef(name=name))
    _echo(gone, as_json, f"removed partition {gone.name}")


@click.command("devices")
@client_options
def devices_command(host, port, token_file, as_json) -> None:
    """IPUs like `gc-info --list-devices`: id, type, card or machine, partition, memory."""
    from ipupod_proto import control_pb2

    listed = Client(host, port, token_file).call("ListDevices", control_pb2.ListDevicesRequest())
    lines = [f"{'id':>5} {'type':<6} {'unit':<12} {'server':<8} {'partition':<16} {'health':<11} "
             f"{'used(B)':>12} {'free(B)':>12}"]
    lines += [f"{d.id:>5} {d.ipu_type:<6} {d.unit:<12} {d.server:<8} {d.partition or '-':<16} "
              f"{d.health:<11} {d.memory_used_bytes:>12} {d.memory_free_bytes:>12}"
              for d in listed.devices]
    _echo(listed, as_json, "\n".join(lines))


@click.command("links")
@client_options
def links_command(host, port, token_file, as_json) -> None:
    """Links like `gc-links`: endpoints, type, bandwidth, latency, state, bytes carried."""
    from ipupod_proto import control_pb2

    listed = Client(host, port, token_file).call("ListLinks", control_pb2.ListLinksRequest())
    lines = [f"{'source':<20} {'target':<20} {'type':<16} {'GB/s':>7} {'lat(ns)':>8} "
             f"{'state':<8} {'bytes':>14}"]
    lines += [f"{l.source:<20} {l.target:<20} {l.type:<16} "
              f"{l.bandwidth_bytes_per_second / 1e9:>7g} {l.latency_seconds * 1e9:>8g} "
              f"{l.state:<8} {l.bytes_carried:>14.0f}" for l in listed.links]
    _echo(listed, as_json, "\n".join(lines))


def bench_on_partition(partition, collective, mode, min_bytes, max_bytes, factor, algorithm,
                       dtype, op, group, root, as_json, host, port, token_file) -> None:
    """``ipupod bench --partition NAME``: the service runs it on that partition's IPUs."""
    from ipupod_proto import control_pb2

    result = Client(host, port, token_file).call("RunBenchmark", control_pb2.BenchmarkRequest(
        partition=partition, collective=collective, min_bytes=min_bytes, max_bytes=max_bytes,
        factor=factor, algorithm=algorithm, dtype=dtype, op=op, mode=mode, group=group,
        root=root))
    lines = [f"# ipupod bench {result.collective} on partition {result.partition} "
             f"({result.ipus} IPUs), mode {result.mode}; time simulated, wall on the service",
             f"{'size(B)':>12} {'count':>12} {'type':>8} {'redop':>6} {'algorithm':>24} "
             f"{'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'wall(s)':>9}"
             + (f" {'#wrong':>7}" if result.mode == "real" else "")]
    for r in result.rows:
        lines.append(f"{r.bytes:>12} {r.count:>12} {r.type:>8} {r.op:>6} {r.algorithm:>24} "
                     f"{r.sim_seconds * 1e6:>12.2f} {r.algbw_GBps:>12.2f} {r.busbw_GBps:>12.2f} "
                     f"{r.wall_seconds:>9.3f}" + (f" {r.wrong:>7}" if r.wrong >= 0 else ""))
    _echo(result, as_json, "\n".join(lines))


def register(cli: click.Group) -> None:
    from cluster.cli.fault import fault_group

    for command in (serve_command, status_command, partition_group, devices_command,
                    links_command, fault_group):
        cli.add_command(command)


__all__ = ["Client", "ServiceError", "bench_on_partition", "register"]
