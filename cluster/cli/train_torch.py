"""``ipupod train --torch file.py:factory``: a PyTorch classifier trained on the emulated servers.

The options of ``train`` that describe the MLP or a workload's pipeline do not apply and
are refused by name; the placement, batch and optimiser options are the MLP's.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from cluster.cli.output import Progress, progress, ray_chatter_to_stderr
from cluster.cli.placement_flags import Placement, launch_pod
from cluster.cli.trace_option import check_trace_path, save_trace, wall_recorder
from cluster.errors import UserError
from cluster.model.topology import Topology
from cluster.training.config import MLP, TrainConfig
from cluster.training.defaults import DEFAULTS
from cluster.training.engines.torch_training import train_torch
from cluster.training.importers.notes import UncountedOpsWarning
from cluster.training.plan import TrainPlan, plan_for
from cluster.training.step_parts import StepTime, parts_spent
from cluster.training.torch_replicas.run import (
    TorchModel,
    load_model,
    priced_run,
    sample_shape,
)
from cluster.training.torch_replicas.torch_trace import torch_trace
from gcl.modes import Mode

if TYPE_CHECKING:
    from ipu_node.pod import EmulatedPod
    from ipu_node.wall_trace import WallRecorder

TORCH_MICRO_BATCH = 8  # samples per replica per micro-batch unless --micro-batch says
NOT_WITH_TORCH = {  # option: its value when not given (anything else is refused)
    "model": DEFAULTS.model, "hidden": None, "split": DEFAULTS.split, "layers_per_ipu": None,
    "final_stage_on_first_ipu": False, "sequence_length": None, "gradient_dtype": None,
    "optimizer_state": str(DEFAULTS.optimizer_state), "recompute": None,
    "efficiency_scale": DEFAULTS.efficiency_scale,
    "pipeline_schedule": DEFAULTS.pipeline_schedule, "tensor_parallel": None,
    "expert_parallel": None, "phased": False}


def _refuse_the_mlps_options(mode: str | None, options: dict[str, Any]) -> None:
    """UserError naming the first option given that ``--torch`` does not take."""
    if mode == Mode.PHANTOM:
        raise UserError("--torch trains in real mode (to price a network in phantom mode, "
                        "import it as a workload and give it to --model)")
    for name, default in NOT_WITH_TORCH.items():
        if options.get(name, default) != default:
            raise UserError(f"--{name.replace('_', '-')} does not apply with --torch (it "
                            "describes the MLP or a workload): leave it out")
    if options.get("ipus_per_replica") not in (None, "1"):
        raise UserError("--ipus-per-replica: a --torch replica runs on one IPU (the "
                        "PopTorch-shaped API places stages with BeginBlock)")


def torch_config(servers: int | None, topology: str | None, check: bool,
                 options: dict[str, Any]) -> TrainConfig:
    """The placement, batch and optimiser settings of a ``--torch`` run."""
    return TrainConfig(
        servers=DEFAULTS.servers if servers is None else servers, topology=topology,
        replicas_per_server=options.get("replicas_per_server") or 0,
        micro_batch=options.get("micro_batch") or TORCH_MICRO_BATCH,
        accumulation=(DEFAULTS.accumulation if options.get("gradient_accumulation") is None
                      else options["gradient_accumulation"]),
        steps=options.get("steps", DEFAULTS.steps), lr=options.get("lr", DEFAULTS.lr),
        momentum=options.get("momentum", DEFAULTS.momentum),
        seed=options.get("seed", DEFAULTS.seed),
        algorithm=options.get("algorithm", DEFAULTS.algorithm), check=check, mode=Mode.REAL,
        model=MLP)


def run_torch(factory: str | None, shape_text: str | None, servers: int | None,
              topology_spec: str | None, mode: str | None, check: bool, as_json: bool,
              trace_path: Path | None, options: dict[str, Any]) -> None:
    """Check everything, launch the servers, train the factory's module, print the run;
    with ``trace_path``, write its timeline: the priced step on the simulated clock and
    what the devices did on the wall clock."""
    if factory is None:
        raise UserError("--sample-shape goes with --torch file.py:factory")
    if shape_text is None:
        raise UserError("--torch needs --sample-shape: one sample's shape, such as 3,32,32")
    _refuse_the_mlps_options(mode, options)
    check_trace_path(trace_path)
    shape = sample_shape(shape_text)
    plan = plan_for(torch_config(servers, topology_spec, check, options))  # checked
    config, topology = plan.config, plan.topology
    model = load_model(factory, shape)  # everything checked before a device starts
    priced, parts = _priced(model, config, topology)
    wall = wall_recorder(Mode.REAL, trace_path)

    with ray_chatter_to_stderr() as out, progress("training", total=config.steps) as on_step:
        pod = launch_pod(topology, options.get("ray_address"),
                         options.get("placement") or Placement())
        try:
            record = _train(model, plan, pod, parts, on_step, wall)
        finally:
            pod.shutdown()
    echo = partial(click.echo, file=out)
    if as_json:
        echo(json.dumps(record, indent=2))
    else:
        echo_torch_record(record, echo)
    if trace_path is not None:
        trace = torch_trace(record, priced)
        if wall is not None:
            wall.add_to(trace)
        save_trace(trace, trace_path)


def _train(model: TorchModel, plan: TrainPlan, pod: EmulatedPod, parts: StepTime,
           on_step: Progress, wall: WallRecorder | None) -> dict[str, Any]:
    """:func:`train_torch` on ``pod``; ``wall`` records what the devices did, a driver span
    per step, and takes their spans before the POD stops."""
    if wall is None:
        return train_torch(model, plan, pod, parts, on_step)
    wall.start(pod)
    try:
        return train_torch(model, plan, pod, parts, wall.marking(on_step))
    finally:
        wall.stop(pod)


def _priced(model: TorchModel, config: TrainConfig,
            topology: Topology) -> tuple[TrainPlan, StepTime]:
    """The run as priced and its step (:func:`priced_run`); each op the importer could not
    count is named in one ``warning:`` line on standard error."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UncountedOpsWarning)
        priced = priced_run(model, config, topology)
    for text in sorted({str(w.message) for w in caught
                        if issubclass(w.category, UncountedOpsWarning)}):
        click.echo(f"warning: {text}: the simulated compute leaves them out", err=True)
    return priced


def echo_torch_record(record: dict[str, Any], echo: Callable[[str], None]) -> None:
    """A ``--torch`` run as text: the set-up, a line per step, the times and checks."""
    shape = "x".join(map(str, record["sample_shape"]))
    echo(f"# {record['model']} ({record['parameters']:,} parameters, samples {shape}, "
         f"{record['classes']} classes) on {record['topology']} ({record['machines']}): "
         f"{record['replicas']} replica{'' if record['replicas'] == 1 else 's'}, "
         f"global batch {record['global_batch']}, real mode "
         "(PyTorch on this machine's CPU, gradients allreduced over the emulated links)")
    echo(f"{'step':>5} {'loss':>10} {'wall(ms)':>10} {'sim(ms)':>10} {'allreduce wall(ms)':>19}")
    for row in record["steps"]:
        echo(f"{row['step']:>5} {row['loss']:>10.6f} {row['wall_seconds'] * 1e3:>10.1f} "
             f"{row['sim_seconds'] * 1e3:>10.4f} {row['allreduce_wall_seconds'] * 1e3:>19.1f}")
    step_parts = record["sim_step_parts"]
    parts = ", ".join(f"{part.title.strip()} {part.seconds(step_parts) * 1e3:.4f}"
                      for part in parts_spent([step_parts]))
    echo(f"# step: {record['sim_step_seconds'] * 1e3:.4f} ms simulated ({parts}); "
         f"{record['wall_step_seconds'] * 1e3:.1f} ms of wall time here (median)")
    echo(f"# replicas identical after every step: {record['replicas_identical']}")
    if "reference_max_rel_error" in record:
        echo("# largest relative difference of the weights from single-process training: "
             f"{record['reference_max_rel_error']:.2e}")
