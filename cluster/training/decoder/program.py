"""A micro-batch of the decoder as a program every rank of a tensor group runs in step:
segments of :mod:`.forward` and :mod:`.backward` parts, each followed by the all-reduces
over the group that the next one reads.

1-D (Megatron, Shoeybi et al. 2019), vocabulary-parallel embedding, tied head and loss:
the embedding's lookups summed (forward); per layer the attention's and the FFN's
outputs summed (forward) and the gradients of their norms' outputs (backward), 4 a
layer; the loss's largest logit (a max), target logit and sum of exponentials per token
(forward); the gradient of the final norm's output (backward). These are the all-reduces
:func:`~cluster.training.tensor_parallel.layer_allreduces.layer_collectives` counts for
the decoder's workload (each :class:`Reduce` names its layer, phase, group and what it
sums as that does), so the real run's collectives are the ones its pricing counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from cluster.training.decoder import backward, forward
from cluster.training.decoder.rank_state import RankState
from cluster.training.tensor_parallel.layer_allreduces import Axis, Phase
from gcl.collectives import ReduceOp

Part = Callable[..., float | None]  # given the RankState (the first also the micro-batch)


@dataclass(frozen=True)
class Reduce:
    """An all-reduce (``op``) of scratch tensor ``name`` over each ``axis`` group, into
    :func:`~.rank_state.summed` ``name``: ``what`` of workload layer ``layer`` in
    ``phase``."""

    name: str
    layer: str
    phase: Phase
    what: str
    axis: Axis = Axis.TENSOR
    op: ReduceOp = ReduceOp.SUM


@dataclass(frozen=True)
class Segment:
    """Parts run one after another on every rank, then the all-reduces ``reduces``."""

    parts: tuple[Part, ...]
    reduces: tuple[Reduce, ...] = ()

    def run(self, state: RankState, *given: np.ndarray) -> float | None:
        """Every part on ``state`` (``given``: the micro-batch, for a first part that
        takes it); the loss, if a part computes it."""
        found = None
        for index, part in enumerate(self.parts):
            result = part(state, *given) if index == 0 and given else part(state)
            found = result if result is not None else found
        return found


_F, _B = Phase.FORWARD, Phase.BACKWARD


def program(layers: int) -> tuple[Segment, ...]:
    """The segments of one micro-batch of a decoder of ``layers`` layers, in order."""
    segments = [Segment((forward.embed,), (Reduce("emb", "embeddings", _F, "lookups"),))]
    previous: Part = forward.embedded
    for layer in range(layers):
        block = f"block{layer}"
        segments += [
            Segment((previous, partial(forward.attention, layer=layer)),
                    (Reduce(f"attn{layer}", f"{block}.attention", _F, "output"),)),
            Segment((partial(forward.attended, layer=layer), partial(forward.ffn, layer=layer)),
                    (Reduce(f"ffn{layer}", f"{block}.mlp", _F, "output"),))]
        previous = partial(forward.fed_forward, layer=layer)
    segments += [
        Segment((previous, forward.head),
                (Reduce("max", "loss", _F, "largest logit", op=ReduceOp.MAX),)),
        Segment((forward.loss_partials,), (Reduce("target", "loss", _F, "target logit"),
                                           Reduce("sumexp", "loss", _F, "sum of exponentials"))),
        Segment((backward.loss,), (Reduce("dhead", "head", _B, "input gradient"),))]
    previous = backward.headed_back
    for layer in reversed(range(layers)):
        block = f"block{layer}"
        segments += [
            Segment((previous, partial(backward.ffn_back, layer=layer)),
                    (Reduce(f"dffn{layer}", f"{block}.mlp", _B, "input gradient"),)),
            Segment((partial(backward.ffn_backed, layer=layer),
                     partial(backward.attention_back, layer=layer)),
                    (Reduce(f"dattn{layer}", f"{block}.attention", _B, "input gradient"),))]
        previous = partial(backward.attention_backed, layer=layer)
    return (*segments, Segment((previous, backward.embed_back)))
