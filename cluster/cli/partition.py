"""``ipupod partition create|list|show|remove``: partitions of a running service, as `vipu`
makes them."""

from __future__ import annotations

from typing import Any

import click

from cluster.cli.options import client_options
from cluster.cli.output import echo_message
from cluster.model.units import ranges
from cluster.service.client import Client

MAX_IPUS = 65536  # the largest POD preset: no partition is bigger


@click.group("partition")
def partition_group() -> None:
    """Create, list, show and remove partitions (as `vipu` does)."""


def _partition_line(p: Any) -> str:
    """One partition (a ``Partition`` message) as a line of ``partition list``."""
    health = p.health + (f" ({p.health_detail})" if p.health_detail else "")
    return f"{p.name:<24} {p.size:>5} {p.gcds:>5}  {ranges(sorted(p.ipus)):<24} {health}"


def _partition_detail(p: Any) -> str:
    """A partition as ``partition show`` prints it: its line, IPU-Link domain, units, ring."""
    ring = " -> ".join(map(str, [*p.ipus, p.ipus[0]])) if len(p.ipus) > 1 else str(p.ipus[0])
    return "\n".join([
        f"partition {p.name}: {p.size} IPU{'s' if p.size > 1 else ''}, {p.gcds} GCD"
        f"{'s' if p.gcds > 1 else ''}, {p.health or 'health unknown'}"
        + (f" ({p.health_detail})" if p.health_detail else ""),
        f"IPU-Link domain size (ILD): {p.ild_size} IPUs",
        f"units: {', '.join(p.units)}",
        f"ring: {ring}"])


@partition_group.command("create")
@click.argument("name")
@click.option("--size", type=click.IntRange(1, MAX_IPUS), required=True,
              help="IPUs, a power of two.")
@click.option("--gcds", type=click.IntRange(1, MAX_IPUS), default=1, show_default=True)
@client_options
def partition_create(name: str, size: int, gcds: int, host: str | None, port: int | None,
                     token_file: str | None, as_json: bool) -> None:
    """Create partition NAME of --size free IPUs."""
    made = Client(host, port, token_file).create_partition(name, size, gcds)
    echo_message(made, as_json,
                 f"created partition {made.name}: IPUs {','.join(map(str, made.ipus))}")


@partition_group.command("list")
@client_options
def partition_list(host: str | None, port: int | None, token_file: str | None,
                   as_json: bool) -> None:
    """Every partition (a user's own, on a shared POD): size, GCDs, IPUs, health; and
    owner, once a user other than the administrator has one."""
    listed = Client(host, port, token_file).list_partitions()
    lines = [f"{'name':<24} {'size':>5} {'gcds':>5}  {'ipus':<24} health"] + [
        _partition_line(p) for p in listed.partitions]
    if any(p.owner not in ("", "admin") for p in listed.partitions):  # a shared POD
        lines = [f"{owner:<16} {line}" for owner, line in
                 zip(["owner", *(p.owner for p in listed.partitions)], lines)]
    echo_message(listed, as_json, "\n".join(lines))


@partition_group.command("show")
@click.argument("name")
@client_options
def partition_show(name: str, host: str | None, port: int | None, token_file: str | None,
                   as_json: bool) -> None:
    """Partition NAME: size, GCDs, health, IPU-Link domain size, units and ring."""
    found = Client(host, port, token_file).get_partition(name)
    echo_message(found, as_json, _partition_detail(found))


@partition_group.command("remove")
@click.argument("name")
@client_options
def partition_remove(name: str, host: str | None, port: int | None, token_file: str | None,
                     as_json: bool) -> None:
    """Remove partition NAME, freeing its IPUs."""
    gone = Client(host, port, token_file).remove_partition(name)
    echo_message(gone, as_json, f"removed partition {gone.name}")
