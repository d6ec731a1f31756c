"""Dell DSS 8440 IPU servers: ``dss8440`` (one) and ``dss8440xN`` (N on an InfiniBand switch).

Inside a server (000, 001): eight C2 cards; each card's two IPUs are a *rung* (192 GB/s);
neighbouring cards are joined by two *rails* (IPU 2c to 2c+2, 2c+1 to 2c+3), making the
IPU-Link ladder. Every card sits on the PCIe Gen3 switch fabric (four switches, drawn as one
node with four x16 uplinks to the host); the host's two 100 Gbps InfiniBand adapters join
it to the other servers through one switch.

IPUs are numbered ``16 s + 2 c + k`` (server s, card c, IPU k of the card). The preferred
ring climbs one rail and comes down the other: 0, 2, ..., 14, 15, 13, ..., 1, so that every
hop is one IPU-Link; across servers the rings are chained.
"""

from __future__ import annotations

import re

import numpy as np

from cluster.errors import SpecError
from cluster.model import hardware as hw
from cluster.model.builder import TopologyBuilder
from cluster.model.presets import PresetOptions, apply_sync, preset
from cluster.model.topology import Server, Topology, Unit

MAX_SERVERS = 1024


def ladder_ring(rungs: int) -> list[int]:
    """A Hamiltonian cycle of a ladder whose rung r joins IPUs 2r and 2r+1."""
    return [2 * r for r in range(rungs)] + [2 * r + 1 for r in reversed(range(rungs))]


@preset(r"dss8440(?:x([0-9]+))?", "dss8440 / dss8440xN", "Dell DSS 8440 servers of 8 C2 cards")
def build_dss8440(match: re.Match[str], options: PresetOptions) -> Topology:
    """``dss8440`` (one server) or ``dss8440xN`` (N servers, 1 to ``MAX_SERVERS``, on one
    InfiniBand switch), as the module docstring describes."""
    servers = int(match.group(1) or 1)
    if not 1 <= servers <= MAX_SERVERS:
        raise SpecError(f"dss8440xN takes 1 to {MAX_SERVERS} servers, not {servers}")
    figures = options.figures
    spec = hw.Dss8440()
    processor = hw.gc2(figures)
    rung, rail = options.link(hw.c2_rung()), options.link(hw.c2_rail(figures))
    pcie = options.link(hw.pcie_gen3_x16())
    infiniband = options.link(hw.infiniband_100g())
    name = "dss8440" if servers == 1 and not match.group(1) else f"dss8440x{servers}"
    b = TopologyBuilder(name)
    per_server = 2 * spec.cards
    ipus = b.add_ipus([f"s{s}.card{c}.ipu{k}" for s in range(servers)
                       for c in range(spec.cards) for k in range(2)], processor)
    cards = b.add_nodes([f"s{s}.card{c}" for s in range(servers) for c in range(spec.cards)],
                        "card")
    fabrics = b.add_nodes([f"s{s}.pcie" for s in range(servers)], "pcie-switch")
    hosts = b.add_nodes([f"s{s}.host" for s in range(servers)], "host")
    grid = ipus.reshape(servers, spec.cards, 2)
    b.add_links(grid[:, :, 0], grid[:, :, 1], rung)
    b.add_links(grid[:, :-1, :], grid[:, 1:, :], rail)
    b.add_links(ipus, np.repeat(cards, 2), pcie)
    b.add_links(cards, np.repeat(fabrics, spec.cards), pcie)
    b.add_links(fabrics, hosts, pcie, count=spec.pcie_switches)
    if servers > 1:
        switch = b.add_nodes(["ib-switch"], "ib-switch")
        b.add_links(hosts, np.repeat(switch, servers), infiniband,
                    count=spec.infiniband_adapters)
    ring = np.array(ladder_ring(spec.cards))
    b.ring_order = (np.arange(servers)[:, None] * per_server + ring[None, :]).ravel().tolist()
    for s in range(servers):
        first = s * spec.cards
        b.units += [Unit(f"s{s}.card{c}", hw.DeviceKind.C2, tuple(grid[s, c].tolist()), s)
                    for c in range(spec.cards)]
        b.servers.append(Server(f"s{s}", "DSS 8440", tuple(range(first, first + spec.cards))))
    apply_sync(b, options)
    return b.build()
