"""IPU-PODs of IPU-M2000s: ``pod16`` (direct attach) and ``pod64`` ... ``pod65536``.

Inside a rack (003, public docs): the IPU-M2000s' IPUs form an IPU-Link ladder two IPUs
wide, closed into a ring at the ends (the POD64's 2D torus); each M2000 holds two rungs,
IPUs ``4m, 4m+1`` and ``4m+2, 4m+3``. Every IPU-Link is one Mk2 link, 32 GB/s each way.
Each IPU reaches its M2000's IPU-Gateway over PCIe Gen4 x16 (003). From IPU-POD128 on, the
racks (POD64s) are joined by GW-Links: each M2000's two 100 GbE GW-Link ports go to a
switched GW-Link fabric (004), modelled as one non-blocking switch. Hosts attach to the
M2000s' RoCE NICs; those links carry no collective traffic.

IPUs are numbered ``64 r + j`` (rack r, position j; j = 2 row + column). The preferred ring
climbs column 0 and comes down column 1 of each rack, racks chained in order.
"""

from __future__ import annotations

import re

import numpy as np

from cluster.model import hardware as hw
from cluster.model.builder import TopologyBuilder
from cluster.model.presets import PresetOptions, apply_sync, preset
from cluster.model.topology import HOST, Server, Topology, Unit


@preset(r"pod([0-9]+)", "pod16 / pod64 / ... / pod65536", "IPU-POD of IPU-M2000s")
def build_pod(match: re.Match[str], options: PresetOptions) -> Topology:
    """``podN``: an IPU-POD of N IPUs (a power of two, 16 to 65,536) in racks of up to 64,
    as the module docstring describes."""
    total = int(match.group(1))
    hw.check_pod_size(total)
    machine = hw.ipu_m2000(options.figures)
    per_rack = min(total, hw.IPUS_PER_POD64)
    racks = total // per_rack
    machines_per_rack = per_rack // machine.ipus
    rows = per_rack // 2
    link = options.link(hw.ipu_link_mk2())
    gateway_link = options.link(hw.pcie_gen4_x16())
    gw_link = options.link(hw.gw_link_100g())
    roce = options.link(hw.host_roce_100g())

    b = TopologyBuilder(f"pod{total}")
    names = [f"r{r}.m{j // 4}.ipu{j % 4}" for r in range(racks) for j in range(per_rack)]
    ipus = b.add_ipus(names, machine.processor).reshape(racks, rows, 2)
    gateways = b.add_nodes([f"r{r}.m{m}.gw" for r in range(racks)
                            for m in range(machines_per_rack)], "gateway")
    hosts = b.add_nodes([f"r{r}.host" for r in range(racks)], "host")
    b.add_links(ipus[:, :, 0], ipus[:, :, 1], link)  # rungs
    b.add_links(ipus, np.roll(ipus, -1, axis=1), link)  # rails, closed at the ends
    b.add_links(ipus.reshape(-1), np.repeat(gateways, machine.ipus), gateway_link)
    b.add_links(np.repeat(hosts, machines_per_rack), gateways, roce, role=HOST)
    if racks > 1:
        switch = b.add_nodes(["gw-fabric"], "gw-switch")
        b.add_links(gateways, np.repeat(switch, len(gateways)), gw_link,
                    count=machine.gw_link_ports)
    rack_ring = [2 * r for r in range(rows)] + [2 * r + 1 for r in reversed(range(rows))]
    b.ring_order = (np.arange(racks)[:, None] * per_rack
                    + np.array(rack_ring)[None, :]).ravel().tolist()
    flat = ipus.reshape(racks, machines_per_rack, machine.ipus)
    for r in range(racks):
        first = r * machines_per_rack
        b.units += [Unit(f"r{r}.m{m}", hw.DeviceKind.IPU_M2000, tuple(flat[r, m].tolist()), r)
                    for m in range(machines_per_rack)]
        kind = f"IPU-POD{per_rack}"
        b.servers.append(Server(f"r{r}", kind, tuple(range(first, first + machines_per_rack))))
    apply_sync(b, options)
    return b.build()
