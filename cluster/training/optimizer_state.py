"""Where the optimiser's values live (``--optimizer-state``): one type, read by what it
means rather than by how its name is spelt."""

from __future__ import annotations

from cluster.model.text_enum import TextEnum


class OptimizerState(TextEnum):
    """On chip (Poplar's default, the only place a DSS 8440 has), in an IPU-M2000's
    Streaming Memory (streamed in for each update), sharded over the replicas of a server
    or rack (PopART's replicated tensor sharding: each updates its share), or both."""

    IN_PROCESSOR = "in-processor"
    STREAMING = "streaming"
    SHARDED = "sharded"
    SHARDED_STREAMING = "sharded-streaming"

    @property
    def over_replicas(self) -> bool:
        """Whether each replica of a server or rack keeps only its share of the state."""
        return self in (OptimizerState.SHARDED, OptimizerState.SHARDED_STREAMING)

    @property
    def offchip(self) -> bool:
        """Whether the state lives in Streaming Memory, streamed in and out each update."""
        return self in (OptimizerState.STREAMING, OptimizerState.SHARDED_STREAMING)
