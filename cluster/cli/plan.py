"""``ipupod plan``: the fastest layouts of a model on a topology that fit, priced as
``ipupod train`` prices them (:mod:`cluster.training.planner`)."""

from __future__ import annotations

import json
import time

import click

from cluster.errors import UserError
from cluster.training.config import TrainConfig
from cluster.training.kinds import ModelKind
from cluster.training.model_ref import model_ref
from cluster.training.plan import TrainPlan, plan_for
from cluster.training.planner.report import Question, as_json, as_text
from cluster.training.planner.search import search
from cluster.training.planner.space import default_global_batch
from cluster.training.workloads.registry import workload_names
from gcl.modes import Mode

MOST_GLOBAL_BATCH = 1 << 24  # samples a step: far past any published recipe's
MOST_SHOWN = 100  # layouts --top shows at most


def _base(model: str, topology: str, sequence_length: int | None) -> TrainPlan:
    """The model on the topology, one IPU a replica: what every layout varies."""
    ref = model_ref(model)
    if ref.kind is ModelKind.MLP:
        raise UserError("ipupod plan lays out a workload (gpt3-2.7b, llama-7b, ...), not the "
                        "MLP: give --model a workload")
    return plan_for(TrainConfig(topology=topology, model=ref, mode=Mode.PHANTOM,
                                sequence_length=sequence_length, replicas_per_server=0))


def _question(model: str, topology: str, sequence_length: int | None,
              global_batch: int | None, top: int, servers: int) -> Question:
    """What was asked, the global batch checked (or chosen) against ``servers``."""
    if not 1 <= top <= MOST_SHOWN:
        raise UserError(f"--top runs from 1 to {MOST_SHOWN}, not {top}")
    reason = "given"
    if global_batch is None:
        global_batch, reason = default_global_batch(model, sequence_length)
    if not 1 <= global_batch <= MOST_GLOBAL_BATCH:
        raise UserError(f"--global-batch runs from 1 to {MOST_GLOBAL_BATCH:,} samples, not "
                        f"{global_batch}")
    if global_batch % servers:
        raise UserError(f"--global-batch {global_batch}: every layout runs a replica or more "
                        f"on each of the topology's {servers} servers or racks, so give a "
                        f"multiple of {servers}")
    return Question(model, topology, sequence_length, global_batch, reason, top)


@click.command("plan")
@click.option("--model", required=True,
              help="The workload to lay out: one of "
                   f"{', '.join(name for name in workload_names() if name != 'mlp')}, or a "
                   "workload YAML file.")
@click.option("--topology", required=True, help="A preset (pod64) or a topology YAML file.")
@click.option("--global-batch", type=int, default=None,
              help="Samples a step, = replicas x micro-batch x accumulation (default: the "
                   "model's published batch, a GPT-3's from Brown et al. 2020 Table 2.1; "
                   "else 512).")
@click.option("--sequence-length", type=int, default=None,
              help="Tokens per sample, for a language model (default: the model's).")
@click.option("--top", type=int, default=5, show_default=True,
              help="Layouts shown, fastest first (and near misses).")
@click.option("--json", "json_output", is_flag=True, help="Print the answer as JSON.")
def plan_command(model: str, topology: str, global_batch: int | None,
                 sequence_length: int | None, top: int, json_output: bool) -> None:
    """The fastest layouts of MODEL on TOPOLOGY that fit In-Processor-Memory."""
    started = time.perf_counter()
    base = _base(model, topology, sequence_length)
    question = _question(model, topology, sequence_length, global_batch, top,
                         base.config.servers)
    found = search(base, question.global_batch, question.top)
    wall = time.perf_counter() - started
    if json_output:
        click.echo(json.dumps({**as_json(question, found, base),
                               "search_wall_seconds": wall}, indent=2))
        return
    for line in as_text(question, found, base):
        click.echo(line)
    click.echo(f"# searched in {wall:.1f} s of wall time")
