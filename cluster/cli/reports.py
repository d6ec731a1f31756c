"""``ipupod pipeline-report`` and ``ipupod scaling-report``: phantom-mode reports on a
workload, written as README.md and PNG plots (:mod:`cluster.training.model_reports`)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from cluster.cli.paths import CheckedPath
from cluster.cli.train import (
    ALGORITHM_OPTION,
    EFFICIENCY_SCALE_OPTION,
    PIPELINE_SCHEDULE_OPTION,
    _counts_option,
    report_folder,
)
from cluster.errors import UserError, quoted
from cluster.training import model_reports
from cluster.training.config import IPUS_PER_REPLICA, TrainConfig
from cluster.training.pipeline.schedules import schedule_names
from gcl.modes import Mode


def _items(text: str, option: str) -> list[str]:
    """Comma-separated items of ``option``, at least one, at most 32; a repeat counts once
    (a sweep runs each value once)."""
    items = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not items or len(items) > 32:
        raise UserError(f"{option} takes 1 to 32 items separated by commas, not {quoted(text)}")
    return items


def _counts(text: str, option: str) -> list[int]:
    """Whole numbers of ``option`` (``1,2,4``), each 1 to 4096."""
    try:
        counts = list(dict.fromkeys(int(item) for item in _items(text, option)))
    except ValueError:
        raise UserError(f"{option} takes whole numbers separated by commas, not "
                        f"{quoted(text)}") from None
    if min(counts) < 1 or max(counts) > 4096:
        raise UserError(f"{option}: each number runs from 1 to 4096")
    return counts


MODEL_OPTIONS = [
    click.option("--model", default="bert-large", show_default=True,
                 help="A built-in workload (resnet50, bert-base, bert-large, gpt2-xl, mlp) "
                      "or a workload YAML file."),
    click.option("--sequence-length", type=int, default=None,
                 help="Tokens per sample for the BERTs and GPT-2."),
    click.option("--micro-batch", type=int, default=1, show_default=True,
                 help="Samples per replica per micro-batch."),
    click.option("--optimizer-state",
                 type=click.Choice(["in-processor", "streaming", "sharded",
                                   "sharded-streaming"]),
                 default="streaming", show_default=True),
    click.option("--out", "out_dir", type=CheckedPath(file_okay=False, path_type=Path),
                 required=True, help="Folder for README.md and the plots; made if missing."),
]


def model_options(command: Any) -> Any:
    for option in reversed(MODEL_OPTIONS):
        command = option(command)
    return command


def _base(model: str, sequence_length: int | None, micro_batch: int,
          optimizer_state: str, topology: str | None = None) -> TrainConfig:
    return TrainConfig(model=model, sequence_length=sequence_length, micro_batch=micro_batch,
                       optimizer_state=optimizer_state, topology=topology,
                       mode=Mode.PHANTOM)


def _why_none_runs(rows: list[dict[str, Any]]) -> str:
    """Why no row of a pipeline sweep ran, in pipeline-report's own options: the first
    that does not fit the IPUs' memory, else the fewest micro-batches a schedule needs."""
    unfit = [row for row in rows if "needed_micro_batches" not in row]
    if unfit:
        return str(unfit[0]["why"])
    needed = min(row["needed_micro_batches"] for row in rows)
    tried = max(row["micro_batches"] for row in rows)
    return (f"every configuration has fewer micro-batches than its schedule needs (at "
            f"least {needed}; --micro-batches went up to {tried}): add {needed} or more to "
            "--micro-batches, or use fewer --ipus-per-replica")


@click.command("pipeline-report")
@click.option("--topology", default="pod16", show_default=True)
@click.option("--ipus-per-replica", "ks", default="2,4,8,16", show_default=True)
@click.option("--schedules", default="fill-drain,1f1b,popart", show_default=True)
@click.option("--micro-batches", default="1,2,4,8,16,32", show_default=True,
              help="Gradient accumulation counts: micro-batches in flight.")
@model_options
def pipeline_report_command(topology: str, ks: str, schedules: str, micro_batches: str,
                            out_dir: Path, **model: Any) -> None:
    """Pipelining: throughput and bubble against stages, schedule and micro-batches."""
    sweep = (_counts(ks, "--ipus-per-replica"), _items(schedules, "--schedules"),
             _counts(micro_batches, "--micro-batches"))
    for k in sweep[0]:
        if k not in IPUS_PER_REPLICA:
            raise UserError(f"--ipus-per-replica takes {', '.join(map(str, IPUS_PER_REPLICA))}, "
                            f"not {k}")
    for name in sweep[1]:
        if name not in schedule_names():
            raise UserError(f"--schedules takes {' and '.join(schedule_names())}, not "
                            f"{quoted(name)}")
    with report_folder(out_dir):
        rows = model_reports.pipeline_sweep(_base(topology=topology, **model), *sweep)
        if not any(row["fits"] for row in rows):
            raise UserError(f"{model['model']} runs in none of these configurations: "
                            f"{_why_none_runs(rows)}")
    _publish(out_dir, f"Pipelining {model['model']} on {topology} (simulated)",
             "pipeline-report", model_reports.pipeline_table(rows),
             model_reports.plot_pipeline(rows, out_dir))


@click.command("scaling-report")
@click.option("--topologies", default="pod16,pod64,pod128,pod256", show_default=True)
@click.option("--ipus-per-replica", "k", type=int, default=1, show_default=True)
@click.option("--gradient-accumulation", type=int, default=1, show_default=True)
@click.option("--layers-per-ipu", default=None,
              help="Consecutive layers on each pipeline stage (a recipe's placement; "
                   "default: balanced on FLOPs).")
@click.option("--final-stage-on-first-ipu", is_flag=True,
              help="One stage more, the last, on each replica's first IPU (Graphcore's "
                   "BERT recipes).")
@PIPELINE_SCHEDULE_OPTION
@ALGORITHM_OPTION
@EFFICIENCY_SCALE_OPTION
@model_options
def scaling_report_command(topologies: str, k: int, gradient_accumulation: int,
                           layers_per_ipu: str | None, final_stage_on_first_ipu: bool,
                           pipeline_schedule: str, algorithm: str, efficiency_scale: float,
                           out_dir: Path, **model: Any) -> None:
    """Scaling: throughput, per-IPU efficiency and the step's parts across topologies
    (with `ipupod calibrate`'s --efficiency-scale and a recipe's settings: a prediction)."""
    names = _items(topologies, "--topologies")
    with report_folder(out_dir):
        base = replace(_base(**model), ipus_per_replica=k, accumulation=gradient_accumulation,
                       layers_per_ipu=_counts_option(layers_per_ipu, "--layers-per-ipu"),
                       final_stage_on_first_ipu=final_stage_on_first_ipu,
                       pipeline_schedule=pipeline_schedule, algorithm=algorithm,
                       efficiency_scale=efficiency_scale)
        rows = model_reports.scaling_sweep(base, names)
        if not any(row["fits"] for row in rows):
            raise UserError(f"{model['model']} fits none of these topologies: "
                            f"{rows[0]['why']}")
    _publish(out_dir, f"Scaling {model['model']} across PODs (simulated)", "scaling-report",
             model_reports.scaling_table(rows), model_reports.plot_scaling(rows, out_dir))


def _publish(out_dir: Path, title: str, command: str, table: str, images: list[Path]) -> None:
    """Write the report's README beside its plots, print its table and where it is."""
    readme = model_reports.write(out_dir, title, f"ipupod {command} " + " ".join(sys.argv[2:]),
                                 table, images)
    click.echo(table)
    click.echo(f"# report: {readme}")
