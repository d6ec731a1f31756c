"""Whether a real-mode bench sweep fits, decided before any device starts or any buffer is
built: the emulated IPUs' memory, then this machine's. No Ray here, so a refusal starts
nothing (``ipupod bench --mode real`` checks before it imports Ray; the service checks
before it builds any input).

1. The phantom check: the sweep's largest size is planned as phantom mode plans it, so a
   buffer larger than an IPU's In-Processor-Memory gets the same one-line refusal.
2. The IPU's memory as the devices account it (In-Processor plus Streaming Memory):
   input, output and the collective's working buffers together (:func:`device_bytes`).
3. This machine's free memory against :data:`HOST_BYTES_PER_BYTE`, measured.
"""

from __future__ import annotations

from collections.abc import Sequence

from cluster.errors import UserError
from cluster.model.topology import Topology
from cluster.model.units import format_size
from cluster.setting_names import SETTING_NAMES
from gcl.bench_spec import PlacedBench
from gcl.collectives import Collective, CollectiveName, DType
from gcl.planner import plan
from ipu_node.device_spec import device_specs
from ipu_node.ipu_memory import available_ram_bytes

# Peak resident bytes a real-mode sweep adds on this machine, per IPU and byte of the
# sweep's largest size: (the device actors: input, output, working buffers, link copies,
# spare buffers kept from smaller sizes; the driver: the inputs and results it checks,
# the NumPy reference). Measured with benchmarks/bench_memory.py on pod16 (sweeps up to 24
# MiB and 48 MiB with -c 1, and up to 48 MiB with -c 0; the processes' VmRSS summed every
# 5 ms): the highest of the runs, times 1.2 (the sampling can miss a peak), rounded up to
# a half. docs/real-mode.md has the figures.
HOST_BYTES_PER_BYTE: dict[str, tuple[float, float]] = {
    CollectiveName.ALLREDUCE: (8.5, 4.5),
    CollectiveName.REDUCE_SCATTER: (6.0, 3.0),
    CollectiveName.ALL_GATHER: (8.0, 2.5),
    CollectiveName.BROADCAST: (9.5, 4.0),
    CollectiveName.ALL_TO_ALL: (10.0, 5.0),
}
GiB = 1 << 30


class DoesNotFit(UserError):
    """A real-mode sweep that would not fit the IPUs' or this machine's memory."""


def largest_buffers(coll: Collective, byte_sizes: Sequence[int], dtype: DType,
                    n: int) -> tuple[int, int]:
    """Bytes of the largest input and output one IPU holds over the sweep (as
    :func:`ipu_node.real_bench.run_real` builds them), ``n`` ranks per group."""
    itemsize = dtype.itemsize
    count = max(coll.count_for_bytes(size, n, itemsize) for size in byte_sizes)
    blocks = coll.blocks_per_size and coll.name != CollectiveName.ALL_GATHER
    per_replica = count * (n if blocks else 1)
    in_bytes = per_replica * itemsize
    return in_bytes, max(in_bytes, coll.bytes_for_count(count, n, itemsize))


def device_bytes(bench: PlacedBench) -> tuple[int, int, int, int]:
    """An IPU's peak bytes over the sweep, as its device accounts them, and its parts
    (input, output, working buffers). Runs phantom mode's planning of the largest size
    first (its refusal, word for word, if a buffer cannot fit In-Processor-Memory). Out of
    place, the first run holds the input and the working buffers, then the input and the
    output; a later run holds all three. In place the output is the input."""
    spec, n = bench.spec, bench.group_size
    coll = spec.collective
    count = max(coll.count_for_bytes(size, n, spec.dtype.itemsize) for size in bench.byte_sizes)
    schedule = plan(coll, bench.topology, count, dtype=spec.dtype,
                    algorithm_name=spec.algorithm, group=spec.group, groups=bench.groups,
                    root=spec.rooted)
    copies = 2 if coll.name == CollectiveName.ALL_TO_ALL else 1
    work = schedule.buffer_elements * schedule.itemsize * copies
    in_bytes, out_bytes = largest_buffers(coll, bench.byte_sizes, spec.dtype, n)
    peak = in_bytes + max(out_bytes, work + (out_bytes if spec.runs.total > 1 else 0))
    return peak, in_bytes, out_bytes, work


def device_capacity(topology: Topology) -> dict[int, int]:
    """Per IPU, the bytes its device accounts before anything is held: In-Processor-Memory
    and, on an IPU-M2000, its share of Streaming Memory."""
    streaming = {ipu: spec.streaming_bytes_per_ipu for spec in device_specs(topology)
                 for ipu in spec.ipus}
    return {ipu: int(topology.ipu_memory_bytes[ipu]) + streaming.get(ipu, 0)
            for ipu in range(topology.ipu_count)}


def check_devices(bench: PlacedBench, free: dict[int, int]) -> None:
    """Refuse a sweep whose largest size an IPU of ``bench`` has no room for (``free``:
    bytes per IPU, as the devices account them)."""
    peak, in_bytes, out_bytes, work = device_bytes(bench)
    ipu = min(bench.replicas, key=lambda i: free[i])
    if peak > free[ipu]:
        size, name = max(bench.byte_sizes), bench.topology.ipu_name(ipu)
        raise DoesNotFit(
            f"{bench.spec.collective.name} of {format_size(size)} in real mode needs "
            f"{peak:,} bytes per IPU (input {in_bytes:,}, output {out_bytes:,}, working "
            f"buffers {work:,}) but {name} has {free[ipu]:,} bytes free (In-Processor-Memory, and "
            f"Streaming Memory on an IPU-M2000): {_smaller(size, free[ipu] / peak)}, or "
            "phantom mode (sizes only)")


def host_bytes(bench: PlacedBench, ipus: int, devices_here: int) -> int:
    """Bytes of this machine's memory the sweep takes at its largest size: the devices'
    share for ``devices_here`` of its ``ipus`` replicas (those whose device runs on this
    machine), and the driver's for all of them when it checks the results."""
    devices, driver = HOST_BYTES_PER_BYTE[bench.spec.collective.name]
    checked = ipus if bench.spec.runs.check else 0
    return int(max(bench.byte_sizes) * (devices * devices_here + driver * checked))


def check_host(bench: PlacedBench, ipus: int, devices_here: int, free_bytes: int,
               what_to_do: str) -> None:
    """Refuse a sweep that needs more of this machine's memory than ``free_bytes``;
    ``ipus``: the replicas; ``what_to_do`` ends the message."""
    needed = host_bytes(bench, ipus, devices_here)
    if needed <= free_bytes:
        return
    largest = max(bench.byte_sizes)
    raise DoesNotFit(
        f"{bench.spec.collective.name} of {format_size(largest)} on {ipus} IPUs in real mode needs "
        f"about {needed / GiB:.1f} GiB of this machine's memory "
        f"({_per_byte(bench, devices_here)}) but {free_bytes / GiB:.1f} GiB is free: "
        f"{_smaller(largest, free_bytes / needed)}, " + what_to_do)


def _per_byte(bench: PlacedBench, devices_here: int) -> str:
    """How the estimate is made, in a few words."""
    devices, driver = HOST_BYTES_PER_BYTE[bench.spec.collective.name]
    parts = []
    if devices_here:
        parts.append(f"{devices:g} x the size per IPU for the devices")
    if bench.spec.runs.check:
        parts.append(f"{driver:g} x per IPU to check the results, which -c 0 skips")
    return ", ".join(parts) + ", as measured"


def _smaller(largest: int, share: float) -> str:
    """What to choose instead of a largest size of ``largest`` bytes of which ``share``
    fits: the largest power of two that does, as a -e option."""
    fits = int(largest * share)
    if fits < 1:
        return f"choose a smaller {SETTING_NAMES['max_bytes']}"
    size = format_size(1 << (fits.bit_length() - 1))
    return f"choose {SETTING_NAMES['max_bytes']} {size} or less"


def check_here(bench: PlacedBench, devices_here: bool) -> None:
    """``ipupod bench --mode real`` before anything starts: the phantom check, the
    devices' memory, this machine's free memory (the devices' share only when they will
    run here, on a local Ray; with a Ray cluster they are the cluster's to hold)."""
    check_devices(bench, device_capacity(bench.topology))
    ipus = len(bench.replicas)
    check_host(bench, ipus, ipus if devices_here else 0, available_ram_bytes(),
               "use phantom mode (sizes only, any size), or a Ray cluster "
               f"({SETTING_NAMES['ray_address']})")
