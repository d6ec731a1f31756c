"""Real-mode tensor parallelism of the MLP: one Megatron block over each replica's ``T``
IPUs, its two allreduces real bytes over the emulated links.

A replica is a tensor group of ``T`` IPUs (``--tensor-parallel T``, ``--ipus-per-replica
T``), the block of :mod:`cluster.training.tensor_parallel.mlp_block` split over them.
Micro-batch after micro-batch, every IPU runs its rank's share of a round
(:mod:`.tensor_parallel_tasks`) for every replica at once, with one GCL allreduce (sum)
over each tensor group (CommGroup CONSECUTIVE of ``T``) after the forward round and one
after the backward round. After the step's last micro-batch each rank's gradient is
averaged with the same rank of every other replica (one allreduce, CommGroup ORTHOGONAL)
and applied with SGD and momentum. This process only streams the host's input and labels
and orders the rounds; no activation or gradient passes through it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from cluster.training.config import TrainConfig
from cluster.training.data import replica_slice
from cluster.training.engines.mlp_engine import Batch, MLPEngine
from cluster.training.engines.rank_rounds import rank_round
from cluster.training.engines.tensor_parallel_tasks import (
    GRAD,
    GRAD_MEAN,
    IN_SUM,
    OUT_SUM,
    PARTIAL_IN,
    PARTIAL_OUT,
    apply_updates,
    backward_block,
    end_micro,
    forward_block,
    place_ranks,
)
from cluster.training.numpy_mlp import init_params
from cluster.training.placement import gradient_group, replica_ipus
from cluster.training.sharding.exchange import ALGORITHM
from cluster.training.step_result import StepResult
from cluster.training.tensor_parallel.mlp_block import MegatronSplit
from gcl import CommGroup
from gcl.collectives import CollectiveName, ReduceOp

if TYPE_CHECKING:
    from ipu_node.pod import EmulatedPod


@dataclass(frozen=True)
class TensorGroups:
    """The replicas on a POD: ``groups[r, k]`` is the IPU of rank ``k`` of replica ``r``."""

    config: TrainConfig
    split: MegatronSplit
    groups: np.ndarray

    def round(self, pod: EmulatedPod, task: Callable[..., Any],
              given: Callable[[int, int], Any]) -> dict[int, Any]:
        """Run ``task`` on every IPU of every replica at once, IPU ``groups[r, k]`` given
        ``given(r, k)``; the IPUs' answers merged."""
        return rank_round(pod, self.groups, task, self.split, given)

    def allreduce(self, pod: EmulatedPod, tensor: str, output: str) -> None:
        """Sum ``tensor`` over each replica's tensor group, every replica at once."""
        pod.collective(CollectiveName.ALLREDUCE, tensor, output=output, op=ReduceOp.SUM,
                       group=CommGroup.consecutive(self.split.ranks),
                       ipus=self.groups.ravel().tolist(), algorithm=ALGORITHM)


def build_groups(config: TrainConfig, pod: EmulatedPod) -> TensorGroups:
    """The MLP's block over ``ipus_per_replica`` IPUs; the replicas' IPUs placed."""
    split = MegatronSplit.of(config.spec, config.ipus_per_replica)
    groups = replica_ipus(config, pod.topology).reshape(config.replicas, split.ranks)
    return TensorGroups(config, split, groups)


class TensorParallelEngine(MLPEngine):
    """Replicas of ``T`` IPUs, the MLP's widest block split over them (Megatron, 1-D)."""

    @cached_property
    def tensor_groups(self) -> TensorGroups:
        """The replicas' tensor groups, placed."""
        return build_groups(self.plan.config, self.pod)

    def begin(self) -> None:
        """Each rank's share of the starting weights (the replicated layers whole)."""
        config, groups = self.plan.config, self.tensor_groups
        split = groups.split
        params = init_params(config.spec, config.seed)
        starting = [split.rank_params(params, k) for k in range(split.ranks)]
        padded = max(len(params) for params in starting)
        groups.round(self.pod, place_ranks, lambda r, k: (starting[k], padded))

    def step(self, batch: Batch) -> StepResult:
        """Every micro-batch of the step, then each rank's gradient averaged and applied."""
        loss = _run_step(self.tensor_groups, self.pod, batch)
        return StepResult(loss, _update(self.tensor_groups, self.pod))


def _run_step(groups: TensorGroups, pod: EmulatedPod, batch: Batch) -> float:
    """Every micro-batch of the step, one after the other; the step's mean loss."""
    config = groups.config
    first = {int(ipu): r for r, ipu in enumerate(groups.groups[:, 0].tolist())}
    loss_sum = np.zeros(config.replicas)
    for micro in range(config.accumulation):
        data = [replica_slice(*batch, r, config.replicas, config.micro_batch,
                              config.accumulation, micro) for r in range(config.replicas)]
        losses = _micro_batch(groups, pod, data, micro == config.accumulation - 1)
        for ipu, loss in losses.items():
            loss_sum[first[ipu]] += loss
    return float(np.mean(loss_sum / config.accumulation))


def _micro_batch(groups: TensorGroups, pod: EmulatedPod, data: list[Batch],
                 last: bool) -> dict[int, float]:
    """One micro-batch, replica ``r`` on ``data[r]``: forward, the tensor group's allreduce
    of the block's output, backward, the allreduce of its input gradient (when layers lie
    below the block), the head's backward; its loss per replica's rank 0. The ``last`` of
    a step leaves the micro-batches' mean gradient."""
    config = groups.config
    groups.round(pod, forward_block, lambda r, k: data[r][0])
    groups.allreduce(pod, PARTIAL_OUT, OUT_SUM)
    losses = groups.round(pod, backward_block, lambda r, k: data[r][1])
    if groups.split.layer > 0:
        groups.allreduce(pod, PARTIAL_IN, IN_SUM)
    groups.round(pod, end_micro, lambda r, k: config.accumulation if last else 0)
    return losses


def _update(groups: TensorGroups, pod: EmulatedPod) -> bool:
    """Average each rank's gradient with the same rank of every other replica, apply it;
    whether every rank's weights are the same in every replica."""
    config = groups.config
    pod.collective(CollectiveName.ALLREDUCE, GRAD, output=GRAD_MEAN, op=ReduceOp.MEAN,
                   algorithm=config.algorithm, group=gradient_group(config),
                   ipus=groups.groups.ravel().tolist())
    digests = groups.round(pod, apply_updates, lambda r, k: (config.lr, config.momentum))
    return all(len({digests[int(ipu)] for ipu in groups.groups[:, k]}) == 1
               for k in range(groups.groups.shape[1]))
