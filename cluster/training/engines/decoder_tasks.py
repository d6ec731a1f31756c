"""What a card runs for the decoder on its IPUs (given through ``Card.execute``).

Rank ``k`` of a replica's tensor group holds its flat vector of
:mod:`cluster.training.decoder.flat_params` (``dec.params``), its velocity, and its accumulated
gradient padded to the group's largest rank. :func:`run_segment` runs one segment of the
decoder's program (:mod:`cluster.training.decoder.program`) on it, its activations kept
on the IPU as tensors ``dec.s.<name>`` between segments; the engine all-reduces the
partials a segment leaves there over the emulated links. Each task takes
``{ipu: (k, what that IPU needs)}``.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from cluster.training.decoder.flat_params import DecoderLayout, RankSplit
from cluster.training.decoder.program import Segment, program
from cluster.training.decoder.rank_state import RankState
from cluster.training.engines.stage_tasks import place_padded, update_weights
from cluster.training.numpy_mlp import DTYPE
from cluster.training.tensor_parallel.layout import TensorParallel
from cluster.training.workloads.decoder import DecoderConfig
from ipu_node.store import TensorStore

PARAMS, VELOCITY = "dec.params", "dec.velocity"
GRAD, GRAD_MEAN = "dec.grad", "dec.grad.mean"
SCRATCH = "dec.s."  # the prefix of a rank's activations on its IPU

Work = dict[int, tuple[int, tuple]]  # IPU -> (its rank k in the tensor group, its share)


@dataclass(frozen=True)
class DecoderSplit:
    """The decoder every replica trains and its tensor group's layout."""

    config: DecoderConfig
    layout: TensorParallel

    def rank(self, k: int) -> DecoderLayout:
        """Rank ``k``'s parameter layout."""
        return DecoderLayout(self.config, RankSplit.of(self.layout, k))


class IpuScratch(MutableMapping[str, np.ndarray]):
    """An IPU's tensors named ``dec.s.<name>``, by ``name``: a rank's scratch."""

    def __init__(self, store: TensorStore, ipu: int) -> None:
        self.store, self.ipu = store, ipu

    def __getitem__(self, name: str) -> np.ndarray:
        found = self.store.find(self.ipu, SCRATCH + name)
        if found is None:
            raise KeyError(name)
        return found

    def __setitem__(self, name: str, value: np.ndarray) -> None:
        self.store.put(self.ipu, SCRATCH + name, np.asarray(value))

    def __delitem__(self, name: str) -> None:
        self.store.free(self.ipu, SCRATCH + name)

    def __iter__(self) -> Iterator[str]:
        held = [name for name in self.store.tensors[self.ipu] if name.startswith(SCRATCH)]
        return (name[len(SCRATCH):] for name in held)

    def __len__(self) -> int:
        return sum(1 for _ in self)


@lru_cache(maxsize=4)
def _program(layers: int, two_d: bool) -> tuple[Segment, ...]:
    return program(layers, two_d)


def place_ranks(store: TensorStore, split: DecoderSplit, work: Work) -> None:
    """Per IPU, ``(k, (its starting parameters, padded size))``: the parameters, zero
    velocity, a zero gradient of the padded size."""
    for ipu, (_k, (params, padded)) in work.items():
        place_padded(store, ipu, (PARAMS, VELOCITY, GRAD), params, padded)


def run_segment(store: TensorStore, split: DecoderSplit, work: Work) -> dict[int, float]:
    """Per IPU, ``(k, (segment index, the micro-batch or (), micro-batches))``: that
    segment of the program on rank ``k``; given the step's micro-batch count (the last
    segment of its last micro-batch), the accumulated gradient divided by it. The loss,
    per IPU of rank 0, if the segment computes it."""
    losses = {}
    for ipu, (k, (index, batch, micro_batches)) in work.items():
        rank = split.rank(k)
        state = RankState(split.config, rank.split, rank.views(store.get(ipu, PARAMS)),
                          rank.views(store.get(ipu, GRAD)), IpuScratch(store, ipu))
        loss = _program(split.config.layers, split.layout.two_d)[index].run(state, *batch)
        if micro_batches:
            store.get(ipu, GRAD)[:] /= DTYPE(micro_batches)
        if loss is not None and k == 0:
            losses[ipu] = loss
    return losses


def apply_updates(store: TensorStore, split: DecoderSplit,
                  work: dict[int, tuple[int, tuple[float, float]]]) -> dict[int, str]:
    """Every IPU, given ``(lr, momentum)``: its averaged gradient applied (SGD with
    momentum), the accumulated one zeroed; a digest of its new parameters."""
    return {ipu: update_weights(store, ipu, (PARAMS, VELOCITY, GRAD, GRAD_MEAN), lr, momentum)
            for ipu, (_k, (lr, momentum)) in work.items()}
