"""The MLP's widest layer split by columns over a replica's IPUs: the arithmetic, in NumPy.

Layer ``s`` (the one with most parameters; ties: the first) computes ``x @ W + b`` with
``W`` of shape ``(fan_in, fan_out)``. Over ``K`` IPUs its columns are cut into ``K``
contiguous shards, as :func:`numpy.array_split` cuts them: the first ``fan_out % K``
shards take ``ceil(fan_out / K)`` columns, the others ``floor(fan_out / K)``; IPU ``k``
holds ``W[:, cols_k]`` and ``b[cols_k]``. Every other layer is whole on the replica's
first IPU. One micro-batch:

- forward: the first IPU runs the layers below ``s`` (the *head*); their output ``a``
  goes to every IPU, each computes ``a @ W[:, cols_k] + b[cols_k]`` (and the ReLU, unless
  ``s`` is the last layer); the slices come back to the first IPU, which concatenates
  them and runs the layers above ``s`` (the *tail*) and the loss;
- backward: the first IPU runs the tail's backward down to ``delta``, the loss's gradient
  with respect to layer ``s``'s output (before its ReLU); IPU ``k`` takes
  ``delta[:, cols_k]``, computes its ``dW``, ``db`` and a partial
  ``delta[:, cols_k] @ W[:, cols_k].T``; the partials summed are the gradient with respect
  to ``a``, which the first IPU takes through the head's backward.

Head and tail are :mod:`cluster.training.pipeline.stage_math`, operation for operation
:func:`cluster.training.numpy_mlp.loss_and_grad`; so is each shard's arithmetic, restricted to
its columns. Only the sum of the partials adds in another order than the whole matrix
product does: the sharded gradient equals ``loss_and_grad``'s to float32 rounding
(relative 1e-6), not bit for bit.

Flat layouts: the *rest* is the model's flat vector without layer ``s`` (every other
layer, in order, ``W`` row-major then ``b``); shard ``k`` is ``W[:, cols_k]`` row-major,
then ``b[cols_k]``. Between IPUs a layer's output or gradient travels *packed*: ``K``
blocks of ``(micro_batch, width)`` values, block ``k`` holding shard ``k``'s columns padded
with zeros to ``width = ceil(fan_out / K)`` (collectives move equal blocks).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from typing import cast

import numpy as np

from cluster.errors import SettingError
from cluster.training.numpy_mlp import DTYPE, MLPSpec
from cluster.training.pipeline import stage_math

Layers = stage_math.Layers


def widest_layer(spec: MLPSpec) -> int:
    """The layer with most parameters (weights and biases); ties: the first."""
    sizes = [fan_in * fan_out + fan_out for fan_in, fan_out in spec.layer_shapes()]
    return int(np.argmax(sizes))


def shard_columns(fan_out: int, shards: int) -> tuple[range, ...]:
    """Contiguous column ranges, one per shard: the first ``fan_out % shards`` take one
    column more than the others (as :func:`numpy.array_split`); a SettingError if there are
    fewer columns than shards."""
    if shards < 1:
        raise ValueError(f"a layer splits into 1 or more shards, not {shards}")
    if fan_out < shards:
        raise SettingError("hidden", "the widest layer has {fan_out} output columns: it "
                           "cannot be split over {shards} IPUs (widen it with {hidden}, or "
                           "use fewer IPUs)", fan_out=fan_out, shards=shards)
    base, extra = divmod(fan_out, shards)
    bounds = np.cumsum([0] + [base + (k < extra) for k in range(shards)])
    return tuple(range(int(a), int(b)) for a, b in pairwise(bounds))


@dataclass(frozen=True)
class ColumnSplit:
    """Layer ``layer`` of ``spec`` split into the column ranges ``columns``, one per IPU of
    a replica (IPU 0, the first, also holding every other layer)."""

    spec: MLPSpec
    layer: int
    columns: tuple[range, ...]

    @classmethod
    def of(cls, spec: MLPSpec, ipus: int) -> ColumnSplit:
        """The widest layer of ``spec`` split over ``ipus`` IPUs."""
        layer = widest_layer(spec)
        return cls(spec, layer, shard_columns(spec.layer_shapes()[layer][1], ipus))

    @property
    def shards(self) -> int:
        """IPUs the layer is split over (K)."""
        return len(self.columns)

    @property
    def fan_in(self) -> int:
        return self.spec.layer_shapes()[self.layer][0]

    @property
    def fan_out(self) -> int:
        return self.spec.layer_shapes()[self.layer][1]

    @property
    def width(self) -> int:
        """Columns of the widest shard (shard 0's): the packed block width."""
        return len(self.columns[0])

    @property
    def relu(self) -> bool:
        """Whether a ReLU follows the layer (every layer but the model's last)."""
        return self.layer < len(self.spec.layer_shapes()) - 1

    @property
    def offsets(self) -> tuple[int, int]:
        """The ``[start, stop)`` slice of the model's flat vector holding the layer."""
        return stage_math.stage_offsets(self.spec, range(self.layer, self.layer + 1))

    def shard_size(self, k: int) -> int:
        """Parameters of shard ``k``: its weight columns and biases."""
        return (self.fan_in + 1) * len(self.columns[k])

    @property
    def rest_size(self) -> int:
        """Parameters of every other layer (held by IPU 0)."""
        start, stop = self.offsets
        return self.spec.parameter_count - (stop - start)

    @property
    def ipu_parameters(self) -> tuple[int, ...]:
        """Parameters each IPU of a replica holds: IPU 0 its shard and the rest."""
        return tuple(self.shard_size(k) + (self.rest_size if k == 0 else 0)
                     for k in range(self.shards))

    def split(self, params: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """The rest and each shard of the model's flat vector ``params`` (copies)."""
        start, stop = self.offsets
        w = params[start:start + self.fan_in * self.fan_out].reshape(self.fan_in, self.fan_out)
        b = params[start + self.fan_in * self.fan_out:stop]
        rest = np.concatenate([params[:start], params[stop:]])
        return rest, [np.concatenate([w[:, cols].ravel(), b[cols]]) for cols in self.columns]

    def join(self, rest: np.ndarray, shards: list[np.ndarray]) -> np.ndarray:
        """The model's flat vector from its rest and shards: :meth:`split` undone."""
        start, _ = self.offsets
        layers = [self.shard_layer(k, shard) for k, shard in enumerate(shards)]
        w = np.concatenate([w for w, _ in layers], axis=1)
        b = np.concatenate([b for _, b in layers])
        return np.concatenate([rest[:start], w.ravel(), b, rest[start:]])

    def shard_layer(self, k: int, shard: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Views ``(W[:, cols_k], b[cols_k])`` into shard ``k``'s flat vector."""
        n = self.fan_in * len(self.columns[k])
        return shard[:n].reshape(self.fan_in, len(self.columns[k])), shard[n:]

    def head(self, rest: np.ndarray) -> Layers:
        """Views ``(W, b)`` of the layers below the split one, into the rest."""
        start, _ = self.offsets
        return stage_math.unflatten(self.spec, range(self.layer), rest[:start])

    def tail(self, rest: np.ndarray) -> Layers:
        """Views ``(W, b)`` of the layers above the split one, into the rest."""
        start, _ = self.offsets
        above = range(self.layer + 1, len(self.spec.layer_shapes()))
        return stage_math.unflatten(self.spec, above, rest[start:])

    def pack(self, columns: np.ndarray) -> np.ndarray:
        """``(micro_batch, fan_out)`` values as ``K`` zero-padded blocks of
        ``(micro_batch, width)``, block ``k`` shard ``k``'s columns, flat."""
        packed = np.zeros((self.shards, columns.shape[0], self.width), dtype=columns.dtype)
        for k, cols in enumerate(self.columns):
            packed[k, :, :len(cols)] = columns[:, cols.start:cols.stop]
        return packed.ravel()

    def unpack(self, packed: np.ndarray) -> np.ndarray:
        """The ``(micro_batch, fan_out)`` values of ``K`` packed blocks: :meth:`pack` undone."""
        blocks = packed.reshape(self.shards, -1, self.width)
        return np.concatenate([blocks[k, :, :len(cols)] for k, cols in enumerate(self.columns)],
                              axis=1)


def head_forward(split: ColumnSplit, rest: np.ndarray,
                 x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """IPU 0's forward below the split layer: the layer's input ``a`` and each head
    layer's input (kept for the backward); ``a`` is ``x`` when the split layer is the
    first."""
    if split.layer == 0:
        return x, []
    return stage_math.forward(split.head(rest), x, ends_model=False)


def shard_forward(split: ColumnSplit, k: int, shard: np.ndarray, a: np.ndarray) -> np.ndarray:
    """IPU ``k``'s columns of the split layer's output, ``(micro_batch, len(cols_k))``."""
    w, b = split.shard_layer(k, shard)
    out = a @ w + b
    return np.maximum(out, 0) if split.relu else out


def tail_forward_backward(split: ColumnSplit, rest: np.ndarray, out: np.ndarray,
                          y: np.ndarray, grad_rest: np.ndarray) -> tuple[float, np.ndarray]:
    """IPU 0 above the split layer, given its whole output ``out``: the loss, the tail's
    weight gradients (written into ``grad_rest``, a vector like the rest) and ``delta``,
    the loss's gradient with respect to the split layer's output before its ReLU."""
    tail = split.tail(rest)
    logits, inputs = stage_math.forward(tail, out, ends_model=True) if tail else (out, [])
    loss, delta = stage_math.loss_gradient(logits, y)
    if not tail:
        return loss, delta
    # a run of layers not starting the model returns its input's gradient, never None
    return loss, cast(np.ndarray, stage_math.backward(tail, inputs, delta,
                                                      split.tail(grad_rest),
                                                      starts_model=False))


def shard_backward(split: ColumnSplit, k: int, shard: np.ndarray, a: np.ndarray,
                   delta_k: np.ndarray, grad_shard: np.ndarray) -> np.ndarray | None:
    """IPU ``k``'s backward: ``dW[:, cols_k]`` and ``db[cols_k]`` written into
    ``grad_shard`` (a vector like the shard); its partial gradient with respect to the
    layer's input, ``delta_k @ W[:, cols_k].T`` (None when the layer is the first)."""
    w, _ = split.shard_layer(k, shard)
    dw, db = split.shard_layer(k, grad_shard)
    np.matmul(a.T, delta_k, out=dw)
    np.sum(delta_k, axis=0, out=db)
    return delta_k @ w.T if split.layer > 0 else None


def head_backward(split: ColumnSplit, rest: np.ndarray, inputs: list[np.ndarray],
                  a: np.ndarray, partial_sum: np.ndarray, grad_rest: np.ndarray) -> None:
    """IPU 0's backward below the split layer, from the partials' sum: through the ReLU
    that produced ``a``, then the head's layers (gradients written into ``grad_rest``)."""
    if split.layer == 0:
        return
    delta = partial_sum * (a > 0)
    stage_math.backward(split.head(rest), inputs, delta, split.head(grad_rest),
                        starts_model=True)


def sharded_loss_and_grad(spec: MLPSpec, ipus: int, params: np.ndarray, x: np.ndarray,
                          y: np.ndarray) -> tuple[float, np.ndarray]:
    """:func:`cluster.training.numpy_mlp.loss_and_grad` computed as a replica of ``ipus`` IPUs
    computes it, in one process: the exchanges are :meth:`ColumnSplit.pack`,
    :meth:`~ColumnSplit.unpack` and the partials summed in shard order. The gradient is a
    new flat vector in the model's layout."""
    split = ColumnSplit.of(spec, ipus)
    rest, shards = split.split(params.astype(DTYPE, copy=False))
    a, inputs = head_forward(split, rest, np.asarray(x, dtype=DTYPE))
    slices = [shard_forward(split, k, shard, a) for k, shard in enumerate(shards)]
    gathered = split.pack(np.concatenate(slices, axis=1))  # what the all-gather delivers
    grad_rest = np.zeros_like(rest)
    loss, delta = tail_forward_backward(split, rest, split.unpack(gathered), y, grad_rest)
    blocks = split.pack(delta).reshape(split.shards, len(y), split.width)
    grad_shards = [np.empty_like(shard) for shard in shards]
    partial_sum = None
    for k, shard in enumerate(shards):
        partial = shard_backward(split, k, shard, a, blocks[k, :, :len(split.columns[k])],
                                 grad_shards[k])
        if partial is not None:  # what the allreduce sums, here in shard order
            partial_sum = partial if partial_sum is None else partial_sum + partial
    if partial_sum is not None:
        head_backward(split, rest, inputs, a, partial_sum, grad_rest)
    return loss, split.join(grad_rest, grad_shards)
