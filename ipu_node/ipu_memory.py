"""In-Processor-Memory accounting for one IPU: capacity, named allocations, what is free.

Capacities come from the catalogue (``cluster.model.hardware``): 304 MiB for a GC2 (1216 tiles of
256 kB), 900 MB for a GC200. An IPU-M2000 adds Streaming Memory, shared by its four IPUs,
which tensors may spill to (``streaming_bytes`` here is this IPU's quarter of it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cluster.host_memory import available_ram_bytes as available_ram_bytes  # re-exported
from ipu_node.device_errors import OutOfMemory


@dataclass
class IpuMemory:
    ipu_name: str
    capacity_bytes: int
    streaming_bytes: int = 0
    allocations: dict[str, int] = field(default_factory=dict)

    @property
    def used_bytes(self) -> int:
        return sum(self.allocations.values())

    @property
    def free_bytes(self) -> int:
        return self.capacity_bytes + self.streaming_bytes - self.used_bytes

    def allocate(self, name: str, nbytes: int) -> None:
        """Account ``nbytes`` under ``name`` (replacing an allocation of that name)."""
        previous = self.allocations.get(name, 0)
        if nbytes - previous > self.free_bytes:
            raise OutOfMemory(
                f"IPU {self.ipu_name}: {name!r} needs {nbytes:,} bytes but only "
                f"{self.free_bytes + previous:,} bytes are free (of {self.capacity_bytes:,} bytes "
                "of In-Processor-Memory"
                + (f" and {self.streaming_bytes:,} of Streaming Memory" if self.streaming_bytes
                   else "") + "): use smaller tensors or more IPUs")
        self.allocations[name] = nbytes

    def release(self, name: str) -> None:
        self.allocations.pop(name, None)
