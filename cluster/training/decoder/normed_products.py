"""A layer norm and the product that follows it (``LN(x) @ W``) with the hidden
dimension split over a tensor group's ``t2`` axis, in one all-reduce each way.

Rank ``(i, j)`` holds ``x``'s hidden slice ``H_j`` and ``W[H_j, C_i]``. The norm needs
each token's mean and variance over all of ``H``, and the product sums over ``H``:

    LN(x) @ W = r ((x g) @ W - mu (g @ W)) + b @ W,  mu = mean(x), r = 1 / sqrt(var(x) + eps)

so the rank's partial sums of ``(x g) @ W``, ``g @ W``, ``b @ W``, ``sum x`` and
``sum x^2`` over ``H_j`` go in ONE all-reduce over ``t2`` (the product's, which 2-D
tensor parallelism runs anyway), the statistics riding along (2 values a token, 2 a
column). Backward, from the gradient ``dz`` of the product's columns ``C_i``: the norm's
backward needs ``sum_h g da xhat`` and ``sum_h g da`` over ``H``, which are
``sum_c dz (z - b @ W)`` and ``sum_c dz (g @ W)`` over ``C``, so they ride along the
all-reduce over ``t1`` of the partial ``dz @ W[H_j, C_i].T`` (2 values a token). With
``T2 = 1`` the first all-reduce is over a group of one (none runs), the second carries
the partial alone (the sums follow from it, every hidden value being on the IPU), and
this is the usual layer norm (its variance computed in one pass).
"""

from __future__ import annotations

import numpy as np

from cluster.training.decoder.numerics import NORM_EPSILON
from cluster.training.decoder.rank_state import RankState


def _cut(flat: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    return np.split(flat, np.cumsum(sizes)[:-1])


def product_partial(state: RankState, x: np.ndarray, norm: str,
                    weight: np.ndarray) -> np.ndarray:
    """Rank's packed partial sums over its hidden slice for ``LN(x) @ weight`` (norm
    ``norm``'s gain and bias), flat: what the ``t2`` all-reduce sums."""
    gain, bias = state.params[norm + ".g"], state.params[norm + ".b"]
    return np.concatenate([((x * gain) @ weight).ravel(), gain @ weight, bias @ weight,
                           x.sum(axis=-1).ravel(), (x * x).sum(axis=-1).ravel()])


def product(state: RankState, name: str, x: np.ndarray, norm: str, columns: int) -> np.ndarray:
    """From the summed partials of ``name``: ``LN(x) @ W`` for the rank's ``columns``
    (no bias), ``(batch, tokens, columns)``; what the backward needs kept as ``name.*``."""
    tokens = x.shape[:-1]
    count = int(np.prod(tokens))
    summed = state.take(name, (-1,))
    products, gain_w, bias_w, total, squares = _cut(
        summed, [count * columns, columns, columns, count, count])
    hidden = x.dtype.type(state.config.block.hidden)
    mean = (total / hidden).reshape(*tokens, 1)
    variance = (squares / hidden).reshape(*tokens, 1) - mean * mean
    inverse = 1 / np.sqrt(variance + x.dtype.type(NORM_EPSILON))
    z = inverse * (products.reshape(*tokens, columns) - mean * gain_w) + bias_w
    scratch = state.scratch
    scratch[name + ".xhat"], scratch[name + ".inv"] = (x - mean) * inverse, inverse
    scratch[name + ".gw"], scratch[name + ".bw"], scratch[name + ".z"] = gain_w, bias_w, z
    return z


def normed(state: RankState, name: str, norm: str) -> np.ndarray:
    """The norm's output on the rank's hidden slice (the product's input)."""
    return state.scratch[name + ".xhat"] * state.params[norm + ".g"] + state.params[norm + ".b"]


def gradient_partial(state: RankState, name: str, dz: np.ndarray,
                     weight: np.ndarray) -> np.ndarray:
    """Rank's packed partial, flat, of the gradient of the norm's output on its hidden
    slice and (with ``T2`` above 1) the two sums its backward needs: what the ``t1``
    all-reduce sums."""
    scratch = state.scratch
    gain_w, bias_w = scratch.pop(name + ".gw"), scratch.pop(name + ".bw")
    z = scratch.pop(name + ".z")
    d_normed = (dz @ weight.T).ravel()
    if state.split.t2 == 1:  # the whole hidden dimension is here: the sums come after
        return d_normed
    return np.concatenate([d_normed, (dz * gain_w).sum(axis=-1).ravel(),
                           (dz * (z - bias_w)).sum(axis=-1).ravel()])


def norm_backward(state: RankState, name: str, reduced: str, norm: str) -> np.ndarray:
    """From the summed partial ``reduced``: the norm's input gradient on the rank's
    hidden slice; its gain's and bias's gradients added to the rank's."""
    scratch = state.scratch
    xhat, inverse = scratch.pop(name + ".xhat"), scratch.pop(name + ".inv")
    gain = state.params[norm + ".g"]
    if state.split.t2 == 1:
        d_normed = state.take(reduced, xhat.shape)
        sum_dx = (d_normed * gain).sum(axis=-1)
        sum_dx_xhat = (d_normed * gain * xhat).sum(axis=-1)
    else:
        count = int(np.prod(xhat.shape[:-1]))
        d_normed, sum_dx, sum_dx_xhat = _cut(state.take(reduced, (-1,)),
                                             [xhat.size, count, count])
        d_normed = d_normed.reshape(xhat.shape)
    state.grads[norm + ".g"] += (d_normed * xhat).sum(axis=(0, 1))
    state.grads[norm + ".b"] += d_normed.sum(axis=(0, 1))
    hidden = xhat.dtype.type(state.config.block.hidden)
    shape = (*xhat.shape[:-1], 1)
    return inverse * (d_normed * gain - sum_dx.reshape(shape) / hidden
                      - xhat * sum_dx_xhat.reshape(shape) / hidden)
