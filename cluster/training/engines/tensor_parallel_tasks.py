"""What a card runs for the tensor-parallel MLP on its IPUs (given through ``Card.execute``).

Rank ``k`` of a replica's tensor group holds its flat vector of
:mod:`cluster.training.tensor_parallel.mlp_block` (``tp.params``), its velocity, and its
accumulated gradient padded to the group's largest rank (so one allreduce averages every
rank over the replicas). A micro-batch is three rounds around the tensor group's two
allreduces: :func:`forward_block` leaves the block's partial output, :func:`backward_block`
reads its sum and leaves the partial input gradient, :func:`end_micro` reads that sum.
Each task takes ``{ipu: (k, what that IPU needs)}``; everything stays on the IPU.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

from cluster.training.engines.stage_tasks import place_padded, update_weights
from cluster.training.numpy_mlp import DTYPE
from cluster.training.tensor_parallel.mlp_block import (
    MegatronSplit,
    RankParts,
    block_backward,
    block_forward,
    head_backward,
    head_forward,
    tail_forward_backward,
)
from ipu_node.store import TensorStore

PARAMS, VELOCITY = "tp.params", "tp.velocity"
GRAD, GRAD_MEAN = "tp.grad", "tp.grad.mean"
PARTIAL_OUT, OUT_SUM = "tp.out.partial", "tp.out"  # the forward allreduce's in and out
PARTIAL_IN, IN_SUM = "tp.din.partial", "tp.din"  # the backward allreduce's in and out
_BLOCK_IN, _HIDDEN = "tp.a", "tp.h"

T = TypeVar("T")
Work = dict[int, tuple[int, T]]  # IPU -> (its rank k in the tensor group, what it is given)


def _stashed(layer: int) -> str:
    return f"tp.x{layer}"


def _views(store: TensorStore, split: MegatronSplit, ipu: int,
           k: int) -> tuple[RankParts, RankParts]:
    """Rank ``k``'s parameters and accumulated gradient on ``ipu``, as layers."""
    return (split.parts(k, store.get(ipu, PARAMS)), split.parts(k, store.get(ipu, GRAD)))


def place_ranks(store: TensorStore, split: MegatronSplit,
                work: Work[tuple[np.ndarray, int]]) -> None:
    """Per IPU, ``(k, (its starting parameters, padded size))``: the parameters, zero
    velocity, a zero gradient of the padded size."""
    for ipu, (_k, (params, padded)) in work.items():
        place_padded(store, ipu, (PARAMS, VELOCITY, GRAD), params, padded)


def forward_block(store: TensorStore, split: MegatronSplit, work: Work[np.ndarray]) -> None:
    """Every rank, given the micro-batch's ``x``: the replicated head, its share of the
    block, the block's partial output left for the allreduce."""
    for ipu, (k, x) in work.items():
        params, _ = _views(store, split, ipu, k)
        a, inputs = head_forward(split, params, np.asarray(x, dtype=DTYPE))
        for layer, kept in enumerate(inputs):
            store.put(ipu, _stashed(layer), kept)
        h, partial = block_forward(params, a)
        store.put(ipu, _BLOCK_IN, a)
        store.put(ipu, _HIDDEN, h)
        store.put(ipu, PARTIAL_OUT, partial)


def backward_block(store: TensorStore, split: MegatronSplit,
                   work: Work[np.ndarray]) -> dict[int, float]:
    """Every rank, given the labels: from the summed block output the replicated tail,
    the loss, the gradients of the tail and of its share of the block; its partial input
    gradient left for the allreduce (when the block has layers below it). Rank 0's loss
    per IPU."""
    losses = {}
    _, fan_out = split.shapes[split.layer + 1]
    for ipu, (k, labels) in work.items():
        params, grads = _views(store, split, ipu, k)
        summed = store.get(ipu, OUT_SUM).reshape(-1, fan_out)
        loss, delta = tail_forward_backward(split, params, grads, summed, labels)
        a, h = store.get(ipu, _BLOCK_IN), store.get(ipu, _HIDDEN)
        partial = block_backward(params, grads, a, h, delta)
        for name in (PARTIAL_OUT, OUT_SUM, _HIDDEN):
            store.free(ipu, name)
        if split.layer > 0:
            store.put(ipu, PARTIAL_IN, partial)
        if k == 0:
            losses[ipu] = loss
    return losses


def end_micro(store: TensorStore, split: MegatronSplit, work: Work[int]) -> None:
    """Every rank: the replicated head's backward from the summed input gradient; given
    the step's micro-batch count on its last, the accumulated gradient divided by it."""
    fan_in, _ = split.shapes[split.layer]
    for ipu, (k, micro_batches) in work.items():
        a = store.get(ipu, _BLOCK_IN)
        if split.layer > 0:
            params, grads = _views(store, split, ipu, k)
            inputs = [store.get(ipu, _stashed(j)) for j in range(split.layer)]
            da = store.get(ipu, IN_SUM).reshape(-1, fan_in)
            head_backward(params, grads, inputs, a, da)
            for name in (PARTIAL_IN, IN_SUM, *map(_stashed, range(split.layer))):
                store.free(ipu, name)
        store.free(ipu, _BLOCK_IN)
        if micro_batches:
            store.get(ipu, GRAD)[:] /= DTYPE(micro_batches)


def apply_updates(store: TensorStore, split: MegatronSplit,
                  work: Work[tuple[float, float]]) -> dict[int, str]:
    """Every IPU, given ``(lr, momentum)``: its averaged gradient applied (SGD with
    momentum), the accumulated one zeroed; a digest of its new parameters."""
    return {ipu: update_weights(store, ipu, (PARAMS, VELOCITY, GRAD, GRAD_MEAN), lr, momentum)
            for ipu, (_k, (lr, momentum)) in work.items()}
