"""Benchmark rows in real mode: each size runs on a launched POD's devices with real data,
and its results are checked against NumPy (the ``#wrong`` column). The rows, sizes and
table are :mod:`gcl.bench`'s, shared with phantom mode."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from cluster.errors import UserError
from gcl.bench import BenchRow, bench_inputs, count_wrong, make_row
from gcl.collectives import Collective, check_op, dtype_itemsize
from gcl.groups import CommGroup
from gcl.planner import AUTO, replica_groups
from ipu_node.executor import run_collective
from ipu_node.pod import EmulatedPod


def run_real(pod: EmulatedPod, coll: Collective, byte_sizes: list[int], *, dtype: str = "float32",
             op: str = "sum", algorithm_name: str = AUTO, group: CommGroup = CommGroup(),
             root: int = 0, ipus: list[int] | None = None, iterations: int = 1,
             warmup: int = 0, check: bool = True) -> Iterator[BenchRow]:
    """Run each size on the POD's devices with real data and yield its row (``wall`` is the
    collective alone, the mean of ``iterations`` runs after ``warmup`` untimed ones, as
    nccl-tests' ``-n`` and ``-w``; inputs are placed on the IPUs first, the last run's
    results checked after unless ``check`` is off: then ``wrong`` is -1).
    ``ipus``: the replicas' IPUs (default: all)."""
    if iterations < 1 or warmup < 0:
        raise UserError("-n (iterations) is 1 or more and -w (warm-up runs) 0 or more")
    check_op(op)
    itemsize = dtype_itemsize(dtype)
    targets = list(range(pod.topology.ipu_count)) if ipus is None else list(ipus)
    groups = replica_groups(pod.topology, group, np.array(targets))
    n = len(groups[0])
    root = root if coll.name == "broadcast" else 0
    counts = [coll.count_for_bytes(size, n, itemsize) for size in byte_sizes]
    for count in dict.fromkeys(counts):
        per_replica = count * (n if coll.blocks_per_size and coll.name != "all-gather" else 1)
        inputs = bench_inputs(per_replica, len(targets), dtype)
        pod.put("bench.in", inputs, ipus=targets)
        walls = []
        for run in range(warmup + iterations):
            result = run_collective(pod, coll.name, "bench.in", output="bench.out",
                                    algorithm=algorithm_name, group=group, op=op, root=root,
                                    ipus=targets)
            if run >= warmup:
                walls.append(result.wall_seconds)
        wall = sum(walls) / len(walls)
        if not check:
            yield make_row(coll, result.schedule, result.timing, group, op, wall,
                           result.link_type_bytes, -1)
            continue
        outputs = dict(zip(targets, pod.get("bench.out", targets)))
        by_ipu = dict(zip(targets, inputs))
        ordered = [by_ipu[i] for members in result.schedule.groups for i in members.tolist()]
        got = [outputs[i] for members in result.schedule.groups for i in members.tolist()]
        yield make_row(coll, result.schedule, result.timing, group, op, wall,
                       result.link_type_bytes, count_wrong(result.schedule, got, ordered, op, root))
