"""The two halves of a transformer layer, shared by BERT and GPT-2: attention and FFN.

Per sample of ``s`` tokens, hidden size ``h``, ``a`` heads, FFN width ``f``, ``p`` bytes
per partial (Vaswani et al. 2017; counts as Narayanan et al. 2021, "Efficient Large-Scale
Language Model Training on GPU Clusters", section 5.1, and Korthikanti et al. 2022,
section 4.1):

- attention: Q, K, V and output projections ``4 (h^2 + h)`` parameters and ``8 s h^2``
  FLOPs; scores ``Q K^T`` and context ``softmax V``, ``4 s^2 h`` FLOPs, every score
  computed (a causal mask saves no work on the IPU); a layer norm, ``2 h`` parameters.
  Stashed: the layer norm's and the projections' inputs, Q, K, V, the softmax output,
  its dropout mask and result, the output dropout mask:
  ``(6p + 1) s h + (2p + 1) a s^2`` bytes, ``11 s h + 5 a s^2`` plus ``2 s h`` for the
  norm with ``p = 2``, as in Korthikanti et al.
- FFN: ``h f + f + f h + h`` parameters and a layer norm, ``4 s h f`` FLOPs. Stashed: the
  inputs of the norm and both products, the GELU's input, the dropout mask:
  ``2p s h + 2p s f + s h`` bytes (``19 s h`` plus ``2 s h`` for the norm when
  ``f = 4h`` and ``p = 2``).

Both hand on ``s h`` partials. Whether the norm comes first (GPT-2) or last (BERT)
changes neither count.
"""

from __future__ import annotations

from cluster.training.workloads.arithmetic import (
    ACTIVATION_FLOPS,
    ADD_FLOPS,
    DROPOUT_FLOPS,
    MASK_BYTES,
    NORM_FLOPS,
    SCORE_SCALE_MASK_FLOPS,
    SOFTMAX_FLOPS,
)
from cluster.training.workloads.layers import Layer, LayerKind

PER_HIDDEN_ELEMENT_FLOPS = ADD_FLOPS + DROPOUT_FLOPS + NORM_FLOPS  # residual, dropout, norm


def attention_layer(name: str, s: int, h: int, heads: int, p: int) -> Layer:
    """Self-attention with its residual addition, dropouts and layer norm."""
    per_score = SCORE_SCALE_MASK_FLOPS + SOFTMAX_FLOPS + DROPOUT_FLOPS
    return Layer(
        name, LayerKind.ATTENTION, parameters=4 * (h * h + h) + 2 * h,
        forward_flops=(8 * s * h * h + 4 * s * s * h + per_score * heads * s * s
                       + PER_HIDDEN_ELEMENT_FLOPS * s * h),
        output_bytes=p * s * h,
        stashed_bytes=(6 * p + MASK_BYTES) * s * h + (2 * p + MASK_BYTES) * heads * s * s)


def ffn_layer(name: str, s: int, h: int, f: int, p: int) -> Layer:
    """The feed-forward network (GELU) with its residual addition, dropout and layer norm."""
    return Layer(
        name, LayerKind.DENSE, parameters=2 * h * f + f + h + 2 * h,
        forward_flops=4 * s * h * f + ACTIVATION_FLOPS * s * f + PER_HIDDEN_ELEMENT_FLOPS * s * h,
        output_bytes=p * s * h,
        stashed_bytes=2 * p * s * h + 2 * p * s * f + MASK_BYTES * s * h)
