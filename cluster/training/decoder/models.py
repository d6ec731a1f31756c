"""The decoders real mode trains, by the name ``--model`` takes."""

from __future__ import annotations

from cluster.training.workloads.decoder import DecoderConfig
from cluster.training.workloads.gpt_tiny import GPT_TINY

REAL_DECODERS: dict[str, DecoderConfig] = {GPT_TINY.name: GPT_TINY}


def real_decoder(model: str) -> DecoderConfig | None:
    """The decoder named ``model`` if real mode trains it, else None."""
    return REAL_DECODERS.get(model)
