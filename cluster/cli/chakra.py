"""``ipupod chakra show TRACE``: an MLCommons Chakra execution trace (one file per rank,
``docs/chakra.md``) read and checked, then summed up per rank: its nodes by kind, its
compute time, its collectives by type with their bytes; ``--json`` for programs. A trace
that cannot be read is one ``error:`` line naming the file and what is wrong."""

from __future__ import annotations

import json
from typing import Any

import click

from cluster.cli.paths import CheckedPath
from cluster.model.units import plural
from cluster.training.chakra.et_summary import summary_json


@click.group("chakra")
def chakra_group() -> None:
    """Read MLCommons Chakra execution traces (per-rank .et files)."""


@chakra_group.command("show")
@click.argument("trace", type=CheckedPath(path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def chakra_show(trace: str, as_json: bool) -> None:
    """Read TRACE and print, per rank, its nodes by kind, compute time and collectives.

    TRACE is a folder of NAME.RANK.et files (or .et.gz), a file pattern
    ('traces/step.*.et'), a prefix as ASTRA-sim takes it ('traces/step' for
    traces/step.0.et, ...), or one file (one rank)."""
    # protobuf and the generated schema load only when this command runs
    from cluster.training.chakra.et_reader import read_chakra_trace


    summary = summary_json(read_chakra_trace(trace))
    click.echo(json.dumps(summary, indent=2) if as_json else render_text(summary))


def render_text(summary: dict[str, Any]) -> str:
    """The summary as a table, a row per rank (a column per node type that occurs), and a
    note naming what was not used."""
    ranks = summary["ranks"]
    kinds = [kind for kind in (ranks[0]["nodes_by_kind"] if ranks else ())
             if any(rank["nodes_by_kind"][kind] for rank in ranks)]
    versions = sorted({rank["version"] for rank in ranks})
    header = ["rank", "nodes", *kinds, "compute (us)", "collectives (count, bytes)"]
    rows = [[str(rank["rank"]), f"{rank['nodes']:,}",
             *(f"{rank['nodes_by_kind'][kind]:,}" for kind in kinds),
             f"{rank['compute_micros']:,}", _collectives(rank["collectives"])]
            for rank in ranks]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    lines = [f"Chakra trace {summary['source']}: {plural(len(ranks), 'rank')}, schema "
             f"version {', '.join(repr(v) for v in versions)}"]
    lines += ["  ".join([*(cell.rjust(w) for cell, w in zip(row, widths)), row[-1]]).rstrip()
              for row in [header, *rows]]
    if summary["ignored"]:
        named = ", ".join(f"{name} ({count:,})" for name, count in summary["ignored"].items())
        lines.append(f"note: not used by the reader (fields and attributes, times given): "
                     f"{named}")
    return "\n".join(lines)


def _collectives(collectives: dict[str, Any]) -> str:
    """``all-reduce 2 (2,048 B), barrier 1 (0 B)``, or ``-`` for none."""
    return ", ".join(f"{name} {total['count']:,} ({total['bytes']:,} B)"
                     for name, total in collectives.items()) or "-"
