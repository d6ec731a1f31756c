"""Small hand-made topologies for tests whose expected times are worked out by hand."""

from __future__ import annotations

import numpy as np

from cluster.model.builder import TopologyBuilder
from cluster.model.hardware import LinkType, gc200
from cluster.model.topology import Topology

GB = 1e9


def link(bandwidth_GBps: float, latency_seconds: float, name: str = "test-link") -> LinkType:
    return LinkType(name, bandwidth_GBps * GB, latency_seconds, "test")


def quiet(builder: TopologyBuilder) -> Topology:
    """No sync cost, infinitely fast tiles: only the network counts."""
    builder.sync_local_seconds = builder.sync_global_seconds = 0.0
    builder.memory_bandwidth_override_Bps = float("inf")
    return builder.build()


def chain(n: int, bandwidth_GBps: float = 10, latency_seconds: float = 1e-6) -> Topology:
    """IPUs 0 - 1 - ... - n-1 in a line."""
    b = TopologyBuilder(f"chain{n}")
    ipus = b.add_ipus([f"ipu{i}" for i in range(n)], gc200())
    b.add_links(ipus[:-1], ipus[1:], link(bandwidth_GBps, latency_seconds))
    return quiet(b)


def star(n: int, bandwidth_GBps: float = 10, latency_seconds: float = 1e-6) -> Topology:
    """n IPUs, each with its own link to one switch."""
    b = TopologyBuilder(f"star{n}")
    ipus = b.add_ipus([f"ipu{i}" for i in range(n)], gc200())
    switch = b.add_nodes(["sw"], "switch")
    b.add_links(ipus, np.repeat(switch, n), link(bandwidth_GBps, latency_seconds))
    return quiet(b)
