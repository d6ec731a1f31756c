"""A benchmark run by the service on a partition: read and checked before any byte moves,
streamed row by row, and leaving nothing behind.

- :func:`read_request` turns a ``BenchmarkRequest`` into what to run (a
  :class:`gcl.bench_spec.BenchSpec` placed on the partition), or a user error
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
from dataclasses import asdict
from typing import Any

import ray

from cluster.errors import UserError
from cluster.model.topology import Topology
from cluster.service.bench_trace import BenchTrace
from cluster.service.partitions import RESOURCE_EXHAUSTED, Partition, PartitionError
from gcl.bench_rows import BenchRow
from gcl.bench_spec import BenchSpec, PlacedBench, Runs, SizeRange
from gcl.collectives import CollectiveName, DType, ReduceOp, check_op, collective
from gcl.groups import CommGroup
from gcl.modes import Mode
from gcl.planner import AUTO
from ipu_node.answers import IpuMemoryStats
from ipu_node.bench import run_bench
from ipu_node.bench_fit import DoesNotFit, check_devices, check_host, device_capacity
from ipu_node.ipu_memory import available_ram_bytes
from ipu_node.pod import EmulatedPod
from ipu_node.real_bench import BENCH_TENSORS, free_tensors
from ipupod_proto import control_pb2


def read_request(request: control_pb2.BenchmarkRequest, partition: Partition,
                 topology: Topology) -> PlacedBench:
    """What ``request`` asks to run on ``partition`` of ``topology``, every field checked
    (0 or empty means the default the .proto gives), placed on the partition's IPUs."""
    coll = collective(request.collective or CollectiveName.ALLREDUCE)
    mode = Mode.parse(request.mode or Mode.PHANTOM.value, option="the mode")
    if not request.min_bytes:
        raise UserError("min_bytes must be 1 or more")
    size_range = SizeRange(request.min_bytes, request.max_bytes or request.min_bytes,
                           request.factor or 2.0)
    size_range.sizes()  # refused here, before the fields below, as they come in the .proto
    group = CommGroup.parse(request.group) if request.group else CommGroup()
    runs = Runs(request.iterations or 1, request.warmup,
                request.check if request.HasField("check") else True)
    spec = BenchSpec(coll, size_range, mode, DType.parse(request.dtype or DType.FLOAT32),
                     check_op(request.op or ReduceOp.SUM), request.algorithm or AUTO, group,
                     request.root, runs)
    return spec.place(topology, partition.ipus)


def rank_messages(bench: PlacedBench) -> list[control_pb2.RankPlacement]:
    """Every rank of ``bench``'s replica groups and the IPU it runs on, group by group."""
    return [control_pb2.RankPlacement(group=g, rank=rank, ipu=ipu,
                                      ipu_name=bench.topology.ipu_name(ipu))
            for g, members in enumerate(bench.groups)
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


def check_fits(pod: EmulatedPod, bench: PlacedBench) -> None:
    """Refuse a real-mode sweep that cannot fit, before any input is built: phantom mode's
    planning of its largest size (INVALID_ARGUMENT, as in phantom mode), then the IPUs'
    free memory and this machine's (RESOURCE_EXHAUSTED; :mod:`ipu_node.bench_fit`)."""
    ipus = bench.replicas
    free = _free_memory(pod, ipus)
    try:
        check_devices(bench, free)
        check_host(bench, len(ipus), _ipus_here(pod, ipus), available_ram_bytes(),
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


def real_rows(pod: EmulatedPod, lock: AbstractContextManager[Any], bench: PlacedBench,
              traced: BenchTrace | None) -> Iterator[BenchRow]:
    """Real-mode rows, one bench at a time on the devices (holding ``lock``); the bench's
    wall-clock trace is gathered and its tensors freed when it ends, however it ends."""
    with lock:
        if traced:
            traced.start(pod)
        try:
            yield from run_bench(bench, pod, on_costed=traced.add if traced else None)
        except BaseException:
            with contextlib.suppress(Exception):  # the failure to report is the bench's
                _end_bench(pod, bench, traced)
            raise
        _end_bench(pod, bench, traced)


def _end_bench(pod: EmulatedPod, bench: PlacedBench, traced: BenchTrace | None) -> None:
    """Gather the bench's wall-clock trace (if asked) and free its tensors."""
    if traced:
        traced.stop(pod)
    free_bench_tensors(pod, bench.replicas)
