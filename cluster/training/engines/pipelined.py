"""Real-mode pipelined training: stages on the devices, activations over the links.

Round by round (:meth:`PipelineSchedule.rounds`), every device runs its IPUs' ops of the
round at once; then what the round produced crosses the stage boundaries as real bytes
over the emulated IPU-Links (a GCL broadcast within each sender-receiver pair, every
replica's pair in one collective). After the last round each stage's gradient is
averaged with the same stage of every other replica (one allreduce, CommGroup
ORTHOGONAL) and every stage applies SGD with momentum. This process only streams the
host's input and labels and orders the rounds; no activation passes through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from cluster.training.config import TrainConfig
from cluster.training.data import replica_slice
from cluster.training.engines.mlp_engine import Batch, MLPEngine
from cluster.training.engines.stage_tasks import (
    GRAD,
    GRAD_MEAN,
    RoundWork,
    Stage,
    StageOp,
    activation,
    apply_stage_updates,
    gradient,
    place_stages,
    run_round,
)
from cluster.training.numpy_mlp import init_params
from cluster.training.pipeline.pass_schedule import Op, Pass, PipelineSchedule
from cluster.training.pipeline.schedules import pipeline_schedule
from cluster.training.pipeline.stage_math import stage_offsets
from cluster.training.pipeline.stages import split_layers
from cluster.training.placement import gradient_group, replica_ipus
from cluster.training.step_result import StepResult
from cluster.training.workloads import mlp_workload
from gcl import CommGroup
from gcl.collectives import CollectiveName, ReduceOp

if TYPE_CHECKING:
    from ipu_node.pod import EmulatedPod


@dataclass(frozen=True)
class Pipeline:
    """The replicas' stages: ``chains[r, s]`` is the IPU of stage ``s`` of replica ``r``."""

    config: TrainConfig
    stages: tuple[Stage, ...]
    chains: np.ndarray
    schedule: PipelineSchedule

    @cached_property
    def stage_of(self) -> dict[int, int]:
        """The stage each IPU holds."""
        return {int(ipu): s for chain in self.chains for s, ipu in enumerate(chain.tolist())}

    @property
    def widths(self) -> list[int]:
        """Values per sample crossing each boundary (the stage's last layer's outputs)."""
        shapes = self.config.spec.layer_shapes()
        return [shapes[stage.layers[-1]][1] for stage in self.stages[:-1]]


def build_pipeline(config: TrainConfig, pod: EmulatedPod) -> Pipeline:
    """Split the model into ``ipus_per_replica`` stages and place them on the POD."""
    spec = config.spec
    ranges = split_layers([layer.training_flops for layer in mlp_workload(spec).layers],
                          config.ipus_per_replica)
    stages = tuple(Stage(spec, layers, s, len(ranges), config.recomputes)
                   for s, layers in enumerate(ranges))
    chains = replica_ipus(config, pod.topology).reshape(config.replicas, len(stages))
    schedule = pipeline_schedule(config.pipeline_schedule, len(stages), config.accumulation)
    return Pipeline(config, stages, chains, schedule)


class PipelinedEngine(MLPEngine):
    """Replicas of several IPUs, a pipeline stage on each."""

    @cached_property
    def pipeline(self) -> Pipeline:
        """The replicas' stages, placed."""
        return build_pipeline(self.plan.config, self.pod)

    def begin(self) -> None:
        """Each stage's share of the starting weights on its IPUs."""
        config, pipeline = self.plan.config, self.pipeline
        start = init_params(config.spec, config.seed)
        padded = max(stage.parameters for stage in pipeline.stages)
        placing: dict[int, dict[int, tuple[np.ndarray, int]]] = {}
        for stage in pipeline.stages:
            first, stop = stage_offsets(config.spec, stage.layers)
            for ipu in pipeline.chains[:, stage.index].tolist():
                placing.setdefault(self.pod.owner[ipu], {})[ipu] = (start[first:stop], padded)
        self.pod.call("execute", {d: (place_stages, work) for d, work in placing.items()})

    def step(self, batch: Batch) -> StepResult:
        """Every round of the schedule, then the stages' gradients averaged and applied."""
        loss = _run_step(self.pipeline, self.pod, batch)
        return StepResult(loss, _update(self.pipeline, self.pod))


def _run_step(pipeline: Pipeline, pod: EmulatedPod,
              batch: tuple[np.ndarray, np.ndarray]) -> float:
    """Every round of the schedule, its moves after it; the step's mean loss."""
    config, chains = pipeline.config, pipeline.chains
    last_backward = {ops[-1] for ops in pipeline.schedule.order}
    pending_free: dict[int, list[str]] = {}
    loss_sum = np.zeros(config.replicas)
    replica_of = {int(ipu): r for r, ipu in enumerate(chains[:, -1].tolist())}  # last stages
    for ops in pipeline.schedule.rounds():
        work: dict[int, dict[int, RoundWork]] = {}
        for r in range(config.replicas):
            for op in ops:
                ipu = int(chains[r, op.stage])
                _add(work, pod, ipu, pipeline, ops=(_stage_op(pipeline, batch, r, op,
                                                              op in last_backward),))
            for name, shape, ipu in _landings(pipeline, r, ops):
                _add(work, pod, ipu, pipeline, expect=((name, shape),))
        for ipu, names in pending_free.items():
            _add(work, pod, ipu, pipeline, free=tuple(names))
        pending_free = {}
        answers = pod.call("execute", {d: (run_round, w) for d, w in work.items()})
        for per_ipu in answers.values():
            for ipu, by_micro in per_ipu.items():
                loss_sum[replica_of[ipu]] += sum(by_micro.values())
        _move(pipeline, pod, ops, pending_free)
    return float(np.mean(loss_sum / config.accumulation))


def _stage_op(pipeline: Pipeline, batch: tuple[np.ndarray, np.ndarray], replica: int,
              op: Op, ends_step: bool) -> StageOp:
    """``op`` for replica ``replica``, with the host's input or labels where it needs them."""
    config = pipeline.config
    x = y = None
    if op.pass_ is Pass.FORWARD and op.stage in (0, pipeline.schedule.stages - 1):
        bx, by = replica_slice(*batch, replica, config.replicas, config.micro_batch,
                               config.accumulation, op.micro)
        x = bx if op.stage == 0 else None
        y = by if op.stage == pipeline.schedule.stages - 1 else None
    return StageOp(op.pass_, op.micro, x, y, ends_step, config.accumulation)


def _crossing(pipeline: Pipeline, op: Op) -> tuple[str, int, int] | None:
    """What ``op`` sends when it ends: (tensor, from stage, to stage), or None."""
    if op.pass_ is Pass.FORWARD and op.stage < pipeline.schedule.stages - 1:
        return activation(op.stage, op.micro), op.stage, op.stage + 1
    if op.pass_ is Pass.BACKWARD and op.stage > 0:
        return gradient(op.stage - 1, op.micro), op.stage, op.stage - 1
    return None


def _landings(pipeline: Pipeline, replica: int,
              ops: list[Op]) -> list[tuple[str, tuple[int, ...], int]]:
    """The buffers replica ``replica``'s receiving IPUs need for the round's moves."""
    landings: list[tuple[str, tuple[int, ...], int]] = []
    for op in ops:
        crossing = _crossing(pipeline, op)
        if crossing is not None:
            name, sender, receiver = crossing
            width = pipeline.widths[min(sender, receiver)]
            landings.append((name, (pipeline.config.micro_batch, width),
                             int(pipeline.chains[replica, receiver])))
    return landings


def _move(pipeline: Pipeline, pod: EmulatedPod, ops: list[Op],
          pending_free: dict[int, list[str]]) -> None:
    """Send what the round's ops produced to the next (or previous) stage of every
    replica: one broadcast per tensor, every replica's sender-receiver pair a group."""
    for op in ops:
        crossing = _crossing(pipeline, op)
        if crossing is None:
            continue
        name, sender, receiver = crossing
        pairs = np.stack([pipeline.chains[:, sender], pipeline.chains[:, receiver]], axis=1)
        pod.collective(CollectiveName.BROADCAST, name, output=name, group=CommGroup.consecutive(2),
                       ipus=pairs.ravel().tolist(), root=0, algorithm="auto")
        for ipu in pairs[:, 0].tolist():
            pending_free.setdefault(int(ipu), []).append(name)


def _add(work: dict[int, dict[int, RoundWork]], pod: EmulatedPod, ipu: int,
         pipeline: Pipeline, ops: tuple[StageOp, ...] = (),
         expect: tuple[tuple[str, tuple[int, ...]], ...] = (), free: tuple[str, ...] = ()) -> None:
    """Add to IPU ``ipu``'s share of the round."""
    device = work.setdefault(pod.owner[ipu], {})
    stage = pipeline.stages[pipeline.stage_of[ipu]]
    share = device.get(ipu, RoundWork(stage))
    device[ipu] = RoundWork(stage, share.ops + ops, share.expect + expect, share.free + free)


def _update(pipeline: Pipeline, pod: EmulatedPod) -> bool:
    """Average each stage's gradient over the replicas, apply it; whether every stage's
    weights are the same in every replica."""
    config, ipus = pipeline.config, pipeline.chains.ravel().tolist()
    pod.collective(CollectiveName.ALLREDUCE, GRAD, output=GRAD_MEAN, op=ReduceOp.MEAN,
                   algorithm=config.algorithm, group=gradient_group(config), ipus=ipus)
    updates: dict[int, dict[int, tuple[float, float]]] = {}
    for ipu in ipus:
        updates.setdefault(pod.owner[ipu], {})[ipu] = (config.lr, config.momentum)
    digests: dict[int, str] = {}
    for answer in pod.call("execute", {d: (apply_stage_updates, w)
                                       for d, w in updates.items()}).values():
        digests.update(answer)
    return all(len({digests[int(ipu)] for ipu in pipeline.chains[:, s]}) == 1
               for s in range(pipeline.chains.shape[1]))
