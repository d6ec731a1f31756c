"""What a device counts: per IPU, bytes out and in, supersteps and simulated seconds; per
directed link of the topology, the bytes its IPUs sent over it (``stats``, metrics)."""

from __future__ import annotations

import threading

import numpy as np

from ipu_node.answers import CounterName, IpuCounters, zero_counters


class Counters:
    """Counters of one device; collectives run in threads, so updates take a lock."""

    def __init__(self, ipus: tuple[int, ...], directed_links: int) -> None:
        self._lock = threading.Lock()
        self.per_ipu: dict[int, IpuCounters] = {ipu: zero_counters() for ipu in ipus}
        self.link_bytes = np.zeros(directed_links)

    def add(self, ipu: int, name: CounterName, amount: float) -> None:
        with self._lock:
            self.per_ipu[ipu][name] += amount

    def add_each(self, name: CounterName, amounts: dict[int, float]) -> None:
        """Add ``amounts[ipu]`` to counter ``name`` of each IPU, under one lock."""
        with self._lock:
            for ipu, amount in amounts.items():
                self.per_ipu[ipu][name] += amount

    def add_link_bytes(self, sent: np.ndarray) -> None:
        with self._lock:
            self.link_bytes += sent

    def add_at_links(self, links: np.ndarray, nbytes: float) -> None:
        """Add ``nbytes`` to each of the directed ``links``."""
        with self._lock:
            self.link_bytes[links] += nbytes

    def snapshot(self) -> tuple[dict[int, IpuCounters], np.ndarray]:
        """A copy of the counters per IPU, and of the bytes per directed link."""
        with self._lock:
            return ({ipu: IpuCounters(**c) for ipu, c in self.per_ipu.items()},
                    self.link_bytes.copy())
