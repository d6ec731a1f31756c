"""Benchmark rows in real mode: each size runs on a launched POD's devices with real data,
out of place then in place as nccl-tests runs them, and each placement's results are
checked against NumPy (the ``#wrong`` columns). The rows, sizes and table are
:mod:`gcl.bench_rows`'s, shared with phantom mode."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from gcl.bench_rows import BenchRow, Measured, bench_input, bench_inputs, count_wrong, make_row
from gcl.bench_spec import PlacedBench
from gcl.collectives import Collective, CollectiveName, DType
from gcl.phantom import Timing
from gcl.schedule import Schedule
from ipu_node.answers import IpuMemoryStats
from ipu_node.executor import CollectiveResult
from ipu_node.known_facts import TensorInfo
from ipu_node.pod import EmulatedPod
from ipu_node.store import TensorStore

BENCH_IN, BENCH_OUT = "bench.in", "bench.out"  # the tensors a bench leaves on the IPUs
BENCH_TENSORS = (BENCH_IN, BENCH_OUT)


def run_real(pod: EmulatedPod, bench: PlacedBench, *,
             on_costed: Callable[[Schedule, Timing], None] | None = None
             ) -> Iterator[BenchRow]:
    """Run each size of ``bench`` on the POD's devices with real data and yield its row:
    out of place (the result in tensor ``bench.out``), then in place (over ``bench.in``).
    Each placement's ``wall`` is the collective alone, the mean of the timed runs after
    the warm-up ones (``bench.spec.runs``, as nccl-tests' ``-n`` and ``-w``); the last
    run's results are checked unless the check is off (then ``wrong`` is -1).
    ``on_costed(schedule, timing)`` hears each size's simulated timing (a trace's,
    :class:`gcl.sweep_trace.SweepTrace`)."""
    spec, targets, n = bench.spec, bench.replicas, bench.group_size
    coll, dtype, runs = spec.collective, spec.dtype, spec.runs
    options: dict[str, Any] = dict(algorithm=spec.algorithm, group=spec.group, op=spec.op,
                                   root=spec.rooted, ipus=targets)
    counts = [coll.count_for_bytes(size, n, dtype.itemsize) for size in bench.byte_sizes]
    for count in dict.fromkeys(counts):
        blocks = coll.blocks_per_size and coll.name != CollectiveName.ALL_GATHER
        per_replica = count * (n if blocks else 1)
        timed = (per_replica, dtype, runs.iterations, runs.warmup)
        inputs = bench_inputs(per_replica, len(targets), dtype) if runs.check else []
        result, wall = _timed(pod, coll, BENCH_OUT, timed, options)
        out_of_place = Measured(wall, _wrong(pod, result, inputs, BENCH_OUT, options)
                                if runs.check else -1)
        free_tensors(pod, [BENCH_OUT], targets)  # room for the in-place runs
        again, wall = _timed(pod, coll, BENCH_IN, timed, options)
        in_place = Measured(wall, _wrong(pod, again, inputs, BENCH_IN, options)
                            if runs.check else -1)
        if on_costed is not None:
            on_costed(result.schedule, result.timing)
        yield make_row(coll, result.schedule, result.timing, spec.group, spec.op,
                       result.link_type_bytes, out_of_place, in_place)


def _timed(pod: EmulatedPod, coll: Collective, output: str, runs: tuple[int, DType, int, int],
           options: dict[str, Any]) -> tuple[CollectiveResult, float]:
    """``runs = (count, dtype, iterations, warmup)``: ``warmup`` then ``iterations`` runs
    from tensor ``bench.in`` (``count`` elements of ``dtype`` per replica) into ``output``;
    the last run and the mean wall seconds of the timed ones. The devices place the inputs
    (untimed): before the first run, and in place before each run, as a run leaves its
    result over them."""
    count, dtype, iterations, warmup = runs
    walls = []
    for run in range(warmup + iterations):
        if run == 0 or output == BENCH_IN:
            _place_inputs(pod, options["ipus"], count, dtype)
        result = pod.collective(coll.name, BENCH_IN, output=output, **options)
        if run >= warmup:
            walls.append(result.wall_seconds)
    return result, sum(walls) / len(walls)


def _place_inputs(pod: EmulatedPod, targets: Sequence[int], count: int, dtype: DType) -> None:
    """Each device builds its replicas' :func:`gcl.bench_rows.bench_input` as tensor
    ``bench.in``: nothing crosses from here, and the tensor is the device's own (writable,
    so an allreduce in place works in it, with no copy). What each device says after it
    (the tensor's shapes, its IPUs' free memory) is what the POD knows of it, so the next
    collective starts in one round trip, as after any collective
    (:mod:`ipu_node.known_facts`)."""
    by_device: dict[int, dict[int, int]] = defaultdict(dict)
    for replica, ipu in enumerate(targets):
        by_device[pod.owner[ipu]][int(ipu)] = replica
    said = pod.call("execute", {d: (_fill, replicas, count, dtype)
                                for d, replicas in by_device.items()}, deadline_seconds=60)
    for device, (tensor, memory) in said.items():
        pod.facts.heard_tensor(device, BENCH_IN, tensor)
        pod.facts.heard_memory(device, memory)


def _fill(store: TensorStore, replicas: dict[int, int], count: int,
          dtype: DType) -> tuple[TensorInfo, dict[int, IpuMemoryStats]]:
    """On a device: store replica ``replicas[ipu]``'s bench input on each IPU ``ipu``;
    then the tensor's shape and dtype on each IPU holding it, and each IPU's memory."""
    for ipu, replica in replicas.items():
        store.put(ipu, BENCH_IN, bench_input(count, replica, dtype))
    return store.info(BENCH_IN), store.memory_stats()


def _wrong(pod: EmulatedPod, result: CollectiveResult, inputs: list[np.ndarray], output: str,
           options: dict[str, Any]) -> int:
    """Elements of tensor ``output`` (on the replicas' IPUs) that differ from NumPy's."""
    targets = options["ipus"]
    outputs = dict(zip(targets, pod.get(output, targets)))
    by_ipu = dict(zip(targets, inputs))
    ordered = [by_ipu[i] for members in result.schedule.groups for i in members.tolist()]
    got = [outputs[i] for members in result.schedule.groups for i in members.tolist()]
    return count_wrong(result.schedule, got, ordered, options["op"], options["root"])


def free_tensors(pod: EmulatedPod, names: Sequence[str], ipus: Sequence[int]) -> None:
    """Drop tensors ``names`` from ``ipus`` where they are held (a round of calls per IPU
    of a device)."""
    by_device: dict[int, list[int]] = defaultdict(list)
    for ipu in ipus:
        by_device[pod.owner[ipu]].append(int(ipu))
    rounds = max((len(held) for held in by_device.values()), default=0)
    for name in names:
        for k in range(rounds):
            calls = {d: (held[k], name) for d, held in by_device.items() if k < len(held)}
            pod.call("free", calls, deadline_seconds=60)
