"""``ipupod topology show|list``: describe a topology (a preset or a YAML file), list the
presets."""

from __future__ import annotations

import click

from cluster.model.hardware import FIGURE_SOURCES
from cluster.model.presets import presets
from cluster.model.rack_drawing import render_dot
from cluster.model.spec import DEFAULT_TOPOLOGY, load_topology
from cluster.model.topology_show import render_json, render_text, summarize
from cluster.model.unit_drawing import render_unit_dot


@click.group("topology")
def topology_group() -> None:
    """Inspect topologies: presets and YAML files."""


@topology_group.command("show")
@click.argument("spec", default=DEFAULT_TOPOLOGY)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "dot"]), default="text",
              show_default=True)
@click.option("--figures", type=click.Choice(FIGURE_SOURCES), default="seed",
              show_default=True)
@click.option("--level", type=click.Choice(["ipu", "unit"]), default="ipu", show_default=True,
              help="With --format dot: a node per IPU, or per card or machine (readable "
                   "for a POD64 and beyond).")
def topology_show(spec: str, fmt: str, figures: str, level: str) -> None:
    """Summarise SPEC: IPUs, cards or machines, servers, links, bisection bandwidth."""
    built = load_topology(spec, figures)
    if fmt == "dot":
        click.echo(render_unit_dot(built) if level == "unit" else render_dot(built))
    else:
        summary = summarize(built)
        click.echo(render_json(summary) if fmt == "json" else render_text(summary))


@topology_group.command("list")
def topology_list() -> None:
    """List the presets."""
    for entry in presets():
        click.echo(f"{entry.example:<32} {entry.summary}")
