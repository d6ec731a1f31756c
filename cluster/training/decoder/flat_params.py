"""The decoder's parameters as ONE flat float32 vector, whole or one tensor rank's share.

A rank of a ``T1 x T2`` tensor group (:class:`RankSplit`; the whole model is the rank of a
``1 x 1`` one) holds every parameter block of :data:`BLOCKS` cut along its ``t1`` axis into
``T1`` equal parts (part ``i``) and along its ``t2`` axis into ``T2`` (part ``j``); a block
with neither is replicated. 1-D (Megatron, Shoeybi et al. 2019): the token table by
vocabulary rows (vocabulary-parallel embedding and tied head), the queries', keys' and
values' weights and biases by heads, the attention's output projection by heads (its
rows), the FFN's first product by columns and its second by rows; the norms, the
positions and the biases added after an all-reduce replicated. 2-D adds ``T2`` over the
hidden dimension of every block that has one. The flat vector is the blocks in order
(embedding, each layer's, the final norm), each C-ordered; a gradient has the same layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from cluster.training.numpy_mlp import DTYPE
from cluster.training.tensor_parallel.layout import TensorParallel
from cluster.training.workloads.decoder import DecoderConfig

INIT_STD = 0.02  # of every weight and table, normal (GPT-2's); biases 0, norm gains 1

# name: (dimensions by symbol, the t1 axis, the t2 axis); symbols: V vocabulary, S tokens,
# H hidden, A heads, D head size, F the FFN's width. "{l}." prefixes a layer's blocks.
BLOCKS: dict[str, tuple[str, int | None, int | None]] = {
    "tok": ("VH", 0, 1), "pos": ("SH", None, 1),
    "{l}.ln1.g": ("H", None, 0), "{l}.ln1.b": ("H", None, 0),
    "{l}.qkv.w": ("H3AD", 2, 0), "{l}.qkv.b": ("3AD", 1, None),
    "{l}.out.w": ("ADH", 0, 2), "{l}.out.b": ("H", None, 0),
    "{l}.ln2.g": ("H", None, 0), "{l}.ln2.b": ("H", None, 0),
    "{l}.fc.w": ("HF", 1, 0), "{l}.fc.b": ("F", 0, None),
    "{l}.proj.w": ("FH", 0, 1), "{l}.proj.b": ("H", None, 0),
    "lnf.g": ("H", None, 0), "lnf.b": ("H", None, 0),
}


@dataclass(frozen=True)
class RankSplit:
    """Rank ``i`` along ``t1`` and ``j`` along ``t2`` of a ``t1 x t2`` tensor group."""

    t1: int = 1
    t2: int = 1
    i: int = 0
    j: int = 0

    @classmethod
    def of(cls, layout: TensorParallel, k: int) -> RankSplit:
        """IPU ``k`` of a replica's tensor group, ``T1`` innermost (``k = j T1 + i``)."""
        return cls(layout.t1, layout.t2, k % layout.t1, k // layout.t1)


WHOLE = RankSplit()


@dataclass(frozen=True)
class DecoderLayout:
    """Where each block of ``config``'s parameters lies in ``split``'s flat vector."""

    config: DecoderConfig
    split: RankSplit = WHOLE

    @cached_property
    def blocks(self) -> tuple[tuple[str, tuple[int, ...], tuple[slice, ...]], ...]:
        """Each block's name, its shape on this rank, and its slices of the whole block."""
        found = []
        for template, (symbols, t1_axis, t2_axis) in BLOCKS.items():
            names = ([template.format(l=layer) for layer in range(self.config.layers)]
                     if "{l}" in template else [template])
            whole = tuple(self._size(symbol) for symbol in symbols)
            cuts = [slice(None)] * len(whole)
            for axis, parts, index in ((t1_axis, self.split.t1, self.split.i),
                                       (t2_axis, self.split.t2, self.split.j)):
                if axis is not None:
                    if whole[axis] % parts:
                        raise ValueError(f"{self.config.name}'s {template} of {whole} does "
                                         f"not split into {parts} parts on axis {axis}")
                    share = whole[axis] // parts
                    cuts[axis] = slice(index * share, (index + 1) * share)
            shape = tuple(len(range(n)[cut]) for n, cut in zip(whole, cuts))
            found += [(name, shape, tuple(cuts)) for name in names]
        return tuple(found)

    def _size(self, symbol: str) -> int:
        block = self.config.block
        return {"V": self.config.vocabulary, "S": self.config.context, "H": block.hidden,
                "A": block.heads, "D": block.head_size, "F": block.ffn, "3": 3}[symbol]

    @property
    def size(self) -> int:
        """Values in the flat vector."""
        return sum(int(np.prod(shape)) for _, shape, _ in self.blocks)

    def views(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Each block as a view into ``flat`` (which may be padded past :attr:`size`)."""
        views, offset = {}, 0
        for name, shape, _ in self.blocks:
            count = int(np.prod(shape))
            views[name] = flat[offset:offset + count].reshape(shape)
            offset += count
        return views

    def cut(self, whole: np.ndarray) -> np.ndarray:
        """This rank's flat vector cut from the whole model's flat ``whole`` (its dtype)."""
        model = DecoderLayout(self.config).views(whole)
        flat = np.zeros(self.size, dtype=whole.dtype)
        for (name, _, cuts), view in zip(self.blocks, self.views(flat).values()):
            view[...] = model[name][cuts]
        return flat


def init_params(config: DecoderConfig, seed: int) -> np.ndarray:
    """The whole model's starting flat float32 vector: weights and tables drawn
    ``normal(0, 0.02)`` from ``np.random.default_rng(seed)`` block by block in order,
    biases 0, norm gains 1."""
    rng = np.random.default_rng(seed)
    layout = DecoderLayout(config)
    flat = np.zeros(layout.size, dtype=DTYPE)
    for name, view in layout.views(flat).items():
        if name.endswith(".g"):
            view[...] = 1
        elif not name.endswith(".b"):
            view[...] = rng.normal(0.0, INIT_STD, size=view.shape).astype(DTYPE)
    return flat
