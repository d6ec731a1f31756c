"""Place a POD's device actors on Ray and wire their links.

A private local Ray by default (nothing to set up), or an existing Ray cluster by address
(``ray_address=`` or ``RAY_ADDRESS``): :mod:`ipu_node.ray_session`. Every actor asks for
the custom resource ``IPU`` (one per IPU it emulates) and is gang-placed: one placement
group per server or rack, on one node (:mod:`ipu_node.node_placement`).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from cluster.errors import UserError
from cluster.model.topology import Topology
from ipu_node.answers import DeviceInfo
from ipu_node.calls import wait_all
from ipu_node.card import Card
from ipu_node.control import CONTROL, CONTROL_THREADS
from ipu_node.device_errors import DeviceError
from ipu_node.device_handle import DeviceHandle, actor_device
from ipu_node.device_process import DeviceProcess, MemberHandle, device_class, process_of
from ipu_node.device_spec import DeviceSpec
from ipu_node.host import HostRelay
from ipu_node.ipu_memory import available_ram_bytes
from ipu_node.links.link_secret import new_secret
from ipu_node.links.link_tls import LinkTLS
from ipu_node.node_placement import (
    check_servers_fit,
    link_host_for,
    live_nodes,
    peer_addresses,
    strategy,
)
from ipu_node.ownership import Ownership, ownership
from ipu_node.ray_session import ensure_ray, uses_local_ray

LAUNCH_DEADLINE_SECONDS = 120.0
DEVICE_RSS_BYTES = 160 << 20  # a device actor's resident memory, measured: ~130 MiB
# Collectives at once per device: one per IPU is enough (partitions never share an IPU),
# and more threads cost wall time (measured: 8 threads made a 64 MiB allreduce 1.5x slower).
MIN_DEVICE_THREADS = 2
_pod_ids = itertools.count()


@dataclass(frozen=True)
class Placed:
    """Device actors running and wired: ``actors[i]`` emulates ``specs[i]``."""

    pod_id: str
    actors: list[DeviceHandle]
    placement_groups: list[PlacementGroup]
    infos: list[DeviceInfo]
    ownership: Ownership
    started_ray: bool


def check_room(topology: Topology, specs: list[DeviceSpec], ray_address: str | None) -> None:
    """Refuse, before starting anything, a POD that cannot fit on this machine."""
    if uses_local_ray(ray_address) and len(specs) * DEVICE_RSS_BYTES > available_ram_bytes():
        raise UserError(
            f"{topology.name} needs {len(specs):,} device actors, about "
            f"{len(specs) * DEVICE_RSS_BYTES / 2**30:.0f} GiB, more than this machine has "
            "free: use phantom mode, or a Ray cluster (--ray-address)")


def place(topology: Topology, specs: list[DeviceSpec], *, ray_address: str | None,
          link_host: str, deadline_seconds: float, max_restarts: int,
          link_tls: LinkTLS | None = None, allow_split_server: bool = False,
          devices_per_process: int = 1, link_shared_memory: bool = True) -> Placed:
    """Start one actor per spec (or per ``devices_per_process`` specs of a server:
    :mod:`ipu_node.device_process`), server by server, and wire their links; on any
    failure every actor and placement group started so far is removed again. Each
    server's (or rack's) devices go on one Ray node unless ``allow_split_server``."""
    if not isinstance(devices_per_process, int) or devices_per_process < 1:
        raise UserError(f"devices_per_process must be a whole number of at least 1, not "
                        f"{devices_per_process!r} (1: each card or machine a process of its own)")
    check_room(topology, specs, ray_address)
    started_ray = ensure_ray(ray_address, topology.ipu_count)
    nodes = live_nodes()
    check_servers_fit(specs, nodes, allow_split_server)  # a private Ray always fits
    available = ray.available_resources().get("IPU", 0)
    if available < topology.ipu_count:
        raise UserError(
            f"{topology.name} needs {topology.ipu_count} IPU resources but the Ray cluster "
            f"has {available:g} free: start Ray nodes with --resources '{{\"IPU\": N}}' or "
            "shut other PODs down")
    launch = Launch(f"pod{os.getpid()}-{next(_pod_ids)}", _actor_classes(devices_per_process),
                    [None] * len(specs), [], link_host_for(link_host, nodes), deadline_seconds,
                    max_restarts, new_secret(), link_tls, strategy(allow_split_server),
                    devices_per_process, link_shared_memory)
    try:  # the POD's links carry the new secret; it leaves only to the devices
        servers = _by_server(specs)
        groups = launch.reserve(topology, specs, servers)  # every server's at once
        for (server, members), group in zip(servers.items(), groups):
            launch.start_server(topology, specs, server, members, group)
        actors = launch.started()
        infos = wait_all([a.info.remote() for a in actors], specs, deadline_seconds, "start")
        owns = _wire(topology, specs, actors, infos, deadline_seconds)
    except BaseException:
        launch.release()
        raise
    return Placed(launch.pod_id, actors, launch.groups, infos, owns, started_ray)


def _actor_classes(devices_per_process: int) -> dict[type, Any]:
    """Card, HostRelay and DeviceProcess as Ray actor classes (a process of N devices gets
    N devices' control threads)."""
    return {  # ray's stubs do not know concurrency_groups
        kind: ray.remote(  # type: ignore[call-overload]
            concurrency_groups={CONTROL: CONTROL_THREADS * (
                devices_per_process if kind is DeviceProcess else 1)})(kind)
        for kind in (Card, HostRelay, DeviceProcess)}


def _by_server(specs: list[DeviceSpec]) -> dict[str, list[int]]:
    by_server: dict[str, list[int]] = {}
    for index, device in enumerate(specs):
        by_server.setdefault(device.server, []).append(index)
    return by_server


@dataclass(eq=False)
class Launch:
    """One launch under way: what it places (the settings), and what it has started so far
    (``actors``, one slot per device, and ``groups``), which only its methods change."""

    pod_id: str
    kinds: dict[type, Any]  # Card, HostRelay and DeviceProcess as Ray actor classes
    actors: list[DeviceHandle | None]  # the handle of each device started, None where not yet
    groups: list[PlacementGroup]  # the placement groups made
    link_host: str
    deadline_seconds: float
    max_restarts: int
    link_secret: str = field(repr=False)  # never printed
    link_tls: LinkTLS | None = None  # TLS on every link, when asked
    strategy: str = "STRICT_PACK"  # a server's devices on one node (ipu_node.node_placement)
    devices_per_process: int = 1  # devices that share one Ray worker process
    link_shared_memory: bool = True  # chunks between co-located cards through shared memory

    def reserve(self, topology: Topology, specs: list[DeviceSpec],
                servers: dict[str, list[int]]) -> list[PlacementGroup]:
        """Gang-place every server's (or rack's) devices: a placement group each, with a
        bundle per process that holds IPUs, all asked for at once and waited for together
        (one wait, not one per server)."""
        made = []
        for server, members in servers.items():
            holding = [p for p in self._processes(members) if any(specs[i].ipus for i in p)]
            made.append(placement_group(
                [{"IPU": sum(len(specs[i].ipus) for i in p)} for p in holding],
                strategy=self.strategy, name=f"{self.pod_id}-{server}"))
            self.groups.append(made[-1])
        ready = [group.ready() for group in made]
        placed = set(ray.wait(ready, num_returns=len(ready), timeout=self.deadline_seconds)[0])
        for server, ref in zip(servers, ready):
            if ref not in placed:
                raise DeviceError(f"Ray could not place server {server} of {topology.name} on "
                                  f"one node within {self.deadline_seconds:g} s: not enough free "
                                  "IPU resources on any node? (`ray status` shows them)")
        return made

    def _processes(self, members: list[int]) -> list[list[int]]:
        """A server's devices split into processes of ``devices_per_process``."""
        per = self.devices_per_process
        return [members[i:i + per] for i in range(0, len(members), per)]

    def start_server(self, topology: Topology, specs: list[DeviceSpec], server: str,
                     members: list[int], group: PlacementGroup) -> None:
        """Start one server's (or rack's) processes in its placement group ``group``
        (:meth:`reserve`; a server's host goes in bundle 0)."""
        processes = self._processes(members)
        holding = [p for p in processes if any(specs[i].ipus for i in p)]
        for process in processes:
            self._start_process(topology, [specs[i] for i in process], process,
                                PlacementGroupSchedulingStrategy(
                                    group, holding.index(process) if process in holding else 0))

    def _start_process(self, topology: Topology, members: list[DeviceSpec], indices: list[int],
                       where: PlacementGroupSchedulingStrategy) -> None:
        """One actor for devices ``members`` (``indices`` among the POD's): the device's own
        class when alone, a :class:`DeviceProcess` when several."""
        alone = len(members) == 1
        kind = device_class(members[0]) if alone else DeviceProcess
        ipus = sum(len(spec.ipus) for spec in members)
        actor = self.kinds[kind].options(
            num_cpus=0, resources={"IPU": ipus} if ipus else {},
            name=f"{self.pod_id}-{members[0].name}" + ("" if alone else f"+{len(members) - 1}"),
            max_restarts=self.max_restarts,
            max_concurrency=sum(max(MIN_DEVICE_THREADS, len(spec.ipus)) for spec in members),
            scheduling_strategy=where,
        ).remote(members[0] if alone else members, topology, self.link_host,
                 self.link_secret, self.link_tls, self.link_shared_memory)
        for member, index in enumerate(indices):
            self.actors[index] = (actor_device(actor) if alone else
                                  MemberHandle(actor, member, device_class(members[member])))

    def started(self) -> list[DeviceHandle]:
        """Every device's handle, once every server is started."""
        missing = [index for index, actor in enumerate(self.actors) if actor is None]
        if missing:
            raise DeviceError(f"devices {missing} of {self.pod_id} were never started")
        return [actor for actor in self.actors if actor is not None]

    def release(self) -> None:
        """Kill what this launch started and remove its placement groups (after a failure)."""
        release(self.actors, self.groups)


def _wire(topology: Topology, specs: list[DeviceSpec], actors: list[DeviceHandle],
          infos: list[DeviceInfo], deadline_seconds: float) -> Ownership:
    """Tell every device every device's name and link address (TCP to peers on other
    Ray nodes), and who owns what."""
    names = [info["name"] for info in infos]
    addresses = peer_addresses([info["node_id"] for info in infos],
                               [info["address"] for info in infos],
                               [info.get("link_address", info["address"]) for info in infos])
    owner_of_ipu = np.array([next(i for i, s in enumerate(specs) if ipu in s.ipus)
                             for ipu in range(topology.ipu_count)])
    hosts = {topology.node_names.index(s.name): i for i, s in enumerate(specs) if not s.ipus}
    owns = ownership(topology, owner_of_ipu, hosts)
    wait_all([a.connect.remote(names, addresses[i], i, owns, None, 0)
              for i, a in enumerate(actors)], specs, deadline_seconds, "connect")
    return owns


def release(actors: Sequence[DeviceHandle | None], groups: list[PlacementGroup]) -> None:
    """Kill ``actors`` and remove ``groups`` (what a failed or finished launch leaves)."""
    processes = {id(process_of(a)): process_of(a) for a in actors if a is not None}
    for process in processes.values():
        ray.kill(process)
    for group in groups:
        remove_placement_group(group)
