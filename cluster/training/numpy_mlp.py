"""A multilayer perceptron in plain NumPy, with its parameters in ONE flat float32 vector.

One flat vector is what data-parallel training moves around: the gradient is allreduced as a
single buffer and the optimiser updates it in place, so no per-layer bookkeeping leaks into
the trainer or the collectives.

Parameter layout (also the gradient's): for each dense layer ``i`` in order, its weight
matrix ``W_i`` of shape ``(fan_in, fan_out)`` flattened row-major (C order), then its bias
``b_i`` of shape ``(fan_out,)``. Layer ``i`` computes ``x @ W_i + b_i``; a ReLU follows
every layer but the last, whose outputs are the logits of a softmax cross-entropy loss.

Everything is float32 (parameters, activations, gradients, optimiser state); float64
parameters are accepted by :func:`loss_and_grad` only so that tests can check gradients
against finite differences.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

DTYPE = np.float32


@dataclass(frozen=True)
class MLPSpec:
    """The shape of an MLP: ``input_size`` features, hidden layer widths, ``classes`` outputs."""

    input_size: int
    hidden: tuple[int, ...]
    classes: int

    def __post_init__(self) -> None:
        sizes = (self.input_size, *self.hidden, self.classes)
        if any(not isinstance(n, (int, np.integer)) or n < 1 for n in sizes):
            raise ValueError(f"MLPSpec sizes must be positive integers, got {sizes}")
        if self.classes < 2:
            raise ValueError(f"MLPSpec needs at least 2 classes, got {self.classes}")
        object.__setattr__(self, "hidden", tuple(int(n) for n in self.hidden))

    def layer_shapes(self) -> list[tuple[int, int]]:
        """``(fan_in, fan_out)`` of each dense layer, input to output."""
        sizes = (self.input_size, *self.hidden, self.classes)
        return [(int(a), int(b)) for a, b in pairwise(sizes)]

    @property
    def parameter_count(self) -> int:
        """Number of scalars in the flat parameter vector (weights + biases)."""
        return sum(fan_in * fan_out + fan_out for fan_in, fan_out in self.layer_shapes())


def _unflatten(spec: MLPSpec, flat: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Views ``(W, b)`` per layer into ``flat`` (no copies), following the documented layout."""
    if flat.ndim != 1 or flat.shape[0] != spec.parameter_count:
        raise ValueError(
            f"expected a flat vector of {spec.parameter_count} parameters, got shape {flat.shape}"
        )
    layers: list[tuple[np.ndarray, np.ndarray]] = []
    offset = 0
    for fan_in, fan_out in spec.layer_shapes():
        w = flat[offset : offset + fan_in * fan_out].reshape(fan_in, fan_out)
        offset += fan_in * fan_out
        b = flat[offset : offset + fan_out]
        offset += fan_out
        layers.append((w, b))
    return layers


def init_params(spec: MLPSpec, seed: int) -> np.ndarray:
    """A fresh flat float32 parameter vector: He-normal weights, zero biases.

    Weights of a layer are drawn ``normal(0, sqrt(2 / fan_in))`` from
    ``np.random.default_rng(seed)``, layer by layer in order, so that ReLU activations keep
    their scale with depth; the same seed always gives the same vector.
    """
    rng = np.random.default_rng(seed)
    params = np.zeros(spec.parameter_count, dtype=DTYPE)
    for w, _b in _unflatten(spec, params):
        fan_in, fan_out = w.shape
        w[...] = rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(fan_in, fan_out)).astype(DTYPE)
    return params


def _work_dtype(params: np.ndarray) -> np.dtype:
    """float64 when the caller passes float64 (gradient checks), float32 otherwise."""
    return np.dtype(np.float64) if params.dtype == np.float64 else np.dtype(DTYPE)


def _check_batch(spec: MLPSpec, x: np.ndarray, y: np.ndarray | None) -> None:
    """ValueError unless ``x`` is a non-empty ``(batch, input_size)`` array and ``y``, if
    given, one label in ``[0, classes)`` per row."""
    if x.ndim != 2 or x.shape[1] != spec.input_size:
        raise ValueError(f"x must have shape (batch, {spec.input_size}), got {x.shape}")
    if x.shape[0] == 0:
        raise ValueError("the batch is empty")
    if y is not None:
        if y.shape != (x.shape[0],):
            raise ValueError(f"y must have shape ({x.shape[0]},), got {y.shape}")
        if y.min() < 0 or y.max() >= spec.classes:
            raise ValueError(f"labels must lie in [0, {spec.classes}), got [{y.min()}, {y.max()}]")


def _forward(
    spec: MLPSpec, params: np.ndarray, x: np.ndarray
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Logits and the input of every layer (kept for the backward pass)."""
    dtype = _work_dtype(params)
    layers = _unflatten(spec, params.astype(dtype, copy=False))
    a = np.asarray(x, dtype=dtype)
    inputs: list[np.ndarray] = []
    for i, (w, b) in enumerate(layers):
        inputs.append(a)
        a = a @ w + b
        if i < len(layers) - 1:
            a = np.maximum(a, 0)
    return a, inputs


def loss_and_grad(
    spec: MLPSpec, params: np.ndarray, x: np.ndarray, y: np.ndarray
) -> tuple[float, np.ndarray]:
    """Mean softmax cross-entropy over the batch and its gradient w.r.t. ``params``.

    Because the loss is a mean, the gradient of a batch is the mean of the gradients of equal
    sized parts of it: that is what makes averaging replicas' gradients (allreduce, then
    divide) equal to single-process training on the whole batch. The gradient is a new flat
    vector in the layout of ``params`` and of its dtype (float32 in training).
    """
    _check_batch(spec, x, y)
    dtype = _work_dtype(params)
    layers = _unflatten(spec, params.astype(dtype, copy=False))
    logits, inputs = _forward(spec, params, x)
    batch = x.shape[0]
    rows = np.arange(batch)

    # Numerically stable softmax cross-entropy: shift each row by its max before exp.
    shifted = logits - logits.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    sum_exp = exp.sum(axis=1, keepdims=True)
    log_prob_true = shifted[rows, y] - np.log(sum_exp[:, 0])
    loss = float(-log_prob_true.mean())

    # d(mean loss)/d(logits) = (softmax - onehot) / batch.
    delta = exp / sum_exp
    delta[rows, y] -= 1
    delta /= dtype.type(batch)

    grad = np.empty(spec.parameter_count, dtype=dtype)
    grad_layers = _unflatten(spec, grad)
    for i in range(len(layers) - 1, -1, -1):
        a_in = inputs[i]
        dw, db = grad_layers[i]
        np.matmul(a_in.T, delta, out=dw)
        np.sum(delta, axis=0, out=db)
        if i > 0:
            # Back through the layer, then through the ReLU that produced its input.
            delta = (delta @ layers[i][0].T) * (a_in > 0)
    return loss, grad


def forward_flops(spec: MLPSpec, batch: int) -> int:
    """Floating-point operations of a forward pass over ``batch`` samples.

    ``2 * fan_in * fan_out * batch`` per dense layer (a multiply-add counts 2); biases,
    ReLUs and the softmax are ignored, as they are negligible next to the matrix products.
    """
    if batch < 0:
        raise ValueError(f"batch must be non-negative, got {batch}")
    return sum(2 * fan_in * fan_out * batch for fan_in, fan_out in spec.layer_shapes())


def training_flops(spec: MLPSpec, batch: int) -> int:
    """Floating-point operations of a forward plus backward pass over ``batch`` samples.

    The usual estimate: backward costs twice the forward (one matrix product for the
    gradient w.r.t. the weights, one for the gradient w.r.t. the activations), so the total
    is ``3 * forward_flops``.
    """
    return 3 * forward_flops(spec, batch)


def sgd_momentum(
    params: np.ndarray, velocity: np.ndarray, grad: np.ndarray, lr: float, momentum: float
) -> None:
    """One SGD-with-momentum update, in place, in float32 arithmetic.

    ``velocity = momentum * velocity + grad``, then ``params -= lr * velocity``. The
    operations are elementwise and in a fixed order, so the same inputs give bit-identical
    results on every replica and every run.
    """
    if params.dtype != DTYPE or velocity.dtype != DTYPE:
        raise TypeError(
            f"params and velocity must be float32, got {params.dtype} and {velocity.dtype}"
        )
    if params.shape != velocity.shape or params.shape != grad.shape:
        raise ValueError(
            f"params, velocity and grad shapes differ: {params.shape}, {velocity.shape}, "
            f"{grad.shape}"
        )
    grad32 = np.asarray(grad, dtype=DTYPE)
    np.multiply(velocity, DTYPE(momentum), out=velocity)
    np.add(velocity, grad32, out=velocity)
    params -= DTYPE(lr) * velocity


def accuracy(spec: MLPSpec, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """Fraction of samples (0 to 1) whose largest logit is their label."""
    _check_batch(spec, x, y)
    logits, _ = _forward(spec, params, x)
    return float(np.mean(np.argmax(logits, axis=1) == y))
