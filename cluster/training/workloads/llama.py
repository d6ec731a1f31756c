"""Llama-style decoders (Touvron et al. 2023, "Llama 2: Open Foundation and Fine-Tuned
Chat Models", arXiv:2307.09288): ``llama-7b`` and ``llama-70b``, Llama 2's shapes.

Architecture: pre-norm RMSNorm, attention without biases and with rotary position
embedding on every head dimension (no position table), a SwiGLU FFN without biases, no
dropout, an output head untied from the token table and without bias; a SentencePiece
vocabulary of 32,000 and Llama 2's context of 4096 tokens (:mod:`.transformer`,
:mod:`.decoder`). ``llama-7b``: 32 layers, hidden 4096, 32 heads, FFN 11008.
``llama-70b``: 80 layers, hidden 8192, 64 query heads sharing 8 key-value heads
(grouped-query attention), FFN 28672.

Parameters: ``2 V h + l (2 h^2 + 2 h g d + 3 h f + 2 h) + h`` with ``g d`` the keys' and
values' width: 6,738,415,616 and 68,976,648,192, Hugging Face's counts of
``meta-llama/Llama-2-7b-hf`` and ``meta-llama/Llama-2-70b-hf`` ("7B" and "70B" in the
paper). Default precision: float16 throughout; Adam (two float32 values per parameter,
AdamW in the paper).
"""

from __future__ import annotations

from cluster.training.workloads.arithmetic import HALF, Precision
from cluster.training.workloads.decoder import DecoderConfig, decoder
from cluster.training.workloads.layers import Workload
from cluster.training.workloads.registry import builtin_workload
from cluster.training.workloads.transformer import BlockShape

VOCABULARY = 32_000
CONTEXT = 4096  # Llama 2's; Llama 1's was 2048


def llama_block(hidden: int, heads: int, ffn: int, kv_heads: int = 0) -> BlockShape:
    """A Llama layer: RMSNorm, rotary attention (grouped-query if ``kv_heads``), SwiGLU,
    no biases, no dropout."""
    return BlockShape(hidden, heads, ffn, kv_heads=kv_heads, rms_norm=True,
                      attention_biases=False, ffn_biases=False, gated=True,
                      rotary_dims=hidden // heads, dropout=False)


LLAMA_7B = DecoderConfig("llama-7b", 32, llama_block(4096, 32, 11_008), VOCABULARY, CONTEXT)
LLAMA_70B = DecoderConfig("llama-70b", 80, llama_block(8192, 64, 28_672, kv_heads=8),
                          VOCABULARY, CONTEXT)


@builtin_workload("llama-7b", "Llama 2 7B, 6.74 B parameters, 4096 tokens, per sequence")
def llama_7b(sequence_length: int = CONTEXT, precision: Precision = HALF) -> Workload:
    """Llama 2 7B training on ``sequence_length`` tokens (1 to 4096), per sequence."""
    return decoder(LLAMA_7B, sequence_length, precision)


@builtin_workload("llama-70b", "Llama 2 70B, 69.0 B parameters, 4096 tokens, per sequence")
def llama_70b(sequence_length: int = CONTEXT, precision: Precision = HALF) -> Workload:
    """Llama 2 70B training on ``sequence_length`` tokens (1 to 4096), per sequence."""
    return decoder(LLAMA_70B, sequence_length, precision)
