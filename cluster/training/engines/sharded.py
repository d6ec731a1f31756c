"""Real-mode sharded training: the widest layer's columns on a replica's IPUs, every
exchange between them real bytes over the emulated links.

Micro-batch after micro-batch, every device runs its IPUs' share of a round
(:mod:`.shard_tasks`) for every replica at once, then one GCL collective moves what the
round left to where the next needs it (:mod:`cluster.training.sharding.exchange`:
broadcast, all-gather, reduce-scatter, allreduce; a replica's ``K`` IPUs one group).
After the step's last micro-batch each IPU's gradient is averaged with the same IPU
position of every other replica (one allreduce, CommGroup ORTHOGONAL) and applied with SGD
and momentum. This process only streams the host's input and labels and orders the
rounds; no activation or gradient passes through it.
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
from cluster.training.engines.shard_tasks import (
    GRAD,
    GRAD_MEAN,
    apply_updates,
    backward_shard,
    begin_micro,
    end_micro,
    finish_forward,
    forward_shard,
    place_shards,
)
from cluster.training.numpy_mlp import init_params
from cluster.training.placement import gradient_group, replica_ipus
from cluster.training.sharding.columns import ColumnSplit
from cluster.training.sharding.exchange import (
    ALGORITHM,
    ALL_GATHER,
    ALLREDUCE,
    BROADCAST,
    REDUCE_SCATTER,
    Exchange,
    shard_group,
)
from cluster.training.step_result import StepResult
from gcl.collectives import CollectiveName, ReduceOp

if TYPE_CHECKING:
    from ipu_node.pod import EmulatedPod


@dataclass(frozen=True)
class ShardedReplicas:
    """The replicas on a POD: ``chains[r, k]`` is the IPU holding shard ``k`` of replica
    ``r`` (``k = 0``: also every other layer)."""

    config: TrainConfig
    split: ColumnSplit
    chains: np.ndarray

    def round(self, pod: EmulatedPod, task: Callable[..., Any],
              given: Callable[[int, int], Any]) -> dict[int, Any]:
        """Run ``task`` on every IPU of every replica at once, IPU ``chains[r, k]`` given
        ``given(r, k)``; the IPUs' answers merged."""
        return rank_round(pod, self.chains, task, self.split, given)

    def exchange(self, pod: EmulatedPod, exchange: Exchange) -> None:
        """Run ``exchange`` over every replica's IPUs at once."""
        pod.collective(exchange.collective, exchange.tensor, output=exchange.output,
                       group=shard_group(self.split), ipus=self.chains.ravel().tolist(),
                       root=0, algorithm=ALGORITHM)


def build_sharded(config: TrainConfig, pod: EmulatedPod) -> ShardedReplicas:
    """Split the widest layer over ``ipus_per_replica`` IPUs; place the replicas' IPUs."""
    split = ColumnSplit.of(config.spec, config.ipus_per_replica)
    chains = replica_ipus(config, pod.topology).reshape(config.replicas, split.shards)
    return ShardedReplicas(config, split, chains)


class ShardedEngine(MLPEngine):
    """Replicas of several IPUs, the widest layer's columns split over them."""

    @cached_property
    def sharded(self) -> ShardedReplicas:
        """The replicas' shards, placed."""
        return build_sharded(self.plan.config, self.pod)

    def begin(self) -> None:
        """Each IPU's shard of the starting weights (IPU 0 also every other layer)."""
        config, sharded = self.plan.config, self.sharded
        rest, shards = sharded.split.split(init_params(config.spec, config.seed))
        starting = [np.concatenate([shards[0], rest]), *shards[1:]]
        padded = max(sharded.split.ipu_parameters)
        sharded.round(self.pod, place_shards, lambda r, k: (starting[k], padded))

    def step(self, batch: Batch) -> StepResult:
        """Every micro-batch of the step, then each IPU's gradient averaged and applied."""
        loss = _run_step(self.sharded, self.pod, batch)
        return StepResult(loss, _update(self.sharded, self.pod))


def _run_step(sharded: ShardedReplicas, pod: EmulatedPod,
              batch: tuple[np.ndarray, np.ndarray]) -> float:
    """Every micro-batch of the step, one after the other; the step's mean loss."""
    config = sharded.config
    first = {int(ipu): r for r, ipu in enumerate(sharded.chains[:, 0].tolist())}
    loss_sum = np.zeros(config.replicas)
    for micro in range(config.accumulation):
        data = [replica_slice(*batch, r, config.replicas, config.micro_batch,
                              config.accumulation, micro) for r in range(config.replicas)]
        losses = _micro_batch(sharded, pod, data, micro == config.accumulation - 1)
        for ipu, loss in losses.items():
            loss_sum[first[ipu]] += loss
    return float(np.mean(loss_sum / config.accumulation))


def _micro_batch(sharded: ShardedReplicas, pod: EmulatedPod,
                 data: list[tuple[np.ndarray, np.ndarray]], last: bool) -> dict[int, float]:
    """One micro-batch, forward then backward, replica ``r`` on ``data[r]``; its loss per
    replica's IPU 0. The ``last`` of a step leaves the micro-batches' mean gradient."""
    config = sharded.config
    sharded.round(pod, begin_micro, lambda r, k: data[r][0] if k == 0 else config.micro_batch)
    sharded.exchange(pod, BROADCAST)
    sharded.round(pod, forward_shard, lambda r, k: None)
    sharded.exchange(pod, ALL_GATHER)
    losses = sharded.round(pod, finish_forward, lambda r, k: data[r][1] if k == 0 else None)
    sharded.exchange(pod, REDUCE_SCATTER)
    sharded.round(pod, backward_shard, lambda r, k: None)
    if sharded.split.layer > 0:
        sharded.exchange(pod, ALLREDUCE)
    sharded.round(pod, end_micro, lambda r, k: config.accumulation if last else 0)
    return losses


def _update(sharded: ShardedReplicas, pod: EmulatedPod) -> bool:
    """Average each IPU's gradient with the same position of every other replica, apply
    it; whether every position's weights are the same in every replica."""
    config = sharded.config
    pod.collective(CollectiveName.ALLREDUCE, GRAD, output=GRAD_MEAN, op=ReduceOp.MEAN,
                   algorithm=config.algorithm, group=gradient_group(config),
                   ipus=sharded.chains.ravel().tolist())
    digests = sharded.round(pod, apply_updates, lambda r, k: (config.lr, config.momentum))
    return all(len({digests[int(ipu)] for ipu in sharded.chains[:, k]}) == 1
               for k in range(sharded.chains.shape[1]))
