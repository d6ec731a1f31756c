"""The training options ``train``, ``train-report``, ``calibrate`` and the workload reports
share, and the run configuration they describe.

Every default is :data:`~cluster.training.defaults.DEFAULTS`'; :func:`make_config` turns
the options into a :class:`~cluster.training.config.TrainConfig` and resolves it once into
a :class:`~cluster.training.plan.TrainPlan`, the defaults left out filled by what fits
(:func:`cluster.training.fit.resolve`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import click

from cluster.cli.made_by import given_settings
from cluster.training.config import IPUS_PER_REPLICA, SPLITS, TrainConfig
from cluster.training.defaults import DEFAULTS
from cluster.training.expert_parallel.expert_groups import parse_expert_parallel
from cluster.training.fit import default_topology, resolve
from cluster.training.kinds import ModelKind, Split
from cluster.training.model_ref import model_ref
from cluster.training.optimizer_state import OptimizerState
from cluster.training.pipeline.schedules import schedule_names
from cluster.training.plan import TrainPlan
from cluster.training.tensor_parallel.layout import parse_tensor_parallel
from cluster.training.workloads import DType
from cluster.training.workloads.arithmetic import whole_numbers
from cluster.training.workloads.registry import hidden_widths, workload_names
from cluster.training.workloads.workload_yaml import MAX_LAYERS
from gcl.modes import Mode

Command = TypeVar("Command", bound=Callable[..., Any])
MAX_STAGE_COUNTS = 64  # numbers --layers-per-ipu takes: far past any recipe's stages


def layer_counts(text: str | None) -> tuple[int, ...] | None:
    """Layers per pipeline stage from ``--layers-per-ipu`` (``4,4,6``); None: balanced."""
    if text is None:
        return None
    return whole_numbers("--layers-per-ipu", text, MAX_LAYERS, MAX_STAGE_COUNTS)


def _hidden(text: str | None) -> tuple[int, ...] | None:
    """Layer widths from ``--hidden`` (``128,64``); None: the default."""
    return None if text is None else hidden_widths("--hidden", text)


PIPELINE_SCHEDULE_OPTION = click.option(
    "--pipeline-schedule", type=click.Choice(schedule_names()),
    default=DEFAULTS.pipeline_schedule,
    show_default=True,
    help="Order of the stages' passes: fill-drain (GPipe), 1f1b (less activation memory) or "
         "popart (PopART's lock-step cycles, the copies between them; at least 2K - 1 "
         "micro-batches for K stages: --ipus-per-replica, one more with "
         "--final-stage-on-first-ipu).")
ALGORITHM_OPTION = click.option("--algorithm", default=DEFAULTS.algorithm, show_default=True,
                                help="Allreduce algorithm for the gradients (or auto).")
EFFICIENCY_SCALE_OPTION = click.option(
    "--efficiency-scale", type=float, default=DEFAULTS.efficiency_scale, show_default=True,
    help="Every layer kind's compute efficiency times this, for a workload: what `ipupod "
         "calibrate` derives from a measured step time.")
"""Options ``scaling-report`` takes too, to report a calibrated prediction."""
OPTIMIZER_STATE_OPTION = click.option(
    "--optimizer-state", type=click.Choice([str(state) for state in OptimizerState]),
    default=str(DEFAULTS.optimizer_state), show_default=True,
    help="Where the optimiser's values live: In-Processor-Memory (Poplar's default, the only "
         "place a DSS 8440 has), an IPU-M2000's Streaming Memory (streamed in for each "
         "update), or sharded over the replicas of a server or rack (PopART's replicated "
         "tensor sharding: each updates its share), or both.")
GRADIENT_DTYPE_OPTION = click.option(
    "--gradient-dtype", type=click.Choice([str(dtype) for dtype in DType]), default=None,
    help="Number format of the gradients allreduced (default: the model's).")
MICRO_BATCH_OPTION = click.option(
    "--micro-batch", "--batch-size", "micro_batch", type=int, default=None,
    help="Samples per replica per micro-batch (default: the largest of "
         f"{', '.join(map(str, DEFAULTS.micro_batches))} that fits In-Processor-Memory).")

COMMON_OPTIONS = [
    click.option("--replicas-per-server", type=int, default=None,
                 help="Replicas per server (default: as many as fit, 16 IPUs / "
                      "--ipus-per-replica)."),
    click.option("--ipus-per-replica", "--gcd", "ipus_per_replica",
                 type=click.Choice([str(k) for k in IPUS_PER_REPLICA]), default=None,
                 help="IPUs per replica (its Graph Compile Domain; --gcd is the same): a "
                      "pipeline of as many stages on successive IPUs (default: the fewest "
                      "that fit In-Processor-Memory)."),
    click.option("--split", type=click.Choice([str(split) for split in SPLITS]),
                 default=str(DEFAULTS.split),
                 show_default=True,
                 help="How a replica's layers spread over its IPUs: pipeline stages, or the "
                      "MLP's widest layer split by columns (shard)."),
    click.option("--tensor-parallel", default=None, metavar="T|T1xT2",
                 help="Split each transformer layer over T IPUs (1-D, Megatron: heads and "
                      "the FFN) or T1 x T2 (2-D, as Graphcore's GPT-3: T2 splits the hidden "
                      "size); a replica is then its T IPUs, consecutive on IPU-Links, "
                      "or with --ipus-per-replica S x T a pipeline of S such groups; "
                      "in real mode the MLP's widest hidden layer, 1-D "
                      "(default: 1, off)."),
    click.option("--expert-parallel", default=None, metavar="E",
                 help="Spread each mixture-of-experts layer's experts over E consecutive "
                      "replicas of a server or rack (E divides the experts and the replicas "
                      "per server); tokens reach their experts by all-to-alls (default: 1, "
                      "off; not with --tensor-parallel)."),
    click.option("--phased", is_flag=True,
                 help="Run each replica's layers phase by phase, each phase's weights "
                      "streamed in from an IPU-M2000's Streaming Memory (with "
                      "--optimizer-state streaming or sharded-streaming; a workload, one IPU "
                      "or one tensor group a replica): for models whose layers do not fit "
                      "In-Processor-Memory at once."),
    PIPELINE_SCHEDULE_OPTION,
    click.option("--recompute/--no-recompute", default=None,
                 help="Keep only checkpoints between passes and recompute the rest in the "
                      "backward pass (less memory, one more forward's FLOPs). Default: as "
                      "the model's published IPU recipe (on for the built-in workloads, off "
                      "for the MLP)."),
    click.option("--model", default=DEFAULTS.model, show_default=True,
                 help="What to train: mlp (the NumPy MLP, real or phantom), or a workload "
                      "priced in phantom mode: one of "
                      f"{', '.join(name for name in workload_names() if name != 'mlp')}, or "
                      "a workload YAML file (docs/workloads.md)."),
    click.option("--sequence-length", type=int, default=None,
                 help="Tokens per sample, for a language model (BERT, GPT, Llama, MoE)."),
    GRADIENT_DTYPE_OPTION,
    OPTIMIZER_STATE_OPTION,
    MICRO_BATCH_OPTION,
    click.option("--gradient-accumulation", type=int, default=None,
                 help="Micro-batches per step: in flight in the pipeline (1 to 65536; "
                      "default: 1, or for a pipeline the smallest power of two keeping its "
                      "bubble at most 10% of its time)."),
    click.option("--steps", type=int, default=DEFAULTS.steps, show_default=True,
                 help="Training steps to run (1 to 1,000,000)."),
    ALGORITHM_OPTION,
    click.option("--seed", type=int, default=DEFAULTS.seed, show_default=True),
    click.option("--lr", type=float, default=DEFAULTS.lr, show_default=True),
    click.option("--momentum", type=float, default=DEFAULTS.momentum, show_default=True),
    click.option("--hidden", default=None,
                 help="Hidden layer widths, e.g. 128,64 (default: 128, once per stage "
                      "boundary, at least once)."),
    click.option("--layers-per-ipu", default=None,
                 help="Consecutive layers on each pipeline stage, e.g. 4,4,6,7,7,7,7,9 (a "
                      "recipe's placement; default: balanced on FLOPs)."),
    click.option("--final-stage-on-first-ipu", is_flag=True,
                 help="One pipeline stage more, the last, run on the replica's first IPU "
                      "beside the first stage (Graphcore's BERT recipes: the heads and loss "
                      "beside the embeddings); --layers-per-ipu then gives one count more."),
    EFFICIENCY_SCALE_OPTION,
    click.option("--ray-address", default=None, help="An existing Ray cluster."),
]


def common_options(command: Command) -> Command:
    """The model, batch and optimiser options both commands take."""
    for option in reversed(COMMON_OPTIONS):
        command = option(command)
    return command


def make_config(servers: int | None, mode: str | None, check: bool,
                replicas_per_server: int | None, ipus_per_replica: str | None, split: str,
                pipeline_schedule: str, recompute: bool | None, model: str,
                sequence_length: int | None, gradient_dtype: str | None,
                optimizer_state: str, micro_batch: int | None,
                gradient_accumulation: int | None,
                steps: int, algorithm: str, seed: int, lr: float, momentum: float,
                hidden: str | None, efficiency_scale: float = DEFAULTS.efficiency_scale,
                layers_per_ipu: str | None = None, final_stage_on_first_ipu: bool = False,
                topology: str | None = None, tensor_parallel: str | None = None,
                expert_parallel: str | None = None, phased: bool = False) -> TrainPlan:
    """The run the options describe, resolved once (:func:`cluster.training.fit.resolve`):
    its topology loaded and workload built, each default left out filled (the topology
    and mode by the model, the micro-batch and IPUs per replica the first that fit, a
    pipeline's accumulation the one that keeps its bubble small), and checked; the
    settings the user gave recorded in it (:func:`~cluster.cli.made_by.given_settings`)."""
    free = frozenset(name for name, value in (("micro_batch", micro_batch),
                                              ("ipus_per_replica", ipus_per_replica),
                                              ("accumulation", gradient_accumulation))
                     if value is None)
    ref = model_ref(model)
    if topology is None:
        topology, servers = default_topology(ref, servers)
    layout = parse_tensor_parallel(tensor_parallel)
    config = TrainConfig(
        servers=servers or 1, topology=topology, model=ref, split=Split(split),
        ipus_per_replica=int(ipus_per_replica or (layout.size if layout.on
                                                  else DEFAULTS.ipus_per_replica[0])),
        sequence_length=sequence_length,
        gradient_dtype=None if gradient_dtype is None else DType(gradient_dtype),
        optimizer_state=OptimizerState(optimizer_state),
        replicas_per_server=replicas_per_server or 0,
        pipeline_schedule=pipeline_schedule, recompute=recompute,
        micro_batch=micro_batch or DEFAULTS.micro_batches[0],
        accumulation=(DEFAULTS.accumulation if gradient_accumulation is None
                      else gradient_accumulation),
        steps=steps, algorithm=algorithm, seed=seed,
        lr=lr, momentum=momentum, hidden=_hidden(hidden), check=check,
        mode=Mode(mode or (Mode.REAL if ref.kind is ModelKind.MLP
                           else Mode.PHANTOM)),
        efficiency_scale=efficiency_scale,
        layers_per_ipu=layer_counts(layers_per_ipu),
        final_stage_on_first_ipu=final_stage_on_first_ipu, tensor_parallel=layout,
        expert_parallel=parse_expert_parallel(expert_parallel), phased=phased)
    return replace(resolve(config, free), given=given_settings())
