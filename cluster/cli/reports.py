"""``ipupod pipeline-report`` and ``ipupod scaling-report``: phantom-mode reports on a
workload, written as README.md and PNG plots (:mod:`cluster.training.reports.sweeps`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from cluster.cli.made_by import command_settings, given_settings, settings_record
from cluster.cli.paths import CheckedPath
from cluster.cli.report_folder import report_folder
from cluster.cli.report_trace import trace_phantom
from cluster.cli.trace_option import check_trace_path
from cluster.cli.training_options import (
    ALGORITHM_OPTION,
    EFFICIENCY_SCALE_OPTION,
    GRADIENT_DTYPE_OPTION,
    MICRO_BATCH_OPTION,
    OPTIMIZER_STATE_OPTION,
    PIPELINE_SCHEDULE_OPTION,
    layer_counts,
)
from cluster.errors import UserError, quoted
from cluster.training.config import IPUS_PER_REPLICA, TrainConfig
from cluster.training.defaults import DEFAULTS
from cluster.training.fit import resolve, sweep_micro_batch
from cluster.training.model_ref import model_ref
from cluster.training.optimizer_state import OptimizerState
from cluster.training.pipeline.schedules import schedule_names
from cluster.training.plan import TrainPlan
from cluster.training.reports import sweeps
from cluster.training.reports.settings import Setting
from cluster.training.reports.settings import markdown as settings_markdown
from cluster.training.workloads import DType
from cluster.training.workloads.registry import workload_names
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
    click.option("--model", default=DEFAULTS.report_model, show_default=True,
                 help=f"A built-in workload ({', '.join(workload_names())}) "
                      "or a workload YAML file."),
    click.option("--sequence-length", type=int, default=None,
                 help="Tokens per sample for the BERTs and GPT-2."),
    GRADIENT_DTYPE_OPTION,
    MICRO_BATCH_OPTION,
    OPTIMIZER_STATE_OPTION,
    click.option("--out", "out_dir", type=CheckedPath(file_okay=False, path_type=Path),
                 required=True, help="Folder for README.md and the plots; made if missing."),
    click.option("--json", "as_json", is_flag=True,
                 help="Print the settings and the rows (seconds) as JSON instead of the "
                      "table."),
    click.option("--trace", "trace_path", default=None, metavar="FILE",
                 type=CheckedPath(dir_okay=False, path_type=Path),
                 help="Also write the timeline of one step of one configuration (the "
                      "report says which) to FILE, and draw it in the report "
                      "(docs/traces.md)."),
]


def model_options(command: Any) -> Any:
    for option in reversed(MODEL_OPTIONS):
        command = option(command)
    return command


def _base(model: str, sequence_length: int | None, gradient_dtype: str | None,
          micro_batch: int | None, optimizer_state: str, topology: str,
          **fields: Any) -> TrainPlan:
    """The phantom run the report sweeps from, planned on ``topology``, with the
    micro-batch (and ``fields``' IPUs per replica and accumulation when None) the first
    that fits (:func:`cluster.training.fit.resolve`); the settings the user gave
    recorded in it (:func:`~cluster.cli.made_by.given_settings`)."""
    free = {"micro_batch"} if micro_batch is None else set()
    if fields.get("ipus_per_replica", 1) is None:
        free.add("ipus_per_replica")
        fields["ipus_per_replica"] = DEFAULTS.ipus_per_replica[0]
    if "accumulation" in fields and fields["accumulation"] is None:
        free.add("accumulation")
        fields["accumulation"] = DEFAULTS.accumulation
    return replace(resolve(TrainConfig(model=model_ref(model), sequence_length=sequence_length,
                               gradient_dtype=(None if gradient_dtype is None
                                               else DType(gradient_dtype)),
                               micro_batch=micro_batch or DEFAULTS.micro_batches[0],
                               optimizer_state=OptimizerState(optimizer_state),
                               topology=topology,
                               mode=Mode.PHANTOM, replicas_per_server=0, **fields),
                   frozenset(free)), given=given_settings())


SWEEP_RULES = {"--micro-batch": "the largest of "
                               f"{', '.join(map(str, DEFAULTS.micro_batches))} at which the "
                               "most of the sweep fits In-Processor-Memory"}


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
@click.option("--schedules", default=",".join(schedule_names()), show_default=True)
@click.option("--micro-batches", default="1,2,4,8,16,32", show_default=True,
              help="Gradient accumulation counts: micro-batches in flight.")
@model_options
def pipeline_report_command(topology: str, ks: str, schedules: str, micro_batches: str,
                            out_dir: Path, as_json: bool, trace_path: Path | None,
                            **model: Any) -> None:
    """Pipelining: throughput and bubble against stages, schedule and micro-batches."""
    check_trace_path(trace_path)
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
        base = _base(topology=topology, **{**model, "micro_batch": model["micro_batch"] or 1})
        if model["micro_batch"] is None:  # the one at which the most of the sweep fits
            base = base.changed(micro_batch=sweep_micro_batch(
                base, sweeps.pipeline_configs(base.config, *sweep)))
        rows = sweeps.pipeline_sweep(base, *sweep)
        if not any(row["fits"] for row in rows):
            raise UserError(f"{model['model']} runs in none of these configurations: "
                            f"{_why_none_runs(rows)}")
        traced = [] if trace_path is None else _trace_fastest(base, rows, trace_path, out_dir)
    _publish(out_dir, f"Pipelining {model['model']} on {topology} (simulated)",
             command_settings(base, swept=("--ipus-per-replica",), rules=SWEEP_RULES), rows,
             as_json,
             sweeps.pipeline_table(rows), sweeps.plot_pipeline(rows, out_dir), traced)


def _trace_fastest(base: TrainPlan, rows: list[dict[str, Any]], trace_path: Path,
                   out_dir: Path) -> list[str]:
    """``--trace``: the pipeline of the highest throughput (the first such row)."""
    row = max((row for row in rows if row["fits"]), key=lambda row: row["throughput"])
    plan = base.replanned(ipus_per_replica=row["ipus_per_replica"],
                          pipeline_schedule=row["schedule"], accumulation=row["micro_batches"],
                          replicas_per_server=0)
    return trace_phantom(plan, trace_path, out_dir,
                         f"the fastest pipeline: {row['ipus_per_replica']} IPUs per replica, "
                         f"{row['schedule']}, {row['micro_batches']} micro-batches")


@click.command("scaling-report")
@click.option("--topologies", default="pod16,pod64,pod128,pod256", show_default=True)
@click.option("--ipus-per-replica", "k", type=click.Choice([str(k) for k in IPUS_PER_REPLICA]),
              default=None, help="IPUs per replica (default: the fewest that fit "
                                 "In-Processor-Memory on the first topology).")
@click.option("--gradient-accumulation", type=int, default=None,
              help="Micro-batches per step (default: 1, or for a pipeline the smallest power "
                   "of two keeping its bubble at most 10% of its time on the first "
                   "topology).")
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
def scaling_report_command(topologies: str, k: str | None, gradient_accumulation: int | None,
                           layers_per_ipu: str | None, final_stage_on_first_ipu: bool,
                           pipeline_schedule: str, algorithm: str, efficiency_scale: float,
                           out_dir: Path, as_json: bool, trace_path: Path | None,
                           **model: Any) -> None:
    """Scaling: throughput, per-IPU efficiency and the step's parts across topologies
    (with `ipupod calibrate`'s --efficiency-scale and a recipe's settings: a prediction)."""
    names = _items(topologies, "--topologies")
    check_trace_path(trace_path)
    with report_folder(out_dir):
        base = _base(topology=names[0], ipus_per_replica=None if k is None else int(k),
                     accumulation=gradient_accumulation,
                     layers_per_ipu=layer_counts(layers_per_ipu),
                     final_stage_on_first_ipu=final_stage_on_first_ipu,
                     pipeline_schedule=pipeline_schedule, algorithm=algorithm,
                     efficiency_scale=efficiency_scale, **model)
        rows = sweeps.scaling_sweep(base, names)
        if not any(row["fits"] for row in rows):
            raise UserError(f"{model['model']} fits none of these topologies: "
                            f"{rows[0]['why']}")
        largest = [row for row in rows if row["fits"]][-1]
        traced = [] if trace_path is None else trace_phantom(
            base.replanned(topology=largest["topology"], replicas_per_server=0), trace_path,
            out_dir, f"the last topology that fits, {largest['topology']}")
    _publish(out_dir, f"Scaling {model['model']} across PODs (simulated)",
             command_settings(base), rows, as_json, sweeps.topology_table(rows),
             sweeps.plot_scaling(rows, out_dir), traced)


def _publish(out_dir: Path, title: str, assumed: list[Setting], rows: list[dict[str, Any]],
             as_json: bool, table: str, images: list[Path], traced: list[str]) -> None:
    """Write the report's README beside its plots (and the lines of its ``traced``
    timeline, if any); print its table and where it is, or with ``as_json`` its settings
    and rows."""
    record = settings_record(assumed)
    readme = sweeps.write(out_dir, title, record["made_by"], table, images,
                                 settings_markdown(assumed), traced)
    if as_json:
        click.echo(json.dumps({**record, "rows": rows, "readme": str(readme)}, indent=2))
        return
    click.echo(table)
    click.echo(f"# report: {readme}")
