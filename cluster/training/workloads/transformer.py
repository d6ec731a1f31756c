"""The two halves of a transformer layer, shared by every built-in transformer: attention
and FFN, in the variants the built-ins need (a :class:`BlockShape` says which).

Per sample of ``s`` tokens, hidden size ``h``, ``a`` query heads of ``d = h / a``, ``g``
key-value heads (``g = a`` is multi-head attention, ``g < a`` grouped-query attention,
Ainslie et al. 2023), FFN width ``f``, ``p`` bytes per partial (Vaswani et al. 2017;
counts as Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
Clusters", section 5.1, and Korthikanti et al. 2022, section 4.1):

- attention: Q and output projections ``2 h^2``, K and V ``2 h g d`` parameters (plus
  biases ``h + 2 g d + h`` if it has them) and ``2 s`` FLOPs per parameter; scores
  ``Q K^T`` and context ``softmax V``, ``4 s^2 h`` FLOPs, every score computed (a causal
  mask saves no work on the IPU); rotary position embedding (Su et al. 2021) on
  ``rotary_dims`` of every query and key head, 3 FLOPs an element; a norm (layer norm
  ``2 h`` parameters, RMSNorm ``h``). Stashed: the inputs of the norm, of the Q, K and V
  projections and of the output projection ``3 p s h``, Q, K, V ``p s (h + 2 g d)``,
  the softmax output ``p a s^2``; with dropout also its mask and result
  ``(p + 1) a s^2`` and the output mask ``s h``: with ``g = a`` and ``p = 2``,
  ``11 s h + 5 a s^2`` plus ``2 s h`` for the norm, as in Korthikanti et al.
- FFN: ``2 h f`` parameters (GELU) or ``3 h f`` (SwiGLU, Shazeer 2020: a gate and an up
  projection, their SiLU-gated product, a down projection), biases ``f + h`` if it has
  them (``2 f + h`` gated), a norm; ``2 s`` FLOPs per weight. Stashed: the inputs of the
  norm and of the first products ``2 p s h``, the activation's input, the up projection's
  output if gated, the last product's input ``2 p s f`` (``3 p s f`` gated), a dropout mask
  ``s h``: ``19 s h`` plus ``2 s h`` for the norm when ``f = 4 h``, ``p = 2``, GELU.

A parallel block (GPT-J; Wang and Komatsuzaki 2021) feeds attention and FFN the same
normed input: its one norm is in the attention layer, whose output then carries the normed
input beside the residual sum (``2 p s h``: what a pipeline cut there must carry), and its
FFN has no norm and stashes no input of its own (the attention layer keeps the normed
input both read). A mixture-of-experts FFN (:func:`moe_layer`) holds ``E`` such FFNs and
a router ``h E`` (no bias); per sample its FLOPs are those of every expert's buffer,
``E ceil(C k s / E)`` tokens (:class:`.Experts`), plus the router ``2 s h E``, its softmax
over ``E`` and the combine ``2 k s h``. Stashed: the norm's and router's inputs
``2 p s h``, the router's probabilities ``p s E``, the int32 choices ``4 k s``, per buffered
token its expert's input and inner tensors ``p (h + 3 f)`` (SwiGLU), and the
``p k s h`` expert outputs the routing weights' gradient needs. Both halves hand on
``s h`` partials otherwise. Whether the norm comes first (GPT-2) or last (BERT) changes
no count.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.training.workloads.arithmetic import (
    ACTIVATION_FLOPS,
    ADD_FLOPS,
    DROPOUT_FLOPS,
    GATE_FLOPS,
    INT32_BYTES,
    MASK_BYTES,
    NORM_FLOPS,
    RMS_NORM_FLOPS,
    ROTARY_FLOPS,
    SCORE_SCALE_MASK_FLOPS,
    SOFTMAX_FLOPS,
)
from cluster.training.workloads.experts import Experts
from cluster.training.workloads.layers import Layer, LayerKind
from cluster.training.workloads.tensor_shape import TensorRole, TensorShape


@dataclass(frozen=True)
class BlockShape:
    """What varies between the built-ins' transformer layers, for ``hidden`` ``h`` and
    ``heads`` ``a``: ``kv_heads`` (0: as many as ``heads``), ``rms_norm`` (RMSNorm, else
    layer norm), biases on the attention's and the FFN's projections, a gated (SwiGLU)
    FFN, ``rotary_dims`` per head (0: none), dropout, a ``parallel`` block."""

    hidden: int
    heads: int
    ffn: int
    kv_heads: int = 0
    rms_norm: bool = False
    attention_biases: bool = True
    ffn_biases: bool = True
    gated: bool = False
    rotary_dims: int = 0
    dropout: bool = True
    parallel: bool = False

    def __post_init__(self) -> None:
        if self.hidden % self.heads or self.heads % self.key_value_heads:
            raise ValueError(f"hidden {self.hidden} must split into {self.heads} heads and "
                             f"those into {self.key_value_heads} key-value groups")

    @property
    def key_value_heads(self) -> int:
        """Key-value heads: ``kv_heads``, or one per query head."""
        return self.kv_heads or self.heads

    @property
    def head_size(self) -> int:
        """``d = h / a``."""
        return self.hidden // self.heads

    @property
    def norm_parameters(self) -> int:
        """A norm's parameters: scale (and shift for a layer norm)."""
        return self.hidden if self.rms_norm else 2 * self.hidden

    @property
    def norm_flops(self) -> int:
        """A norm's FLOPs per element of the hidden state."""
        return RMS_NORM_FLOPS if self.rms_norm else NORM_FLOPS


def attention_layer(name: str, s: int, shape: BlockShape, p: int) -> Layer:
    """Self-attention with its norm, residual addition and (if ``shape.dropout``) dropouts."""
    h, a, d = shape.hidden, shape.heads, shape.head_size
    kv = shape.key_value_heads * d  # the width of K and of V
    weights = 2 * h * h + 2 * h * kv
    biases = 2 * h + 2 * kv if shape.attention_biases else 0
    dropout = DROPOUT_FLOPS if shape.dropout else 0
    per_score = SCORE_SCALE_MASK_FLOPS + SOFTMAX_FLOPS + dropout
    per_hidden = ADD_FLOPS + dropout + shape.norm_flops
    rotary = ROTARY_FLOPS * s * (a + shape.key_value_heads) * shape.rotary_dims
    scores = a * s * s
    score_bytes = (2 * p + MASK_BYTES) * scores if shape.dropout else p * scores
    return Layer(
        name, LayerKind.ATTENTION, parameters=weights + biases + shape.norm_parameters,
        forward_flops=2 * s * weights + 4 * s * s * h + per_score * scores + per_hidden * s * h
        + rotary,
        output_bytes=(2 if shape.parallel else 1) * p * s * h,
        stashed_bytes=p * s * (4 * h + 2 * kv) + score_bytes
        + (MASK_BYTES * s * h if shape.dropout else 0),
        tensor=TensorShape(TensorRole.ATTENTION, h, s, a, inner=h + 2 * kv))


def ffn_layer(name: str, s: int, shape: BlockShape, p: int) -> Layer:
    """The feed-forward network (GELU, or SwiGLU if ``shape.gated``) with its norm (none
    in a parallel block), residual addition and (if ``shape.dropout``) dropout."""
    h, f = shape.hidden, shape.ffn
    products = 3 if shape.gated else 2
    biases = (products - 1) * f + h if shape.ffn_biases else 0
    norm = 0 if shape.parallel else shape.norm_parameters
    per_hidden = (ADD_FLOPS + (DROPOUT_FLOPS if shape.dropout else 0)
                  + (0 if shape.parallel else shape.norm_flops))
    per_width = ACTIVATION_FLOPS + (GATE_FLOPS if shape.gated else 0)
    # the norm's input and the first products'; in a parallel block the attention layer
    # keeps the normed input both halves read
    kept_inputs = 0 if shape.parallel else 2
    return Layer(
        name, LayerKind.DENSE, parameters=products * h * f + biases + norm,
        forward_flops=2 * products * s * h * f + per_width * s * f + per_hidden * s * h,
        output_bytes=p * s * h,
        stashed_bytes=kept_inputs * p * s * h + products * p * s * f
        + (MASK_BYTES * s * h if shape.dropout else 0),
        tensor=TensorShape(TensorRole.FFN, h, s, inner=(products - 1) * f))


def moe_layer(name: str, s: int, shape: BlockShape, experts: Experts, p: int) -> Layer:
    """A mixture-of-experts FFN: a norm, a router, ``experts.count`` FFNs of ``shape``
    computing their buffers, the top-k outputs combined by the router's weights, the
    residual addition (and dropout if ``shape.dropout``)."""
    h, f, e, k = shape.hidden, shape.ffn, experts.count, experts.top_k
    products = 3 if shape.gated else 2
    expert = products * h * f + ((products - 1) * f + h if shape.ffn_biases else 0)
    slots = experts.slots(s)
    per_slot = 2 * products * h * f + (ACTIVATION_FLOPS + (GATE_FLOPS if shape.gated else 0)) * f
    per_hidden = ADD_FLOPS + (DROPOUT_FLOPS if shape.dropout else 0) + shape.norm_flops
    router = 2 * s * h * e + SOFTMAX_FLOPS * s * e
    return Layer(
        name, LayerKind.DENSE, parameters=e * expert + h * e + shape.norm_parameters,
        forward_flops=router + slots * per_slot + 2 * k * s * h + per_hidden * s * h,
        output_bytes=p * s * h,
        stashed_bytes=2 * p * s * h + p * s * e + INT32_BYTES * k * s
        + slots * p * (h + products * f) + p * k * s * h
        + (MASK_BYTES * s * h if shape.dropout else 0),
        experts=experts, tensor=TensorShape(TensorRole.EXPERTS, h, s))
