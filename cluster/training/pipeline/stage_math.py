"""One pipeline stage of the MLP: its forward and backward passes on a micro-batch.

The same arithmetic as :func:`cluster.training.numpy_mlp.loss_and_grad`, operation for
operation, cut at stage boundaries: a stage's layers are a contiguous run of the MLP's,
its parameters a contiguous slice of the flat vector (same layout). What crosses a
boundary forward is the activation after the ReLU; backward, the loss's gradient with
respect to it, already through the ReLU's mask (the receiving stage applies
``* (input > 0)`` exactly as the whole-model backward does).
"""

from __future__ import annotations

import numpy as np

from cluster.training.numpy_mlp import DTYPE, MLPSpec

Layers = list[tuple[np.ndarray, np.ndarray]]


def stage_offsets(spec: MLPSpec, layers: range) -> tuple[int, int]:
    """The ``[start, stop)`` slice of the flat parameter vector holding ``layers``."""
    sizes = [fan_in * fan_out + fan_out for fan_in, fan_out in spec.layer_shapes()]
    start = sum(sizes[:layers.start])
    return start, start + sum(sizes[layers.start:layers.stop])


def unflatten(spec: MLPSpec, layers: range, flat: np.ndarray) -> Layers:
    """Views ``(W, b)`` per layer of the stage into its flat slice ``flat``."""
    views, offset = [], 0
    for fan_in, fan_out in spec.layer_shapes()[layers.start:layers.stop]:
        w = flat[offset:offset + fan_in * fan_out].reshape(fan_in, fan_out)
        offset += fan_in * fan_out
        views.append((w, flat[offset:offset + fan_out]))
        offset += fan_out
    return views


def forward(layers: Layers, x: np.ndarray, ends_model: bool) -> tuple[np.ndarray, list]:
    """The stage's output and each layer's input (layer 0's is ``x``). A ReLU follows
    every layer but the model's last (when the stage ``ends_model``)."""
    a, inputs = x, []
    for i, (w, b) in enumerate(layers):
        inputs.append(a)
        a = a @ w + b
        if not (ends_model and i == len(layers) - 1):
            a = np.maximum(a, 0)
    return a, inputs


def loss_gradient(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean softmax cross-entropy of ``logits`` and its gradient with respect to them."""
    rows = np.arange(len(y))
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    sum_exp = exp.sum(axis=1, keepdims=True)
    loss = float(-(shifted[rows, y] - np.log(sum_exp[:, 0])).mean())
    delta = exp / sum_exp
    delta[rows, y] -= 1
    delta /= DTYPE(len(y))
    return loss, delta


def backward(layers: Layers, inputs: list, delta: np.ndarray, into: Layers,
             starts_model: bool) -> np.ndarray | None:
    """Write the stage's weight gradients into ``into`` (views like ``layers``); return
    the gradient for the previous stage (None when the stage ``starts_model``)."""
    for i in range(len(layers) - 1, -1, -1):
        dw, db = into[i]
        np.matmul(inputs[i].T, delta, out=dw)
        np.sum(delta, axis=0, out=db)
        if i > 0 or not starts_model:
            delta = (delta @ layers[i][0].T) * (inputs[i] > 0)
    return None if starts_model else delta
