"""Single-process PyTorch training that a data-parallel run must match.

The reference trains a copy of the same module, from the same weights, with the same
optimiser, on each step's whole global batch at once (the replicas' micro-batches
concatenated). Because every replica's loss is a mean over equal micro-batches, the mean of
their gradients is the gradient of the whole batch: the weights must agree up to float32
rounding, which the summation order changes.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import numpy as np

from cluster.training.torch_replicas.replica_tasks import batch_loss, flat_parameters


def train_reference(module: Any, optimizer_class: type, settings: dict[str, Any],
                    loss_kind: str,
                    batches: Iterable[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray,
                                                                                list[float]]:
    """Train a copy of ``module`` one step per ``(inputs, labels)`` of ``batches``; its
    flat weights after the last step and each step's loss (before its update)."""
    model = copy.deepcopy(module)
    model.train()
    optimizer = optimizer_class(model.parameters(), **settings)
    losses = []
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = batch_loss(model, loss_kind, x, y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return flat_parameters(model).copy(), losses


def relative_difference(weights: np.ndarray, reference: np.ndarray) -> float:
    """Largest difference of two weight vectors relative to the reference's largest
    magnitude (0 for two empty vectors)."""
    if reference.size == 0:
        return 0.0
    scale = float(np.max(np.abs(reference))) or 1.0
    return float(np.max(np.abs(weights.astype(np.float64) - reference))) / scale
