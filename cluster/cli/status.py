"""``ipupod status``, ``ipupod devices`` and ``ipupod links``: what a running service reports
about its POD (as ``gc-info --list-devices`` and ``gc-links`` do for real IPUs)."""

from __future__ import annotations

from typing import Any

import click

from cluster.cli.options import client_options
from cluster.cli.output import echo_message
from cluster.errors import UserError, quoted
from cluster.model.units import format_size, plural
from cluster.service.client import Client


@click.command("status")
@client_options
def status_command(host: str | None, port: int | None, token_file: str | None,
                   as_json: bool) -> None:
    """The service's topology, devices and partitions."""
    status = Client(host, port, token_file).status()
    echo_message(status, as_json,
                 f"{status.topology}: {plural(status.ipus, 'IPU')} on "
                 f"{plural(status.devices, 'device')}, {plural(status.partitions, 'partition')}, "
                 f"{plural(status.free_ipus, 'IPU')} free; "
                 f"up {status.uptime_seconds:.0f} s (ipupod {status.version})")


@click.command("devices")
@client_options
def devices_command(host: str | None, port: int | None, token_file: str | None,
                    as_json: bool) -> None:
    """IPUs like `gc-info --list-devices`: id, type, card or machine, partition, memory, and
    the Ray node its card or machine runs on (short id @ address)."""
    listed = Client(host, port, token_file).list_devices()
    lines = [f"{'id':>5} {'type':<6} {'unit':<12} {'server':<8} {'partition':<16} {'health':<11} "
             f"{'used':>8} {'free':>8} {'capacity':>9}  node"]
    lines += [f"{d.id:>5} {d.ipu_type:<6} {d.unit:<12} {d.server:<8} {d.partition or '-':<16} "
              f"{d.health:<11} {format_size(d.memory_used_bytes):>8} "
              f"{format_size(d.memory_free_bytes):>8} "
              f"{format_size(d.memory_capacity_bytes):>9}  "
              f"{d.node_id or '-'}{'@' + d.node_ip if d.node_ip else ''}"
              for d in listed.devices]
    echo_message(listed, as_json, "\n".join(lines))


def _keep(link: Any, device: str | None, ipu_names: set[str] | None,
          link_type: str | None) -> bool:
    """Whether ``link`` passes the filters: an end on ``device`` (a card, machine or host,
    by name), an end on one of the partition's IPUs, its type."""
    ends = (link.source, link.target)
    return ((device is None or any(e == device or e.startswith(device + ".") for e in ends))
            and (ipu_names is None or any(e in ipu_names for e in ends))
            and (link_type is None or link.type == link_type))


@click.command("links")
@click.option("--device", default=None, help="Only links with an end on this card, machine "
              "or host (e.g. s0.card3).")
@click.option("--partition", default=None, help="Only links with an end on this partition's "
              "IPUs.")
@click.option("--type", "link_type", default=None, help="Only links of this type "
              "(e.g. ipu-link-rail).")
@client_options
def links_command(device: str | None, partition: str | None, link_type: str | None,
                  host: str | None, port: int | None, token_file: str | None,
                  as_json: bool) -> None:
    """Links like `gc-links`: endpoints, type, bandwidth, latency, state, bytes carried."""
    client = Client(host, port, token_file)
    listed = client.list_links()
    ipu_names = None
    if partition is not None:
        found = client.get_partition(partition)
        devices = client.list_devices().devices
        ipus = set(found.ipus)
        ipu_names = {d.name for d in devices if d.id in ipus}
    kept = [link for link in listed.links if _keep(link, device, ipu_names, link_type)]
    if not kept and (device or partition or link_type):
        raise UserError(f"no link matches those filters (--device {quoted(device)}, "
                        f"--partition {quoted(partition)}, --type {quoted(link_type)}): "
                        "`ipupod links` lists them all")
    del listed.links[:]
    listed.links.extend(kept)
    lines = [f"{'source':<20} {'target':<20} {'type':<16} {'GB/s':>7} {'lat(ns)':>8} "
             f"{'state':<8} {'bytes':>14}"]
    lines += [f"{link.source:<20} {link.target:<20} {link.type:<16} "
              f"{link.bandwidth_bytes_per_second / 1e9:>7g} {link.latency_seconds * 1e9:>8g} "
              f"{link.state:<8} {link.bytes_carried:>14.0f}" for link in kept]
    echo_message(listed, as_json, "\n".join(lines))
