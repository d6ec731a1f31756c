"""Model replicas on emulated devices: weights, velocity and gradients live on the IPUs.

A data-parallel replica of one IPU (GCD 1; a replica spanning several IPUs is pipelined,
:mod:`.stage_tasks`, or sharded, :mod:`.shard_tasks`); its engine is :mod:`.data_parallel`.
The device computes the replica's forward and backward passes on the micro-batches the
host streams to it, leaves the gradient on the IPU as tensor ``model.grad`` for the
allreduce, and applies the averaged gradient (``model.grad.mean``) with SGD and momentum.
A card runs these as tasks (``Card.execute``), without knowing what training is.
"""

from __future__ import annotations

import hashlib

import numpy as np

from cluster.training.numpy_mlp import MLPSpec, loss_and_grad, sgd_momentum
from ipu_node.store import TensorStore

PARAMS, VELOCITY = "model.params", "model.velocity"
GRAD, GRAD_MEAN = "model.grad", "model.grad.mean"


def place_replicas(store: TensorStore, params: np.ndarray, ipus: list[int]) -> None:
    """Place a replica's starting weights (and zero velocity) on each of ``ipus``."""
    for ipu in ipus:
        store.put(ipu, PARAMS, params.copy())
        store.put(ipu, VELOCITY, np.zeros_like(params))


def compute_gradients(store: TensorStore, spec: MLPSpec,
                      work: dict[int, list]) -> dict[int, float]:
    """For each replica IPU: its micro-batches ``[(x, y), ...]``. Leaves the mean
    gradient on the IPU; returns each replica's mean loss."""
    losses = {}
    for ipu, batches in work.items():
        params = store.get(ipu, PARAMS)
        total = np.zeros_like(params)
        loss_sum = 0.0
        for x, y in batches:
            loss, grad = loss_and_grad(spec, params, x, y)
            total += grad
            loss_sum += loss
        store.put(ipu, GRAD, total / np.float32(len(batches)))
        losses[ipu] = loss_sum / len(batches)
    return losses


def apply_update(store: TensorStore,
                 work: dict[int, tuple[float, float]]) -> dict[int, str]:
    """Apply the averaged gradient on each replica; return a digest of its new weights
    (equal digests: identical replicas, without shipping the weights)."""
    digests = {}
    for ipu, (lr, momentum) in work.items():
        params, velocity = store.get(ipu, PARAMS), store.get(ipu, VELOCITY)
        sgd_momentum(params, velocity, store.get(ipu, GRAD_MEAN), lr, momentum)
        digests[ipu] = hashlib.sha256(params.tobytes()).hexdigest()
    return digests

