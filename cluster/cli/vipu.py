"""V-IPU's verb-noun commands beside ipupod's own: ``ipupod create partition NAME --size N``,
``ipupod list partitions``, ``ipupod show partition NAME``, ``ipupod remove partition
NAME`` (as ``vipu create partition`` and friends); the same commands as ``ipupod partition
create|list|show|remove``."""

from __future__ import annotations

import click

from cluster.cli.partition import (
    partition_create,
    partition_list,
    partition_remove,
    partition_show,
)


@click.group("create")
def create_group() -> None:
    """Create a partition (`vipu create partition`)."""


@click.group("list")
def list_group() -> None:
    """List partitions (`vipu list partitions`)."""


@click.group("show")
def show_group() -> None:
    """Show a partition (`vipu get partition`)."""


@click.group("remove")
def remove_group() -> None:
    """Remove a partition (`vipu remove partition`)."""


create_group.add_command(partition_create, "partition")
list_group.add_command(partition_list, "partitions")
show_group.add_command(partition_show, "partition")
remove_group.add_command(partition_remove, "partition")
