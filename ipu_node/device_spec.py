"""What each actor of a launched POD emulates, and how errors name it.

One actor per unit of the topology (a C2 card or an IPU-M2000), one per IPU that belongs to
no unit, and one per relaying host (a DSS 8440 server's host, which owns its PCIe fabric and
InfiniBand adapters: :mod:`ipu_node.ownership`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from cluster.model.hardware import DeviceKind, ipu_m2000
from cluster.model.topology import Topology
from ipu_node.ownership import relaying_hosts


@dataclass(frozen=True)
class DeviceSpec:
    """What one actor emulates: a unit of the topology (card or machine) and its IPUs, or a
    host (no IPUs). ``streaming_bytes_per_ipu``: an IPU-M2000's Streaming Memory, per IPU."""

    name: str
    kind: str
    ipus: tuple[int, ...]
    server: str
    streaming_bytes_per_ipu: int = 0


class Named(Protocol):
    """A device as messages name it: a spec, or a device's health."""

    @property
    def name(self) -> str: ...

    @property
    def ipus(self) -> tuple[int, ...]: ...


def describe(spec: Named) -> str:
    """``'card3 (IPUs 6, 7)'``: how errors and the service's messages name a device."""
    if not spec.ipus:
        return spec.name
    plural = "s" if len(spec.ipus) > 1 else ""
    return f"{spec.name} (IPU{plural} {', '.join(map(str, spec.ipus))})"


def device_specs(topology: Topology) -> list[DeviceSpec]:
    """One device per unit (card or machine), IPUs in no unit one each, then one per
    relaying host (a DSS 8440 cluster's servers), named after the host node. An IPU-M2000's
    Streaming Memory is shared by its 4 IPUs (``docs/hardware.md``): a quarter each."""
    streaming = ipu_m2000().streaming_memory_bytes // 4
    specs: list[DeviceSpec] = []
    covered: set[int] = set()
    for unit in topology.units:
        server = topology.servers[unit.server].name if topology.servers else "server0"
        specs.append(DeviceSpec(unit.name, unit.kind, unit.ipus, server,
                                streaming if unit.kind == DeviceKind.IPU_M2000 else 0))
        covered.update(unit.ipus)
    for ipu in range(topology.ipu_count):
        if ipu not in covered:
            specs.append(DeviceSpec(topology.ipu_name(ipu), "IPU", (ipu,), "server0"))
    for node in relaying_hosts(topology):
        name = topology.node_names[node]
        server = next((s.name for s in topology.servers if name.startswith(s.name + ".")),
                      name)
        specs.append(DeviceSpec(name, "host", (), server))
    return specs
