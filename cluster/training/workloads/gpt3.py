"""The GPT-3 family (Brown et al. 2020, "Language Models are Few-Shot Learners",
arXiv:2005.14165, Table 2.1): ``gpt3-125m`` ... ``gpt3-175b``.

Architecture: GPT-2's (:mod:`.gpt2`: pre-norm layer norms, GELU FFN of ``4 h``, biases,
learned positions, a head tied to the token table) with a context of 2048 tokens and
GPT-2's byte-pair vocabulary of 50,257; Table 2.1's ``n_layers``, ``d_model``,
``n_heads``, ``d_head`` below. The paper alternates dense and locally banded sparse
attention layers without saying where the bands lie: every layer here computes every
score, as the IPU recipes of GPT-3 do. Dropout as GPT-2's (the paper does not say).

===========  ========  =======  =======  ======  ==========================  =========
name         n_layers  d_model  n_heads  d_head  parameters here             published
===========  ========  =======  =======  ======  ==========================  =========
gpt3-125m    12        768      12       64      125,226,240                 125M
gpt3-350m    24        1024     16       64      355,871,744                 350M
gpt3-1.3b    24        2048     16       128     1,315,723,264               1.3B
gpt3-2.7b    32        2560     32       80      2,651,553,280               2.7B
gpt3-6.7b    32        4096     32       128     6,658,404,352               6.7B
gpt3-13b     40        5120     40       128     12,853,386,240              13B
gpt3-175b    96        12288    96       128     174,604,259,328             175B
===========  ========  =======  =======  ======  ==========================  =========

Parameters: ``l (12 h^2 + 13 h) + (V + 2048) h + 2 h``. Two rows of Table 2.1 disagree
with themselves, ``n_heads d_head != d_model``: GPT-3 XL (24 heads of 128 for 2048) and
GPT-3 13B (``d_model`` 5140 for 40 heads of 128). Here ``d_model = n_heads d_head`` in
every row, keeping the published parameter count: XL has 16 heads of 128 (24 of them
would make 1.52B, not 1.3B), 13B has ``d_model`` 5120 (5140 gives 12.94B, also "13B").
"350M" is 1.7% under the count: the same shape with GPT-2's 1024 positions is Hugging
Face's ``gpt2-medium``, 354,823,168, as the 125M one less 1024 positions is ``gpt2``,
124,439,808. Forward FLOPs per 2048-token sequence of ``gpt3-175b``: 7.35e14, within 0.1%
of ``2 N s + 4 l s^2 h`` (Kaplan et al. 2020's ``2 N`` per token, both attention products
counted as Narayanan et al. 2021 do). In float16 its weights are 349 GB. Default
precision: float16 throughout; Adam (two float32 values per parameter), as in the paper.
"""

from __future__ import annotations

from cluster.training.workloads.arithmetic import HALF, Precision
from cluster.training.workloads.decoder import DecoderConfig, decoder
from cluster.training.workloads.layers import Workload
from cluster.training.workloads.registry import builtin_workload
from cluster.training.workloads.transformer import BlockShape

VOCABULARY = 50_257
CONTEXT = 2048


def gpt3_config(name: str, layers: int, hidden: int, heads: int) -> DecoderConfig:
    """A GPT-3 of Table 2.1's shape: GPT-2's architecture at 2048 tokens."""
    return DecoderConfig(name, layers, BlockShape(hidden, heads, ffn=4 * hidden),
                         vocabulary=VOCABULARY, context=CONTEXT, learned_positions=True,
                         tied_head=True)


GPT3_125M = gpt3_config("gpt3-125m", 12, 768, 12)
GPT3_350M = gpt3_config("gpt3-350m", 24, 1024, 16)
GPT3_1_3B = gpt3_config("gpt3-1.3b", 24, 2048, 16)
GPT3_2_7B = gpt3_config("gpt3-2.7b", 32, 2560, 32)
GPT3_6_7B = gpt3_config("gpt3-6.7b", 32, 4096, 32)
GPT3_13B = gpt3_config("gpt3-13b", 40, 5120, 40)
GPT3_175B = gpt3_config("gpt3-175b", 96, 12288, 96)
CONFIGS = (GPT3_125M, GPT3_350M, GPT3_1_3B, GPT3_2_7B, GPT3_6_7B, GPT3_13B, GPT3_175B)
_SUMMARY = "GPT-3 {} parameters (Brown et al. 2020), 2048 tokens, per sequence"


@builtin_workload("gpt3-125m", _SUMMARY.format("125 M"))
def gpt3_125m(sequence_length: int = CONTEXT, precision: Precision = HALF) -> Workload:
    """GPT-3 Small training on ``sequence_length`` tokens (1 to 2048), per sequence."""
    return decoder(GPT3_125M, sequence_length, precision)


@builtin_workload("gpt3-350m", _SUMMARY.format("350 M"))
def gpt3_350m(sequence_length: int = CONTEXT, precision: Precision = HALF) -> Workload:
    """GPT-3 Medium training on ``sequence_length`` tokens (1 to 2048), per sequence."""
    return decoder(GPT3_350M, sequence_length, precision)


@builtin_workload("gpt3-1.3b", _SUMMARY.format("1.3 B"))
def gpt3_1_3b(sequence_length: int = CONTEXT, precision: Precision = HALF) -> Workload:
    """GPT-3 XL training on ``sequence_length`` tokens (1 to 2048), per sequence."""
    return decoder(GPT3_1_3B, sequence_length, precision)


@builtin_workload("gpt3-2.7b", _SUMMARY.format("2.7 B"))
def gpt3_2_7b(sequence_length: int = CONTEXT, precision: Precision = HALF) -> Workload:
    """GPT-3 2.7B training on ``sequence_length`` tokens (1 to 2048), per sequence."""
    return decoder(GPT3_2_7B, sequence_length, precision)


@builtin_workload("gpt3-6.7b", _SUMMARY.format("6.7 B"))
def gpt3_6_7b(sequence_length: int = CONTEXT, precision: Precision = HALF) -> Workload:
    """GPT-3 6.7B training on ``sequence_length`` tokens (1 to 2048), per sequence."""
    return decoder(GPT3_6_7B, sequence_length, precision)


@builtin_workload("gpt3-13b", _SUMMARY.format("13 B"))
def gpt3_13b(sequence_length: int = CONTEXT, precision: Precision = HALF) -> Workload:
    """GPT-3 13B training on ``sequence_length`` tokens (1 to 2048), per sequence."""
    return decoder(GPT3_13B, sequence_length, precision)


@builtin_workload("gpt3-175b", _SUMMARY.format("175 B"))
def gpt3_175b(sequence_length: int = CONTEXT, precision: Precision = HALF) -> Workload:
    """GPT-3 175B training on ``sequence_length`` tokens (1 to 2048), per sequence."""
    return decoder(GPT3_175B, sequence_length, precision)
