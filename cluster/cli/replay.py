"""``ipupod replay TRACE --topology T``: an MLCommons Chakra execution trace replayed on an
emulated POD in phantom mode (``docs/chakra.md``): rank ``r`` on IPU ``r``, every node in
dependency order, collectives through GCL and the cost model. Prints per-rank totals, the
time in each collective kind, the critical path and the busiest links; ``--json`` all of
it, ``--trace FILE`` a timeline. ``--mode real`` (up to a POD16) also runs each collective
on a launched POD's devices with real data, checked against NumPy
(:mod:`cluster.training.engines.replay_on_devices`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from cluster.cli.output import ray_chatter_to_stderr
from cluster.cli.paths import CheckedPath
from cluster.cli.phantom_note import options_given, phantom_note
from cluster.cli.placement_flags import Placement, launch_pod
from cluster.cli.trace_option import check_trace_path, save_trace, trace_option
from cluster.model.hardware import FIGURE_SOURCES
from cluster.model.spec import DEFAULT_TOPOLOGY, load_topology
from cluster.model.topology import Topology
from cluster.model.units import format_size, plural
from cluster.training.chakra.replay_engine import ReplayRecord
from cluster.training.chakra.replay_pricing import ComputeSource, ReplayOptions
from cluster.training.chakra.replay_run import replay
from cluster.training.chakra.replay_trace import replay_trace
from cluster.training.engines.replay_on_devices import (
    check_fits,
    check_real_topology,
    moving_collectives,
    real_summary,
    run_on_devices,
)
from gcl.collectives import DTYPES, DType
from gcl.planner import AUTO

RANK_ROWS = 32  # per-rank rows shown; --json has every rank
LINK_ROWS = 10  # busiest links shown
PATH_KINDS = 6  # kinds of node the critical path's line names


@click.command("replay")
@click.argument("trace", type=CheckedPath(path_type=str))
@click.option("--topology", "topology_spec", default=DEFAULT_TOPOLOGY, show_default=True,
              help="A preset (dss8440, dss8440xN, pod16 ... pod65536) or a YAML file; rank r "
                   "runs on its IPU r.")
@click.option("--mode", type=click.Choice(["phantom", "real"]), default="phantom",
              show_default=True,
              help="phantom: sizes only, simulated seconds; real (up to a POD16): also run "
                   "each collective on emulated devices with real data, checked against "
                   "NumPy.")
@click.option("--ray-address", default=None,
              help="Real mode: an existing Ray cluster (default: RAY_ADDRESS, else local Ray).")
@click.option("--compute", type=click.Choice(["trace", "ipu"]), default="trace",
              show_default=True,
              help="COMP nodes' time: their duration_micros as traced, or their num_ops "
                   "FLOPs priced on the IPU (float16 peak x 0.22, a dense layer's "
                   "efficiency); each falls back to the other.")
@click.option("--algorithm", default=AUTO, show_default=True,
              help="GCL's algorithm for the collectives it runs (auto elsewhere): auto, "
                   "clockwise_ring, anticlockwise_ring, bidirectional_ring_pair, "
                   "hierarchical, halving_doubling.")
@click.option("--dtype", type=click.Choice(list(DTYPES)), default="float32", show_default=True,
              help="The element type collectives move (a trace gives bytes only).")
@click.option("--ranks-to", type=click.IntRange(1, 65536), default=None,
              help="Re-scale a trace of R ranks to N (a multiple of R): rank r replays rank "
                   "r mod R, process groups grow N/R times (data-parallel replicas).")
@click.option("--figures", type=click.Choice(FIGURE_SOURCES), default="seed", show_default=True,
              help="Where seed and public figures disagree, which to use (presets).")
@click.option("--json", "as_json", is_flag=True, help="Print everything as JSON.")
@trace_option
def replay_command(trace: str, topology_spec: str, mode: str, ray_address: str | None,
                   compute: str, algorithm: str, dtype: str, ranks_to: int | None,
                   figures: str, as_json: bool, trace_path: Path | None) -> None:
    """Replay a Chakra TRACE on an emulated POD (phantom mode: simulated seconds; real
    mode: the collectives also move real bytes through emulated devices).

    TRACE is a folder of NAME.RANK.et files, a file pattern, a prefix or one file, as
    `ipupod chakra show` takes it."""
    # protobuf and the generated schema load only when this command runs
    from cluster.training.chakra.et_reader import read_chakra_trace

    options = ReplayOptions(ComputeSource(compute), algorithm, DType(dtype), ranks_to)
    check_trace_path(trace_path)
    topology = load_topology(topology_spec, figures)
    if mode == "real":
        check_real_topology(topology)
    else:
        for line in phantom_note(options_given(("ray_address", "--ray-address"))):
            click.echo(line, err=True)
    chakra = read_chakra_trace(trace)
    record, summary = replay(chakra, topology, options)
    if mode == "real":
        summary = _on_devices(record, summary, topology, options, ray_address)
    click.echo(json.dumps(summary, indent=2) if as_json else render_text(summary))
    for line in notes(summary):
        click.echo(line, err=True)
    if trace_path is not None:
        save_trace(replay_trace(record, topology, trace), trace_path)


def _on_devices(record: ReplayRecord, summary: dict[str, Any], topology: Topology,
                options: ReplayOptions, ray_address: str | None) -> dict[str, Any]:
    """The replay's collectives run again on a launched POD with real data: the summary
    with mode real and what the devices did (``real``)."""
    runs = moving_collectives(record)  # checked before anything starts
    check_fits(topology, runs, options,
               devices_here=not (ray_address or os.environ.get("RAY_ADDRESS")))
    with ray_chatter_to_stderr():
        pod = launch_pod(topology, ray_address, Placement())
        try:
            done = run_on_devices(pod, runs, options)
        finally:
            pod.shutdown(stop_ray=True)
    return {**summary, "mode": "real",
            "real": real_summary(done, len(record.collectives) - len(runs))}


def notes(summary: dict[str, Any]) -> list[str]:
    """``note:`` lines for stderr: what was assumed, COMP nodes without a time."""
    lines = [f"note: assumed: {assumed}" for assumed in summary["assumed"]]
    if summary["no_duration_nodes"]:
        lines.append(f"note: {plural(summary['no_duration_nodes'], 'COMP node')} had no "
                     "duration_micros and no num_ops: 0 s each")
    return lines


def render_text(summary: dict[str, Any]) -> str:
    """The replay as text: a heading, a row per rank, collectives, critical path, links."""
    lines = [f"# ipupod replay {summary['trace']}: {plural(summary['ranks'], 'rank')} on "
             f"{summary['topology']}, mode {summary['mode']}, compute from {summary['compute']}, "
             f"algorithm {summary['algorithm']}, {summary['dtype']}",
             f"# simulated seconds; step ends at {_seconds(summary['end_seconds'])}"]
    lines += _table(["rank", "IPU", "nodes", "compute", "communication", "memory", "idle",
                     "end"],
                    [[str(r["rank"]), r["ipu"], f"{r['nodes']:,}",
                      *(_seconds(r[key]) for key in ("compute_seconds", "communication_seconds",
                                                     "memory_seconds", "idle_seconds",
                                                     "end_seconds"))]
                     for r in summary["per_rank"][:RANK_ROWS]])
    if summary["ranks"] > RANK_ROWS:
        lines.append(f"... and {summary['ranks'] - RANK_ROWS:,} more ranks (--json lists "
                     "every rank)")
    lines += ["", "collectives (each counted once):"]
    lines += _table(["kind", "count", "bytes", "time"],
                    [[kind, f"{k['count']:,}", format_size(k["bytes"]),
                      _seconds(k["sim_seconds"])] for kind, k in summary["collectives"].items()])
    lines += ["", _path_line(summary["critical_path"]), "", "busiest links:"]
    links = summary["links"][:LINK_ROWS]
    lines += _table(["link", "bytes", "busy"],
                    [[row["link"], format_size(row["bytes"]), f"{row['busy_fraction']:.1%}"]
                     for row in links]) if links else ["  (no bytes crossed a link)"]
    if len(summary["links"]) > LINK_ROWS:
        lines.append(f"... and {len(summary['links']) - LINK_ROWS:,} more links (--json)")
    if "real" in summary:
        lines += ["", _real_line(summary["real"])]
    return "\n".join(lines)


def _real_line(real: dict[str, Any]) -> str:
    """What the devices did, in one line."""
    ran = real["collectives"]
    moved = sum(c["bytes"] for c in ran)
    skipped = (f"; {plural(real['not_run'], 'collective')} moving nothing not run"
               if real["not_run"] else "")
    return (f"real mode: {plural(len(ran), 'collective')} ran on the devices with real data "
            f"({format_size(moved)} a rank), {real['wrong']:,} elements wrong against NumPy, "
            f"{real['wall_seconds']:.3g} s of wall{skipped}")


def _path_line(path: dict[str, Any]) -> str:
    kinds = sorted(path["seconds_by_kind"].items(), key=lambda item: -item[1])[:PATH_KINDS]
    parts = ", ".join(f"{kind} {_seconds(seconds)}" for kind, seconds in kinds if seconds > 0)
    return (f"critical path: {plural(path['nodes'], 'node')} ending at "
            f"{_seconds(path['end_seconds'])}: {parts or 'no time'}, waiting "
            f"{_seconds(path['waiting_seconds'])}")


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Rows under a header, the first two columns left-aligned, the rest right-aligned."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return ["  " + "  ".join(cell.ljust(w) if i < 2 else cell.rjust(w)
                             for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
            for row in [header, *rows]]


def _seconds(seconds: float) -> str:
    """Simulated seconds in a readable unit (``12.3 ms``)."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return "0 s" if seconds == 0 else f"{seconds / 1e-9:.4g} ns"
