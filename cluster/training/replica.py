"""Model replicas on emulated devices: weights, velocity and gradients live on the IPUs.

A data-parallel replica sits on one IPU (GCD 1) or on both IPUs of a C2 card (GCD 2, its
gradient split in two halves, one per IPU). The device computes the replica's forward and
backward passes on the micro-batches the host streams to it, leaves the gradient on the
IPUs as tensor ``model.grad`` for the allreduce, and applies the averaged gradient
(``model.grad.mean``) with SGD and momentum. Mixed into :class:`ipu_node.card.Device`.
"""

from __future__ import annotations

import hashlib

import numpy as np

from cluster.training.model import MLPSpec, loss_and_grad, sgd_momentum
from ipu_node.store import TensorStore

PARAMS, VELOCITY = "model.params", "model.velocity"
GRAD, GRAD_MEAN = "model.grad", "model.grad.mean"


def place_replicas(store: TensorStore, params: np.ndarray, ipus: list[int]) -> None:
    """Place a replica's starting weights (and zero velocity) on each of ``ipus``."""
    for ipu in ipus:
        store.put(ipu, PARAMS, params.copy())
        store.put(ipu, VELOCITY, np.zeros_like(params))


def compute_gradients(store: TensorStore, spec: MLPSpec,
                      work: dict[int, tuple[list, tuple[int, ...]]]) -> dict[int, float]:
    """For each replica IPU: its micro-batches ``[(x, y), ...]`` and the IPUs its
    gradient goes to (one, or two halves). Returns each replica's mean loss."""
    losses = {}
    for ipu, (batches, targets) in work.items():
        params = store.get(ipu, PARAMS)
        total = np.zeros_like(params)
        loss_sum = 0.0
        for x, y in batches:
            loss, grad = loss_and_grad(spec, params, x, y)
            total += grad
            loss_sum += loss
        gradient = total / np.float32(len(batches))
        for target, piece in zip(targets, _split(gradient, len(targets))):
            store.put(target, GRAD, piece)
        losses[ipu] = loss_sum / len(batches)
    return losses


def apply_update(store: TensorStore,
                 work: dict[int, tuple[tuple[int, ...], float, float]]) -> dict[int, str]:
    """Apply the averaged gradient on each replica; return a digest of its new weights
    (equal digests: identical replicas, without shipping the weights)."""
    digests = {}
    for ipu, (sources, lr, momentum) in work.items():
        params, velocity = store.get(ipu, PARAMS), store.get(ipu, VELOCITY)
        gradient = np.concatenate([store.get(s, GRAD_MEAN) for s in sources])[:params.size]
        sgd_momentum(params, velocity, gradient, lr, momentum)
        digests[ipu] = hashlib.sha256(params.tobytes()).hexdigest()
    return digests


def _split(gradient: np.ndarray, parts: int) -> list[np.ndarray]:
    """The gradient as ``parts`` equal pieces (the last padded with zeros)."""
    if parts == 1:
        return [gradient]
    size = -(-gradient.size // parts)
    padded = np.zeros(size * parts, dtype=gradient.dtype)
    padded[:gradient.size] = gradient
    return [padded[i * size:(i + 1) * size].copy() for i in range(parts)]
