"""Two phantom-mode reports on a workload: how pipelining pays off (throughput and bubble
against IPUs per replica, schedule and micro-batches) and how it scales across PODs
(throughput, per-IPU efficiency and the step broken down, preset by preset).

Each run is :func:`cluster.training.trainer.train` in phantom mode; a configuration that
does not fit the IPUs' memory is a row that says so, not the end of the report. Every time
is simulated seconds on the emulated hardware.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from cluster.training.config import TrainConfig
from cluster.training.memory_plan import OutOfMemory
from cluster.training.pipeline.pass_schedule import TooFewMicroBatches
from cluster.training.pipeline.schedules import fill_drain
from cluster.training.plan import TrainPlan
from cluster.training.reports.document import (
    SIM_NOTE,
    legend,
    plot_breakdown,
    pyplot,
    save_png,
    write_readme,
)
from cluster.training.step_parts import STEP_PARTS, StepPart, parts_spent
from cluster.training.trainer import train

Row = dict[str, Any]
BUBBLE_OF_STEP = "bubble, % of step"
"""The bubble's share of the whole step: what pipelining's idle time costs a step."""
BUBBLE_OF_SPAN = "bubble, % of compute + bubble"
"""The bubble's share of the pipeline's span, compute + bubble: the share
``(K - 1) / (M + K - 1)`` predicts for equal stages, and the one bubble.png plots."""
BUBBLE_NOTE = (f"*{BUBBLE_OF_STEP}*: pipeline bubble / step time. *{BUBBLE_OF_SPAN}*: "
               "pipeline bubble / (compute + pipeline bubble), the share "
               "(K - 1) / (M + K - 1) predicts for K equal stages and M micro-batches, "
               "and the one bubble.png plots (fill-drain).")


def parts_shown(rows: list[Row]) -> list[StepPart]:
    """The parts of a step the table and breakdown.png show, in step order: those every
    table shows, and each other one a row that ran spends time in
    (:func:`~cluster.training.step_parts.parts_spent`): no empty column."""
    return parts_spent(row for row in rows if row["fits"])


def _run(base: TrainPlan, config: TrainConfig) -> Row:
    """One phantom run of ``config`` (a variation of ``base``) as a row, or a row saying
    why it does not fit the IPUs' memory or why its schedule cannot run that many
    micro-batches (any other mistake in the options is the user's to mend: it is
    raised)."""
    row: Row = {"topology": config.topology, "ipus_per_replica": config.ipus_per_replica,
                "schedule": config.pipeline_schedule, "micro_batches": config.accumulation}
    try:
        record = train(base.replanned_as(replace(config, steps=1)))
    except OutOfMemory as error:
        return {**row, "fits": False, "verdict": "does not fit", "why": str(error)}
    except TooFewMicroBatches as error:
        return {**row, "fits": False, "verdict": "too few micro-batches", "why": str(error),
                "needed_micro_batches": error.needed}
    step = record["steps"][0]
    ipus = record["replicas"] * config.ipus_per_replica
    return {**row, "fits": True, "ipus": ipus, "replicas": record["replicas"],
            "global_batch": record["global_batch"], "sim_seconds": step["sim_seconds"],
            "throughput": record["throughput_samples_per_sim_second"],
            "bubble_fraction": step["pipeline_bubble_seconds"] / step["sim_seconds"],
            "span_bubble_fraction": step["pipeline_bubble_seconds"] / (
                step["pipeline_bubble_seconds"] + step["compute_seconds"]),
            "peak_memory_bytes": max(s["total_bytes"] for s in record["memory_per_ipu"]),
            **{part.key: part.seconds(step) for part in STEP_PARTS}}


def pipeline_configs(base: TrainConfig, ipus_per_replica: Iterable[int],
                     schedules: Iterable[str], micro_batches: Iterable[int]) -> list[TrainConfig]:
    """Every combination of the sweep, as many replicas as fit."""
    return [replace(base, ipus_per_replica=k, pipeline_schedule=schedule, accumulation=m,
                    replicas_per_server=0)
            for k in ipus_per_replica for schedule in schedules for m in micro_batches]


def pipeline_sweep(base: TrainPlan, ipus_per_replica: Iterable[int],
                   schedules: Iterable[str], micro_batches: Iterable[int]) -> list[Row]:
    """Every combination, in phantom mode."""
    return [_run(base, config) for config in pipeline_configs(base.config, ipus_per_replica,
                                                             schedules, micro_batches)]


def scaling_sweep(base: TrainPlan, topologies: Iterable[str]) -> list[Row]:
    """The same run on each topology, with per-IPU efficiency against the first that fits."""
    rows = [_run(base, replace(base.config, topology=name, replicas_per_server=0))
            for name in topologies]
    fitting = [row for row in rows if row["fits"]]
    if fitting:
        base_rate = fitting[0]["throughput"] / fitting[0]["ipus"]
        for row in fitting:
            row["per_ipu_efficiency"] = (row["throughput"] / row["ipus"] / base_rate
                                         if base_rate > 0 else math.nan)
    return rows


def _fmt(row: Row, key: str, scale: float = 1.0, spec: str = ".3f") -> str:
    return format(row[key] * scale, spec) if row.get("fits") else "-"


def pipeline_table(rows: list[Row]) -> str:
    """Markdown: one line per run of :func:`pipeline_sweep`, then what the two bubble
    columns are (:data:`BUBBLE_NOTE`)."""
    lines = ["| IPUs/replica | schedule | micro-batches | replicas | step (ms) | samples/s | "
             f"{BUBBLE_OF_STEP} | {BUBBLE_OF_SPAN} | between stages (ms) | "
             "peak memory/IPU (MB) |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        if not row["fits"]:
            lines.append(f"| {row['ipus_per_replica']} | {row['schedule']} | "
                         f"{row['micro_batches']} | - | {row['verdict']} | | | | | |")
            continue
        lines.append(f"| {row['ipus_per_replica']} | {row['schedule']} | "
                     f"{row['micro_batches']} | {row['replicas']} | {_fmt(row, 'sim_seconds', 1e3)}"
                     f" | {_fmt(row, 'throughput', 1, ',.0f')} | "
                     f"{_fmt(row, 'bubble_fraction', 1, '.1%')} | "
                     f"{_fmt(row, 'span_bubble_fraction', 1, '.1%')} | "
                     f"{_fmt(row, 'inter_stage_seconds', 1e3)} | "
                     f"{_fmt(row, 'peak_memory_bytes', 1e-6, ',.0f')} |")
    return "\n".join([*lines, "", BUBBLE_NOTE])


def topology_table(rows: list[Row]) -> str:
    """Markdown: one line per topology of :func:`scaling_sweep`, the step broken down."""
    parts = parts_shown(rows)
    head = ["topology", "IPUs", "step (ms)", "samples/s", "per-IPU efficiency",
            *[f"{part.label} (ms)" for part in parts]]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for row in rows:
        if not row["fits"]:
            lines.append(f"| {row['topology']} | {row['verdict']}: {row['why'][:120]} |")
            continue
        cells = [row["topology"], str(row["ipus"]), _fmt(row, "sim_seconds", 1e3),
                 _fmt(row, "throughput", 1, ",.0f"), _fmt(row, "per_ipu_efficiency"),
                 *[_fmt(row, part.key, 1e3) for part in parts]]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def bubble_points(rows: list[Row]) -> dict[int, list[tuple[int, float]]]:
    """What bubble.png plots: per K (IPUs per replica), the fill-drain runs that fit as
    (micro-batches, :data:`BUBBLE_OF_SPAN` as a fraction), by micro-batches; the same
    figure as the table's column of that name."""
    points: dict[int, list[tuple[int, float]]] = {}
    for row in rows:
        if row["fits"] and row["schedule"] == fill_drain.NAME:
            points.setdefault(row["ipus_per_replica"], []).append(
                (row["micro_batches"], row["span_bubble_fraction"]))
    return {k: sorted(points[k]) for k in sorted(points)}


def plot_pipeline(rows: list[Row], out: Path) -> list[Path]:
    """throughput.png (samples/s against IPUs per replica, per schedule, at the most
    micro-batches) and bubble.png (:func:`bubble_points`: :data:`BUBBLE_OF_SPAN`
    against micro-batches, per K, with the formula for equal stages, (K - 1) / (M + K - 1),
    dashed: the workload's stages are not quite equal)."""
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter, PercentFormatter

    whole = FuncFormatter(lambda value, _: f"{value:g}")  # 1, 2, 4 ... rather than 2^k

    fitting = [row for row in rows if row["fits"]]
    most = max((row["micro_batches"] for row in fitting), default=1)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for schedule in sorted({row["schedule"] for row in fitting}):
        mine = sorted((row["ipus_per_replica"], row["throughput"]) for row in fitting
                      if row["schedule"] == schedule and row["micro_batches"] == most)
        if mine:
            ax.plot(*zip(*mine), marker="o", label=f"{schedule}, {most} micro-batches")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(whole)
    ax.set_xlabel("IPUs per replica (pipeline stages)")
    ax.set_ylabel("throughput (samples per simulated second)")
    ax.set_title("Pipelined training throughput (simulated)")
    ax.grid(True, alpha=0.3)
    legend(ax)
    paths = [save_png(fig, out / "throughput.png")]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k, mine in bubble_points(rows).items():
        line = ax.plot(*zip(*mine), marker="o", label=f"K = {k}")[0]
        ms = [m for m, _ in mine]
        ax.plot(ms, [(k - 1) / (m + k - 1) for m in ms], linestyle="--",
                color=line.get_color(), alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(whole)
    ax.set_xlabel("micro-batches per step, M (gradient accumulation)")
    ax.set_ylabel(f"{BUBBLE_OF_SPAN} (simulated)")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_title("Pipeline bubble, fill-drain (dashed: (K-1)/(M+K-1))")
    ax.grid(True, alpha=0.3)
    legend(ax)
    paths.append(save_png(fig, out / "bubble.png"))
    return paths


def plot_scaling(rows: list[Row], out: Path) -> list[Path]:
    """throughput.png (samples/s per topology) and breakdown.png (the step's parts)."""
    plt = pyplot()
    fitting = [row for row in rows if row["fits"]]
    names = [row["topology"] for row in fitting]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.bar(names, [row["throughput"] for row in fitting], width=0.6)
    for i, row in enumerate(fitting):
        ax.annotate(f"{row['per_ipu_efficiency']:.0%}", (i, row["throughput"]),
                    textcoords="offset points", xytext=(0, 4), ha="center", fontsize=8)
    ax.set_ylabel("throughput (samples per simulated second)")
    ax.set_title("Throughput per topology (labels: per-IPU efficiency)")
    ax.grid(True, axis="y", alpha=0.3)
    paths = [save_png(fig, out / "throughput.png")]
    paths.append(plot_breakdown(fitting, parts_shown(rows), names, out / "breakdown.png",
                                xlabel=None, ylabel="step time (ms, simulated)",
                                title="Where a step's simulated time goes"))
    return paths


def write(out: Path, title: str, command: str, table: str, images: list[Path],
          settings: str = "", more: Sequence[str] = ()) -> Path:
    """README.md in ``out`` (:func:`~.document.write_readme`): the title, the command
    (every setting spelt out), the simulated-time note, the table, the ``settings`` table
    (Markdown), the plots, then ``more`` lines (a step's timeline)."""
    body = [line for image in images for line in (f"![{image.stem}]({image.name})", "")]
    return write_readme(out, title, command, SIM_NOTE, table, settings, [*body, *more])
