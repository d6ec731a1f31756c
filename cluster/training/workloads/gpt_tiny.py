"""``gpt-tiny``: the smallest GPT, the one real mode trains (:mod:`cluster.training.decoder`).

Graphcore's "tiny" test configuration of their GPT PopXL examples: 2 layers, hidden 64,
4 heads (of 16), a sequence of 8 tokens, a vocabulary of 128. Architecture: GPT-3's
(pre-norm layer norms, a GELU FFN of ``4 h`` with biases, learned positions, the head
tied to the token table) without dropout, so that a real run is deterministic.
Float32 throughout, and one optimiser value per parameter (SGD's momentum), as real mode
trains it: 2 x 49,984 + (128 + 8) x 64 + 2 x 64 = 108,800 parameters.
"""

from __future__ import annotations

from dataclasses import replace

from cluster.training.workloads.arithmetic import SINGLE, Precision
from cluster.training.workloads.decoder import DecoderConfig, decoder
from cluster.training.workloads.layers import Workload
from cluster.training.workloads.registry import builtin_workload
from cluster.training.workloads.transformer import BlockShape

GPT_TINY = DecoderConfig("gpt-tiny", layers=2, block=BlockShape(64, 4, ffn=256, dropout=False),
                         vocabulary=128, context=8, learned_positions=True, tied_head=True)
SGD_MOMENTUM_VALUES = 1  # float32 values per parameter: the velocity


@builtin_workload("gpt-tiny", "Graphcore's tiny GPT test shape, 8 tokens, float32 (real mode)")
def gpt_tiny(sequence_length: int = GPT_TINY.context,
             precision: Precision = SINGLE) -> Workload:
    """The tiny GPT training on ``sequence_length`` tokens (1 to 8), per sequence."""
    return replace(decoder(GPT_TINY, sequence_length, precision),
                   optimizer_values_per_parameter=SGD_MOMENTUM_VALUES)
