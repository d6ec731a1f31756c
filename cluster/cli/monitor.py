"""``ipupod monitor``: a live view of a running service, as ``gc-monitor`` gives of real IPUs:
the POD, its partitions, the cards and machines (health, memory) and the busiest links,
redrawn in place every ``--interval`` seconds.

On a terminal each frame replaces the last (cursor home, clear); piped, frames follow each
other, each under a ``# ipupod monitor`` line. Link traffic is the bytes a link carried
between two frames over the time between them (wall seconds of this machine).
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import click

from cluster.model.units import format_size, plural, ranges
from cluster.service.client import Client

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen
BUSIEST_LINKS = 8


@dataclass
class Snapshot:
    """What one frame shows, as the service answered, and when (monotonic seconds)."""

    status: Any
    partitions: list[Any]
    devices: list[Any]
    links: list[Any]
    taken_at: float = field(default_factory=time.monotonic)


def snapshot(client: Client) -> Snapshot:
    """Ask the service for everything a frame shows."""
    return Snapshot(client.status(), list(client.list_partitions().partitions),
                    list(client.list_devices().devices), list(client.list_links().links))


def _link_key(link: Any) -> tuple[str, str, str]:
    return link.source, link.target, link.type


def link_rates(before: Snapshot | None, now: Snapshot) -> list[tuple[float, Any]]:
    """(bytes per wall second since ``before``, link) for every link, busiest first."""
    if before is None:
        return [(0.0, link) for link in now.links]
    seconds = max(now.taken_at - before.taken_at, 1e-9)
    earlier = {_link_key(link): link.bytes_carried for link in before.links}
    rates = [((link.bytes_carried - earlier.get(_link_key(link), link.bytes_carried))
              / seconds, link) for link in now.links]
    return sorted(rates, key=lambda pair: -pair[0])


def _unit_lines(devices: list[Any]) -> list[str]:
    """One line per card or machine: its IPUs, health, memory used of capacity."""
    units: dict[str, list[Any]] = defaultdict(list)
    for device in devices:
        units[device.unit].append(device)
    lines = [f"{'unit':<14} {'ipus':<10} {'health':<12} {'memory used':>20}"]
    for unit, ipus in sorted(units.items()):
        health = sorted({d.health for d in ipus})
        used = sum(d.memory_used_bytes for d in ipus)
        capacity = sum(d.memory_capacity_bytes for d in ipus)
        lines.append(f"{unit:<14} {ranges(sorted(d.id for d in ipus)):<10} "
                     f"{'/'.join(health):<12} "
                     f"{format_size(used) + ' of ' + format_size(capacity):>20}")
    return lines


def render(now: Snapshot, before: Snapshot | None, frame: int) -> str:
    """One frame of the monitor, as text."""
    status = now.status
    lines = [f"# ipupod monitor: {status.topology}, {plural(status.ipus, 'IPU')} "
             f"({status.free_ipus} free), {plural(status.partitions, 'partition')}, "
             f"up {status.uptime_seconds:.0f} s; frame {frame}", "", "partitions"]
    lines += [f"  {p.name:<20} {plural(p.size, 'IPU'):<9} {ranges(sorted(p.ipus)):<12} "
              f"{p.health}" for p in now.partitions] or ["  none"]
    lines += ["", "cards and machines"] + ["  " + line for line in _unit_lines(now.devices)]
    lines += ["", "busiest links (bytes per wall second since the last frame)"]
    for rate, link in link_rates(before, now)[:BUSIEST_LINKS]:
        lines.append(f"  {link.source:<20} {link.target:<20} {link.type:<16} "
                     f"{format_size(rate) + '/s' if rate else '0/s':>10}  {link.state}")
    return "\n".join(lines)


@click.command("monitor")
@click.option("--interval", type=click.FloatRange(0.1, 3600), default=1.0, show_default=True,
              help="Seconds between frames.")
@click.option("--count", type=click.IntRange(1), default=None,
              help="Frames to draw, then stop (default: until Ctrl-C).")
@click.option("--host", default=None, help="Service host.")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Service port.")
@click.option("--token-file", default=None, help="Token file.")
def monitor_command(interval: float, count: int | None, host: str | None, port: int | None,
                    token_file: str | None) -> None:
    """A live view of partitions, devices and link traffic, as gc-monitor."""
    client = Client(host, port, token_file)
    live = sys.stdout.isatty()
    before: Snapshot | None = None
    frame = 0
    while count is None or frame < count:
        if frame:
            time.sleep(interval)
        now = snapshot(client)
        frame += 1
        click.echo((CLEAR if live else ("\n" if frame > 1 else "")) + render(now, before, frame))
        before = now
