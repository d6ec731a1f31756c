"""Synthetic token sequences for the decoder, and the single-process training a
distributed run must reproduce (``--check``).

The sequences follow a fixed random Markov chain: each token's successor is one token of
its own (drawn once per vocabulary) with probability :data:`FOLLOW`, else any token. A
decoder learns it (its loss falls from ``ln V`` towards the chain's entropy), and its
labels are the sequence moved on by one token.
"""

from __future__ import annotations

import numpy as np

from cluster.training.data import step_batch
from cluster.training.decoder.flat_params import init_params
from cluster.training.decoder.group import loss_and_grad
from cluster.training.numpy_mlp import sgd_momentum
from cluster.training.workloads.decoder import DecoderConfig

FOLLOW = 0.8  # how often a token is followed by its own successor


def make_token_dataset(seed: int, samples: int, tokens: int,
                       vocabulary: int) -> tuple[np.ndarray, np.ndarray]:
    """``samples`` sequences of ``tokens`` ids and their next-token labels, int64
    ``(samples, tokens)`` each, drawn from ``np.random.default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    successor = rng.permutation(vocabulary)
    sequences = np.empty((samples, tokens + 1), dtype=np.int64)
    sequences[:, 0] = rng.integers(0, vocabulary, samples)
    for t in range(1, tokens + 1):
        follows = rng.random(samples) < FOLLOW
        sequences[:, t] = np.where(follows, successor[sequences[:, t - 1]],
                                   rng.integers(0, vocabulary, samples))
    return sequences[:, :-1], sequences[:, 1:]


def train_decoder_reference(config: DecoderConfig, x: np.ndarray, y: np.ndarray, *,
                            global_batch: int, steps: int, lr: float, momentum: float,
                            seed: int) -> list[float]:
    """Single-process training of the whole decoder from ``init_params(config, seed)``:
    step ``s`` takes rows ``step_batch(x, y, s, global_batch)`` at once, SGD with
    momentum; the loss of each step before its update."""
    params = init_params(config, seed)
    velocity = np.zeros_like(params)
    losses = []
    for step in range(steps):
        loss, grad = loss_and_grad(config, params, *step_batch(x, y, step, global_batch))
        sgd_momentum(params, velocity, grad, lr, momentum)
        losses.append(loss)
    return losses
