"""GPT-2 XL language-model training (Radford et al. 2019, "Language Models are
Unsupervised Multitask Learners").

Architecture (OpenAI's released 1.5B model): 48 layers, hidden 1600, 25 heads, FFN 6400,
a byte-pair vocabulary of 50,257, a context of 1024 tokens; layer norm before each half
(pre-norm) and once more before the output. Per sequence of ``s`` tokens: the
embeddings with a position table, 48 x (attention, FFN) with dropout, a head tied to the
token table, the loss: :mod:`.decoder` and :mod:`.transformer`.

Parameters: 1,557,611,200 (Hugging Face's ``gpt2-xl``; "1.5B" in the paper). Forward
FLOPs per 1024-token sequence: 3.52e12, within 0.5% of ``24 s l h^2 (1 + s / 6h) +
2 s h V``, the forward part of Narayanan et al. 2021's count (section 5.1). In float16
the weights alone are 3.1 GB, over three times a GC200's 900 MB of In-Processor-Memory
(docs/hardware.md, 003): the model needs pipelining. Default precision: float16 throughout;
Adam (two float32 values per parameter), GPT-2's optimiser.
"""

from __future__ import annotations

from cluster.training.workloads.arithmetic import HALF, Precision
from cluster.training.workloads.decoder import DecoderConfig, decoder
from cluster.training.workloads.layers import Workload
from cluster.training.workloads.registry import builtin_workload
from cluster.training.workloads.transformer import BlockShape

CONTEXT = 1024
HIDDEN = 1600
GPT2_XL = DecoderConfig("gpt2-xl", layers=48, block=BlockShape(HIDDEN, heads=25, ffn=4 * HIDDEN),
                        vocabulary=50_257, context=CONTEXT, learned_positions=True,
                        tied_head=True)


@builtin_workload("gpt2-xl", "GPT-2 XL, 1.56 B parameters, 1024 tokens, per sequence")
def gpt2_xl(sequence_length: int = CONTEXT, precision: Precision = HALF) -> Workload:
    """GPT-2 XL training on ``sequence_length`` tokens (1 to 1024), per sequence."""
    return decoder(GPT2_XL, sequence_length, precision)
