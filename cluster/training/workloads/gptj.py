"""GPT-J 6B (Wang and Komatsuzaki 2021, EleutherAI's ``mesh-transformer-jax``;
Hugging Face's ``EleutherAI/gpt-j-6b``): ``gpt-j-6b``.

Architecture: 28 layers, ``d_model`` 4096, 16 heads of 256, FFN 16384 (GELU, with
biases), a context of 2048 tokens, GPT-2's byte-pair vocabulary padded to 50,400. Each
layer is a parallel block (:mod:`.transformer`): one layer norm feeds attention and FFN,
whose outputs are added to the residual together. The attention's projections have no
biases; rotary position embedding on 64 of each head's 256 dimensions, so no position
table; no dropout. The output head is untied from the token table and has a bias.

Parameters: ``V h + l (4 h^2 + 2 h f + f + 3 h) + 2 h + h V + V`` = 6,050,882,784, the
count of Hugging Face's ``GPTJForCausalLM``. The model card gives 6,053,381,344,
2,498,560 more, which is exactly seven more copies of the 29 layer norms (``2 h`` each)
and of the 28 FFN output biases (``h`` each) and 8 biases of ``h``: what the 8
model-parallel shards of ``mesh-transformer-jax`` would count if each kept its own copy
of those and of an embedding bias the released checkpoint lacks (an inference from the
numbers, not a published breakdown). Default precision: float16 throughout; Adam (two
float32 values per parameter), as it was trained.
"""

from __future__ import annotations

from cluster.training.workloads.arithmetic import HALF, Precision
from cluster.training.workloads.decoder import DecoderConfig, decoder
from cluster.training.workloads.layers import Workload
from cluster.training.workloads.registry import builtin_workload
from cluster.training.workloads.transformer import BlockShape

CONTEXT = 2048
HIDDEN = 4096
GPT_J_6B = DecoderConfig(
    "gpt-j-6b", layers=28,
    block=BlockShape(HIDDEN, heads=16, ffn=4 * HIDDEN, attention_biases=False,
                     rotary_dims=64, dropout=False, parallel=True),
    vocabulary=50_400, context=CONTEXT, head_bias=True)


@builtin_workload("gpt-j-6b", "GPT-J 6B, 6.05 B parameters, 2048 tokens, per sequence")
def gpt_j_6b(sequence_length: int = CONTEXT, precision: Precision = HALF) -> Workload:
    """GPT-J 6B training on ``sequence_length`` tokens (1 to 2048), per sequence."""
    return decoder(GPT_J_6B, sequence_length, precision)
