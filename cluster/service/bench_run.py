"""A benchmark run by the service on a partition: checked before any byte moves, streamed
row by row, and leaving nothing behind.

- :func:`check_fits` refuses (RESOURCE_EXHAUSTED) a real-mode sweep whose inputs and outputs
  would not fit the partition's IPUs (In-Processor-Memory free now) or the service's RAM
  (half of what the kernel reports available): before any input is built.
- :func:`free_bench_tensors` drops the bench tensors from the IPUs: when a bench ends,
  success or failure, and when a partition is removed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from cluster.model.units import format_size
from cluster.service.partitions import RESOURCE_EXHAUSTED, PartitionError
from gcl.collectives import Collective, dtype_itemsize
from gcl.groups import CommGroup
from gcl.planner import replica_groups
from ipu_node.pod import EmulatedPod

BENCH_TENSORS = ("bench.in", "bench.out")  # what ipu_node.bench.run_real stores
RAM_SHARE = 0.5  # a bench may use this share of the RAM available to the service


def available_ram_bytes() -> int | None:
    """``MemAvailable`` of /proc/meminfo (bytes), or None where there is none."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def largest_buffers(coll: Collective, byte_sizes: Sequence[int], dtype: str, n: int) -> tuple[
        int, int]:
    """Bytes of the largest input and output one IPU holds over the sweep (as
    :func:`ipu_node.bench.run_real` builds them)."""
    itemsize = dtype_itemsize(dtype)
    count = max(coll.count_for_bytes(size, n, itemsize) for size in byte_sizes)
    per_replica = count * (n if coll.blocks_per_size and coll.name != "all-gather" else 1)
    in_bytes = per_replica * itemsize
    return in_bytes, max(in_bytes, coll.bytes_for_count(count, n, itemsize))


def check_fits(pod: EmulatedPod, coll: Collective, byte_sizes: Sequence[int], dtype: str,
               ipus: Sequence[int], group: CommGroup) -> None:
    """Refuse (RESOURCE_EXHAUSTED) a real-mode sweep that cannot fit, before building it."""
    n = len(replica_groups(pod.topology, group, np.asarray(ipus, np.int64))[0])
    in_bytes, out_bytes = largest_buffers(coll, byte_sizes, dtype, n)
    per_ipu = in_bytes + out_bytes
    free = _free_memory(pod, ipus)
    if per_ipu > free:
        raise PartitionError(RESOURCE_EXHAUSTED, (
            f"{coll.name} of {format_size(max(byte_sizes))} needs "
            f"{format_size(per_ipu)} per IPU (input and output) but an IPU of the partition "
            f"has {format_size(free)} free: choose a smaller --maxbytes"))
    ram, host_bytes = available_ram_bytes(), len(ipus) * per_ipu
    if ram is not None and host_bytes > RAM_SHARE * ram:
        raise PartitionError(RESOURCE_EXHAUSTED, (
            f"{coll.name} of {format_size(max(byte_sizes))} on {len(ipus)} IPUs needs "
            f"{format_size(host_bytes)} of the service's RAM to place and check, more than "
            f"half the {format_size(ram)} available: choose a smaller --maxbytes or a "
            "smaller partition"))


def _free_memory(pod: EmulatedPod, ipus: Sequence[int]) -> int:
    """The least In-Processor-Memory free (bytes) on any of ``ipus``, as their devices
    report it (the capacity when a device does not answer)."""
    devices = sorted({pod.owner[ipu] for ipu in ipus})
    memory: dict[int, dict[str, int]] = {}
    for stats in pod.stats(deadline_s=30, devices=devices):
        memory.update(stats["memory"])
    capacity = pod.topology.ipu_memory_bytes
    return min(int(memory[i]["free_bytes"]) if i in memory else int(capacity[i]) for i in ipus)


def free_bench_tensors(pod: EmulatedPod, ipus: Sequence[int]) -> None:
    """Drop the bench tensors from ``ipus`` (a round of calls per IPU of a device)."""
    by_device: dict[int, list[int]] = defaultdict(list)
    for ipu in ipus:
        by_device[pod.owner[ipu]].append(int(ipu))
    rounds = max((len(held) for held in by_device.values()), default=0)
    for name in BENCH_TENSORS:
        for k in range(rounds):
            calls = {d: (held[k], name) for d, held in by_device.items() if k < len(held)}
            pod.call("free", calls, deadline_s=60)
