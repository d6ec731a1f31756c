"""The benchmark harness: one loop for every collective, rows like nccl-tests'.

``size count type redop algorithm time algbw busbw wall`` where ``time`` is *simulated*
microseconds on the emulated hardware, ``algbw = size / time`` and ``busbw = algbw x`` the
collective's bus factor (nccl-tests' convention, decimal GB/s), and ``wall`` is how many
seconds of this machine it took to plan and cost the collective.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import numpy as np

from cluster.errors import UserError
from cluster.model.topology import Topology
from cluster.model.units import format_size, plural
from gcl.collectives import DTYPES, Collective, check_op, dtype_itemsize
from gcl.groups import CommGroup
from gcl.planner import AUTO, plan_timed, replica_groups
from gcl.reference import expected

MAX_SIZES = 64
MAX_RANK_LINES = 64  # ranks listed one per line above the table
NO_OP = "none"  # the redop of a collective that reduces nothing (nccl-tests' word)


@dataclass(frozen=True)
class BenchRow:
    """One size of a benchmark sweep (both clocks named: sim_ vs wall_)."""

    collective: str
    bytes: int
    count: int
    type: str
    op: str
    algorithm: str
    group: str
    group_size: int
    sim_seconds: float
    algbw_GBps: float
    busbw_GBps: float
    wall_seconds: float
    phases: list[dict] = field(default_factory=list)
    link_type_bytes: dict[str, float] = field(default_factory=dict)
    wrong: int | None = None  # real mode: result elements that differ from NumPy's


def make_row(coll: Collective, schedule, timing, group: CommGroup, op: str, wall_seconds: float,
             link_type_bytes: dict[str, float], wrong: int | None = None) -> BenchRow:
    """A table row: the schedule's bytes (nccl-tests' size), simulated time and bandwidths."""
    n = schedule.group_size
    nbytes = coll.bytes_for_count(schedule.count, n, schedule.itemsize)
    algbw = nbytes / timing.sim_seconds / 1e9 if timing.sim_seconds > 0 else 0.0
    return BenchRow(
        collective=coll.name, bytes=nbytes, count=nbytes // schedule.itemsize,
        type=schedule.dtype, op=op if coll.reduces else NO_OP, algorithm=schedule.algorithm,
        group=str(group),
        group_size=n, sim_seconds=timing.sim_seconds, algbw_GBps=algbw,
        busbw_GBps=algbw * coll.bus_factor(n) if n > 1 else 0.0, wall_seconds=wall_seconds,
        phases=[{"label": p.label, "scope": p.scope, "steps": p.steps, "sim_seconds": p.seconds}
                for p in timing.phases],
        link_type_bytes=link_type_bytes, wrong=wrong)


def sizes(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """``min, min*f, min*f^2, ...`` up to ``max`` (bytes), as nccl-tests' -b/-e/-f."""
    if min_bytes < 1:
        raise UserError("the smallest size (-b) must be at least 1 byte")
    if max_bytes < min_bytes:
        raise UserError(f"the largest size (-e {max_bytes}) is below the smallest (-b {min_bytes})")
    if min_bytes != max_bytes and not factor > 1:
        raise UserError(f"the size factor (-f) must be more than 1, not {factor}")
    out, size = [], float(min_bytes)
    while size <= max_bytes:
        out.append(int(size))
        if len(out) > MAX_SIZES:
            raise UserError(f"that sweep has more than {MAX_SIZES} sizes: raise -f or narrow -b/-e")
        if min_bytes == max_bytes:
            break
        size *= factor
    return out


def run_phantom(coll: Collective, topology: Topology, byte_sizes: list[int], *,
                dtype: str = "float32", op: str = "sum", algorithm_name: str = AUTO,
                group: CommGroup = CommGroup(), root: int = 0,
                on_phase: Callable[[int, int], None] | None = None,
                ipus: list[int] | None = None) -> Iterator[BenchRow]:
    """Cost each size in phantom mode (sizes only) and yield its row; ``on_phase`` reports
    progress through each size's phases. ``ipus``: the replicas' IPUs (default: all)."""
    check_op(op)
    itemsize = dtype_itemsize(dtype)
    n = len(replica_groups(topology, group, ipus)[0])
    root = root if coll.name == "broadcast" else 0
    counts = [coll.count_for_bytes(size, n, itemsize) for size in byte_sizes]
    for count in dict.fromkeys(counts):  # sizes that round to one buffer: one row
        started = time.perf_counter()
        schedule, timing = plan_timed(coll, topology, count, dtype=dtype,
                                      algorithm_name=algorithm_name, group=group, root=root,
                                      on_phase=on_phase, ipus=ipus)
        yield make_row(coll, schedule, timing, group, op, time.perf_counter() - started,
                       timing.link_type_bytes)


HEADER = (f"{'size(B)':>12} {'count':>12} {'type':>8} {'redop':>6} {'algorithm':>24} "
          f"{'time(us)':>12} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'wall(s)':>9}")
REAL_HEADER = HEADER + f" {'#wrong':>7}"


def table_header(mode: str) -> str:
    """The column names as a comment line (``#wrong`` too in real mode)."""
    return "# " + (REAL_HEADER if mode == "real" else HEADER)[2:]


def format_row(row: BenchRow) -> str:
    """One row of the table, under :func:`table_header`'s columns."""
    line = (f"{row.bytes:>12} {row.count:>12} {row.type:>8} {row.op:>6} {row.algorithm:>24} "
            f"{row.sim_seconds * 1e6:>12.2f} {row.algbw_GBps:>12.2f} {row.busbw_GBps:>12.2f} "
            f"{row.wall_seconds:>9.3f}")
    if row.wrong is None:
        return line
    return line + f" {row.wrong if row.wrong >= 0 else 'N/A':>7}"  # -1: not checked (-c 0)


def bench_inputs(count: int, replicas: int, dtype: str, seed: int = 0) -> list[np.ndarray]:
    """Inputs whose reductions are exact in any order (small integers), as nccl-tests
    chooses, so that ``#wrong`` counts real errors, not rounding."""
    base = np.arange(count, dtype=np.int64)
    return [((base + r + seed) % 8).astype(DTYPES[dtype]) for r in range(replicas)]


def count_wrong(schedule, results: list[np.ndarray], inputs: list[np.ndarray], op: str,
                root: int) -> int:
    """Elements of ``results`` that differ from the NumPy reference."""
    wrong, start = 0, 0
    for members in schedule.groups:
        n = len(members)
        group_inputs = inputs[start:start + n]
        wants = expected(schedule.collective, group_inputs, "sum" if op == "mean" else op, root)
        for got, want in zip(results[start:start + n], wants):
            if op == "mean" and schedule.collective in ("allreduce", "reduce-scatter"):
                want = want // n if want.dtype.kind == "i" else (want / n).astype(want.dtype)
            wrong += int(np.count_nonzero(got != want))
        start += n
    return wrong


def preamble(coll: Collective, topology: Topology, group: CommGroup, mode: str,
             root: int = 0) -> str:
    """The lines above a standalone run's table: topology, mode, groups, clocks, columns."""
    groups = replica_groups(topology, group)
    rooted = f", root {root}" if coll.name == "broadcast" else ""
    return "\n".join([
        f"# ipupod bench {coll.name}: topology {topology.name} "
        f"({plural(topology.ipu_count, 'IPU')}), "
        f"mode {mode}, group {group} ({len(groups)} x {plural(len(groups[0]), 'IPU')}){rooted}",
        *rank_lines(topology, groups),
        "# time, algbw, busbw: simulated on the emulated hardware; wall: seconds on this machine",
        "#",
        table_header(mode),
    ])


def rank_lines(topology: Topology, groups: list[np.ndarray]) -> list[str]:
    """Which IPU each rank runs on, as nccl-tests lists ranks and devices: a line per rank
    up to :data:`MAX_RANK_LINES` ranks, else one line saying how they are laid out."""
    ranks = sum(len(g) for g in groups)
    if ranks > MAX_RANK_LINES:
        first = groups[0].tolist()
        return [f"#  {plural(ranks, 'rank')} in {plural(len(groups), 'group')}; group 0 on "
                f"IPUs {first[0]}, {first[1] if len(first) > 1 else ''}... (listed up to "
                f"{MAX_RANK_LINES} ranks)"]
    return [f"#  Rank {rank:>3} Group {g:>3} on IPU {ipu:>4} {topology.ipu_name(ipu)}"
            for g, members in enumerate(groups) for rank, ipu in enumerate(members.tolist())]


def summary_line(rows: list[BenchRow]) -> str:
    """The line below the table: the average bus bandwidth over the sizes."""
    if not rows:
        return "# no sizes"
    average = sum(r.busbw_GBps for r in rows) / len(rows)
    return (f"# Avg bus bandwidth (simulated): {average:.2f} GB/s over "
            f"{plural(len(rows), 'size')}, "
            f"{format_size(rows[0].bytes)} to {format_size(rows[-1].bytes)} bytes\n"
            f"{out_of_bounds_line(rows)}")


def out_of_bounds_line(rows: list[BenchRow]) -> str:
    """nccl-tests' last line: how many result elements differ from the reference."""
    if any(r.wrong is None for r in rows):
        return "# Out of bounds values : not checked (phantom mode moves no data)"
    if any(r.wrong is not None and r.wrong < 0 for r in rows):
        return "# Out of bounds values : not checked (-c 0)"
    wrong = sum(r.wrong or 0 for r in rows)
    return f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}"


def rows_to_json(rows: list[BenchRow]) -> str:
    """The rows as a JSON list (``--json``)."""
    return json.dumps([asdict(r) for r in rows], indent=2)
