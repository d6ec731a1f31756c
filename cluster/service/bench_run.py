"""A benchmark run by the service on a partition: read and checked before any byte moves,
streamed row by row, and leaving nothing behind.

- :func:`read_request` turns a ``BenchmarkRequest`` into what to run, or a user error
  (INVALID_ARGUMENT) saying which field is wrong and what it may be.
- :func:`check_fits` refuses a real-mode sweep that would not fit, before any input is
  built: phantom mode's check of the largest size (INVALID_ARGUMENT), then the partition's
  IPUs (their memory free now) and this machine's free memory for the devices that run on
  it and the results checked here (RESOURCE_EXHAUSTED; :mod:`ipu_node.bench_fit`).
- :func:`free_bench_tensors` drops the bench tensors from the IPUs: when a bench ends,
  success or failure, and when a partition is removed.
- :func:`rank_messages` and :func:`row_message`: the ranks' IPUs and the rows, as the API
  sends them.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from typing import Any

import ray

from cluster.errors import UserError
from cluster.model.topology import Topology
from cluster.service.bench_trace import BenchTrace
from cluster.service.partitions import RESOURCE_EXHAUSTED, Partition, PartitionError
from gcl.bench_rows import BenchRow, check_runs, sizes
from gcl.collectives import Collective, CollectiveName, ReduceOp, collective, dtype_itemsize
from gcl.groups import CommGroup
from gcl.modes import Mode
from gcl.planner import AUTO, replica_groups
from ipu_node.answers import IpuMemoryStats
from ipu_node.bench_fit import (
    DoesNotFit,
    RealSweep,
    check_devices,
    check_host,
    device_capacity,
)
from ipu_node.ipu_memory import available_ram_bytes
from ipu_node.pod import EmulatedPod
from ipu_node.real_bench import BENCH_TENSORS, free_tensors, run_real
from ipupod_proto import control_pb2


@dataclass(frozen=True)
class BenchPlan:
    """A checked request: which collective, how, over which sizes; ``options`` are the
    keyword arguments of :func:`gcl.bench_rows.run_phantom` (and ``runs`` with them, of
    :func:`ipu_node.real_bench.run_real`)."""

    coll: Collective
    mode: Mode
    byte_sizes: list[int]
    group: CommGroup
    options: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, Any] = field(default_factory=dict)


def read_request(request: control_pb2.BenchmarkRequest, partition: Partition) -> BenchPlan:
    """What ``request`` asks to run on ``partition``, every field checked (0 or empty
    means the default the .proto gives)."""
    coll = collective(request.collective or CollectiveName.ALLREDUCE)
    mode = Mode.parse(request.mode or Mode.PHANTOM.value, option="the mode")
    if not request.min_bytes:
        raise UserError("min_bytes must be 1 or more")
    byte_sizes = sizes(request.min_bytes, request.max_bytes or request.min_bytes,
                       request.factor or 2.0)
    group = CommGroup.parse(request.group) if request.group else CommGroup()
    iterations = request.iterations or 1
    check_runs(iterations, request.warmup)
    options: dict[str, Any] = dict(
        dtype=request.dtype or "float32", op=request.op or ReduceOp.SUM,
        algorithm_name=request.algorithm or AUTO, group=group, root=request.root,
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


def check_fits(pod: EmulatedPod, bench: BenchPlan) -> None:
    """Refuse a real-mode sweep that cannot fit, before any input is built: phantom mode's
    planning of its largest size (INVALID_ARGUMENT, as in phantom mode), then the IPUs'
    free memory and this machine's (RESOURCE_EXHAUSTED; :mod:`ipu_node.bench_fit`)."""
    ipus = list(bench.options["ipus"])
    sweep = RealSweep(bench.coll, bench.byte_sizes, dtype=bench.options["dtype"],
                      algorithm_name=bench.options["algorithm_name"], group=bench.group,
                      root=bench.options["root"], ipus=ipus,
                      runs=bench.runs["iterations"] + bench.runs["warmup"],
                      check=bench.runs["check"])
    free = _free_memory(pod, ipus)
    try:
        check_devices(sweep, pod.topology, free)
        check_host(sweep, len(ipus), _ipus_here(pod, ipus), available_ram_bytes(),
                   "use phantom mode (sizes only), or a smaller partition")
    except DoesNotFit as error:
        raise PartitionError(RESOURCE_EXHAUSTED, str(error)) from None


def _ipus_here(pod: EmulatedPod, ipus: Sequence[int]) -> int:
    """How many of ``ipus`` have their device on this machine (Ray's node of this
    process)."""
    here = ray.get_runtime_context().get_node_id()
    nodes = pod.nodes()
    return sum(1 for ipu in ipus if nodes[pod.specs[pod.owner[ipu]].name] == here)


def _free_memory(pod: EmulatedPod, ipus: Sequence[int]) -> dict[int, int]:
    """Per IPU of ``ipus``, the memory free (bytes) as its device reports it (In-Processor
    and Streaming Memory; the capacity when a device does not answer)."""
    devices = sorted({pod.owner[ipu] for ipu in ipus})
    memory: dict[int, IpuMemoryStats] = {}
    for stats in pod.stats(deadline_seconds=30, devices=devices):
        memory.update(stats["memory"])
    capacity = device_capacity(pod.topology)
    return {i: int(memory[i]["free_bytes"]) if i in memory else capacity[i] for i in ipus}


def free_bench_tensors(pod: EmulatedPod, ipus: Sequence[int]) -> None:
    """Drop the bench tensors (:data:`ipu_node.real_bench.BENCH_TENSORS`) from ``ipus``."""
    free_tensors(pod, BENCH_TENSORS, ipus)


def real_rows(pod: EmulatedPod, lock: AbstractContextManager[Any], bench: BenchPlan,
              traced: BenchTrace | None) -> Iterator[BenchRow]:
    """Real-mode rows, one bench at a time on the devices (holding ``lock``); the bench's
    wall-clock trace is gathered and its tensors freed when it ends, however it ends."""
    with lock:
        if traced:
            traced.start(pod)
        try:
            yield from run_real(pod, bench.coll, bench.byte_sizes, **bench.options,
                                on_costed=traced.add if traced else None, **bench.runs)
        except BaseException:
            with contextlib.suppress(Exception):  # the failure to report is the bench's
                _end_bench(pod, bench, traced)
            raise
        _end_bench(pod, bench, traced)


def _end_bench(pod: EmulatedPod, bench: BenchPlan, traced: BenchTrace | None) -> None:
    """Gather the bench's wall-clock trace (if asked) and free its tensors."""
    if traced:
        traced.stop(pod)
    free_bench_tensors(pod, bench.options["ipus"])
