"""GPT-2 XL language-model training (Radford et al. 2019, "Language Models are
Unsupervised Multitask Learners").

Architecture (OpenAI's released 1.5B model): 48 layers, hidden 1600, 25 heads, FFN 6400,
a byte-pair vocabulary of 50,257, a context of 1024 tokens; layer norm before each half
(pre-norm) and once more before the output. Layers, per sequence of ``s`` tokens:

- ``embeddings``: token table ``V h`` and position table ``1024 h``; an addition and a
  dropout per element. Stashed: the dropout mask, the int32 token ids.
- ``block{i}.attention`` and ``block{i}.mlp``: :mod:`.transformer`.
- ``head``: the final layer norm (``2h``) and the logits ``2 s h V``, whose weight is the
  token table (tied: its parameters are in ``embeddings``; a pipeline that puts ``head``
  on another IPU than ``embeddings`` keeps a copy of the table there).
- ``loss``: softmax cross-entropy over the ``s V`` logits.

Parameters: 1,557,611,200 (Hugging Face's ``gpt2-xl``; "1.5B" in the paper). Forward
FLOPs per 1024-token sequence: 3.52e12, within 0.5% of ``24 s l h^2 (1 + s / 6h) +
2 s h V``, the forward part of Narayanan et al. 2021's count (section 5.1). In float16
the weights alone are 3.1 GB, over three times a GC200's 900 MB of In-Processor-Memory
(docs/hardware.md, 003): the model needs pipelining. Default precision: float16 throughout;
Adam (two float32 values per parameter), GPT-2's optimiser.
"""

from __future__ import annotations

from cluster.training.workloads.arithmetic import (
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
from cluster.training.workloads.transformer import attention_layer, ffn_layer

VOCABULARY = 50_257
CONTEXT = 1024
LAYERS = 48
HIDDEN = 1600
HEADS = 25
FFN = 4 * HIDDEN


@builtin_workload("gpt2-xl", "GPT-2 XL, 1.56 B parameters, 1024 tokens, per sequence")
def gpt2_xl(sequence_length: int = CONTEXT, precision: Precision = HALF) -> Workload:
    """GPT-2 XL training on ``sequence_length`` tokens (1 to 1024), per sequence."""
    s = whole("sequence_length", sequence_length, 1, CONTEXT)
    h, v, p = HIDDEN, VOCABULARY, precision.partials.itemsize
    layers = [Layer("embeddings", LayerKind.EMBEDDING, parameters=(v + CONTEXT) * h,
                    forward_flops=(ADD_FLOPS + DROPOUT_FLOPS) * s * h,
                    output_bytes=p * s * h,
                    stashed_bytes=MASK_BYTES * s * h + INT32_BYTES * s)]
    for i in range(LAYERS):
        layers += [attention_layer(f"block{i}.attention", s, h, HEADS, p),
                   ffn_layer(f"block{i}.mlp", s, h, FFN, p)]
    layers += [
        Layer("head", LayerKind.DENSE, parameters=2 * h,
              forward_flops=NORM_FLOPS * s * h + 2 * s * h * v, output_bytes=p * s * v,
              stashed_bytes=2 * p * s * h),  # the norm's input and the logits' input
        Layer("loss", LayerKind.LOSS, parameters=0, forward_flops=LOSS_FLOPS_PER_LOGIT * s * v,
              output_bytes=p, stashed_bytes=p * s * v)]
    return Workload(name="gpt2-xl", layers=tuple(layers),
                    input_bytes=2 * INT32_BYTES * s,  # int32 tokens and their next-token labels
                    weight_dtype=precision.weight, gradient_dtype=precision.gradient,
                    partials_dtype=precision.partials, optimizer_values_per_parameter=2)
