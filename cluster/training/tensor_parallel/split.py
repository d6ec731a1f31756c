"""What each IPU of a tensor group holds and computes: a workload's layers split over it.

:func:`rank_workload` is the workload one IPU of a ``T1 x T2`` tensor group runs (every
IPU of the group runs the same share). For a layer with a tensor shape
(:class:`~cluster.training.workloads.tensor_shape.TensorShape`):

- parameters and FLOPs: 1/``T`` each (``T = T1 x T2``; rounded up). Megatron keeps a
  block's norms and its row-parallel products' biases whole on every IPU; they are
  counted split too here (well under 1% of a layer). The embedding's token table, the
  untied head's weight and the loss split over the vocabulary (vocabulary-parallel,
  padded as Megatron pads it: rounded up).
- stashed activations: a replicated part whole on each IPU of a ``t1`` group, the rest
  split over it. An attention or FFN half keeps its norm's input, the input of its first
  products and its output dropout mask whole (``(2 p + 1) tokens x hidden`` bytes per
  sample, ``p`` bytes per partial: Korthikanti et al. 2022, "Reducing Activation
  Recomputation in Large Transformer Models", section 4.2.1, the ``10 s b h`` of
  ``s b h (10 + 24 / t + 5 a s / h t)``); the embedding's and the head's stashes (the
  ids, masks and the head's inputs) are whole; the loss's logits are split over the
  vocabulary. With 2-D, ``T2`` splits the hidden dimension of all of it: the replicated
  part is 1/``T2`` on each IPU (an assumption: Graphcore publish no activation count).
- the activation a layer hands on: whole with 1-D (after the all-reduce every IPU has it),
  1/``T2`` with 2-D.

A mixture-of-experts layer (the ``experts`` role) is split as :mod:`.expert_split` says.
A layer without a tensor shape runs whole on every IPU of the group. A SettingError
refuses what cannot be split as asked (:func:`check_tensor_split`).
"""

from __future__ import annotations

from dataclasses import replace

from cluster.errors import SettingError
from cluster.training.tensor_parallel.expert_split import expert_rank_layer
from cluster.training.tensor_parallel.layout import TensorParallel
from cluster.training.workloads.arithmetic import MASK_BYTES
from cluster.training.workloads.layers import Layer, Workload
from cluster.training.workloads.tensor_shape import TensorRole


def _up(value: int, parts: int) -> int:
    """``value / parts`` rounded up: one IPU's share."""
    return -(-value // parts)


def check_tensor_split(workload: Workload, layout: TensorParallel) -> None:
    """A SettingError if ``workload`` cannot be split over ``layout``: no layer it could
    split, a mixture-of-experts layer without the ``experts`` tensor shape (its hidden
    size and tokens), heads that ``T1`` does not divide, a hidden size that ``T2`` does
    not divide."""
    if not layout.on:
        return
    if not any(layer.tensor is not None for layer in workload.layers):
        raise SettingError("tensor_parallel", "{tensor_parallel} splits a transformer's "
                           "layers; {name} has none it can split (no layer carries a tensor "
                           "shape, docs/workloads.md): leave out {tensor_parallel}",
                           name=workload.name[:60])
    for layer in workload.layers:
        if layer.experts is not None and layer.tensor is None:
            raise SettingError("tensor_parallel", "{tensor_parallel}: the mixture-of-experts "
                               "layer {layer} of {name} has no tensor shape to split it by: "
                               "give it 'tensor: {{role: experts, hidden: H, tokens: S}}' "
                               "(docs/workloads.md), or leave out {tensor_parallel}",
                               name=workload.name[:60], layer=layer.name)
        shape = layer.tensor
        if shape is None:
            continue
        if shape.heads and shape.heads % layout.t1:
            raise SettingError("tensor_parallel", "{tensor_parallel} {given}: {t1} does not "
                               "divide the {heads} attention heads of {layer}: use a T that "
                               "divides them", given=str(layout), t1=layout.t1,
                               heads=shape.heads, layer=layer.name)
        if shape.hidden % layout.t2:
            raise SettingError("tensor_parallel", "{tensor_parallel} {given}: {t2} does not "
                               "divide the hidden size {hidden} of {layer}: use a T2 that "
                               "divides it", given=str(layout), t2=layout.t2,
                               hidden=shape.hidden, layer=layer.name)


def replicated_stash_bytes(layer: Layer, partial_bytes: int) -> int:
    """Bytes per sample of ``layer``'s stash that each IPU of a ``t1`` group keeps whole
    (the module's docstring says which)."""
    shape = layer.tensor
    if shape is None or shape.role in (TensorRole.EMBEDDING, TensorRole.HEAD):
        return layer.stashed_bytes
    if shape.role is TensorRole.LOSS:
        return 0
    return min(layer.stashed_bytes, (2 * partial_bytes + MASK_BYTES) * shape.activation_values)


def rank_layer(layer: Layer, layout: TensorParallel, partial_bytes: int) -> Layer:
    """``layer`` as one IPU of the tensor group runs it (whole if it has no tensor
    shape)."""
    if layer.tensor is None:
        return layer
    if layer.tensor.role is TensorRole.EXPERTS:
        return expert_rank_layer(layer, layout, partial_bytes)
    whole = replicated_stash_bytes(layer, partial_bytes)
    split = layer.stashed_bytes - whole
    return replace(layer, parameters=_up(layer.parameters, layout.size),
                   forward_flops=_up(layer.forward_flops, layout.size),
                   output_bytes=_up(layer.output_bytes, layout.t2),
                   stashed_bytes=_up(whole, layout.t2) + _up(split, layout.size))


def rank_workload(workload: Workload, layout: TensorParallel) -> Workload:
    """What one IPU of a ``layout`` tensor group runs of ``workload``: ``workload``
    itself when tensor parallelism is off."""
    if not layout.on:
        return workload
    p = workload.partials_dtype.itemsize
    return replace(workload, layers=tuple(rank_layer(layer, layout, p)
                                          for layer in workload.layers))
