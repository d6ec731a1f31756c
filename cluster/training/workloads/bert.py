"""BERT-Base and BERT-Large pre-training (Devlin et al. 2018, arXiv:1810.04805).

Architecture (Google's configurations): a WordPiece vocabulary of 30,522, 512 positions,
2 segment types; Base: 12 layers, hidden 768, 12 heads, FFN 3072; Large: 24 layers,
hidden 1024, 16 heads, FFN 4096. Layers, per sequence of ``s`` tokens:

- ``embeddings``: word, position and segment tables and a layer norm,
  ``(30522 + 512 + 2) h + 2 h`` parameters; two additions, the norm and a dropout per
  element. Stashed: the norm's input, the dropout mask, the int32 token and segment ids
  (the tables' gradients scatter by them).
- ``encoder{i}.attention`` and ``encoder{i}.ffn``: :mod:`.transformer`.
- ``heads``: the pre-training heads. The pooler (``h^2 + h``) and next-sentence
  classifier (``2h + 2``) on the first token; the masked-LM transform (``h^2 + h``, GELU,
  layer norm ``2h``) and decoder on the ``m`` masked positions only, as the reference
  implementation gathers them. The decoder's weight is the word table (tied): its FLOPs
  ``2 m h V`` are here, its parameters in ``embeddings``, its bias ``V`` here; a pipeline
  that puts ``heads`` on another IPU than ``embeddings`` keeps a copy of the table there.
- ``loss``: softmax cross-entropy over the ``m V + 2`` logits.

Parameters: Base 110,106,428, "110M" in the paper; Large 336,226,108, "340M" in the
paper. Less the masked-LM and next-sentence heads (the pooler kept), Hugging Face's
``BertModel`` figures: 109,482,240 and 335,141,888. Forward FLOPs per 128-token
sequence with 20 masked tokens: Base 2.34e10, Large 8.04e10, within 0.4% of
``24 s l h^2 (1 + s / 6h)`` (the layers' forward FLOPs in Narayanan et al. 2021,
section 5.1) plus the heads' products ``2 m h (h + V) + 2 h^2``.

``sequence_length`` defaults to 128 (phase 1 of the recipe; phase 2 is 512); the masked
positions default to ``ceil(0.15 s)`` (20 at 128, as the recipe's
``max_predictions_per_seq``). Default precision: float16 throughout; LAMB (Adam's two
float32 values per parameter), the optimiser of Graphcore's and NVIDIA's BERT recipes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cluster.training.workloads.arithmetic import (
    ACTIVATION_FLOPS,
    ADD_FLOPS,
    DROPOUT_FLOPS,
    HALF,
    INT32_BYTES,
    LOSS_FLOPS_PER_LOGIT,
    MASK_BYTES,
    NORM_FLOPS,
    Precision,
    whole,
)
from cluster.training.workloads.layers import Layer, LayerKind, Workload
from cluster.training.workloads.registry import builtin_workload
from cluster.training.workloads.tensor_shape import TensorRole, TensorShape
from cluster.training.workloads.transformer import BlockShape, attention_layer, ffn_layer

VOCABULARY = 30_522
MAX_POSITIONS = 512
SEGMENT_TYPES = 2
MASKED_FRACTION = 0.15


@dataclass(frozen=True)
class BertConfig:
    """The shape of a BERT: layers, hidden size, heads, FFN width."""

    name: str
    layers: int
    hidden: int
    heads: int
    ffn: int


BASE = BertConfig("bert-base", 12, 768, 12, 3072)
LARGE = BertConfig("bert-large", 24, 1024, 16, 4096)


def _embeddings(s: int, h: int, p: int) -> Layer:
    elements = s * h
    return Layer("embeddings", LayerKind.EMBEDDING,
                 parameters=(VOCABULARY + MAX_POSITIONS + SEGMENT_TYPES) * h + 2 * h,
                 forward_flops=(2 * ADD_FLOPS + NORM_FLOPS + DROPOUT_FLOPS) * elements,
                 output_bytes=p * elements,
                 stashed_bytes=(p + MASK_BYTES) * elements + 2 * INT32_BYTES * s,
                 tensor=TensorShape(TensorRole.EMBEDDING, h, s))


def _heads(h: int, m: int, p: int) -> Layer:
    """Pooler and next-sentence classifier on one token, masked LM on ``m`` tokens."""
    pooler_nsp = (h * h + h) + (2 * h + 2)
    mlm = (h * h + h) + 2 * h + VOCABULARY  # transform, its norm, the decoder's bias
    flops = (2 * h * h + ACTIVATION_FLOPS * h + 2 * 2 * h  # pooler, tanh, classifier
             + m * (2 * h * h + (ACTIVATION_FLOPS + NORM_FLOPS) * h + 2 * h * VOCABULARY))
    return Layer("heads", LayerKind.DENSE, parameters=pooler_nsp + mlm, forward_flops=flops,
                 output_bytes=p * (m * VOCABULARY + 2),
                 stashed_bytes=p * (2 * h + 4 * m * h),  # pooler in, tanh out; MLM 4 inputs
                 tensor=TensorShape(TensorRole.HEAD, h, m, inner=VOCABULARY))


def bert(config: BertConfig, sequence_length: int = 128, masked_positions: int | None = None,
         precision: Precision = HALF) -> Workload:
    """A BERT of shape ``config`` pre-training on ``sequence_length`` tokens (1 to 512) of
    which ``masked_positions`` (default ``ceil(0.15 s)``) are predicted, per sequence."""
    s = whole("sequence_length", sequence_length, 1, MAX_POSITIONS)
    m = (math.ceil(MASKED_FRACTION * s) if masked_positions is None
         else whole("masked_positions", masked_positions, 1, s))
    h, p = config.hidden, precision.partials.itemsize
    layers = [_embeddings(s, h, p)]
    shape = BlockShape(h, config.heads, config.ffn)
    for i in range(config.layers):
        layers += [attention_layer(f"encoder{i}.attention", s, shape, p),
                   ffn_layer(f"encoder{i}.ffn", s, shape, p)]
    logits = m * VOCABULARY + 2
    layers += [_heads(h, m, p),
               Layer("loss", LayerKind.LOSS, parameters=0,
                     forward_flops=LOSS_FLOPS_PER_LOGIT * logits, output_bytes=p,
                     stashed_bytes=p * logits, tensor=TensorShape(TensorRole.LOSS, h, m))]
    # int32 token ids, segment ids and attention mask per token; masked positions and
    # their labels; the next-sentence label
    input_bytes = INT32_BYTES * (3 * s + 2 * m + 1)
    return Workload(name=config.name, layers=tuple(layers), input_bytes=input_bytes,
                    weight_dtype=precision.weight, gradient_dtype=precision.gradient,
                    partials_dtype=precision.partials, optimizer_values_per_parameter=2)


@builtin_workload("bert-base", "BERT-Base pre-training, 110 M parameters, per sequence")
def bert_base(sequence_length: int = 128, masked_positions: int | None = None,
              precision: Precision = HALF) -> Workload:
    """BERT-Base pre-training (12 layers, hidden 768): see the module's docstring."""
    return bert(BASE, sequence_length, masked_positions, precision)


@builtin_workload("bert-large", "BERT-Large pre-training, 336 M parameters, per sequence")
def bert_large(sequence_length: int = 128, masked_positions: int | None = None,
               precision: Precision = HALF) -> Workload:
    """BERT-Large pre-training (24 layers, hidden 1024): see the module's docstring."""
    return bert(LARGE, sequence_length, masked_positions, precision)
