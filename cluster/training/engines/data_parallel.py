"""Real-mode data-parallel training of the MLP: replicas of one IPU each.

Each device computes its replicas' gradients (:mod:`.data_parallel_tasks`), the gradients are
averaged by an allreduce on the devices, each device updates its replicas; this process only
streams the micro-batches (the host's job).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from cluster.training.data import replica_slice
from cluster.training.engines.data_parallel_tasks import (
    GRAD,
    GRAD_MEAN,
    apply_update,
    compute_gradients,
    place_replicas,
)
from cluster.training.engines.mlp_engine import Batch, MLPEngine
from cluster.training.numpy_mlp import init_params
from cluster.training.placement import gradient_group, replica_ipus
from cluster.training.step_result import StepResult
from gcl.collectives import CollectiveName, ReduceOp


class DataParallelEngine(MLPEngine):
    """Replicas of one IPU: a replica's whole model on its IPU."""

    @cached_property
    def home(self) -> list[int]:
        """Replica ``r``'s IPU."""
        return replica_ipus(self.plan.config, self.pod.topology).tolist()

    @cached_property
    def placed(self) -> dict[int, list[int]]:
        """Each device's replica IPUs."""
        placed: dict[int, list[int]] = {}
        for ipu in self.home:
            placed.setdefault(self.pod.owner[ipu], []).append(ipu)
        return placed

    def begin(self) -> None:
        """Every replica's starting weights on its IPU."""
        start = init_params(self.plan.config.spec, self.plan.config.seed)
        self.pod.call("execute", {d: (place_replicas, start, h) for d, h in self.placed.items()})

    def step(self, batch: Batch) -> StepResult:
        """Gradients on the devices, their allreduce, the update on every replica."""
        config, pod, home = self.plan.config, self.pod, self.home
        batch_x, batch_y = batch
        work: dict[int, dict] = {}
        for r, ipu in enumerate(home):
            work.setdefault(pod.owner[ipu], {})[ipu] = [
                replica_slice(batch_x, batch_y, r, config.replicas, config.micro_batch,
                              config.accumulation, micro)
                for micro in range(config.accumulation)]
        replica_losses = {}
        for answer in pod.call("execute", {d: (compute_gradients, config.spec, w)
                                           for d, w in work.items()}).values():
            replica_losses.update(answer)
        pod.collective(CollectiveName.ALLREDUCE, GRAD, output=GRAD_MEAN, op=ReduceOp.MEAN,
                       algorithm=config.algorithm, group=gradient_group(config), ipus=home)
        updates = {d: (apply_update, {h: (config.lr, config.momentum) for h in ipus})
                   for d, ipus in self.placed.items()}
        digests = set()
        for answer in pod.call("execute", updates).values():
            digests.update(answer.values())
        return StepResult(float(np.mean([replica_losses[h] for h in home])), len(digests) == 1)
