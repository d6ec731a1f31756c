"""A replay in real mode (``ipupod replay TRACE --mode real``): the trace is replayed in
phantom mode first (every figure in simulated seconds, compute included: real mode moves
bytes, it does not compute), then each collective it ran, in the order they started, runs
again on a launched POD's devices with real data: ``comm_size`` bytes of ``--dtype`` per
rank (as ``ipupod bench`` sizes it), over the emulated links, each rank's result checked
element by element against NumPy as bench's check does (inputs of small integers, so any
order of summing is exact). A barrier and a collective on one rank move nothing and are
not run. Up to a POD16 (16 IPUs), each collective up to 128 MiB a rank and within the
IPUs' and this machine's memory as bench estimates it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cluster.errors import UserError, quoted
from cluster.model.topology import Topology
from cluster.model.units import GiB, format_size
from cluster.training.chakra.et_nodes import CommType
from cluster.training.chakra.replay_engine import CollectiveRun, ReplayRecord
from cluster.training.chakra.replay_pricing import GCL_NAMES, ReplayOptions, algorithm_for
from gcl.bench_rows import bench_inputs, count_wrong
from gcl.bench_spec import BenchSpec, SizeRange
from gcl.collectives import CollectiveName, ReduceOp, collective
from gcl.modes import Mode
from ipu_node.bench_fit import device_bytes, device_capacity, host_bytes
from ipu_node.ipu_memory import available_ram_bytes

if TYPE_CHECKING:
    from ipu_node.pod import EmulatedPod

REAL_MAX_IPUS = 16  # a POD16
REAL_MAX_BYTES = 128 * 2**20  # one collective's bytes on one rank


@dataclass(frozen=True)
class RealCollective:
    """One collective as the devices ran it: which, its ranks, the elements each rank
    gave, the elements of all results that differ from NumPy's, its wall seconds and the
    bytes the devices counted on their links."""

    run: CollectiveRun
    elements: int
    wrong: int
    wall_seconds: float
    link_bytes: float


def check_real_topology(topology: Topology) -> None:
    """Refuse, before anything is read or started, a topology larger than a POD16."""
    if topology.ipu_count > REAL_MAX_IPUS:
        raise UserError(f"--mode real replays on up to {REAL_MAX_IPUS} IPUs (a POD16): "
                        f"{topology.name} has {topology.ipu_count:,}; replay it on a "
                        "smaller --topology, or in --mode phantom")


def moving_collectives(record: ReplayRecord) -> list[CollectiveRun]:
    """The collectives of the replay that move bytes, in the order they started, each
    checked to fit real mode (a UserError naming the first that does not)."""
    runs = sorted((run for run in record.collectives
                   if run.detail.comm_type is not CommType.BARRIER and len(run.ranks) > 1
                   and run.detail.size_bytes > 0),
                  key=lambda run: run.start)
    for run in runs:
        if run.detail.size_bytes > REAL_MAX_BYTES:
            raise UserError(f"--mode real moves every collective's bytes through the devices, "
                            f"up to {format_size(REAL_MAX_BYTES)} a rank: collective "
                            f"{run.call} of process group {quoted(run.pg_name or 'default')} "
                            f"({run.detail.comm_type}) has "
                            f"{format_size(run.detail.size_bytes)}; replay it in --mode "
                            "phantom")
    return runs


def check_fits(topology: Topology, runs: list[CollectiveRun], options: ReplayOptions,
               devices_here: bool) -> None:
    """Refuse, before anything starts, a collective of ``runs`` that the IPUs' memory or
    this machine's (the devices' share when they run here, and the check's) has no room
    for, estimated as ``ipupod bench --mode real`` estimates it."""
    capacity, free_ram = device_capacity(topology), available_ram_bytes()
    for run in {(r.detail.comm_type, r.detail.size_bytes, r.ranks): r for r in runs}.values():
        coll = collective(GCL_NAMES[run.detail.comm_type])
        bench = BenchSpec(coll, SizeRange(run.detail.size_bytes, run.detail.size_bytes),
                          Mode.REAL, options.dtype,
                          algorithm=algorithm_for(options.algorithm, coll)).place(topology,
                                                                                  run.ranks)
        what = (f"--mode real: collective {run.call} of process group "
                f"{quoted(run.pg_name or 'default')} ({run.detail.comm_type} of "
                f"{format_size(run.detail.size_bytes)} on {len(run.ranks)} ranks)")
        peak, ipu = device_bytes(bench)[0], min(run.ranks, key=capacity.__getitem__)
        if peak > capacity[ipu]:
            raise UserError(f"{what} needs {peak:,} bytes per IPU but "
                            f"{topology.ipu_name(ipu)} has {capacity[ipu]:,} free: replay it "
                            "in --mode phantom")
        needed = host_bytes(bench, len(run.ranks), len(run.ranks) if devices_here else 0)
        if needed > free_ram:
            raise UserError(f"{what} needs about {needed / GiB:.1f} GiB of this machine's "
                            f"memory but {free_ram / GiB:.1f} GiB is free: replay it in "
                            "--mode phantom, or on a Ray cluster (--ray-address)")


def run_on_devices(pod: EmulatedPod, runs: list[CollectiveRun],
                   options: ReplayOptions) -> list[RealCollective]:
    """Each of ``runs`` on ``pod``'s devices (rank ``r`` on IPU ``r``), with real data,
    checked against NumPy."""
    return [_run_one(pod, run, options) for run in runs]


def _run_one(pod: EmulatedPod, run: CollectiveRun, options: ReplayOptions) -> RealCollective:
    """One collective with bench's inputs; a reduce runs as the all-reduce it is priced as."""
    coll = collective(GCL_NAMES[run.detail.comm_type])
    size, dtype = len(run.ranks), options.dtype
    count = coll.count_for_bytes(run.detail.size_bytes, size, dtype.itemsize)
    blocks = coll.blocks_per_size and coll.name != CollectiveName.ALL_GATHER
    per_rank = count * (size if blocks else 1)  # as bench gives each replica
    inputs = bench_inputs(per_rank, size, dtype)
    result = pod.collective(coll.name, inputs, algorithm=algorithm_for(options.algorithm, coll),
                            ipus=list(run.ranks), op="sum", root=0)
    wrong = count_wrong(result.schedule, result.results, inputs, ReduceOp.SUM, 0)
    return RealCollective(run, per_rank, wrong, result.wall_seconds,
                          float(sum(result.link_type_bytes.values())))


def real_summary(done: list[RealCollective], skipped: int) -> dict[str, Any]:
    """What the devices did, as plain data: each collective, the wrong elements in all,
    the wall seconds in all, and how many collectives moved nothing (not run)."""
    return {"collectives": [{"kind": str(d.run.detail.comm_type), "pg_name": d.run.pg_name,
                             "call": d.run.call, "ranks": list(d.run.ranks),
                             "bytes": d.run.detail.size_bytes, "elements": d.elements,
                             "wrong": d.wrong, "wall_seconds": d.wall_seconds,
                             "device_link_bytes": d.link_bytes} for d in done],
            "wrong": sum(d.wrong for d in done),
            "wall_seconds": sum(d.wall_seconds for d in done),
            "not_run": skipped}
