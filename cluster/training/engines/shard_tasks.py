"""What a card runs for the sharded replicas on its IPUs (given through ``Card.execute``).

IPU ``k`` of a replica holds shard ``k`` of the widest layer; IPU 0 also holds every other
layer. Each IPU keeps one flat vector of its parameters (``shard.params``: its shard, then,
on IPU 0, the rest: :mod:`cluster.training.sharding.columns`), its velocity, and its
accumulated gradient, padded to the replica's largest (IPU 0's) so that one allreduce
averages every position over the replicas. A micro-batch is five rounds, the exchanges of
:mod:`cluster.training.sharding.exchange` between them;
each task takes ``{ipu: (k, what that IPU needs)}``, reads what the last exchange left,
computes, and leaves the next exchange's input (and, on the IPUs receiving a broadcast, a
buffer for it). Everything on an IPU is accounted in its memory.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

from cluster.training.engines.stage_tasks import place_padded, update_weights
from cluster.training.numpy_mlp import DTYPE
from cluster.training.sharding.columns import (
    ColumnSplit,
    head_backward,
    head_forward,
    shard_backward,
    shard_forward,
    tail_forward_backward,
)
from cluster.training.sharding.exchange import (
    DELTA,
    DELTA_COLUMNS,
    GATHERED,
    LAYER_IN,
    OUT,
    PARTIAL,
    PARTIAL_SUM,
)
from ipu_node.store import TensorStore

PARAMS, VELOCITY = "shard.params", "shard.velocity"
GRAD, GRAD_MEAN = "shard.grad", "shard.grad.mean"

T = TypeVar("T")
Work = dict[int, tuple[int, T]]  # IPU -> (its position k in the replica, what it is given)


def _stashed(layer: int) -> str:
    return f"shard.h{layer}"


def _rows(tensor: np.ndarray, width: int) -> np.ndarray:
    """``tensor`` as rows of ``width`` values: what crossed a link arrives flat."""
    return tensor.reshape(-1, width)


def _parts(split: ColumnSplit, k: int, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Views of shard ``k`` and of the rest (empty but on IPU 0) in an IPU's flat vector."""
    size = split.shard_size(k)
    return flat[:size], flat[size:size + (split.rest_size if k == 0 else 0)]


def place_shards(store: TensorStore, split: ColumnSplit,
                 work: Work[tuple[np.ndarray, int]]) -> None:
    """Per IPU, ``(k, (its starting parameters, padded size))``: the parameters, zero
    velocity, a zero gradient of the padded size."""
    for ipu, (_k, (params, padded)) in work.items():
        place_padded(store, ipu, (PARAMS, VELOCITY, GRAD), params, padded)


def begin_micro(store: TensorStore, split: ColumnSplit, work: Work[np.ndarray | int]) -> None:
    """IPU 0, given the host's ``x``: the head's forward, its inputs kept, the split
    layer's input left for the broadcast. The others, given the micro-batch size: a
    buffer the broadcast lands in."""
    for ipu, (_k, given) in work.items():
        if not isinstance(given, np.ndarray):
            store.put(ipu, LAYER_IN, np.zeros((given, split.fan_in), dtype=DTYPE))
            continue
        _, rest = _parts(split, 0, store.get(ipu, PARAMS))
        a, inputs = head_forward(split, rest, np.array(given, dtype=DTYPE))
        for layer, kept in enumerate(inputs):
            store.put(ipu, _stashed(layer), kept)
        store.put(ipu, LAYER_IN, a)


def forward_shard(store: TensorStore, split: ColumnSplit, work: Work[None]) -> None:
    """Every IPU: its columns of the split layer's output, padded to the block width, for
    the all-gather."""
    for ipu, (k, _) in work.items():
        shard, _ = _parts(split, k, store.get(ipu, PARAMS))
        a = _rows(store.get(ipu, LAYER_IN), split.fan_in)
        out = np.zeros((a.shape[0], split.width), dtype=DTYPE)
        out[:, :len(split.columns[k])] = shard_forward(split, k, shard, a)
        store.put(ipu, OUT, out)


def finish_forward(store: TensorStore, split: ColumnSplit,
                   work: Work[np.ndarray | None]) -> dict[int, float]:
    """IPU 0, given the labels: the gathered output through the tail, the loss, the
    tail's backward (its gradient added to the IPU's), the output's gradient packed for
    the reduce-scatter. The others: zeros of that size (they add nothing to it). Returns
    IPU 0's losses."""
    losses = {}
    for ipu, (_k, labels) in work.items():
        gathered = store.get(ipu, GATHERED)
        store.free(ipu, OUT)
        store.free(ipu, GATHERED)
        if labels is None:
            store.put(ipu, DELTA, np.zeros(gathered.size, dtype=DTYPE))
            continue
        _, rest = _parts(split, 0, store.get(ipu, PARAMS))
        _, grad_rest = _parts(split, 0, store.get(ipu, GRAD))
        tail_grad = np.zeros_like(rest)
        loss, delta = tail_forward_backward(split, rest, split.unpack(gathered), labels,
                                            tail_grad)
        start, _ = split.offsets
        grad_rest[start:] += tail_grad[start:]
        store.put(ipu, DELTA, split.pack(delta))
        losses[ipu] = loss
    return losses


def backward_shard(store: TensorStore, split: ColumnSplit, work: Work[None]) -> None:
    """Every IPU, from its columns of the output's gradient: its shard's gradient added to
    the IPU's, and its partial gradient of the layer's input for the allreduce."""
    for ipu, (k, _) in work.items():
        shard, _ = _parts(split, k, store.get(ipu, PARAMS))
        delta = _rows(store.get(ipu, DELTA_COLUMNS), split.width)[:, :len(split.columns[k])]
        grad = np.empty_like(shard)
        partial = shard_backward(split, k, shard, _rows(store.get(ipu, LAYER_IN), split.fan_in),
                                 delta, grad)
        store.get(ipu, GRAD)[:grad.size] += grad
        store.free(ipu, DELTA)
        store.free(ipu, DELTA_COLUMNS)
        if partial is not None:
            store.put(ipu, PARTIAL, partial)
        if k != 0:
            store.free(ipu, LAYER_IN)


def end_micro(store: TensorStore, split: ColumnSplit, work: Work[int]) -> None:
    """IPU 0: the partials' sum through the head's backward (its gradient added). Every
    IPU, given the step's micro-batch count on its last: the accumulated gradient divided
    by it (a mean over the micro-batches)."""
    for ipu, (k, micro_batches) in work.items():
        if k == 0:
            _end_head(store, split, ipu)
        store.free(ipu, PARTIAL)
        store.free(ipu, PARTIAL_SUM)
        if micro_batches:
            store.get(ipu, GRAD)[:] /= DTYPE(micro_batches)


def _end_head(store: TensorStore, split: ColumnSplit, ipu: int) -> None:
    """IPU 0's backward below the split layer; frees what the micro-batch kept."""
    a = _rows(store.get(ipu, LAYER_IN), split.fan_in)
    if split.layer > 0:
        _, rest = _parts(split, 0, store.get(ipu, PARAMS))
        _, grad_rest = _parts(split, 0, store.get(ipu, GRAD))
        inputs = [store.get(ipu, _stashed(layer)) for layer in range(split.layer)]
        head_grad = np.zeros_like(rest)
        head_backward(split, rest, inputs, a,
                      _rows(store.get(ipu, PARTIAL_SUM), split.fan_in), head_grad)
        start, _ = split.offsets
        grad_rest[:start] += head_grad[:start]
    for layer in range(split.layer):
        store.free(ipu, _stashed(layer))
    store.free(ipu, LAYER_IN)


def apply_updates(store: TensorStore, split: ColumnSplit,
                  work: Work[tuple[float, float]]) -> dict[int, str]:
    """Every IPU, given ``(lr, momentum)``: its averaged gradient applied (SGD with
    momentum), the accumulated one zeroed; returns a digest of its new parameters."""
    return {ipu: update_weights(store, ipu, (PARAMS, VELOCITY, GRAD, GRAD_MEAN), lr, momentum)
            for ipu, (_k, (lr, momentum)) in work.items()}
