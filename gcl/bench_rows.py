"""The benchmark harness: one loop for every collective, rows like nccl-tests' (as data;
``ipupod bench`` prints them as its table).

A row is one size: its bytes (nccl-tests' size), element count, type, reduction op and
algorithm; the *simulated* seconds on the emulated hardware, ``algbw = size / time`` and
``busbw = algbw x`` the collective's bus factor (nccl-tests' convention, decimal GB/s),
the same for both placements by construction (the schedule does not depend on where the
result goes: out of place, in a tensor of its own, or in place, over the input). Each
placement's ``wall`` is seconds of this machine: in real mode the collective on the
devices, measured for each; in phantom mode the planning and costing, done once for both.
``wrong`` counts result elements that differ from NumPy's (real mode).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from cluster.model.units import plural
from gcl.bench_spec import PlacedBench
from gcl.collectives import DTYPES, Collective, CollectiveName, DType, ReduceOp
from gcl.groups import CommGroup
from gcl.phantom import Timing
from gcl.planner import plan_timed
from gcl.reference import expected
from gcl.schedule import Schedule

NO_OP = "none"  # the redop of a collective that reduces nothing (nccl-tests' word)


@dataclass(frozen=True)
class BenchRow:
    """One size of a benchmark sweep (both clocks named: sim_ vs wall_). The simulated
    figures hold for both placements; ``wall_seconds`` and ``wrong`` are the out-of-place
    run's, ``in_place_wall_seconds`` and ``in_place_wrong`` the in-place run's. ``wrong``:
    result elements that differ from NumPy's; None in phantom mode (no data), -1 when the
    check was off (``-c 0``). ``op`` is a :class:`ReduceOp`'s name, or ``none``."""

    collective: CollectiveName
    bytes: int
    count: int
    type: DType
    op: str
    algorithm: str
    group: str
    group_size: int
    sim_seconds: float
    algbw_GBps: float
    busbw_GBps: float
    wall_seconds: float
    in_place_wall_seconds: float
    phases: list[dict] = field(default_factory=list)
    link_type_bytes: dict[str, float] = field(default_factory=dict)
    wrong: int | None = None
    in_place_wrong: int | None = None


@dataclass(frozen=True)
class Measured:
    """What one placement (out of place or in place) of a size cost on this machine: wall
    seconds (the mean of the timed runs) and wrong elements (see :class:`BenchRow`)."""

    wall_seconds: float
    wrong: int | None = None


def make_row(coll: Collective, schedule: Schedule, timing: Timing, group: CommGroup, op: ReduceOp,
             link_type_bytes: dict[str, float], out_of_place: Measured,
             in_place: Measured | None = None) -> BenchRow:
    """A table row: the schedule's bytes (nccl-tests' size), simulated time and bandwidths,
    and each placement's measurements (``in_place`` None: the one costing stands for both,
    as in phantom mode)."""
    in_place = in_place or out_of_place
    n = schedule.group_size
    nbytes = coll.bytes_for_count(schedule.count, n, schedule.itemsize)
    algbw = nbytes / timing.sim_seconds / 1e9 if timing.sim_seconds > 0 else 0.0
    return BenchRow(
        collective=coll.name, bytes=nbytes, count=nbytes // schedule.itemsize,
        type=schedule.dtype, op=op if coll.reduces else NO_OP, algorithm=schedule.algorithm,
        group=str(group),
        group_size=n, sim_seconds=timing.sim_seconds, algbw_GBps=algbw,
        busbw_GBps=algbw * coll.bus_factor(n) if n > 1 else 0.0,
        wall_seconds=out_of_place.wall_seconds, in_place_wall_seconds=in_place.wall_seconds,
        phases=[{"label": p.label, "scope": p.scope, "steps": p.steps, "sim_seconds": p.seconds}
                for p in timing.phases],
        link_type_bytes=link_type_bytes, wrong=out_of_place.wrong, in_place_wrong=in_place.wrong)


def size_notes(coll: Collective, requested: Sequence[int], n: int, dtype: DType) -> list[str]:
    """A ``note:`` line when a size of the sweep does not run as asked: a collective moves
    whole elements (per block, on ``n`` ranks, for reduce-scatter, all-gather and
    all-to-all), so a size rounds down to whole elements as nccl-tests rounds it, but to
    at least one (nccl-tests would run none); sizes that round alike run once."""
    itemsize = dtype.itemsize
    ran = [coll.bytes_for_count(coll.count_for_bytes(size, n, itemsize), n, itemsize)
           for size in requested]
    changed = [(size, got) for size, got in zip(requested, ran) if got != size]
    if not changed:
        return []
    shown = ", ".join(f"{_option(size, requested)}{' ran' if not k else ''} as {got:,} "
                      f"bytes ({_elements(coll, got, n, itemsize, dtype)})"
                      for k, (size, got) in enumerate(changed[:3]))
    more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
    unit = (f"{n} blocks of whole {itemsize}-byte elements" if coll.blocks_per_size
            else f"whole {itemsize}-byte elements")
    merged = len(set(ran)) < len(ran)
    rows = (f" ({plural(len(set(ran)), 'row')} for {len(ran)} sizes: sizes that round alike "
            "run once)" if merged else "")
    return [f"note: {shown}{more}: {coll.name} moves {unit}, so a size rounds down to whole "
            f"elements as in nccl-tests, but to at least one; the size column shows what ran"
            f"{rows}"]


def _option(size: int, requested: Sequence[int]) -> str:
    """``-b 3`` for the sweep's first size, else ``3``."""
    return f"-b {size:,}" if size == requested[0] else f"{size:,}"


def _elements(coll: Collective, nbytes: int, n: int, itemsize: int, dtype: DType) -> str:
    """``1 float32 element`` (per block on ``n`` ranks for a blocked collective)."""
    count = nbytes // itemsize // (n if coll.blocks_per_size else 1)
    words = plural(count, f"{dtype} element")
    return f"{n} blocks of {words}" if coll.blocks_per_size else words


def run_phantom(bench: PlacedBench, *, on_phase: Callable[[int, int], None] | None = None,
                on_costed: Callable[[Schedule, Timing], None] | None = None,
                ) -> Iterator[BenchRow]:
    """Cost each size of ``bench`` in phantom mode (sizes only) and yield its row;
    ``on_phase`` reports progress through each size's phases, ``on_costed`` gets each
    size's schedule and timing (a trace)."""
    spec = bench.spec
    coll, itemsize = spec.collective, spec.dtype.itemsize
    counts = [coll.count_for_bytes(size, bench.group_size, itemsize) for size in bench.byte_sizes]
    for count in dict.fromkeys(counts):  # sizes that round to one buffer: one row
        started = time.perf_counter()
        schedule, timing = plan_timed(coll, bench.topology, count, dtype=spec.dtype,
                                      algorithm_name=spec.algorithm, group=spec.group,
                                      root=spec.rooted, on_phase=on_phase,
                                      groups=bench.groups)
        if on_costed is not None:
            on_costed(schedule, timing)
        yield make_row(coll, schedule, timing, spec.group, spec.op, timing.link_type_bytes,
                       Measured(time.perf_counter() - started))


def bench_inputs(count: int, replicas: int, dtype: DType, seed: int = 0) -> list[np.ndarray]:
    """Inputs whose reductions are exact in any order (small integers), as nccl-tests
    chooses, so that ``#wrong`` counts real errors, not rounding."""
    return [bench_input(count, r, dtype, seed) for r in range(replicas)]


def bench_input(count: int, replica: int, dtype: DType, seed: int = 0) -> np.ndarray:
    """Replica ``replica``'s input of :func:`bench_inputs` (a device builds its own)."""
    return ((np.arange(count, dtype=np.int64) + replica + seed) % 8).astype(DTYPES[dtype])


def count_wrong(schedule: Schedule, results: list[np.ndarray], inputs: list[np.ndarray],
                op: ReduceOp, root: int) -> int:
    """Elements of ``results`` that differ from the NumPy reference."""
    wrong, start = 0, 0
    for members in schedule.groups:
        n = len(members)
        group_inputs = inputs[start:start + n]
        summed = ReduceOp.SUM if op == ReduceOp.MEAN else op
        wants = expected(schedule.collective, group_inputs, summed, root)
        for got, want in zip(results[start:start + n], wants):
            if op == ReduceOp.MEAN and schedule.collective in (CollectiveName.ALLREDUCE,
                                                              CollectiveName.REDUCE_SCATTER):
                want = want // n if want.dtype.kind == "i" else (want / n).astype(want.dtype)
            wrong += int(np.count_nonzero(got != want))
        start += n
    return wrong


