"""What the NumPy MLP's engines share: the synthetic data set, made once, and each step's
global batch drawn from it on this process (the host streams it, as on an IPU-POD)."""

from __future__ import annotations

from functools import cached_property

import numpy as np

from cluster.training.data import make_dataset, step_batch
from cluster.training.engines.base import StepEngine

Batch = tuple[np.ndarray, np.ndarray]
"""A step's inputs and labels."""


class MLPEngine(StepEngine):
    """An engine training the trainer's MLP (:mod:`cluster.training.numpy_mlp`)."""

    @cached_property
    def dataset(self) -> Batch:
        """The run's samples and labels, drawn from its seed."""
        config = self.plan.config
        return make_dataset(config.seed, config.samples, config.input_size, config.classes)

    def batch(self, step: int) -> Batch:
        """Step ``step``'s global batch."""
        return step_batch(*self.dataset, step, self.plan.config.global_batch)
