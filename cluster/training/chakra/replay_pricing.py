"""What each node of a replayed trace costs on the topology, in simulated seconds, with the
bytes it puts on each directed link; every distinct question is priced once (cached by
kind, size and IPUs), so a trace of many identical steps prices each collective once.

- COMP: its ``duration_micros`` (``--compute trace``; its ``duration_seconds`` attribute
  instead where it has one, as ipupod's export writes), or its ``num_ops`` FLOPs over the
  IPU's float16 peak times the dense-layer efficiency the training pricing uses
  (``--compute ipu``); each falls back to the other, and a node with neither is 0 s.
- COMM_COLL: GCL's schedule on the group's IPUs (or on several groups at once, as replica
  groups), timed by the cost model (:func:`gcl.planner.plan_timed`), exactly as ``ipupod
  bench`` prices that collective, ``comm_size`` taken as bench's size; a reduce as an
  all-reduce (GCL has no reduce to one root), a barrier as one sync (local within an
  IPU-Link domain, else global).
- COMM_SEND: one transfer over the route between the two IPUs, a superstep of the cost
  model (as the training pricing prices a pipeline's boundary).
- MEM_LOAD / MEM_STORE: the bytes over an IPU-M2000's link to its Streaming Memory (PCIe
  Gen4 x16, as the training pricing streams optimiser state), or over the host link for
  IPUs without it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cluster.errors import ScheduleError
from cluster.model.costmodel import superstep_cost
from cluster.model.hardware import DeviceKind, pcie_gen4_x16
from cluster.model.routing import router_of
from cluster.model.text_enum import TextEnum
from cluster.model.topology import Topology
from cluster.training.chakra.et_nodes import ChakraNode, Collective, CommType, Compute
from cluster.training.step_timing import host_io_seconds
from cluster.training.workloads import DEFAULT_EFFICIENCIES, peak_flops_per_second
from cluster.training.workloads.layers import DType as ComputeDType
from gcl.algorithms import algorithm as checked_algorithm
from gcl.collectives import COLLECTIVES, DType, collective
from gcl.collectives import Collective as GclCollective
from gcl.planner import AUTO, plan_timed
from gcl.schedule import Schedule

GCL_NAMES = {CommType.ALL_REDUCE: "allreduce", CommType.REDUCE: "allreduce",
             CommType.REDUCE_SCATTER: "reduce-scatter", CommType.ALL_GATHER: "all-gather",
             CommType.BROADCAST: "broadcast", CommType.ALL_TO_ALL: "all-to-all"}
COMPUTE_EFFICIENCY = DEFAULT_EFFICIENCIES.dense  # --compute ipu: a dense layer's fraction
NO_LINKS = (np.zeros(0, dtype=np.int64), np.zeros(0))


class ComputeSource(TextEnum):
    """Where a COMP node's time comes from: the trace's durations, or its FLOPs priced."""

    TRACE = "trace"
    IPU = "ipu"


@dataclass(frozen=True)
class ReplayOptions:
    """How a trace is replayed: compute from the trace or the IPU, GCL's algorithm
    (``auto``: the fastest for each collective; a named one where it runs the collective,
    auto elsewhere), the element type collectives move, and ``--ranks-to``."""

    compute: ComputeSource = ComputeSource.TRACE
    algorithm: str = AUTO
    dtype: DType = DType.FLOAT32
    ranks_to: int | None = None

    def __post_init__(self) -> None:
        if self.algorithm != AUTO:
            _check_known(self.algorithm)


def _check_known(name: str) -> None:
    """Refuse an algorithm GCL does not know (by name or alias) that runs no collective."""
    refusals = []
    for known in COLLECTIVES.values():
        try:
            checked_algorithm(name, known)
            return
        except ScheduleError as error:
            refusals.append(error)
    raise refusals[0]


@dataclass(frozen=True)
class Priced:
    """A communication's simulated seconds, the algorithm that ran it (``""``: none), and
    the bytes it puts on each directed link (``links``, ``link_bytes``)."""

    seconds: float
    algorithm: str
    links: np.ndarray
    link_bytes: np.ndarray


class ReplayPricer:
    """Prices nodes on one topology with one set of options, each question once."""

    def __init__(self, topology: Topology, options: ReplayOptions) -> None:
        self.topology = topology
        self.options = options
        self._collectives: dict[tuple[CommType, int, tuple[tuple[int, ...], ...]], Priced] = {}
        self._transfers: dict[tuple[int, int, int], Priced] = {}
        self._memory: dict[tuple[int, int], float] = {}
        streaming = [u.ipus for u in topology.units if u.kind == DeviceKind.IPU_M2000]
        self._streaming = {int(ipu) for ipus in streaming for ipu in ipus}

    def compute_seconds(self, node: ChakraNode, ipu: int) -> tuple[float, bool]:
        """A COMP node's seconds on IPU ``ipu``, and whether it had any time to give."""
        detail = node.detail
        num_ops = detail.num_ops if isinstance(detail, Compute) else None
        exact = detail.duration_seconds if isinstance(detail, Compute) else None
        traced = node.duration_micros / 1e6 if exact is None else exact
        if self.options.compute is ComputeSource.TRACE and (exact is not None
                                                            or node.duration_micros):
            return traced, True
        if num_ops is not None:
            processor = self.topology.ipu_processors[ipu]
            peak = peak_flops_per_second(processor, ComputeDType.FLOAT16)
            return num_ops / (peak * COMPUTE_EFFICIENCY), True
        return traced, node.duration_micros > 0

    def collective(self, detail: Collective, groups: tuple[tuple[int, ...], ...]) -> Priced:
        """A collective run at once on each of ``groups`` (disjoint, of one size; each its
        IPUs in rank order), priced as one schedule: GCL's replica groups, sharing the
        network as ``ipupod bench --group`` prices them."""
        key = (detail.comm_type, detail.size_bytes, groups)
        if key not in self._collectives:
            self._collectives[key] = self._price_collective(detail, groups)
        return self._collectives[key]

    def _price_collective(self, detail: Collective,
                          groups: tuple[tuple[int, ...], ...]) -> Priced:
        size = len(groups[0])
        if size < 2:
            return Priced(0.0, "", *NO_LINKS)
        if detail.comm_type is CommType.BARRIER:
            router = router_of(self.topology)
            ipus = np.asarray(groups, dtype=np.int64)
            local = bool(router.same_domain(ipus[:, :1].repeat(size, axis=1), ipus).all())
            sync = self.topology.sync_local_seconds if local else self.topology.sync_global_seconds
            return Priced(sync, "sync", *NO_LINKS)
        coll = collective(GCL_NAMES[detail.comm_type])
        count = coll.count_for_bytes(detail.size_bytes, size, self.options.dtype.itemsize)
        schedule, timing = plan_timed(coll, self.topology, count, dtype=self.options.dtype,
                                      algorithm_name=self._algorithm(coll),
                                      groups=[np.asarray(g, dtype=np.int64) for g in groups])
        links, link_bytes = schedule_link_bytes(self.topology, schedule)
        return Priced(timing.sim_seconds, schedule.algorithm, links, link_bytes)

    def _algorithm(self, coll: GclCollective) -> str:
        """The chosen algorithm if it runs ``coll``, else auto."""
        return algorithm_for(self.options.algorithm, coll)

    def transfer(self, src_ipu: int, dst_ipu: int, nbytes: int) -> Priced:
        """``nbytes`` from IPU ``src_ipu`` to IPU ``dst_ipu``, alone on the network."""
        key = (src_ipu, dst_ipu, nbytes)
        if key not in self._transfers:
            if src_ipu == dst_ipu or nbytes <= 0:
                self._transfers[key] = Priced(0.0, "", *NO_LINKS)
            else:
                src, dst = np.array([src_ipu]), np.array([dst_ipu])
                sizes = np.array([float(nbytes)])
                cost = superstep_cost(self.topology, src, dst, sizes)
                links, link_bytes = flow_link_bytes(self.topology, src, dst, sizes)
                self._transfers[key] = Priced(cost.seconds, "", links, link_bytes)
        return self._transfers[key]

    def memory_seconds(self, ipu: int, nbytes: int) -> float:
        """A MEM_LOAD or MEM_STORE of ``nbytes`` on IPU ``ipu``."""
        key = (ipu, nbytes)
        if key not in self._memory:
            if nbytes <= 0:
                self._memory[key] = 0.0
            elif ipu in self._streaming:
                self._memory[key] = nbytes / pcie_gen4_x16().bandwidth_Bps
            else:
                self._memory[key] = host_io_seconds(self.topology, [ipu], nbytes)
        return self._memory[key]


def algorithm_for(algorithm: str, coll: GclCollective) -> str:
    """``algorithm`` if it runs ``coll``, else auto (``--algorithm`` names one where it
    runs, as replay and bench take it)."""
    if algorithm == AUTO:
        return AUTO
    try:
        checked_algorithm(algorithm, coll)
    except ScheduleError:
        return AUTO
    return algorithm


def flow_link_bytes(topology: Topology, src: np.ndarray, dst: np.ndarray,
                    nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The directed links the flows ``src -> dst`` of ``nbytes`` cross and the bytes each
    carries (flows that move nothing, or stay on an IPU, left out)."""
    moving = (nbytes > 0) & (src != dst)
    if not moving.any():
        return NO_LINKS
    src, dst, nbytes = src[moving], dst[moving], nbytes[moving]
    routes = router_of(topology).route(src, dst)
    per_link = np.bincount(routes.pair_link, weights=nbytes[routes.pair_flow],
                           minlength=len(topology.directed_bandwidth_Bps))
    links = np.flatnonzero(per_link)
    return links, per_link[links]


def schedule_link_bytes(topology: Topology, schedule: Schedule) -> tuple[np.ndarray, np.ndarray]:
    """The bytes a schedule puts on each directed link over all its supersteps."""
    total = np.zeros(len(topology.directed_bandwidth_Bps))
    for phase in schedule.phases:
        sizes = np.broadcast_to(np.asarray(phase.count * schedule.itemsize, dtype=np.float64),
                                np.shape(phase.src))
        links, carried = flow_link_bytes(topology, np.asarray(phase.src, dtype=np.int64),
                                         np.asarray(phase.dst, dtype=np.int64), sizes)
        total[links] += carried * phase.steps
    links = np.flatnonzero(total)
    return links, total[links]

