"""``ipupod trace show FILE --out step.png``: a trace (``--trace``, :mod:`cluster.model.trace`)
drawn as a Gantt chart without leaving the terminal: a row per track, time across, a
colour per span name; a trace with both clocks (real mode) gets a chart per clock, each
with its own time axis; the legend names the span names that cover the drawn time
(:mod:`cluster.cli.trace_legend`). Readable up to :data:`MAX_ROWS` rows; a larger trace
is summarised (a row per process, then only the first processes), and the title says
so. PNG, SVG or PDF, as ``--out``'s suffix says."""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from cluster.cli.paths import CheckedPath
from cluster.cli.trace_legend import legend
from cluster.errors import UserError, quoted
from cluster.model.files import open_regular
from cluster.model.trace import SIMULATED, WALL, WALL_PREFIX

MAX_ROWS = 80  # rows a chart draws (pod64's bench: 2 sweep + its link types + 64 IPUs)
FORMATS = ("png", "svg", "pdf")  # what --out's suffix may ask for
UNITS = ((1e6, "s"), (1e3, "ms"), (1.0, "us"))  # the x axis's unit, by the trace's length


@dataclass
class Row:
    """A row of the chart: its label and its spans, (start, duration, name) in
    microseconds."""

    label: str
    spans: list[tuple[float, float, str]] = field(default_factory=list)


def read_trace(path: Path) -> dict[str, Any]:
    """The trace at ``path`` (a JSON object with ``traceEvents``), or a UserError."""
    try:
        with open_regular(path) as handle:
            document = json.loads(handle.read().decode("utf-8"))
    except OSError as error:
        raise UserError(f"{quoted(str(path))}: {error.strerror or error}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{quoted(str(path))} is not a trace (not JSON: {error})") from None
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise UserError(f"{quoted(str(path))} is not a trace: a JSON object with a "
                        "traceEvents list (as `ipupod bench --trace` writes) was expected")
    _check_spans(document["traceEvents"], path)
    return document


def _check_spans(events: list[Any], path: Path) -> None:
    """Refuse a trace with no span (``"X"`` event) to draw, or a span whose start is not
    a finite number or whose duration is not a finite number of 0 or more."""
    spans = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    if not spans:
        raise UserError(f"{quoted(str(path))} holds no spans (\"X\" events): nothing to "
                        "draw; give a trace that --trace wrote")
    for span in spans:
        ts: Any = span.get("ts")
        dur: Any = span.get("dur")
        if not (_finite(ts) and _finite(dur) and dur >= 0):
            raise UserError(f"{quoted(str(path))}: a span's ts must be a finite number and "
                            f"its dur a finite number of 0 or more: {quoted(span)}")


def _finite(value: Any) -> bool:
    """Whether ``value`` is a finite JSON number (not NaN, not infinite, not a bool)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def chart_format(out: Path) -> str:
    """The format ``out``'s suffix asks for (:data:`FORMATS`), or a UserError."""
    suffix = out.suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise UserError(f"--out {quoted(str(out))}: its suffix chooses the chart's format: "
                        "end it in .png, .svg or .pdf")
    return suffix


def _names(events: list[Any]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    """Process names by pid, track names by (pid, tid), from the metadata events."""
    processes: dict[int, str] = {}
    tracks: dict[tuple[int, int], str] = {}
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "M":
            continue
        name = str((event.get("args") or {}).get("name", ""))
        if event.get("name") == "process_name":
            processes[event.get("pid", 0)] = name
        elif event.get("name") == "thread_name":
            tracks[(event.get("pid", 0), event.get("tid", 0))] = name
    return processes, tracks


def rows_of(document: Mapping[str, Any]) -> tuple[list[Row], str]:
    """The chart's rows, in the order the trace numbers its processes and tracks, and a
    note saying how they were summarised (empty when every track has a row). Above
    :data:`MAX_ROWS` tracks, the first processes keep a row per track while a row is
    left for each process after them (for half the chart, when they will not all fit);
    the others get one row (their tracks' spans together); beyond :data:`MAX_ROWS` rows,
    the first processes only."""
    events = document["traceEvents"]
    processes, tracks = _names(events)
    by_track: dict[tuple[int, int], list[tuple[float, float, str]]] = {}
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "X":
            try:
                span = (float(event["ts"]), float(event["dur"]), str(event.get("name", "")))
                key = (int(event.get("pid", 0)), int(event.get("tid", 0)))
            except (KeyError, TypeError, ValueError):
                raise UserError(f"a span of the trace has a ts, dur, pid or tid that is not "
                                f"a number: {quoted(event)}") from None
            by_track.setdefault(key, []).append(span)
    keys = sorted(set(tracks) | set(by_track))
    by_process: dict[int, list[int]] = {}
    for p, t in keys:
        by_process.setdefault(p, []).append(t)
    rows: list[Row] = []
    merged = drawn = 0
    for p, tids in by_process.items():
        if len(rows) >= MAX_ROWS:
            break
        drawn += 1
        rest = len(by_process) - drawn  # a row for each process after (half the chart
        rest = rest if rest <= MAX_ROWS else MAX_ROWS // 2  # when they will not all fit)
        if len(tids) == 1 or len(rows) + len(tids) + rest <= MAX_ROWS:  # a row per track
            rows += [Row(f"{processes.get(p, p)} / {tracks.get((p, t), t)}",
                         by_track.get((p, t), [])) for t in tids]
        else:
            merged += 1
            rows.append(Row(f"{processes.get(p, p)} (all {len(tids)} tracks)",
                            [span for t in tids for span in by_track.get((p, t), [])]))
    notes = [f"{merged:,} processes as one row each"] if merged else []
    if drawn < len(by_process):
        notes.append(f"the first {drawn:,} of {len(by_process):,} processes")
    return rows, "; ".join(notes)


def split_clocks(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The trace as one document per clock it holds (``simulated``, ``wall``: the
    processes whose names begin ``wall clock:``), each with its processes' events only,
    so that the two are never drawn on one axis."""
    processes, _ = _names(document["traceEvents"])
    wall = {pid for pid, name in processes.items() if name.startswith(WALL_PREFIX)}
    parts: dict[str, dict[str, Any]] = {}
    for event in document["traceEvents"]:
        if isinstance(event, dict):
            clock = WALL if event.get("pid") in wall else SIMULATED
            parts.setdefault(clock, {**document, "traceEvents": []})["traceEvents"].append(event)
    for clock, part in parts.items():
        part["metadata"] = {**(document.get("metadata") or {}), "clock": clock}
    return {clock: parts[clock] for clock in (SIMULATED, WALL) if clock in parts}


def draw(document: Mapping[str, Any], out: Path, clock: str | None = None) -> None:
    """Draw the trace's chart at ``out`` (PNG, SVG or PDF, as its suffix says),
    atomically: a chart per clock the trace holds spans of (each with its own time
    axis), or only ``clock``'s."""
    from cluster.training.reports.document import pyplot  # matplotlib: only here

    kind = chart_format(out)
    plt = pyplot()
    panels = {name: part for name, part in split_clocks(document).items()
              if any(isinstance(e, dict) and e.get("ph") == "X" for e in part["traceEvents"])}
    if clock is not None:
        if clock not in panels:
            raise UserError(f"--clock {clock}: the trace holds no spans on the {clock} clock "
                            f"(it has {' and '.join(panels) or 'none'})")
        panels = {clock: panels[clock]}
    if not panels:
        raise UserError("the trace holds no spans: nothing to draw")
    charts: list[tuple[Mapping[str, Any], list[Row], str]] = [
        (part, *rows_of(part)) for part in panels.values()]
    heights = [1.2 + 0.28 * max(len(rows), 1) for _, rows, _ in charts]
    fig, axes = plt.subplots(len(charts), 1, figsize=(12, 0.3 + sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, (part, rows, note) in zip(axes[:, 0], charts):
        _chart(plt, ax, part, rows, note)
    fig.tight_layout()
    descriptor, temporary = tempfile.mkstemp(prefix=f".{out.name}-", suffix=f".{kind}",
                                             dir=out.parent)
    os.close(descriptor)
    try:
        fig.savefig(temporary, format=kind, dpi=120)
        os.chmod(temporary, 0o644)
        os.replace(temporary, out)
    finally:
        Path(temporary).unlink(missing_ok=True)
        plt.close(fig)


def _chart(plt: Any, ax: Any, document: Mapping[str, Any], rows: list[Row], note: str) -> None:
    """One clock's Gantt chart on ``ax``: a row per track, that clock's time across."""
    end = max((start + duration for row in rows for start, duration, _ in row.spans),
              default=0.0)
    scale, unit = next(((s, u) for s, u in UNITS if end >= s), UNITS[-1])
    key = legend(plt, (span for row in rows for span in row.spans))
    for y, row in enumerate(rows):
        by_colour: dict[Any, list[tuple[float, float]]] = {}
        for start, duration, name in row.spans:
            by_colour.setdefault(key.colour(name), []).append((start / scale, duration / scale))
        for colour, bars in by_colour.items():
            ax.broken_barh(bars, (y - 0.4, 0.8), facecolor=colour, edgecolor="white",
                           linewidth=0.3)
    ax.set_yticks(range(len(rows)), [row.label for row in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    clock = document.get("metadata", {}).get("clock", SIMULATED)
    ax.set_xlabel(f"{'wall-clock' if clock == WALL else clock} time ({unit})")
    ax.set_title(_title(document, note), fontsize=9)
    if key.entries:
        from matplotlib.patches import Patch

        ax.legend([Patch(facecolor=colour) for _, colour in key.entries],
                  [label for label, _ in key.entries], fontsize=7, loc="upper left",
                  bbox_to_anchor=(1.0, 1.0))


def _title(document: Mapping[str, Any], note: str) -> str:
    """What the trace is of, from its metadata, and how the chart summarised it."""
    metadata = document.get("metadata") or {}
    words = [str(metadata[key]) for key in ("tool", "topology", "model") if key in metadata]
    if metadata.get("clock") == WALL:
        words.append("wall clock: what the driver and the actors did")
    elif metadata.get("aggregation"):
        words.append(f"tracks: {metadata['aggregation']}")
    if note:
        words.append(f"drawn: {note}")
    return " | ".join(words) or "trace"


@click.group("trace")
def trace_group() -> None:
    """Draw the timelines `--trace FILE` writes."""


@trace_group.command("show")
@click.argument("file", type=CheckedPath(dir_okay=False, path_type=Path))
@click.option("--out", "out", type=CheckedPath(dir_okay=False, path_type=Path),
              required=True, help="The chart to write (a Gantt chart: tracks down, time "
                                  "across), as its suffix says: .png, .svg or .pdf.")
@click.option("--clock", type=click.Choice([SIMULATED, WALL]), default=None,
              help="Draw only this clock's processes (default: a chart per clock the trace "
                   "holds; real mode's traces hold both).")
def trace_show(file: Path, out: Path, clock: str | None) -> None:
    """Draw FILE (a trace from --trace) as a Gantt chart (PNG, SVG or PDF)."""
    chart_format(out)  # before any work
    document = read_trace(file)
    if not out.parent.is_dir():
        raise UserError(f"--out {quoted(str(out))}: the folder {quoted(str(out.parent))} "
                        "does not exist")
    try:
        draw(document, out, clock)
    except OSError as error:
        raise UserError(f"--out {quoted(str(out))}: {error.strerror or error}") from None
    click.echo(f"# {out}", err=True)
