"""Run a schedule on NumPy arrays in this process: the meaning of a schedule, executable.

This module says how a replica's data is laid into its IPU's buffers (:func:`layout`),
how one transfer lands (:func:`land`), and how the result is read back
(:func:`extract`). The device actors use the same three functions between processes, so
real mode and :func:`run_in_memory` agree bit for bit.

BSP semantics: within a superstep every transfer reads its source as it was when the
superstep began; then the receivers reduce (``op``) or copy, in transfer order. For a
fixed schedule the reduction order is fixed, so results are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from cluster.errors import ScheduleError
from gcl.collectives import DTYPES, CollectiveName, ReduceOp
from gcl.schedule import OUT, WORK, Schedule

_REDUCE = {"sum": np.add, "mean": np.add, "max": np.maximum, "min": np.minimum}
BLOCKED = (CollectiveName.REDUCE_SCATTER, CollectiveName.ALL_TO_ALL)  # inputs of n blocks

Allocator = Callable[[int, type[np.generic]], np.ndarray]
"""``empty(elements, dtype)``: a new, uninitialised 1-D array (``np.empty``, or a pool's)."""


def input_elements(schedule: Schedule) -> int:
    """Elements each replica contributes."""
    return schedule.count * (schedule.group_size if schedule.collective in BLOCKED else 1)


def check_inputs(schedule: Schedule, inputs: list[np.ndarray]) -> None:
    """One array per replica, of the schedule's dtype and size."""
    replicas = sum(len(g) for g in schedule.groups)
    if len(inputs) != replicas:
        raise ScheduleError(f"expected one array per replica ({replicas}), got {len(inputs)}")
    dtype, expected = np.dtype(DTYPES[schedule.dtype]), input_elements(schedule)
    for index, array in enumerate(inputs):
        if array.dtype != dtype:
            raise ScheduleError(f"replica {index} has dtype {array.dtype}, not {dtype}")
        if array.size != expected:
            raise ScheduleError(f"replica {index} has {array.size} elements, not {expected}")


def layout(schedule: Schedule, group: int, rank: int, data: np.ndarray,
           empty: Allocator = np.empty) -> dict[str, np.ndarray]:
    """The ``work`` (and, for all-to-all, ``out``) buffer of rank ``rank`` of group ``group``
    with its input laid in its slots; padding is zero. ``empty(n, dtype)`` allocates (a
    device passes its buffer pool)."""
    owner = schedule.slot_of_rank[group]
    chunk, count, name = schedule.chunk, schedule.count, schedule.collective
    data = np.asarray(data).ravel()
    work = empty(schedule.buffer_elements, DTYPES[schedule.dtype])
    work[count if name in (CollectiveName.ALLREDUCE, CollectiveName.BROADCAST) else 0:] = 0
    if name == CollectiveName.ALLREDUCE or (name == CollectiveName.BROADCAST
                                            and rank == schedule.root):
        work[:count] = data
    elif name in BLOCKED:
        for block in range(len(owner)):
            start = owner[block] * chunk
            work[start:start + count] = data[block * count:(block + 1) * count]
    elif name == CollectiveName.ALL_GATHER:
        work[owner[rank] * chunk:owner[rank] * chunk + count] = data
    buffers = {WORK: work}
    if name == CollectiveName.ALL_TO_ALL:
        out = empty(schedule.buffer_elements, DTYPES[schedule.dtype])
        out[...] = 0
        start = owner[rank] * chunk
        out[start:start + chunk] = work[start:start + chunk]
        buffers[OUT] = out
    return buffers


def land(target: np.ndarray, offset: int, payload: np.ndarray, reduce: bool,
         op: ReduceOp) -> None:
    """Deliver one transfer's payload at ``offset`` of ``target``: reduce with ``op`` or copy."""
    region = target[offset:offset + len(payload)]
    if reduce:
        _REDUCE[op](region, payload, out=region)
    else:
        region[...] = payload


def extract(schedule: Schedule, group: int, rank: int, buffers: dict[str, np.ndarray],
            op: ReduceOp, into: np.ndarray | None = None) -> np.ndarray:
    """Rank ``rank``'s result, without padding (``mean`` divides by the group size); copied
    into ``into`` when it is given and fits (no new memory)."""
    owner = schedule.slot_of_rank[group]
    n, count, chunk, name = len(owner), schedule.count, schedule.chunk, schedule.collective
    work = buffers[WORK]
    # a view only when it is copied into ``into``
    if name in (CollectiveName.ALLREDUCE, CollectiveName.BROADCAST):
        fits = into is not None and into.shape == (count,) and into.dtype == work.dtype
        result = work[:count] if fits else work[:count].copy()
    elif name == CollectiveName.REDUCE_SCATTER:
        result = work[owner[rank] * chunk:owner[rank] * chunk + count].copy()
    else:
        source = work if name == CollectiveName.ALL_GATHER else buffers[OUT]
        result = np.concatenate([source[owner[j] * chunk:owner[j] * chunk + count]
                                 for j in range(n)])
    if op == ReduceOp.MEAN and name in (CollectiveName.ALLREDUCE, CollectiveName.REDUCE_SCATTER):
        result = (result // n) if result.dtype.kind == "i" else (result / n).astype(result.dtype)
    if into is not None and into.shape == result.shape and into.dtype == result.dtype:
        np.copyto(into, result)
        return into
    return result


def run_in_memory(schedule: Schedule, inputs: list[np.ndarray],
                  op: ReduceOp = ReduceOp.SUM) -> list[np.ndarray]:
    """Run ``schedule`` on ``inputs`` (one array per replica, replicas being the groups' IPUs
    in order) and return each replica's result."""
    check_inputs(schedule, inputs)
    ranks = [(g, r, int(ipu)) for g, ipus in enumerate(schedule.groups)
             for r, ipu in enumerate(ipus.tolist())]
    buffers = {ipu: layout(schedule, g, r, inputs[i]) for i, (g, r, ipu) in enumerate(ranks)}
    for phase in schedule.phases:
        for step in range(phase.steps):
            moves = phase.transfers(step)
            payloads = [buffers[s][moves.src_buffer][o:o + c].copy() for s, o, c in zip(
                moves.src.tolist(), moves.src_offset.tolist(), moves.count.tolist())]
            for d, o, payload in zip(moves.dst.tolist(), moves.dst_offset.tolist(), payloads):
                land(buffers[d][moves.dst_buffer], o, payload, moves.reduce, op)
    return [extract(schedule, g, r, buffers[ipu], op) for g, r, ipu in ranks]
