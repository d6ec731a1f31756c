"""A micro-batch of the decoder as a program every rank of a tensor group runs in step:
segments of :mod:`.forward` and :mod:`.backward` parts, each followed by the all-reduces
that the next one reads.

1-D (Megatron, Shoeybi et al. 2019), vocabulary-parallel embedding, tied head and loss,
over the whole group: the embedding's lookups summed (forward); per layer the
attention's and the FFN's outputs summed (forward) and the gradients of their norms'
outputs (backward), 4 a layer; the loss's largest logit (a max), target logit and sum of
exponentials per token (forward); the gradient of the final norm's output (backward).

2-D (``T1 x T2``, as Graphcore's GPT-3): the same over each ``t1`` group, and over each
``t2`` group the partial sums of the first products (queries, keys and values; the FFN's
first; the logits) forward and the gradient of what they feed (the heads' context; GELU's
output) backward: 8 a layer, 1 for the embedding, 5 for the head and loss. With 1-D the
``t2`` ones are over groups of one IPU: none runs.

Each :class:`Reduce` names its workload layer, phase, group and what it sums as
:func:`~cluster.training.tensor_parallel.layer_allreduces.layer_collectives` does, so the
real run's all-reduces are the ones its pricing counts; the bytes differ a little
(:mod:`.normed_products`: the norms' statistics ride along; the attention's backward
``t2`` all-reduce sums the context's gradient, a third of the queries', keys' and
values' the pricing assumes).
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
    axis: Axis
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


def _layer_forward(layer: int, previous: Part, t1: Axis) -> list[Segment]:
    """Layer ``layer``'s forward segments, the first finishing with ``previous``."""
    attention, mlp = f"block{layer}.attention", f"block{layer}.mlp"
    return [
        Segment((previous, partial(forward.attention, layer=layer)),
                (Reduce(f"qkv{layer}", attention, _F, "first products' partial sums", Axis.T2),)),
        Segment((partial(forward.attention_heads, layer=layer),),
                (Reduce(f"attn{layer}", attention, _F, "output", t1),)),
        Segment((partial(forward.attended, layer=layer), partial(forward.ffn, layer=layer)),
                (Reduce(f"fc{layer}", mlp, _F, "first products' partial sums", Axis.T2),)),
        Segment((partial(forward.ffn_columns, layer=layer),),
                (Reduce(f"ffn{layer}", mlp, _F, "output", t1),))]


def _layer_backward(layer: int, previous: Part, t1: Axis) -> list[Segment]:
    """Layer ``layer``'s backward segments, the first finishing with ``previous``."""
    attention, mlp = f"block{layer}.attention", f"block{layer}.mlp"
    return [
        Segment((previous, partial(backward.ffn_back, layer=layer)),
                (Reduce(f"dproj{layer}", mlp, _B, "first products' output gradient",
                        Axis.T2),)),
        Segment((partial(backward.ffn_columns_back, layer=layer),),
                (Reduce(f"dffn{layer}", mlp, _B, "input gradient", t1),)),
        Segment((partial(backward.ffn_backed, layer=layer),
                 partial(backward.attention_back, layer=layer)),
                (Reduce(f"dout{layer}", attention, _B, "first products' output gradient",
                        Axis.T2),)),
        Segment((partial(backward.attention_heads_back, layer=layer),),
                (Reduce(f"dattn{layer}", attention, _B, "input gradient", t1),))]


def program(layers: int, two_d: bool = False) -> tuple[Segment, ...]:
    """The segments of one micro-batch of a decoder of ``layers`` layers, in order; the
    ``t1``-type all-reduces over the whole group (:attr:`Axis.TENSOR`) unless ``two_d``."""
    t1 = Axis.T1 if two_d else Axis.TENSOR
    segments = [Segment((forward.embed,), (Reduce("emb", "embeddings", _F, "lookups", t1),))]
    previous: Part = forward.embedded
    for layer in range(layers):
        segments += _layer_forward(layer, previous, t1)
        previous = partial(forward.fed_forward, layer=layer)
    segments += [
        Segment((previous, forward.head),
                (Reduce("head", "head", _F, "logits' partial sums", Axis.T2),)),
        Segment((forward.logits,),
                (Reduce("max", "loss", _F, "largest logit", t1, ReduceOp.MAX),)),
        Segment((forward.loss_partials,),
                (Reduce("target", "loss", _F, "target logit", t1),
                 Reduce("sumexp", "loss", _F, "sum of exponentials", t1))),
        Segment((backward.loss,), (Reduce("dhead", "head", _B, "input gradient", t1),))]
    previous = backward.headed_back
    for layer in reversed(range(layers)):
        segments += _layer_backward(layer, previous, t1)
        previous = partial(backward.attention_backed, layer=layer)
    return (*segments, Segment((previous, backward.embed_back)))
