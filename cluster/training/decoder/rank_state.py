"""What one rank of a tensor group works on while it runs the decoder's program: its
parameters and accumulated gradient (views of its flat vectors), and a scratch of named
activations kept between the program's segments (on a card: tensors on the IPU)."""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass

import numpy as np

from cluster.training.decoder.flat_params import RankSplit
from cluster.training.workloads.decoder import DecoderConfig

SUMMED = ".sum"  # a reduced tensor's name: its partial's, and this


def summed(name: str) -> str:
    """The name of the all-reduce of scratch tensor ``name``."""
    return name + SUMMED


@dataclass(frozen=True)
class RankState:
    """Rank ``split`` of ``config``'s tensor group: ``params`` and ``grads`` by block,
    ``scratch`` the activations between segments."""

    config: DecoderConfig
    split: RankSplit
    params: dict[str, np.ndarray]
    grads: dict[str, np.ndarray]
    scratch: MutableMapping[str, np.ndarray]

    def take(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """The all-reduce of ``name`` (what crossed the links arrives flat; over a group
        of one IPU, none ran: ``name`` itself) as ``shape``; both dropped from the
        scratch."""
        partial = self.scratch.pop(name)
        reduced = self.scratch.pop(summed(name), partial)  # a group of one: the partial
        return reduced.reshape(shape)
