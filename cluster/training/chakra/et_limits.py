"""The bounds a Chakra trace is read within, one frozen value: a damaged or hostile file
is refused when it passes one, before the reader allocates for it."""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20


@dataclass(frozen=True)
class TraceLimits:
    """How large a trace may be. ``max_file_bytes`` bounds a rank's file as read and,
    for a gzip-compressed one, as decompressed; ``max_message_bytes`` one message's
    declared length (its varint prefix); the node counts bound the values kept in memory
    (about 0.4 KiB a node)."""

    max_file_bytes: int = 1024 * MiB
    max_message_bytes: int = 64 * MiB
    max_nodes_per_rank: int = 2_000_000
    max_total_nodes: int = 20_000_000
    max_ranks: int = 65_536


DEFAULT_LIMITS = TraceLimits()
