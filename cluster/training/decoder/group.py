"""The decoder's program run in this process: the whole model (a group of one rank) for
single-process training and gradient checks, or every rank of a tensor group in step
with the all-reduces done here in NumPy (what the engines do over the emulated links)."""

from __future__ import annotations

import numpy as np

from cluster.training.decoder.flat_params import DecoderLayout, RankSplit
from cluster.training.decoder.program import Reduce, program
from cluster.training.decoder.rank_state import RankState, summed
from cluster.training.tensor_parallel.layer_allreduces import Axis
from cluster.training.tensor_parallel.layout import TensorParallel
from cluster.training.workloads.decoder import DecoderConfig
from gcl.collectives import ReduceOp


def axis_ranks(layout: TensorParallel, axis: Axis) -> list[list[int]]:
    """The ranks (``k = j T1 + i``) of each ``axis`` group of one tensor group."""
    grid = np.arange(layout.size).reshape(layout.t2, layout.t1)
    groups = {Axis.TENSOR: [grid.ravel()], Axis.T1: list(grid), Axis.T2: list(grid.T)}[axis]
    return [group.tolist() for group in groups]


def _all_reduce(states: list[RankState], layout: TensorParallel, reduce: Reduce) -> None:
    """``reduce`` over the ranks' scratches, each of its groups apart."""
    combine = np.maximum if reduce.op is ReduceOp.MAX else np.add
    for ranks in axis_ranks(layout, reduce.axis):
        parts = [states[k].scratch[reduce.name] for k in ranks]
        total = parts[0]
        for part in parts[1:]:
            total = combine(total, part)
        for k in ranks:
            states[k].scratch[summed(reduce.name)] = total.copy()


def group_loss_and_grads(config: DecoderConfig, layout: TensorParallel, whole: np.ndarray,
                         tokens: np.ndarray, labels: np.ndarray
                         ) -> tuple[float, list[np.ndarray]]:
    """Every rank of a ``layout`` group on one micro-batch from the whole model's
    ``whole`` parameters (their dtype): the loss and each rank's gradient (its layout)."""
    states, grads = [], []
    for k in range(layout.size):
        rank = DecoderLayout(config, RankSplit.of(layout, k))
        grads.append(np.zeros(rank.size, dtype=whole.dtype))
        states.append(RankState(config, rank.split, rank.views(rank.cut(whole)),
                                rank.views(grads[-1]), {}))
    loss = None
    for index, segment in enumerate(program(config.layers, layout.two_d)):
        given = (tokens, labels) if index == 0 else ()
        losses = [segment.run(state, *given) for state in states]
        loss = losses[0] if losses[0] is not None else loss
        for reduce in segment.reduces:
            _all_reduce(states, layout, reduce)
    assert loss is not None
    return loss, grads


def loss_and_grad(config: DecoderConfig, params: np.ndarray, tokens: np.ndarray,
                  labels: np.ndarray) -> tuple[float, np.ndarray]:
    """The whole decoder's mean loss over the micro-batch's tokens and its gradient (the
    layout and dtype of ``params``: float32 in training, float64 for gradient checks)."""
    loss, (grad,) = group_loss_and_grads(config, TensorParallel(), params, tokens, labels)
    return loss, grad
