"""Real-mode data-parallel training of a user's PyTorch classifier (``ipupod train --torch``).

Each step's global batch is drawn on this process (:func:`~cluster.training.torch_replicas.
run.step_data`) and cut into one block of micro-batches per replica; the replicas on the
cards (:class:`~cluster.training.torch_replicas.replicas.TorchReplicas`) compute, allreduce
their gradients and update. The same steps in one process are the reference ``--check``
compares the weights with (:mod:`.torch_training` writes the run's record).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from cluster.training.engines.base import StepEngine
from cluster.training.importers.torch_factory import require_torch
from cluster.training.placement import replica_ipus
from cluster.training.step_result import StepResult
from cluster.training.torch_replicas.replica_tasks import LOGITS
from cluster.training.torch_replicas.replicas import TorchReplicas, pickled
from cluster.training.torch_replicas.run import TorchModel, replica_work, step_data
from cluster.training.torch_replicas.single_process import relative_difference, train_reference

if TYPE_CHECKING:
    from cluster.training.plan import TrainPlan
    from ipu_node.pod import EmulatedPod


class TorchEngine(StepEngine):
    """Replicas of one IPU, each a copy of the user's module on its card."""

    replicas: TorchReplicas  # from begin() on

    def __init__(self, plan: TrainPlan, pod: EmulatedPod, model: TorchModel) -> None:
        super().__init__(plan, pod)
        self.model = model

    @cached_property
    def settings(self) -> dict[str, float]:
        """The optimiser's settings."""
        return {"lr": self.plan.config.lr, "momentum": self.plan.config.momentum}

    def begin(self) -> None:
        """The module's replicas on the cards (replica ``r`` on its replica's first IPU)."""
        config = self.plan.config
        ipus = replica_ipus(config, self.pod.topology)[::config.ipus_per_replica].tolist()
        self.replicas = TorchReplicas(
            self.pod, ipus, pickled(self.model.module, require_torch().optim.SGD,
                                    self.settings, LOGITS), config.algorithm)

    def batch(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """Step ``step``'s global batch."""
        config = self.plan.config
        return step_data(self.model, config.seed, step, config.global_batch)

    def step(self, batch: tuple[np.ndarray, np.ndarray]) -> StepResult:
        """Each replica on its micro-batches, the gradients' allreduce, the update."""
        return self.replicas.step(replica_work(self.plan.config, *batch))

    def reference_error(self) -> tuple[list[float], float]:
        """The same steps in one process: its losses, and how far its weights are from
        replica 0's."""
        config = self.plan.config
        weights, losses = train_reference(
            self.model.module, require_torch().optim.SGD, self.settings, LOGITS,
            (step_data(self.model, config.seed, step, config.global_batch)
             for step in range(config.steps)))
        return losses, relative_difference(self.replicas.weights(), weights)

    def close(self) -> None:
        """Forget the replicas on the cards and free their tensors."""
        self.replicas.close()
