"""``ipupod status``, ``ipupod devices`` and ``ipupod links``: what a running service reports
about its POD (as ``gc-info --list-devices`` and ``gc-links`` do for real IPUs)."""

from __future__ import annotations

import click

from cluster.cli.options import client_options
from cluster.cli.output import echo_message
from cluster.service.client import Client
from ipupod_proto import control_pb2


@click.command("status")
@client_options
def status_command(host: str | None, port: int | None, token_file: str | None,
                   as_json: bool) -> None:
    """The service's topology, devices and partitions."""
    status = Client(host, port, token_file).call("GetStatus", control_pb2.StatusRequest())
    echo_message(status, as_json,
                 f"{status.topology}: {status.ipus} IPUs on {status.devices} devices, "
                 f"{status.partitions} partitions, {status.free_ipus} IPUs free; "
                 f"up {status.uptime_seconds:.0f} s (ipupod {status.version})")


@click.command("devices")
@client_options
def devices_command(host: str | None, port: int | None, token_file: str | None,
                    as_json: bool) -> None:
    """IPUs like `gc-info --list-devices`: id, type, card or machine, partition, memory."""
    listed = Client(host, port, token_file).call("ListDevices", control_pb2.ListDevicesRequest())
    lines = [f"{'id':>5} {'type':<6} {'unit':<12} {'server':<8} {'partition':<16} {'health':<11} "
             f"{'used(B)':>12} {'free(B)':>12}"]
    lines += [f"{d.id:>5} {d.ipu_type:<6} {d.unit:<12} {d.server:<8} {d.partition or '-':<16} "
              f"{d.health:<11} {d.memory_used_bytes:>12} {d.memory_free_bytes:>12}"
              for d in listed.devices]
    echo_message(listed, as_json, "\n".join(lines))


@click.command("links")
@client_options
def links_command(host: str | None, port: int | None, token_file: str | None,
                  as_json: bool) -> None:
    """Links like `gc-links`: endpoints, type, bandwidth, latency, state, bytes carried."""
    listed = Client(host, port, token_file).call("ListLinks", control_pb2.ListLinksRequest())
    lines = [f"{'source':<20} {'target':<20} {'type':<16} {'GB/s':>7} {'lat(ns)':>8} "
             f"{'state':<8} {'bytes':>14}"]
    lines += [f"{link.source:<20} {link.target:<20} {link.type:<16} "
              f"{link.bandwidth_bytes_per_second / 1e9:>7g} {link.latency_seconds * 1e9:>8g} "
              f"{link.state:<8} {link.bytes_carried:>14.0f}" for link in listed.links]
    echo_message(listed, as_json, "\n".join(lines))
