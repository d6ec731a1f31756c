"""Run a schedule on NumPy arrays in this process: the meaning of a schedule, executable.

This is how the data of a collective is laid into the per-IPU buffers, moved superstep by
superstep and read back. Tests use it to prove every schedule computes its collective;
the device executor applies the same :class:`~gcl.schedule.Transfers` between actors.

BSP semantics: within a superstep every transfer reads its source as it was when the
superstep began; then the receivers reduce (``op``) or copy, in transfer order. For a
fixed schedule the reduction order is fixed, so results are deterministic.
"""

from __future__ import annotations

import numpy as np

from cluster.errors import ScheduleError
from gcl.collectives import DTYPES, check_op
from gcl.schedule import OUT, WORK, Schedule

_REDUCE = {"sum": np.add, "mean": np.add, "max": np.maximum, "min": np.minimum}


def _check_inputs(schedule: Schedule, inputs: list[np.ndarray]) -> np.dtype:
    replicas = sum(len(g) for g in schedule.groups)
    if len(inputs) != replicas:
        raise ScheduleError(f"expected one array per replica ({replicas}), got {len(inputs)}")
    dtype = np.dtype(DTYPES[schedule.dtype])
    expected = schedule.count * (schedule.group_size if schedule.collective in (
        "reduce-scatter", "all-to-all") else 1)
    for index, array in enumerate(inputs):
        if array.dtype != dtype:
            raise ScheduleError(f"replica {index} has dtype {array.dtype}, not {dtype}")
        if array.size != expected:
            raise ScheduleError(f"replica {index} has {array.size} elements, not {expected}")
    return dtype


def load_buffers(schedule: Schedule, inputs: list[np.ndarray]) -> dict[str, dict[int, np.ndarray]]:
    """Each IPU's ``work`` (and ``out``) buffer with its replica's input laid in its slots.

    ``inputs[r]`` belongs to replica ``r``; replicas are the groups' IPUs in order.
    """
    dtype = _check_inputs(schedule, inputs)
    size, chunk, count = schedule.buffer_elements, schedule.chunk, schedule.count
    work: dict[int, np.ndarray] = {}
    out: dict[int, np.ndarray] = {}
    replica = 0
    for ipus, owner in zip(schedule.groups, schedule.slot_of_rank):
        for rank, ipu in enumerate(ipus.tolist()):
            data = np.asarray(inputs[replica]).ravel()
            replica += 1
            buffer = np.zeros(size, dtype=dtype)
            name = schedule.collective
            if name in ("allreduce",) or (name == "broadcast" and rank == schedule.root):
                buffer[:count] = data
            elif name == "reduce-scatter" or name == "all-to-all":
                for block in range(len(ipus)):
                    start = owner[block] * chunk
                    buffer[start:start + count] = data[block * count:(block + 1) * count]
            elif name == "all-gather":
                buffer[owner[rank] * chunk:owner[rank] * chunk + count] = data
            work[int(ipu)] = buffer
            if name == "all-to-all":
                out[int(ipu)] = np.zeros(size, dtype=dtype)
                start = owner[rank] * chunk
                out[int(ipu)][start:start + chunk] = buffer[start:start + chunk]
    return {WORK: work, OUT: out}


def run_steps(schedule: Schedule, buffers: dict[str, dict[int, np.ndarray]], op: str) -> None:
    """Apply every superstep of ``schedule`` to ``buffers`` in place."""
    combine = _REDUCE[check_op(op)]
    for phase in schedule.phases:
        for step in range(phase.steps):
            moves = phase.transfers(step)
            source = buffers[moves.src_buffer]
            target = buffers[moves.dst_buffer]
            payloads = [source[s][o:o + c].copy() for s, o, c in zip(
                moves.src.tolist(), moves.src_offset.tolist(), moves.count.tolist())]
            for d, o, c, payload in zip(moves.dst.tolist(), moves.dst_offset.tolist(),
                                        moves.count.tolist(), payloads):
                region = target[d][o:o + c]
                if moves.reduce:
                    combine(region, payload, out=region)
                else:
                    region[...] = payload


def read_results(schedule: Schedule, buffers: dict[str, dict[int, np.ndarray]],
                 op: str) -> list[np.ndarray]:
    """Each replica's result, in replica order, without padding."""
    results = []
    count, chunk = schedule.count, schedule.chunk
    for ipus, owner in zip(schedule.groups, schedule.slot_of_rank):
        n = len(ipus)
        for rank, ipu in enumerate(ipus.tolist()):
            work = buffers[WORK][ipu]
            name = schedule.collective
            if name in ("allreduce", "broadcast"):
                result = work[:count].copy()
            elif name == "reduce-scatter":
                result = work[owner[rank] * chunk:owner[rank] * chunk + count].copy()
            elif name == "all-gather":
                result = np.concatenate([work[owner[j] * chunk:owner[j] * chunk + count]
                                         for j in range(n)])
            else:
                out = buffers[OUT][ipu]
                result = np.concatenate([out[owner[j] * chunk:owner[j] * chunk + count]
                                         for j in range(n)])
            if op == "mean" and name in ("allreduce", "reduce-scatter"):
                result = (result // n) if result.dtype.kind == "i" else (result / n).astype(
                    result.dtype)
            results.append(result)
    return results


def run_in_memory(schedule: Schedule, inputs: list[np.ndarray], op: str = "sum") -> list[np.ndarray]:
    """Run ``schedule`` on ``inputs`` (one array per replica) and return each result."""
    buffers = load_buffers(schedule, inputs)
    run_steps(schedule, buffers, op)
    return read_results(schedule, buffers, op)
