"""A mixture-of-experts layer split over a tensor group: expert tensor parallelism.

As Megatron-Core splits an MoE layer when tensor parallelism is on (its expert tensor
parallel size left at the tensor-parallel size, the default; Liu et al. 2025, "MoE
Parallel Folding", arXiv:2504.14960, section 3): every expert's FFN is split over the
layer's tensor group as the dense FFN is (its first products by columns, the last by
rows), and the expert group is made of the same tensor rank of ``E`` replicas, so the
tokens' all-to-alls (:mod:`cluster.training.expert_parallel_time`) and the tensor group's
collectives run over orthogonal groups. A layer with the ``experts`` tensor role
(:class:`~cluster.training.workloads.tensor_shape.TensorShape`) runs, for each
micro-batch, with ``n = tokens x hidden`` values a sample and ``B = n x top_k x capacity
factor`` the experts' buffers:

- each IPU of a ``T`` group takes its ``1/T`` of the tokens (the layer's input is whole on
  each after the attention's all-reduce: a slice, no transfer; Megatron's sequence
  parallelism has that share already), routes them, and sends them to the IPUs holding
  their experts by the dispatch all-to-all over its expert group (``B / T`` per IPU);
- an all-gather over the tensor group of the tokens each IPU received: every IPU of the
  group then holds its experts' whole buffers (``B``) and computes its ``1/T`` of their
  FFNs; a reduce-scatter over the tensor group of the experts' partial outputs (``B``)
  leaves each IPU the sums of its ``1/T`` of the tokens, which the combine all-to-all
  sends back (``B / T``);
- an all-gather over the tensor group of the combined output (``n``): the whole
  activation the next layer takes, as a dense FFN's all-reduce leaves it (Megatron-Core
  with sequence parallelism defers it to the next layer's first all-gather: the bytes
  are the same).

The backward pass mirrors it: the output gradient, whole on each IPU, is sliced; the
combine's gradient all-to-all, an all-gather of the experts' output gradients, a
reduce-scatter of the partial gradients of their inputs, the dispatch's gradient
all-to-all, an all-gather of the input gradient (``n``). 1-D: 3 tensor-group collectives
a pass. 2-D (``T1 x T2``; Graphcore publish no MoE layout, so assumed here): the experts
are split over the whole group of ``T1 x T2`` as 1-D, and the layer's input (forward)
and output gradient (backward), ``1/T2`` of the hidden size on each IPU, are first
all-gathered over ``t2`` (``n``): 4 a pass; the output handed on is each IPU's ``1/T2``
of the whole (a slice). With recomputation the forward's run again.

What each IPU holds and computes: ``1/T`` of the layer's parameters and FLOPs (its
experts' FFNs split; the router and the norm, whole on every IPU in Megatron, are
counted split too, as a dense block's norms are: 0.003% of a ``moe-8x7b`` layer; the
router, the norm and the combine run on the IPU's ``1/T`` of the tokens), and of its
stash all but the experts' input buffers (``slots x hidden`` values, whole on every IPU
after the all-gather), which are split over ``T``.
"""

from __future__ import annotations

from dataclasses import replace

from cluster.training.tensor_parallel.layout import TensorParallel
from cluster.training.workloads.layers import DType, Layer
from gcl.collectives import CollectiveName

GATHER, SCATTER = CollectiveName.ALL_GATHER, CollectiveName.REDUCE_SCATTER

# (phase, axis, what, collective, whether it carries the experts' buffers (else ``n``)),
# in the order a pass runs them; the axes and phases are layer_allreduces' by value
_FORWARD = (("forward", "t2", "input", GATHER, False),
            ("forward", "tensor", "dispatched tokens", GATHER, True),
            ("forward", "tensor", "experts' partial outputs", SCATTER, True),
            ("forward", "tensor", "output", GATHER, False))
_BACKWARD = (("backward", "t2", "output gradient", GATHER, False),
             ("backward", "tensor", "experts' output gradients", GATHER, True),
             ("backward", "tensor", "dispatched tokens' partial gradients", SCATTER, True),
             ("backward", "tensor", "input gradient", GATHER, False))


def expert_collectives(layer: Layer, partials: DType
                       ) -> list[tuple[str, str, str, int, DType, CollectiveName, float]]:
    """(phase, axis, what, values per sample, dtype, collective, factor) of each
    tensor-group collective of the experts ``layer`` for a micro-batch, in the module's
    order, every axis's (the caller drops those over a group of one IPU). ``factor``
    multiplies the values (the capacity factor of the experts' buffers, padding
    included), rounded up per micro-batch."""
    assert layer.tensor is not None and layer.experts is not None
    n, experts = layer.tensor.activation_values, layer.experts
    return [(phase, axis, what, n * experts.top_k if buffers else n, partials, collective,
             experts.capacity_factor if buffers else 1.0)
            for phase, axis, what, collective, buffers in _FORWARD + _BACKWARD]


def expert_rank_layer(layer: Layer, layout: TensorParallel, partial_bytes: int) -> Layer:
    """The experts ``layer`` as one IPU of a ``layout`` tensor group runs it (the module's
    docstring says what is split)."""
    assert layer.tensor is not None and layer.experts is not None
    size = layout.size
    buffers = layer.experts.slots(layer.tensor.tokens) * layer.tensor.hidden * partial_bytes
    whole = min(layer.stashed_bytes, buffers)
    return replace(layer, parameters=-(-layer.parameters // size),
                   forward_flops=-(-layer.forward_flops // size),
                   output_bytes=-(-layer.output_bytes // layout.t2),
                   stashed_bytes=whole + -(-(layer.stashed_bytes - whole) // size))
