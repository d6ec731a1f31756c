"""What a device actor answers, typed: the contract between the devices and whoever reads
them (the POD, its roster, the executor, the service's metrics and API).

The answers cross Ray as plain dicts (``TypedDict``s are dicts at run time, so readers
index them by key as before) and a device's state is a :class:`HealthState`, text on the
wire. Units are in the names: ``_bytes`` bytes, ``sim_seconds`` simulated seconds.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, TypedDict

import numpy as np

from cluster.model.text_enum import TextEnum


class HealthState(TextEnum):
    """A device's state as the POD last heard it (compares equal to its string)."""

    HEALTHY = "healthy"
    RESTARTING = "restarting"
    UNREACHABLE = "unreachable"
    DEAD = "dead"


CounterName = Literal["bytes_out", "bytes_in", "supersteps", "sim_seconds"]


class IpuCounters(TypedDict):
    """What one IPU has counted: bytes it sent and received, BSP supersteps it took part
    in, and simulated seconds it spent in collectives."""

    bytes_out: int
    bytes_in: int
    supersteps: int
    sim_seconds: float


class IpuMemoryStats(TypedDict):
    """One IPU's In-Processor-Memory, in bytes."""

    used_bytes: int
    capacity_bytes: int
    free_bytes: int


class DeviceInfo(TypedDict):
    """Who a device is (its ``info`` answer): name, ``kind`` of card or machine (a host
    relay holds no IPUs), its control and link addresses, its Ray node's id and address
    (None outside Ray) and process id (which incarnation answered)."""

    name: str
    kind: str
    ipus: list[int]
    address: str
    link_address: str
    node_id: str | None
    node_ip: str | None
    pid: int


class _DeviceDetails(TypedDict):
    memory: dict[int, IpuMemoryStats]  # per IPU of the device (none on a host)
    collectives_running: int
    dropped_chunks: int


class DeviceDetails(_DeviceDetails, total=False):
    """What a kind of device adds to its counters: memory per IPU, collectives running on
    it now, link chunks it dropped (nobody waited for them); a host relay also says how
    many payload bytes it relayed (``relayed_bytes``), and how many of them it read from
    its senders' shared memory (``relayed_shared_bytes``). A device on Ray says its node
    (``node_id``, ``node_ip``)."""

    relayed_bytes: int
    relayed_shared_bytes: int
    node_id: str | None
    node_ip: str | None


class DeviceStats(DeviceDetails):
    """A device's ``stats`` answer: who answered (and on which Ray node), its counters per
    IPU, the bytes per directed link of the topology, and its details."""

    name: str
    address: str
    link_address: str
    pid: int
    counters: dict[int, IpuCounters]  # per IPU of the device
    link_bytes: np.ndarray  # bytes its IPUs sent (or, on a host, it relayed) per directed link


class RunAnswer(NamedTuple):
    """A device's answer to its share of a collective: the results per IPU (None when
    they stay on the IPUs as the output tensor), the bytes it sent per directed link, and
    what the POD then knows without asking (:mod:`ipu_node.known_facts`): its IPUs'
    memory, and shape and dtype of the output tensor on each (empty without one)."""

    results: dict[int, np.ndarray] | None
    link_bytes: np.ndarray
    memory: dict[int, IpuMemoryStats]
    output_info: dict[int, tuple[tuple[int, ...], str]]


def zero_counters() -> IpuCounters:
    """The counters of an IPU that has done nothing yet."""
    return IpuCounters(bytes_out=0, bytes_in=0, supersteps=0, sim_seconds=0.0)


def add_counters(a: IpuCounters, b: IpuCounters) -> IpuCounters:
    """The sum of two IPUs' (or two incarnations') counters, counter by counter."""
    return IpuCounters(bytes_out=a["bytes_out"] + b["bytes_out"],
                       bytes_in=a["bytes_in"] + b["bytes_in"],
                       supersteps=a["supersteps"] + b["supersteps"],
                       sim_seconds=a["sim_seconds"] + b["sim_seconds"])
