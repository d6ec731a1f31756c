"""A decoder-only language model (GPT-2, GPT-3, GPT-J, Llama, Mixtral) as a workload:
embeddings, ``layers`` x (attention, FFN) of :mod:`.transformer`, the output head and the
loss, per sequence of ``s`` tokens, hidden ``h``, vocabulary ``V``:

- ``embeddings``: the token table ``V h`` and, for learned positions, a position table
  ``context h`` with an addition per element; a dropout if the blocks have one. Stashed:
  the dropout mask, the int32 token ids (the table's gradient scatters by them).
- ``block{i}.attention`` and ``block{i}.mlp`` (``block{i}.moe`` with experts).
- ``head``: the final norm and the logits ``2 s h V``. Tied (GPT-2, GPT-3): the weight is
  the token table, whose parameters are in ``embeddings`` (a pipeline that puts ``head``
  on another IPU than ``embeddings`` keeps a copy of it there); untied: ``h V`` more, and
  ``V`` for a bias (GPT-J). Stashed: the norm's and the logits' inputs.
- ``loss``: softmax cross-entropy over the ``s V`` logits.

The input is the int32 tokens and their next-token labels. Float16 throughout by default,
Adam's two float32 values per parameter.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.training.workloads.arithmetic import (
    ADD_FLOPS,
    DROPOUT_FLOPS,
    HALF,
    INT32_BYTES,
    LOSS_FLOPS_PER_LOGIT,
    MASK_BYTES,
    Precision,
    whole,
)
from cluster.training.workloads.experts import Experts
from cluster.training.workloads.layers import Layer, LayerKind, Workload
from cluster.training.workloads.tensor_shape import TensorRole, TensorShape
from cluster.training.workloads.transformer import (
    BlockShape,
    attention_layer,
    ffn_layer,
    moe_layer,
)

ADAM_VALUES = 2  # float32 values per parameter: Adam's two moments


@dataclass(frozen=True)
class DecoderConfig:
    """The shape of a decoder: ``layers`` blocks of ``block``, a ``vocabulary``, the
    longest sequence ``context`` (tokens), learned positions (else rotary, in ``block``),
    a head tied to the token table or not, with a bias or not, and ``experts`` for a
    mixture-of-experts FFN (``None``: dense)."""

    name: str
    layers: int
    block: BlockShape
    vocabulary: int
    context: int
    learned_positions: bool = False
    tied_head: bool = False
    head_bias: bool = False
    experts: Experts | None = None


def _embeddings(config: DecoderConfig, s: int, p: int) -> Layer:
    h, dropout = config.block.hidden, config.block.dropout
    positions = config.context if config.learned_positions else 0
    per_element = ((ADD_FLOPS if config.learned_positions else 0)
                   + (DROPOUT_FLOPS if dropout else 0))
    return Layer("embeddings", LayerKind.EMBEDDING,
                 parameters=(config.vocabulary + positions) * h,
                 forward_flops=per_element * s * h, output_bytes=p * s * h,
                 stashed_bytes=(MASK_BYTES * s * h if dropout else 0) + INT32_BYTES * s,
                 tensor=TensorShape(TensorRole.EMBEDDING, h, s))


def _head_and_loss(config: DecoderConfig, s: int, p: int) -> list[Layer]:
    h, v, shape = config.block.hidden, config.vocabulary, config.block
    untied = 0 if config.tied_head else h * v + (v if config.head_bias else 0)
    return [
        Layer("head", LayerKind.DENSE, parameters=shape.norm_parameters + untied,
              forward_flops=shape.norm_flops * s * h + 2 * s * h * v, output_bytes=p * s * v,
              stashed_bytes=2 * p * s * h,  # the norm's input and the logits' input
              tensor=TensorShape(TensorRole.HEAD, h, s, inner=v)),
        Layer("loss", LayerKind.LOSS, parameters=0, forward_flops=LOSS_FLOPS_PER_LOGIT * s * v,
              output_bytes=p, stashed_bytes=p * s * v, tensor=TensorShape(TensorRole.LOSS, h, s))]


def decoder(config: DecoderConfig, sequence_length: int, precision: Precision = HALF
            ) -> Workload:
    """The workload of ``config`` training on ``sequence_length`` tokens (1 to its
    context), per sequence; a SpecError for a length outside that."""
    s = whole("sequence_length", sequence_length, 1, config.context)
    p = precision.partials.itemsize
    layers = [_embeddings(config, s, p)]
    for i in range(config.layers):
        layers.append(attention_layer(f"block{i}.attention", s, config.block, p))
        layers.append(ffn_layer(f"block{i}.mlp", s, config.block, p) if config.experts is None
                      else moe_layer(f"block{i}.moe", s, config.block, config.experts, p))
    layers += _head_and_loss(config, s, p)
    return Workload(name=config.name, layers=tuple(layers),
                    input_bytes=2 * INT32_BYTES * s,  # int32 tokens and next-token labels
                    weight_dtype=precision.weight, gradient_dtype=precision.gradient,
                    partials_dtype=precision.partials,
                    optimizer_values_per_parameter=ADAM_VALUES)
