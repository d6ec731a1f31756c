"""``ipupod calibrate`` and ``ipupod validate``: the emulator against measured step times.

``calibrate`` takes one measured step time of one configuration and derives the compute
efficiency from it (:mod:`cluster.training.fidelity.calibration`); ``validate`` prints
Graphcore's published MLPerf step times next to the emulator's predictions, calibrated
on each model's IPU-POD16 (:mod:`cluster.training.fidelity.validation`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

from cluster.cli.made_by import command_settings, settings_record
from cluster.cli.paths import CheckedPath
from cluster.cli.training_options import common_options, make_config
from cluster.errors import UserError
from cluster.training.fidelity.calibration import calibrate
from cluster.training.fidelity.published import TABLE, load_published
from cluster.training.fidelity.validation import ERROR_BAR, Prediction, growths, predict
from cluster.training.step_parts import STEP_PARTS
from cluster.training.step_timing import step_time


@click.command("calibrate")
@click.option("--topology", "topology_spec", default="pod16", show_default=True,
              help="The measured system: a preset such as pod16, or a YAML file.")
@click.option("--measured-step-ms", type=float, required=True,
              help="The measured step time of this configuration, in milliseconds.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the efficiencies found and the step's parts (seconds) as JSON.")
@common_options
def calibrate_command(topology_spec: str, measured_step_ms: float, as_json: bool,
                      ray_address: str | None, **options: Any) -> None:
    """Derive the compute efficiency from one measured step time."""
    del ray_address  # phantom: no devices
    if not (math.isfinite(measured_step_ms) and measured_step_ms > 0):
        raise UserError(f"--measured-step-ms must be a positive number of milliseconds, not "
                        f"{measured_step_ms!r}")
    if options["efficiency_scale"] != 1.0:
        raise UserError("--efficiency-scale is what calibrate finds from --measured-step-ms: "
                        "leave it out")
    options["efficiency_scale"] = 1.0
    plan = make_config(None, "phantom", False, topology=topology_spec, **options)
    config, topology = plan.config, plan.topology
    assumed = settings_record(command_settings(plan))
    found = calibrate(plan, measured_step_ms / 1e3)
    step = step_time(plan.changed(efficiency_scale=found.efficiency_scale))
    if as_json:
        click.echo(json.dumps({"topology": topology.name, "model": config.model.text,
                               "measured_step_seconds": found.measured_step_seconds,
                               "efficiency_scale": found.efficiency_scale,
                               "efficiencies": vars(found.efficiencies),
                               "predicted_step_seconds": found.predicted_step_seconds,
                               "predicted_parts": step.parts(), **assumed}, indent=2))
        return
    kinds = ", ".join(f"{kind} {value:.4f}" for kind, value in vars(found.efficiencies).items())
    click.echo(f"# {config.model} on {topology.name}: {config.replicas} replicas of "
               f"{config.ipus_per_replica} IPU(s), micro-batch {config.micro_batch}, "
               f"accumulation {config.accumulation}")
    click.echo(f"measured step {measured_step_ms:.4f} ms -> efficiency scale "
               f"{found.efficiency_scale:.4f} ({kinds})")
    click.echo(f"simulated step with it {found.predicted_step_seconds * 1e3:.4f} ms: "
               + ", ".join(f"{part.title} {getattr(step, part.key) * 1e3:.3f}"
                           for part in STEP_PARTS if getattr(step, part.key) >= 5e-7))
    click.echo(f"# every setting: {assumed['made_by']}")
    click.echo(f"# predict other systems with: ipupod train --mode phantom ... "
               f"--efficiency-scale {found.efficiency_scale:.4f}")


for _param in calibrate_command.params:  # it finds the scale: train's option, not its own
    if isinstance(_param, click.Option) and _param.name == "efficiency_scale":
        _param.hidden = True


def _row(prediction: Prediction) -> str:
    entry = prediction.published
    mark = "*" if prediction.calibration_point else " "
    return (f"{entry.round:>5} {entry.model:>10} {entry.topology:>7} {entry.hosts:>5} "
            f"{entry.ipus // entry.ipus_per_replica:>8} {entry.micro_batch:>3} "
            f"{entry.gradient_accumulation:>4} {entry.step_seconds * 1e3:>10.2f} "
            f"{prediction.step.sim_seconds * 1e3:>10.2f} {prediction.error * 100:>+7.1f}%{mark}"
            + "".join(f" {getattr(prediction.step, part.key) * 1e3:>9.2f}"
                      for part in STEP_PARTS))


def _echo_summary(predicted: list[Prediction]) -> None:
    """The largest error and how many predictions are within the bar, away from the
    calibration points."""
    if not predicted:
        return
    worst = max(predicted, key=lambda p: abs(p.error))
    click.echo(f"# largest error away from the calibration points: {worst.error:+.1%} "
               f"({worst.published.label})")
    within = sum(p.within_bar for p in predicted)
    why = "" if within == len(predicted) else "; docs/fidelity.md says why the others miss"
    click.echo(f"# within {ERROR_BAR:.0%} of the published step: {within} of "
               f"{len(predicted)} predicted configurations{why}")


@click.command("validate")
@click.option("--published", "table", type=CheckedPath(dir_okay=False, path_type=Path),
              default=TABLE, show_default="the shipped table",
              help="A table of published step times (JSON, as benchmarks/"
                   "mlperf_published.py writes it).")
@click.option("--json", "as_json", is_flag=True,
              help="Print a JSON list: each configuration's published and predicted step "
                   "(seconds), its error and parts.")
def validate_command(table: Path, as_json: bool) -> None:
    """Published MLPerf step times against the emulator's, POD16-calibrated."""
    predictions = predict(load_published(table))
    if not predictions:
        raise UserError(f"{table} lists no configurations")
    if as_json:
        click.echo(json.dumps([p.as_record() for p in predictions], indent=2))
        return
    click.echo("# Graphcore's MLPerf Training step times (closed division, median of the "
               "runs) against the emulator's;")
    click.echo("# * the calibration point: each model and round's IPU-POD16 fixes the "
               "compute efficiency, nothing else is fitted. Times in ms.")
    click.echo(f"{'round':>5} {'model':>10} {'system':>7} {'hosts':>5} {'replicas':>8} "
               f"{'mb':>3} {'acc':>4} {'published':>10} {'predicted':>10} {'error':>9}"
               + "".join(f" {part.title:>9}" for part in STEP_PARTS))
    for prediction in predictions:
        click.echo(_row(prediction))
    _echo_summary([p for p in predictions if not p.calibration_point])
    for growth in growths(predictions):
        click.echo(f"# {growth.label} at equal work per IPU: the step changes by "
                   f"{growth.published_seconds * 1e3:+.2f} ms published, "
                   f"{growth.predicted_seconds * 1e3:+.2f} ms predicted ("
                   f"{abs(growth.predicted_seconds - growth.published_seconds) * 1e3:.2f} ms "
                   "apart)")
