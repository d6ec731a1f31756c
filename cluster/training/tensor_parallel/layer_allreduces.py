"""The collectives a tensor-parallel replica runs for one micro-batch, layer by layer.

Each is an all-reduce over a group of the replica's tensor group (:class:`Axis`): the
whole group with 1-D, its ``t1`` or ``t2`` groups with 2-D. Per layer, with ``n`` the
layer's ``tokens x hidden`` values per sample (:class:`~.TensorShape`), in the partials'
number format unless said:

1-D (Megatron, Shoeybi et al. 2019; Graphcore's PopXL GPT and GPT-J: "four all-reduce
operations" per layer, one for the embedding, four for the head):

- attention and FFN: the forward's all-reduce of the output of their row-parallel
  product (``n``), and the backward's of the gradient of their column-parallel product's
  input (``n``): 4 a transformer layer;
- embedding: the forward's all-reduce of the vocabulary-split lookups (``n``);
- head: the backward's all-reduce of its input's gradient (``n``); loss (vocabulary-
  parallel cross-entropy): the forward's all-reduces of each token's largest logit, its
  target's logit and its sum of exponentials (``tokens`` float32 values each): 4 in all.

2-D (``T1 x T2``, Graphcore's GPT-3 175B PopXL recipe, whose README counts 8 all-reduces
a layer, 1 for the embedding and 5 for the head; which ones, and their sizes, are not
published: assumed here are those of splitting each product's weight over both groups,
the activations' hidden dimension over ``t2`` and the inner one over ``t1``):

- attention and FFN: forward, the first products' (queries, keys and values; the FFN's
  first) partial sums over ``t2`` (``tokens x inner / T1``: their input is split over
  ``t2``, their output over ``t1``) and the second product's output over ``t1``
  (``n / T2``); backward, the gradient of the first products' output over ``t2`` and of
  the layer's input over ``t1``, the same sizes: 8 a transformer layer (the norms'
  statistics over ``t2``, a few bytes a token, not counted);
- embedding: the table split by vocabulary over ``t1`` and hidden over ``t2``: the
  lookups summed over ``t1`` (``n / T2``);
- head: forward, the logits' partial sums over ``t2`` (``tokens x V / T1``), backward its
  input's gradient over ``t1`` (``n / T2``); loss: each token's largest logit, target
  logit and sum of exponentials over ``t1`` (``tokens`` float32 each): 5 in all.

A mixture-of-experts layer (the ``experts`` role) runs all-gathers and reduce-scatters
instead, over the whole tensor group (and ``t2`` with 2-D): :mod:`.expert_split`.

A collective over a group of one IPU (``T1`` or ``T2`` of 1) is none.

With recomputation every layer's forward runs again in the backward pass (as the step's
compute prices it), and so do its forward all-reduces (``recompute``; Graphcore's counts
leave them out).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from cluster.model.text_enum import TextEnum
from cluster.training.tensor_parallel.expert_split import expert_collectives
from cluster.training.tensor_parallel.layout import TensorParallel
from cluster.training.workloads.layers import DType, Layer, Workload
from cluster.training.workloads.tensor_shape import TensorRole
from gcl.collectives import CollectiveName


class Axis(TextEnum):
    """The group of a replica's tensor group an all-reduce runs over."""

    TENSOR = "tensor"  # 1-D: the whole group
    T1 = "t1"  # 2-D: the IPUs splitting the heads and the FFN (consecutive)
    T2 = "t2"  # 2-D: the IPUs splitting the hidden dimension


class Phase(TextEnum):
    """When in a micro-batch's passes an all-reduce runs."""

    FORWARD = "forward"
    BACKWARD = "backward"
    RECOMPUTE = "recompute"  # a forward's again, in the backward pass


@dataclass(frozen=True)
class TensorCollective:
    """One collective of layer ``layer`` (an all-reduce unless ``collective`` says
    otherwise): ``what`` it carries, over ``axis``, in ``phase``, ``values`` per sample
    times ``factor`` (an MoE layer's capacity factor) in ``dtype``."""

    layer: str
    role: TensorRole
    phase: Phase
    axis: Axis
    what: str
    values: int
    dtype: DType
    collective: CollectiveName = CollectiveName.ALLREDUCE
    factor: float = 1.0

    def nbytes(self, micro_batch: int) -> int:
        """Bytes of the buffer each IPU holds whole for a micro-batch of ``micro_batch``
        samples: what an all-reduce sums, an all-gather's result, a reduce-scatter's
        input (rounded up)."""
        whole = micro_batch * self.values * self.dtype.itemsize
        return whole if self.factor == 1.0 else math.ceil(whole * self.factor)


F32 = DType.FLOAT32
_FORWARD, _BACKWARD = Phase.FORWARD, Phase.BACKWARD


def _one_d(layer: Layer, p: DType) -> list[tuple[Phase, Axis, str, int, DType]]:
    """(phase, axis, what, values, dtype) of each 1-D all-reduce of ``layer``."""
    assert layer.tensor is not None
    n, tokens, role = layer.tensor.activation_values, layer.tensor.tokens, layer.tensor.role
    axis = Axis.TENSOR
    if role in (TensorRole.ATTENTION, TensorRole.FFN):
        return [(_FORWARD, axis, "output", n, p), (_BACKWARD, axis, "input gradient", n, p)]
    if role is TensorRole.EMBEDDING:
        return [(_FORWARD, axis, "lookups", n, p)]
    if role is TensorRole.HEAD:
        return [(_BACKWARD, axis, "input gradient", n, p)]
    return [(_FORWARD, axis, what, tokens, F32)
            for what in ("largest logit", "target logit", "sum of exponentials")]


def _two_d(layer: Layer, layout: TensorParallel,
           p: DType) -> list[tuple[Phase, Axis, str, int, DType]]:
    """(phase, axis, what, values, dtype) of each 2-D all-reduce of ``layer``."""
    assert layer.tensor is not None
    shape = layer.tensor
    tokens, role = shape.tokens, shape.role
    split = tokens * -(-shape.hidden // layout.t2)  # n / T2
    wide = tokens * -(-shape.inner // layout.t1)  # the first products' share of t1
    if role in (TensorRole.ATTENTION, TensorRole.FFN):
        return [(_FORWARD, Axis.T2, "first products' partial sums", wide, p),
                (_FORWARD, Axis.T1, "output", split, p),
                (_BACKWARD, Axis.T2, "first products' output gradient", wide, p),
                (_BACKWARD, Axis.T1, "input gradient", split, p)]
    if role is TensorRole.EMBEDDING:
        return [(_FORWARD, Axis.T1, "lookups", split, p)]
    if role is TensorRole.HEAD:
        return [(_FORWARD, Axis.T2, "logits' partial sums", wide, p),
                (_BACKWARD, Axis.T1, "input gradient", split, p)]
    return [(_FORWARD, Axis.T1, what, tokens, F32)
            for what in ("largest logit", "target logit", "sum of exponentials")]


def layer_collectives(layer: Layer, layout: TensorParallel,
                      partials: DType) -> list[TensorCollective]:
    """The collectives ``layer`` runs for a micro-batch over a ``layout`` tensor group
    (none without a tensor shape, or with tensor parallelism off), recomputation aside."""
    if layer.tensor is None or not layout.on:
        return []
    role = layer.tensor.role
    sizes = {Axis.TENSOR: layout.size, Axis.T1: layout.t1, Axis.T2: layout.t2}
    if role is TensorRole.EXPERTS:
        return [TensorCollective(layer.name, role, Phase(phase), Axis(axis), what, values,
                                 dtype, collective, factor)
                for phase, axis, what, values, dtype, collective, factor
                in expert_collectives(layer, partials) if sizes[Axis(axis)] > 1]
    found = (_two_d(layer, layout, partials) if layout.two_d
             else _one_d(layer, partials))
    return [TensorCollective(layer.name, role, phase, axis, what, values, dtype)
            for phase, axis, what, values, dtype in found if sizes[axis] > 1]


def micro_batch_collectives(workload: Workload, layout: TensorParallel, recomputes: bool,
                            layers: Sequence[int] | None = None) -> list[TensorCollective]:
    """Every collective a replica's tensor group runs for one micro-batch of ``workload``
    (the whole model's: its shapes are the layers'; ``layers``: only those, by index, a
    pipeline stage's), with the forward ones again when it ``recomputes``."""
    chosen = (workload.layers if layers is None
              else [workload.layers[i] for i in layers])
    found = [each for layer in chosen
             for each in layer_collectives(layer, layout, workload.partials_dtype)]
    if recomputes:
        found += [replace(c, phase=Phase.RECOMPUTE) for c in found if c.phase is Phase.FORWARD]
    return found
