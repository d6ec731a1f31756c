"""A mixture-of-experts decoder of Mixtral's shape (Jiang et al. 2024, "Mixtral of
Experts", arXiv:2401.04088; Hugging Face's ``mistralai/Mixtral-8x7B-v0.1``): ``moe-8x7b``.

Architecture: a Llama-style decoder (:mod:`.llama`: RMSNorm, rotary attention, SwiGLU,
no biases, no dropout, untied head) of 32 layers, hidden 4096, 32 query heads sharing 8
key-value heads, whose every FFN is a mixture of 8 SwiGLU experts of width 14336 with a
router sending each token to 2 of them (:class:`.Experts`; :func:`.transformer.moe_layer`
counts it); a vocabulary of 32,000.

Parameters: ``2 V h + l (2 h^2 + 2 h g d + E 3 h f + h E + 2 h) + h`` = 46,702,792,704,
Hugging Face's count ("47B" in the paper), of which a token uses 12.9 B (2 experts of 8).

Assumed where the paper is silent: sequences of 4096 tokens by default (Mixtral's context
is 32,768, the most this takes); a capacity factor of 1.25, Fedus et al. 2021's (Switch
Transformers) for training (Mixtral's routing is dropless, which static shapes cannot
be): each expert computes ``ceil(1.25 x 2 s / 8)`` tokens a sequence, 25% more expert
FLOPs than a perfectly even router's. Default precision: float16 throughout; Adam (two
float32 values per parameter).
"""

from __future__ import annotations

from typing import Any

from cluster.errors import SpecError
from cluster.training.workloads.arithmetic import HALF, Precision
from cluster.training.workloads.decoder import DecoderConfig, decoder
from cluster.training.workloads.experts import Experts
from cluster.training.workloads.layers import Workload
from cluster.training.workloads.llama import VOCABULARY, llama_block
from cluster.training.workloads.registry import builtin_workload

CONTEXT = 32_768
SEQUENCE = 4096
EXPERTS = 8
TOP_K = 2
CAPACITY_FACTOR = 1.25


def _factor(value: Any) -> float:
    """A capacity factor from a number or its text (as a command line gives it)."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise SpecError(f"capacity_factor: expected a number such as 1.25, got "
                            f"{value[:40]!r}") from None
    return value  # Experts checks it


@builtin_workload("moe-8x7b", "Mixtral-shaped MoE, 8 experts top-2, 46.7 B parameters, "
                              "per sequence")
def moe_8x7b(sequence_length: int = SEQUENCE, capacity_factor: Any = CAPACITY_FACTOR,
             precision: Precision = HALF) -> Workload:
    """A Mixtral-shaped decoder training on ``sequence_length`` tokens (1 to 32768), each
    expert's buffer ``capacity_factor`` times its even share, per sequence."""
    experts = Experts(EXPERTS, TOP_K, _factor(capacity_factor))
    config = DecoderConfig("moe-8x7b", 32, llama_block(4096, 32, 14_336, kv_heads=8),
                           VOCABULARY, CONTEXT, experts=experts)
    return decoder(config, sequence_length, precision)
