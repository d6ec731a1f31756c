"""The tensors a card's IPUs hold, their In-Processor-Memory accounting, and a pool of
collective buffers to reuse. Plain Python: testable without Ray."""

from __future__ import annotations

import threading

import numpy as np

from cluster.model.topology import Topology
from ipu_node.answers import IpuMemoryStats
from ipu_node.device_errors import DeviceError
from ipu_node.ipu_memory import IpuMemory
from ipu_node.links.shared_buffers import shared_empty

SPARE_BUFFERS_PER_SHAPE = 4  # buffers of one size and dtype kept for reuse


class TensorStore:
    """Named tensors per IPU of one device, accounted in each IPU's memory (capacities
    from the catalogue: ``cluster.model.hardware``), and spare collective buffers."""

    def __init__(self, topology: Topology, ipus: tuple[int, ...],
                 streaming_bytes_per_ipu: int = 0, shared_buffers: bool = False) -> None:
        """``shared_buffers``: collective buffers live in memory a peer on this machine
        can map (:mod:`ipu_node.links.shared_buffers`), so links read them in place."""
        self._allocate = shared_empty if shared_buffers else np.empty
        self.ipu_names = {ipu: topology.ipu_name(ipu) for ipu in ipus}
        self.memory = {ipu: IpuMemory(topology.ipu_name(ipu),
                                      int(topology.ipu_memory_bytes[ipu]),
                                      streaming_bytes_per_ipu) for ipu in ipus}
        self.tensors: dict[int, dict[str, np.ndarray]] = {ipu: {} for ipu in ipus}
        self._spare: dict[tuple[int, str], list[np.ndarray]] = {}
        self._spare_lock = threading.Lock()

    def put(self, ipu: int, name: str, array: np.ndarray) -> None:
        """Store a named tensor on one of this device's IPUs (memory is accounted)."""
        self.memory[ipu].allocate(name, array.nbytes)
        self.tensors[ipu][name] = array

    def get(self, ipu: int, name: str) -> np.ndarray:
        if name not in self.tensors[ipu]:
            raise DeviceError(f"IPU {self.ipu_names[ipu]} holds no tensor {name!r}")
        return self.tensors[ipu][name]

    def find(self, ipu: int, name: str) -> np.ndarray | None:
        """Tensor ``name`` of IPU ``ipu``, or None."""
        return self.tensors[ipu].get(name)

    def free(self, ipu: int, name: str) -> None:
        self.tensors[ipu].pop(name, None)
        self.memory[ipu].release(name)

    def info(self, name: str) -> dict[int, tuple[tuple[int, ...], str]]:
        """Shape and dtype of tensor ``name`` on each IPU that holds it."""
        return {ipu: (held[name].shape, held[name].dtype.name)
                for ipu, held in self.tensors.items() if name in held}

    def memory_stats(self) -> dict[int, IpuMemoryStats]:
        """Each IPU's memory in use, capacity and free (bytes)."""
        return {ipu: IpuMemoryStats(used_bytes=m.used_bytes, capacity_bytes=m.capacity_bytes,
                                    free_bytes=m.free_bytes) for ipu, m in self.memory.items()}

    # -- collective buffers ----------------------------------------------------------
    def empty(self, elements: int, dtype: np.dtype | type | str) -> np.ndarray:
        """A collective buffer, reused from an earlier collective when one fits (fresh
        memory costs page faults on every first touch)."""
        with self._spare_lock:
            stack = self._spare.get((elements, np.dtype(dtype).name))
            if stack:
                return stack.pop()
        return self._allocate(elements, dtype)

    def recycle(self, buffers: dict[str, np.ndarray]) -> None:
        """Keep a finished collective's buffers for the next one (a few per shape)."""
        with self._spare_lock:
            for array in buffers.values():
                if not array.flags.writeable:  # a tensor that arrived read-only (from Ray)
                    continue
                stack = self._spare.setdefault((array.size, array.dtype.name), [])
                if len(stack) < SPARE_BUFFERS_PER_SHAPE:
                    stack.append(array)
