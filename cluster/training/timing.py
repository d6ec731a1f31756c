"""Where a data-parallel training step's simulated time goes.

A step is: the host streams each replica its input (PCIe), every replica computes
forward and backward on its micro-batches, then the gradients are allreduced, locally
over IPU-Links and globally over InfiniBand. Each part is simulated seconds on the
emulated hardware, from the catalogue and the cost model; none is measured on this machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cluster.errors import UserError
from cluster.model.costmodel import transmission_seconds
from cluster.model.routing import Routes
from cluster.model.topology import HOST, ROLES, Topology
from gcl.phantom import Timing


@dataclass(frozen=True)
class StepTime:
    """Simulated seconds of one training step, by part."""

    compute_seconds: float
    host_io_seconds: float
    local_allreduce_seconds: float
    global_allreduce_seconds: float

    @property
    def sim_seconds(self) -> float:
        """The whole step's simulated seconds: the four parts summed."""
        return (self.compute_seconds + self.host_io_seconds + self.local_allreduce_seconds
                + self.global_allreduce_seconds)


def compute_seconds(topology: Topology, flops: int, ipus_per_replica: int,
                    replica_ipu: int) -> float:
    """``flops`` of float32 work spread over a replica's IPUs, at the IPU's fp32 peak
    (GC2 31.1 TFLOPS, GC200 62.5 TFLOPS: public docs, see cluster/hardware.py)."""
    processor = topology.ipu_processors[replica_ipu]
    return flops / (ipus_per_replica * processor.fp32_flops_per_second)


def _host_path(topology: Topology, ipu: int) -> list[int]:
    """Directed links from the IPU's host down to the IPU: up the network tree to a host,
    or to the node a host is attached to (an IPU-M2000's gateway, by its RoCE link)."""
    router, node = topology.router, ipu
    down: list[int] = []
    host_links = np.flatnonzero(topology.link_role == ROLES.index(HOST))
    while node >= 0:
        if topology.node_kinds[node] == "host":
            return down[::-1]
        attached = [l for l in host_links.tolist()
                    if node in (topology.link_a[l], topology.link_b[l])]
        if attached and node != ipu:
            link = attached[0]  # host -> this node, the host being link_a or link_b
            into = 2 * link if topology.link_b[link] == node else 2 * link + 1
            return [into] + down[::-1]
        if router.parent[node] < 0:
            break
        down.append(int(router.down_link[node]))
        node = int(router.parent[node])
    raise UserError(f"IPU {topology.ipu_name(ipu)} of {topology.name} has no host to stream its "
                    "training input from: train on a topology whose IPUs reach a host (the "
                    "dss8440 and pod presets, or a YAML file with host nodes)")


def host_io_seconds(topology: Topology, ipus: list[int], nbytes: float) -> float:
    """Time for every host to send ``nbytes`` to each of ``ipus`` at once (max-min fair
    over the shared PCIe or RoCE links, plus the path's latency)."""
    flows: list[int] = []
    links: list[int] = []
    for flow, ipu in enumerate(ipus):
        path = _host_path(topology, ipu)
        flows += [flow] * len(path)
        links += path
    pair_flow, pair_link = np.array(flows, dtype=np.int64), np.array(links, dtype=np.int64)
    latency = np.bincount(pair_flow, weights=topology.directed_latency_s[pair_link],
                          minlength=len(ipus))
    routes = Routes(pair_flow, pair_link, latency, np.zeros(len(ipus), dtype=bool))
    finish = transmission_seconds(routes, np.full(len(ipus), float(nbytes)), topology)
    return float((finish + latency).max())


def allreduce_parts(timing: Timing, spans_domains: bool) -> tuple[float, float]:
    """(local, global) seconds of an allreduce: hierarchical phases say which they are; a
    flat algorithm counts as global when its groups span IPU-Link domains."""
    scopes = timing.seconds_by_scope()
    flat = scopes.get("flat", 0.0)
    local = scopes.get("local", 0.0) + (0.0 if spans_domains else flat)
    return local, scopes.get("global", 0.0) + (flat if spans_domains else 0.0)
