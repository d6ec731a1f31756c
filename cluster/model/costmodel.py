"""The network cost model: how long one BSP superstep takes on a topology, in simulated seconds.

The contract, as in astra-network-analytical, is one call per question:

- :func:`send_seconds` ``(topology, src, dst, nbytes) -> seconds`` for one transfer alone;
- :func:`superstep_cost` ``(topology, src, dst, nbytes, reduce) -> StepCost`` for a superstep.

The model is flow-level and a pure function of its arguments (no clock, no randomness):

1. each transfer follows its route (:mod:`cluster.model.routing`);
2. links are full duplex; transfers sharing a directed link split its bandwidth max-min
   fairly (progressive filling); when a transfer finishes, the others share again;
3. a transfer's last byte lands its route's summed per-hop latency after it is sent;
4. the superstep costs ``sync + exchange + reduce``: the BSP sync (local to an IPU-Link
   domain, or global when any transfer leaves its domain), the time the last transfer
   lands, and the reductions on the receivers' tiles: ``REDUCE_MEMORY_PASSES`` times the
   bytes received for reduction over the IPU's memory bandwidth (read both operands, write
   the result), the slowest IPU setting the pace.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cluster.model.routing import Routes, router_of
from cluster.model.topology import Topology

REDUCE_MEMORY_PASSES = 3
_EPS = 1e-12


@dataclass(frozen=True)
class StepCost:
    """One superstep's simulated duration and its parts (seconds), and bytes per link type."""

    seconds: float
    sync_seconds: float
    exchange_seconds: float
    reduce_seconds: float
    link_type_bytes: dict[str, float]


def max_min_rates(flow_count: int, pair_flow: np.ndarray, pair_link: np.ndarray,
                  capacity_Bps: np.ndarray) -> np.ndarray:
    """Max-min fair rates (bytes/s) of flows over links by progressive filling.

    ``pair_flow[i]`` crosses link ``pair_link[i]`` (indices into ``capacity_Bps``). Repeatedly
    the link with the smallest fair share (remaining capacity over unfrozen flows) fixes the
    rate of every flow through it. A flow crossing no link gets ``inf``.
    """
    rate = np.full(flow_count, np.inf)
    capacity = capacity_Bps.astype(np.float64, copy=True)
    links = len(capacity)
    while len(pair_flow):
        count = np.bincount(pair_link, minlength=links)
        used = np.flatnonzero(count)
        share = capacity[used] / count[used]
        level = share.min()
        bottleneck = np.zeros(links, dtype=bool)
        bottleneck[used[share <= level * (1 + _EPS)]] = True
        frozen = np.zeros(flow_count, dtype=bool)
        frozen[pair_flow[bottleneck[pair_link]]] = True
        rate[frozen] = level
        selected = frozen[pair_flow]
        capacity -= np.bincount(pair_link[selected], minlength=links) * level
        np.maximum(capacity, 0.0, out=capacity)
        pair_flow, pair_link = pair_flow[~selected], pair_link[~selected]
    return rate


def transmission_seconds(routes: Routes, nbytes: np.ndarray, topology: Topology) -> np.ndarray:
    """When each flow's last byte has been sent, with fair sharing renewed at every finish."""
    flow_count = len(nbytes)
    # Work on the links this superstep uses only.
    used_links, pair_link = _relabel(routes.pair_link, len(topology.directed_bandwidth_Bps))
    capacity = topology.directed_bandwidth_Bps[used_links]
    pair_flow = routes.pair_flow
    remaining = nbytes.astype(np.float64, copy=True)
    finish = np.zeros(flow_count)
    active = remaining > 0
    now = 0.0
    while active.any():
        keep = active[pair_flow]
        pair_flow, pair_link = pair_flow[keep], pair_link[keep]
        rate = max_min_rates(flow_count, pair_flow, pair_link, capacity)
        live = np.flatnonzero(active)
        needed = remaining[live] / rate[live]
        step = needed.min()
        now += step
        done = live[needed <= step * (1 + _EPS)]
        remaining[live] -= rate[live] * step
        finish[done] = now
        active[done] = False
    return finish


def _relabel(pair_link: np.ndarray, link_count: int) -> tuple[np.ndarray, np.ndarray]:
    """The links used (sorted) and each pair's index among them: ``np.unique(pair_link,
    return_inverse=True)``, by a mask over all links when the pairs are many (linear time)
    and by sorting them when they are few next to the links."""
    if len(pair_link) * 8 < link_count:
        used_links, inverse = np.unique(pair_link, return_inverse=True)
        return used_links, inverse.reshape(-1)
    used = np.zeros(link_count, dtype=bool)
    used[pair_link] = True
    position = np.cumsum(used) - 1
    return np.flatnonzero(used), position[pair_link]


def superstep_cost(topology: Topology, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray,
                   reduce: np.ndarray | bool = False) -> StepCost:
    """Simulated duration of one superstep whose transfers are ``src[f] -> dst[f]`` of
    ``nbytes[f]`` bytes; where ``reduce[f]`` the receiver reduces what it gets."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    nbytes = np.asarray(nbytes, dtype=np.float64)
    reduce = np.broadcast_to(np.asarray(reduce, dtype=bool), src.shape)
    if not (src.shape == dst.shape == nbytes.shape):
        raise ValueError("src, dst and nbytes need one entry per transfer")
    if not np.isfinite(nbytes).all() or (nbytes < 0).any():
        raise ValueError("transfer sizes must be finite byte counts, 0 or more")
    ids = np.concatenate([src, dst])
    if len(ids) and (ids.min() < 0 or ids.max() >= topology.ipu_count):
        raise ValueError(f"IPU ids run from 0 to {topology.ipu_count - 1} on {topology.name}")
    moving = nbytes > 0
    if not moving.all():
        src, dst, nbytes, reduce = src[moving], dst[moving], nbytes[moving], reduce[moving]
    if len(src) == 0:
        return StepCost(0.0, 0.0, 0.0, 0.0, {})
    if (src == dst).any():
        raise ValueError("a transfer from an IPU to itself is not a network transfer")
    routes = router_of(topology).route(src, dst)
    transmission = transmission_seconds(routes, nbytes, topology)
    exchange = float((transmission + routes.latency_seconds).max())
    crosses = routes.crosses_domains.any()
    sync = topology.sync_global_seconds if crosses else topology.sync_local_seconds
    reduce_seconds = _reduce_seconds(topology, dst, nbytes, reduce)
    per_type = np.bincount(topology.directed_type[routes.pair_link],
                           weights=nbytes[routes.pair_flow], minlength=len(topology.link_types))
    link_bytes = {t.name: float(v) for t, v in zip(topology.link_types, per_type) if v}
    return StepCost(sync + exchange + reduce_seconds, sync, exchange, reduce_seconds, link_bytes)


def _reduce_seconds(topology: Topology, dst: np.ndarray, nbytes: np.ndarray,
                    reduce: np.ndarray) -> float:
    """The slowest IPU's reductions: it reads and writes what it reduces
    (:data:`REDUCE_MEMORY_PASSES` passes) at its tiles' memory bandwidth."""
    reduced = np.bincount(dst[reduce], weights=nbytes[reduce], minlength=topology.ipu_count)
    return float((REDUCE_MEMORY_PASSES * reduced / topology.ipu_memory_bandwidth_Bps).max())


def superstep_lower_bound(topology: Topology, src: np.ndarray, dst: np.ndarray,
                          nbytes: np.ndarray, reduce: np.ndarray | bool = False) -> float:
    """A lower bound on :func:`superstep_cost`'s seconds, found without routing (cheap).

    Every flow leaves its IPU over one of that IPU's links, so it takes at least its bytes
    over the fastest of them plus the smallest latency among them, and all the flows of one
    IPU at least their bytes over the sum of its links' bandwidths; all the links together
    carry every flow's bytes once per link of its route (at least
    :meth:`~cluster.model.routing.Router.min_hops`), at most their summed bandwidth; the
    sync costs at least the smaller of the local and global sync; the reductions are
    costed exactly. The planner uses it to skip algorithms that cannot beat one already
    costed.
    """
    src = np.asarray(src, dtype=np.int64)
    nbytes = np.asarray(nbytes, dtype=np.float64)
    moving = nbytes > 0
    if not moving.any():
        return 0.0
    reduce = np.broadcast_to(np.asarray(reduce, dtype=bool), src.shape)
    fastest, total, nearest = _egress(topology)
    out_bytes = np.bincount(src[moving], weights=nbytes[moving], minlength=topology.ipu_count)
    with np.errstate(divide="ignore", invalid="ignore"):
        single = nbytes[moving] / fastest[src[moving]] + nearest[src[moving]]
        shared = np.where(out_bytes > 0, out_bytes / total, 0.0)
    hops = router_of(topology).min_hops(src[moving], np.asarray(dst, dtype=np.int64)[moving])
    volume = float(nbytes[moving] @ hops) / float(topology.directed_bandwidth_Bps.sum())
    exchange = float(max(single.max(), shared.max(), volume))
    sync = min(topology.sync_local_seconds, topology.sync_global_seconds)
    return sync + exchange + _reduce_seconds(topology, np.asarray(dst, dtype=np.int64)[moving],
                                             nbytes[moving], reduce[moving])


def _egress(topology: Topology) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per IPU, over the directed links leaving it: the fastest bandwidth, their total
    bandwidth (bytes/s) and the smallest latency (s)."""
    cached = _EGRESS.get(id(topology))
    if cached is not None and cached[0] is topology:
        return cached[1]
    leaving = topology.directed_src < topology.ipu_count
    ipu = topology.directed_src[leaving]
    bandwidth = topology.directed_bandwidth_Bps[leaving]
    latency = topology.directed_latency_seconds[leaving]
    fastest = np.zeros(topology.ipu_count)
    np.maximum.at(fastest, ipu, bandwidth)
    nearest = np.full(topology.ipu_count, np.inf)
    np.minimum.at(nearest, ipu, latency)
    total = np.bincount(ipu, weights=bandwidth, minlength=topology.ipu_count)
    result = (fastest, total, np.where(np.isfinite(nearest), nearest, 0.0))
    if len(_EGRESS) >= 8:
        _EGRESS.clear()
    _EGRESS[id(topology)] = (topology, result)
    return result


_EGRESS: dict[int, tuple[Topology, tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}


def send_seconds(topology: Topology, src: int, dst: int, nbytes: float) -> float:
    """Time for ``nbytes`` to go from IPU ``src`` to IPU ``dst`` alone on the network: its
    route's latency plus the bytes over its slowest link (no sync, no reduction)."""
    cost = superstep_cost(topology, np.array([src]), np.array([dst]), np.array([nbytes]))
    return cost.exchange_seconds
