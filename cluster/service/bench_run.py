"""A benchmark run by the service on a partition: read and checked before any byte moves,
streamed row by row, and leaving nothing behind.

- :func:`read_request` turns a ``BenchmarkRequest`` into what to run, or a user error
  (INVALID_ARGUMENT) saying which field is wrong and what it may be.
- :func:`check_fits` refuses (RESOURCE_EXHAUSTED) a real-mode sweep whose inputs and outputs
  would not fit the partition's IPUs (In-Processor-Memory free now) or the service's RAM
  (half of what the kernel reports available): before any input is built.
- :func:`free_bench_tensors` drops the bench tensors from the IPUs: when a bench ends,
  success or failure, and when a partition is removed.
- :func:`rank_messages` and :func:`row_message`: the ranks' IPUs and the rows, as the API
  sends them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cluster.errors import UserError
from cluster.model.topology import Topology
from cluster.model.units import format_size
from cluster.service.partitions import RESOURCE_EXHAUSTED, Partition, PartitionError
from gcl.bench import BenchRow, check_runs, sizes
from gcl.collectives import Collective, collective, dtype_itemsize
from gcl.groups import CommGroup
from gcl.modes import Mode
from gcl.planner import replica_groups
from ipu_node.bench import BENCH_TENSORS, free_tensors
from ipu_node.pod import EmulatedPod
from ipupod_proto import control_pb2

RAM_SHARE = 0.5  # a bench may use this share of the RAM available to the service


@dataclass(frozen=True)
class BenchPlan:
    """A checked request: which collective, how, over which sizes; ``options`` are the
    keyword arguments of :func:`gcl.bench.run_phantom` (and ``runs`` with them, of
    :func:`ipu_node.bench.run_real`)."""

    coll: Collective
    mode: Mode
    byte_sizes: list[int]
    group: CommGroup
    options: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, Any] = field(default_factory=dict)


def read_request(request: control_pb2.BenchmarkRequest, partition: Partition) -> BenchPlan:
    """What ``request`` asks to run on ``partition``, every field checked (0 or empty
    means the default the .proto gives)."""
    coll = collective(request.collective or "allreduce")
    mode = Mode.parse(request.mode or Mode.PHANTOM.value, option="the mode")
    if not request.min_bytes:
        raise UserError("min_bytes must be 1 or more")
    byte_sizes = sizes(request.min_bytes, request.max_bytes or request.min_bytes,
                       request.factor or 2.0)
    group = CommGroup.parse(request.group or "all")
    iterations = request.iterations or 1
    check_runs(iterations, request.warmup)
    options: dict[str, Any] = dict(
        dtype=request.dtype or "float32", op=request.op or "sum",
        algorithm_name=request.algorithm or "auto", group=group, root=request.root,
        ipus=list(partition.ipus))
    if mode is Mode.REAL:
        dtype_itemsize(options["dtype"])  # a user error for an unknown dtype
    check = request.check if request.HasField("check") else True
    return BenchPlan(coll, mode, byte_sizes, group, options,
                     dict(iterations=iterations, warmup=request.warmup, check=check))


def rank_messages(topology: Topology, group: CommGroup,
                  ipus: Sequence[int]) -> list[control_pb2.RankPlacement]:
    """Every rank of the replica groups on ``ipus`` and the IPU it runs on, group by
    group."""
    return [control_pb2.RankPlacement(group=g, rank=rank, ipu=ipu,
                                      ipu_name=topology.ipu_name(ipu))
            for g, members in enumerate(replica_groups(topology, group, list(ipus)))
            for rank, ipu in enumerate(members.tolist())]


def row_message(row: BenchRow) -> control_pb2.BenchmarkRow:
    """A benchmark row as the API sends it (``wrong`` -1: not counted, in phantom mode or
    with the check off), with the whole row as ``ipupod bench --json`` prints it."""
    return control_pb2.BenchmarkRow(
        bytes=row.bytes, count=row.count, type=row.type, op=row.op, algorithm=row.algorithm,
        sim_seconds=row.sim_seconds, algbw_GBps=row.algbw_GBps, busbw_GBps=row.busbw_GBps,
        wall_seconds=row.wall_seconds, wrong=-1 if row.wrong is None else row.wrong,
        in_place_wall_seconds=row.in_place_wall_seconds,
        in_place_wrong=-1 if row.in_place_wrong is None else row.in_place_wrong,
        json=json.dumps(asdict(row)))


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
    """Refuse (RESOURCE_EXHAUSTED) a real-mode sweep that cannot fit, before building it
    (out of place is the larger: the in-place runs start after ``bench.out`` is freed)."""
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
    """Drop the bench tensors (:data:`ipu_node.bench.BENCH_TENSORS`) from ``ipus``."""
    free_tensors(pod, BENCH_TENSORS, ipus)
