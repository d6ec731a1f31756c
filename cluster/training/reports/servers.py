"""``ipupod train-report``: data-parallel training across server counts, as a table,
three plots and a README (:mod:`.document`).

Each run is a :class:`~cluster.training.records.RunRecord` of one server count; a step's
parts are :data:`~cluster.training.step_parts.STEP_PARTS`. Every time here is SIMULATED
seconds on the emulated hardware, never wall-clock time on this machine; tables and plots
show milliseconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import fmean
from typing import Any

from cluster.training.records import RunRecord
from cluster.training.reports.document import (
    SIM_NOTE,
    plot_breakdown,
    pyplot,
    save_png,
    write_readme,
)
from cluster.training.step_parts import STEP_PARTS, StepPart, parts_spent

Record = dict[str, Any]
"""A row of :func:`scaling_rows`."""

# (header, row key, format) of the table columns before the step's parts.
_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("servers", "servers", "d"),
    ("replicas", "replicas", "d"),
    ("mode", "mode", "s"),
    ("batch", "global_batch", "d"),
    ("step(ms,sim)", "step_seconds", ".3f"),
    ("samples/s(sim)", "throughput_samples_per_sim_second", ",.0f"),
    ("efficiency", "efficiency", ".3f"),
)
_MS = {"step_seconds"}  # seconds shown as milliseconds, besides the parts


def parts_shown(rows: Sequence[Mapping[str, Any]]) -> list[StepPart]:
    """The parts the table and breakdown.png show (:func:`parts_spent`): those every table
    shows first, then the others some row spends time in, each group in step order."""
    return sorted(parts_spent(rows), key=lambda part: not part.always)


def _columns(rows: list[Record]) -> list[tuple[str, str, str]]:
    """:data:`_COLUMNS` and a column for each part ``rows`` show."""
    return [*_COLUMNS, *((f"{part.title}(ms)", part.key, ".3f") for part in parts_shown(rows))]


def scaling_rows(runs: Sequence[RunRecord]) -> list[Record]:
    """One row per run, sorted by server count (then mode), summarising its simulated speed.

    Each row holds ``servers``, ``replicas``, ``mode``, ``global_batch``, ``step_seconds``
    (mean simulated seconds per step over all steps), ``throughput_samples_per_sim_second``
    (``global_batch / step_seconds``), the mean of each part of
    :data:`~cluster.training.step_parts.STEP_PARTS` (simulated seconds) and
    ``efficiency``: throughput over ideal linear scaling from the smallest server count,
    ``throughput / (servers / base_servers * base_throughput)``, so 1.0 means perfect
    scaling. Real and phantom runs share one base: both take their simulated time from the
    same cost model, so they time alike by construction. Raises ValueError for a run without steps.
    """
    rows: list[Record] = []
    for run in runs:
        steps = run["steps"]
        if not steps:
            raise ValueError(f"run with {run['servers']} servers has no steps")
        step_seconds = fmean(step["sim_seconds"] for step in steps)
        if step_seconds <= 0:
            raise ValueError(f"run with {run['servers']} servers has no simulated time")
        row: Record = {
            "servers": int(run["servers"]),
            "replicas": int(run["replicas"]),
            "mode": str(run["mode"]),
            "global_batch": int(run["global_batch"]),
            "steps": len(steps),
            "step_seconds": step_seconds,
            "throughput_samples_per_sim_second": run["global_batch"] / step_seconds,
        }
        for part in STEP_PARTS:
            row[part.key] = fmean(part.seconds(step) for step in steps)
        rows.append(row)
    rows.sort(key=lambda row: (row["servers"], row["mode"]))
    first = rows[0]  # sorted: the smallest server count
    for row in rows:
        ideal = (row["servers"] / first["servers"]
                 * first["throughput_samples_per_sim_second"])
        row["efficiency"] = row["throughput_samples_per_sim_second"] / ideal
    return rows


def _cells(row: Record, columns: list[tuple[str, str, str]]) -> list[str]:
    """The table cells of one row, seconds converted to milliseconds."""
    cells: list[str] = []
    parts = {part.key for part in STEP_PARTS}
    for _, key, fmt in columns:
        value = row[key] * 1e3 if key in parts or key in _MS else row[key]
        cells.append(format(value, fmt))
    return cells


def format_table(rows: list[Record]) -> str:
    """Plain-text table of :func:`scaling_rows`, aligned columns, units in headers."""
    columns = _columns(rows)
    headers = [header for header, _, _ in columns]
    body = [_cells(row, columns) for row in rows]
    widths = [max(len(cell) for cell in column) for column in zip(headers, *body)]
    left = [fmt == "s" for _, _, fmt in columns]
    lines = ["  ".join(cell.ljust(width) if is_left else cell.rjust(width)
                       for cell, width, is_left in zip(line, widths, left)).rstrip()
             for line in [headers, *body]]
    return "\n".join(lines)


def markdown_table(rows: list[Record]) -> str:
    """Markdown table of :func:`scaling_rows`, same columns as ``format_table``."""
    columns = _columns(rows)
    headers = [header for header, _, _ in columns]
    align = ["---" if fmt == "s" else "---:" for _, _, fmt in columns]
    lines = [headers, align, *(_cells(row, columns) for row in rows)]
    return "\n".join("| " + " | ".join(line) + " |" for line in lines)


def plot_loss(runs: Sequence[RunRecord], path: Path | str) -> Path:
    """Training loss against step, one line per run with losses, labelled "N servers".

    Phantom runs carry no data, so their losses are None and they are left out; steps
    with a None loss inside a real run are skipped too.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    plotted = 0
    for run in sorted(runs, key=lambda run: (run["servers"], run["mode"])):
        points = [(step["step"], step["loss"]) for step in run["steps"]
                  if step.get("loss") is not None]
        if not points:
            continue
        steps, losses = zip(*points)
        label = f"{run['servers']} server{'s' if run['servers'] != 1 else ''}"
        if sum(other["servers"] == run["servers"] for other in runs) > 1:
            label += f" ({run['mode']})"
        ax.plot(steps, losses, marker="." if len(points) < 50 else None, label=label)
        plotted += 1
    if plotted:
        ax.legend()
    else:
        ax.text(0.5, 0.5, "no losses: phantom runs carry no data", transform=ax.transAxes,
                ha="center", va="center")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole: no tick at 2.5
    ax.set_xlabel("training step (optimizer updates)")
    ax.set_ylabel("training loss (mean per sample, unitless)")
    ax.set_title("Training loss per step (data-parallel, simulated IPU-POD)")
    ax.grid(True, alpha=0.3)
    return save_png(fig, path)


THROUGHPUT_LABELS = {
    "phantom": "simulated (phantom mode)",
    "real": "simulated (real mode: data moved, time from the cost model)",
}
"""What throughput.png calls a run's points, by mode: in both modes the time is the cost
model's simulated step, never wall-clock time, so neither is "measured"."""


def plot_throughput(rows: list[Record], path: Path | str) -> Path:
    """Throughput (samples per simulated second) against servers, with ideal linear scaling;
    each mode's points are named by :data:`THROUGHPUT_LABELS`.

    The ideal line grows from the smallest run in proportion to the server count; the x axis
    is log2 with a tick at each server count measured.
    """
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    servers = sorted({row["servers"] for row in rows})
    if rows:
        first = min(rows, key=lambda row: (row["servers"], row["mode"]))
        ideal = [s / first["servers"] * first["throughput_samples_per_sim_second"]
                 for s in servers]
        ax.plot(servers, ideal, linestyle="--", color="grey",
                label=f"ideal linear scaling from {first['servers']} server"
                + ("s" if first["servers"] != 1 else ""))
    for mode in sorted({row["mode"] for row in rows}):
        mine = [row for row in rows if row["mode"] == mode]
        xs = [row["servers"] for row in mine]
        ys = [row["throughput_samples_per_sim_second"] for row in mine]
        ax.plot(xs, ys, marker="o", label=THROUGHPUT_LABELS.get(mode, f"simulated ({mode} mode)"))
        for row in mine:
            ax.annotate(f"{row['efficiency']:.0%}", (row["servers"],
                        row["throughput_samples_per_sim_second"]),
                        textcoords="offset points", xytext=(0, 8), ha="center", fontsize=8,
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
    ax.set_xscale("log", base=2)
    ax.set_xticks(servers, [str(s) for s in servers])
    ax.minorticks_off()
    ax.set_xlabel("servers (DSS 8440, log2 scale)")
    from matplotlib.ticker import StrMethodFormatter

    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    ax.set_ylabel("throughput (samples per simulated second)")
    ax.set_title("Training throughput vs servers (simulated; labels: scaling efficiency)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return save_png(fig, path)


def plot_breakdown_by_servers(rows: list[Record], path: Path) -> Path:
    """Stacked bars per server count: the mean simulated step time split into its parts
    (ms; :func:`~.document.plot_breakdown`)."""
    repeated = len({row["servers"] for row in rows}) < len(rows)
    ticks = [f"{row['servers']}" + (f"\n{row['mode']}" if repeated else "") for row in rows]
    return plot_breakdown(rows, parts_shown(rows), ticks, path, xlabel="servers",
                          ylabel="mean step time (ms, simulated)",
                          title="Where a training step's simulated time goes")


def write_report(runs: Sequence[RunRecord], out_dir: Path, command: str,
                 settings: str = "", more: Sequence[str] = ()) -> dict[str, Path]:
    """Write loss.png, throughput.png, breakdown.png and README.md into ``out_dir``.

    The README (:func:`~.document.write_readme`) gives the command that produced the runs
    (every setting spelt out), says the times are simulated, holds the scaling table in
    Markdown, the ``settings`` table (Markdown: each setting and why) and the three
    images, then ``more`` lines (a step's timeline). Creates ``out_dir``; returns the
    written paths keyed "loss", "throughput",
    "breakdown", "readme".
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = scaling_rows(runs)
    paths = {
        "loss": plot_loss(runs, out_dir / "loss.png"),
        "throughput": plot_throughput(rows, out_dir / "throughput.png"),
        "breakdown": plot_breakdown_by_servers(rows, out_dir / "breakdown.png"),
    }
    paths["readme"] = write_readme(
        out_dir, "Data-parallel training: scaling across emulated servers (simulated)",
        command, SIM_NOTE + " Efficiency is throughput over ideal linear scaling from the "
        "smallest server count.", markdown_table(rows), settings, [
            "## Throughput (simulated)",
            "",
            "![Throughput against servers, simulated](throughput.png)",
            "",
            "## Step-time breakdown (simulated)",
            "",
            "![Mean simulated step time split into parts](breakdown.png)",
            "",
            "## Loss",
            "",
            "![Training loss per step](loss.png)",
            "",
            *more,
        ])
    return paths
