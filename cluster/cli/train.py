"""``ipupod train`` and ``ipupod train-report``: data-parallel training on emulated servers."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cluster.cli import train_torch
from cluster.cli.chakra_out import chakra_out_option, prepare_export, write_export
from cluster.cli.made_by import command_settings, settings_record
from cluster.cli.output import Progress, progress, ray_chatter_to_stderr
from cluster.cli.paths import CheckedPath
from cluster.cli.placement_flags import Placement, launch_pod, placement_options
from cluster.cli.report_folder import report_folder
from cluster.cli.report_trace import trace_run
from cluster.cli.trace_option import (
    check_trace_path,
    save_trace,
    trace_option,
    wall_recorder,
)
from cluster.cli.training_options import common_options, make_config
from cluster.errors import UserError
from cluster.model.units import plural
from cluster.training.accumulation import BUBBLE_SHARE, bubble_share, pipelined
from cluster.training.config import TrainConfig
from cluster.training.defaults import DEFAULTS
from cluster.training.engines import train
from cluster.training.fit import check_fits
from cluster.training.kinds import ModelKind
from cluster.training.memory_plan import stage_memory
from cluster.training.plan import TrainPlan
from cluster.training.records import RunRecord
from cluster.training.reports.servers import format_table, scaling_rows, write_report
from cluster.training.reports.settings import made_by
from cluster.training.reports.settings import markdown as settings_markdown
from cluster.training.step_collectives import collective_records
from cluster.training.step_parts import parts_spent
from cluster.training.step_trace import config_trace
from gcl.modes import Mode

if TYPE_CHECKING:
    from ipu_node.wall_trace import WallRecorder


def run(plan: TrainPlan, ray_address: str | None, on_step: Progress,
        wall: WallRecorder | None = None, placement: Placement = Placement()) -> RunRecord:
    """Launch the servers if the run needs devices, train, shut them down; ``wall``
    (real mode) records what the devices did, a driver span per step."""
    if plan.config.mode != Mode.REAL:
        return train(plan, on_step=on_step)
    # Ray: only for real mode (phantom training needs no devices)

    check_fits(plan, stage_memory(plan))  # before any actor starts
    pod = launch_pod(plan.topology, ray_address, placement)
    try:
        if wall is None:
            return train(plan, pod=pod, on_step=on_step)
        wall.start(pod)
        try:
            return train(plan, pod=pod, on_step=wall.marking(on_step))
        finally:
            wall.stop(pod)
    finally:
        pod.shutdown()


UNCOUNTED_KEY = "flops_not_counted"
EXPERTS_KEY = "expert_load"


def _expert_load(plan: TrainPlan) -> dict[str, Any]:
    """``{EXPERTS_KEY: {...}}`` with expert parallelism: experts a MoE layer and on each
    IPU, top-k, and the busiest expert's tokens over the mean (the capacity factor: each
    expert's buffer is priced full); empty without it."""
    degree = plan.config.expert_parallel
    routing = next((layer.experts for layer in plan.workload.layers
                    if layer.experts is not None), None)
    if degree == 1 or routing is None:
        return {}
    return {EXPERTS_KEY: {"experts": routing.count, "experts_per_ipu": routing.count // degree,
                          "top_k": routing.top_k,
                          "busiest_expert_over_mean": routing.capacity_factor}}


def _collectives(plan: TrainPlan) -> dict[str, Any]:
    """``{"collectives": [...]}``: every kind of tensor- and expert-parallel collective
    of a step, by stage and group (:func:`collective_records`); empty without them."""
    found = collective_records(plan)
    return {"collectives": found} if found else {}


def _uncounted(plan: TrainPlan) -> dict[str, Any]:
    """``{UNCOUNTED_KEY: {layer: [ops]}}`` for a workload file whose importer met ops of
    unknown FLOPs (its ``uncounted_ops``); empty otherwise."""
    if plan.kind is ModelKind.MLP:
        return {}
    found = plan.workload.uncounted
    return {UNCOUNTED_KEY: {name: list(ops) for name, ops in found.items()}} if found else {}


def _uncounted_note(uncounted: dict[str, list[str]]) -> str:
    """One line naming the layers whose FLOPs are short, and the ops that are missing."""
    listed = ", ".join(f"{name} ({', '.join(ops)})" for name, ops in uncounted.items())
    return (f"FLOPs not counted (taken as 0) in {plural(len(uncounted), 'layer')} of "
            f"the workload: {listed}; compute is short by what they cost")


def _echo_record(record: dict[str, Any], config: TrainConfig,
                 echo: Callable[[str], None]) -> None:
    """A training run as text: the set-up, a line per step, throughput and checks."""
    first = record["steps"][0]
    pipelined = config.pipeline_stages > 1 and not config.splits_columns
    wrapped = (f" of {config.pipeline_stages} stages, the last on the first IPU"
               if config.final_stage_on_first_ipu else
               f" of {config.pipeline_stages} stages, each tensor-parallel "
               f"{config.tensor_parallel}" if config.tensor_parallel.on else "")
    shape = (f"{config.ipus_per_replica} IPUs each: {config.pipeline_schedule} pipeline"
             f"{wrapped}, "
             f"{config.accumulation} micro-batch{'' if config.accumulation == 1 else 'es'} "
             "in flight"
             f"{', recomputation' if config.recomputes else ''}" if pipelined else
             f"{config.ipus_per_replica} IPUs each, the widest layer sharded"
             if config.splits_columns else
             f"{config.ipus_per_replica} IPUs each: tensor-parallel {config.tensor_parallel}"
             f"{', recomputation' if config.recomputes else ''}"
             if config.tensor_parallel.on else "1 IPU each")
    if config.expert_parallel > 1:
        shape += f", experts over {config.expert_parallel} replicas"
    echo(f"# {config.model} on {record['topology']} ({record['machines']}): "
         f"{config.replicas} replicas "
         f"({shape}), global batch {config.global_batch}, {config.mode} mode; times simulated")
    if record.get(UNCOUNTED_KEY):
        echo(f"# note: {_uncounted_note(record[UNCOUNTED_KEY])}")
    if EXPERTS_KEY in record:
        load = record[EXPERTS_KEY]
        split = config.tensor_parallel
        shares = f" (each 1/{split.size} of it: split over the tensor group)" if split.on else ""
        echo(f"# experts: {load['experts']} a MoE layer, {load['experts_per_ipu']} on each IPU "
             f"of its group{shares}, top-{load['top_k']}; load imbalance: the busiest expert "
             "computes "
             f"{load['busiest_expert_over_mean']:g} x the mean's tokens (the capacity factor: "
             "every buffer priced full)")
    parts = parts_spent(record["steps"][:1])  # every step's parts are the same
    echo(f"{'step':>5} {'loss':>10} {'step(ms)':>9} "
         + " ".join(f"{part.title:>9}" for part in parts))
    for row in record["steps"]:
        loss = "-" if row["loss"] is None else f"{row['loss']:.6f}"
        echo(f"{row['step']:>5} {loss:>10} {row['sim_seconds'] * 1e3:>9.4f} "
             + " ".join(f"{part.seconds(row) * 1e3:>9.4f}" for part in parts))
    echo(f"# throughput {record['throughput_samples_per_sim_second']:,.0f} samples per "
         f"simulated second; step {first['sim_seconds'] * 1e3:.4f} ms simulated")
    if record["replicas_identical"] is not None:
        echo(f"# replicas identical after every step: {record['replicas_identical']}")
    if "reference_max_rel_error" in record:
        echo(f"# largest relative difference from single-process training: "
             f"{record['reference_max_rel_error']:.2e}")


@click.command("train")
@click.option("--servers", type=int, default=None,
              help=f"DSS 8440 servers (default: {DEFAULTS.servers} for the MLP; a workload "
                   f"runs on --topology {DEFAULTS.workload_topology} unless given this).")
@click.option("--topology", "topology_spec", default=None,
              help="Train on this topology instead (a preset such as pod64, or a YAML file); "
                   "replicas fill each server or rack.")
@click.option("--mode", type=click.Choice([Mode.REAL.value, Mode.PHANTOM.value]), default=None,
              help="real (bytes on the emulated devices) or phantom (timing only); default: "
                   "real for the MLP, phantom for a workload.")
@click.option("--check", is_flag=True,
              help="Also train the single-process reference and report the largest relative "
                   "difference of the losses.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the run's report as JSON (the step's parts in seconds).")
@click.option("--torch", "torch_factory", default=None, metavar="FILE.py:FACTORY",
              help="Train your PyTorch classifier instead, in real mode: a function in FILE.py "
                   "returning a torch.nn.Module whose output is (batch, classes); needs "
                   "--sample-shape and the extra: pip install -e '.[torch]' "
                   "(docs/torch-training.md).")
@click.option("--sample-shape", "shape_text", default=None, metavar="SIZES",
              help="With --torch: one sample's shape, no batch dimension, e.g. 3,32,32.")
@trace_option
@chakra_out_option
@placement_options
@common_options
def train_command(servers: int | None, topology_spec: str | None, mode: str | None,
                  check: bool, as_json: bool, trace_path: Path | None,
                  chakra_out: Path | None, placement: Placement, ray_address: str | None,
                  **options: Any) -> None:
    """Train an MLP data-parallel across emulated DSS 8440 servers (or a POD)."""

    torch_factory, shape_text = options.pop("torch_factory"), options.pop("shape_text")
    if torch_factory is not None or shape_text is not None:  # your model: --torch
        if chakra_out is not None:
            raise UserError("--chakra-out exports a priced workload's step, not a --torch "
                            "model's: drop one of them")
        train_torch.run_torch(torch_factory, shape_text, servers, topology_spec, mode, check,
                              as_json, trace_path,
                              {**options, "ray_address": ray_address,
                               "placement": placement})
        return
    check_trace_path(trace_path)
    plan = make_config(servers, mode, check, topology=topology_spec, **options)
    export = prepare_export(chakra_out, plan) if chakra_out is not None else None
    config = plan.config
    assumed = settings_record(command_settings(plan))
    wall = wall_recorder(config.mode, trace_path)
    with ray_chatter_to_stderr() as out, progress("training", total=config.steps) as on_step:
        record = {**run(plan, ray_address, on_step, wall, placement), **assumed,
                  **_uncounted(plan), **_expert_load(plan), **_collectives(plan)}
    echo = partial(click.echo, file=out)
    if as_json:
        echo(json.dumps(record, indent=2))
    else:
        _echo_record(record, config, echo)
        if "accumulation" in plan.chosen and pipelined(config):
            echo(_accumulation_note(plan))
        echo(f"# every setting: {record['made_by']}")
    if trace_path is not None:
        trace = config_trace(record, plan)
        if wall is not None:
            wall.add_to(trace)
        save_trace(trace, trace_path)
    if export is not None and chakra_out is not None:
        write_export(chakra_out, export, record["topology"])


def _room_for_more(config: TrainConfig) -> str:
    """What leaves memory for more micro-batches in flight: a smaller micro-batch, else a
    schedule that stashes fewer of them than fill-drain's all."""
    if config.micro_batch > 1:
        return "a smaller --micro-batch leaves room for more"
    if config.pipeline_schedule == "fill-drain":
        return ("--pipeline-schedule 1f1b stashes at most K - s micro-batches on stage s of "
                "K, not all of them")
    return "a sharded --optimizer-state leaves room for more"


def _accumulation_note(plan: TrainPlan) -> str:
    """What the default gradient accumulation of a pipelined run is, and why."""
    config, share = plan.config, bubble_share(plan)
    why = ("the smallest power of two keeping the pipeline's bubble at most "
           f"{BUBBLE_SHARE:.0%} of its time" if share <= BUBBLE_SHARE else
           "the most micro-batches in flight that fit In-Processor-Memory, short of a bubble "
           f"of {BUBBLE_SHARE:.0%} ({_room_for_more(config)})")
    return (f"# gradient accumulation {config.accumulation} by default for a pipeline of "
            f"{config.pipeline_stages} stages: {why}; bubble {share:.1%} of the pipeline's "
            "time (--gradient-accumulation to choose)")


def _server_counts(text: str) -> list[int]:
    """Server counts from ``--servers`` (``1,2,4,8``), sorted, without repeats."""
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise UserError(f"--servers takes counts separated by commas, not {text!r}") from None
    if not counts or counts[0] < 1:
        raise UserError("--servers needs at least one count of 1 or more")
    return counts


@click.command("train-report")
@click.option("--servers", "server_list", default="1,2,4,8", show_default=True,
              help="Server counts to compare, e.g. 1,2,4,8.")
@click.option("--real-up-to", type=int, default=4, show_default=True,
              help="Run real mode up to this many servers, phantom mode beyond.")
@click.option("--out", "out_dir", type=CheckedPath(file_okay=False, path_type=Path),
              default=Path("train-report"), show_default=True,
              help="Folder for the report (README.md and plots); made if missing.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the settings and the table's rows (seconds) as JSON instead.")
@click.option("--trace", "trace_path", default=None, metavar="FILE",
              type=CheckedPath(dir_okay=False, path_type=Path),
              help="Also write the timeline of the run on the most servers to FILE (real "
                   "mode: with the devices' wall clock) and draw it in the report "
                   "(docs/traces.md).")
@common_options
def train_report_command(server_list: str, real_up_to: int, out_dir: Path, as_json: bool,
                         trace_path: Path | None, ray_address: str | None,
                         **options: Any) -> None:
    """Scaling report: throughput and efficiency for several server counts, with plots."""
    counts = _server_counts(server_list)
    check_trace_path(trace_path)
    runs, traced = [], []
    with report_folder(out_dir), ray_chatter_to_stderr() as out:  # checked before training
        for servers in counts:
            real = servers <= real_up_to and ModelKind.of(options["model"]) is ModelKind.MLP
            plan = make_config(servers, "real" if real else "phantom", False, **options)
            last = servers == counts[-1]
            wall = wall_recorder(plan.config.mode, trace_path if last else None)
            with progress(f"{servers} servers ({plan.config.mode})",
                          total=plan.config.steps) as on_step:
                runs.append(run(plan, ray_address, on_step, wall))
            if len(runs) == 1:
                assumed = command_settings(plan, swept=("--servers",))
            if last and trace_path is not None:
                traced = trace_run(runs[-1], plan, trace_path, out_dir,
                                   f"the run on {plural(servers, 'server')}", wall)
        paths = write_report(runs, out_dir, made_by("train-report", assumed),
                             settings_markdown(assumed), traced)
    if as_json:
        click.echo(json.dumps({**settings_record(assumed),
                               "rows": scaling_rows(runs)}, indent=2), file=out)
        return
    click.echo(format_table(scaling_rows(runs)), file=out)
    click.echo(f"# report: {paths['readme']}", file=out)
