"""A launched POD: its topology, its device actors, and what it knows of them.

:meth:`EmulatedPod.launch` places one actor per card or machine on Ray and wires their
links (:mod:`ipu_node.launcher`); :meth:`EmulatedPod.shutdown` frees every actor,
placement group and port, and launching again in the same process works. The POD is
composed of parts, each testable on its own:

- :class:`~ipu_node.roster.Roster`: the devices as last heard (addresses, incarnations,
  restarts, counters across restarts); restarted devices are wired in again whenever the
  POD hears from them (:meth:`stats`, :meth:`health`);
- :class:`~ipu_node.faults.FaultInjector`: link faults and card kills;
- :func:`~ipu_node.device_health.check_health`: each device's state;
- :func:`~ipu_node.executor.run_collective`: collectives on the devices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from cluster.errors import UserError
from cluster.model.link_faults import LinkFault
from cluster.model.spec import load_topology
from cluster.model.topology import Topology
from gcl.collectives import CollectiveName
from ipu_node.answers import DeviceInfo, DeviceStats
from ipu_node.calls import wait_all
from ipu_node.device_errors import DeviceError
from ipu_node.device_handle import DeviceHandle
from ipu_node.device_health import HEALTH_DEADLINE_SECONDS, DeviceHealth, check_health
from ipu_node.device_spec import DeviceSpec, device_specs
from ipu_node.executor import CollectiveResult, run_collective
from ipu_node.faults import FaultInjector
from ipu_node.known_facts import READ_ONLY, KnownFacts
from ipu_node.launcher import LAUNCH_DEADLINE_SECONDS, place, release
from ipu_node.links.link_tls import LinkTLS
from ipu_node.links.shared_slots import shared_memory_asked
from ipu_node.node_loss import with_lost_nodes
from ipu_node.node_placement import short_id
from ipu_node.roster import Roster

TENSOR_DEADLINE_SECONDS = 120.0


@dataclass
class EmulatedPod:
    """A launched POD. ``topology`` is the one collectives see: the launched one
    (``base_topology``) with the link faults injected so far."""

    specs: list[DeviceSpec]
    roster: Roster
    fault_injector: FaultInjector
    placement_groups: list
    owner: dict[int, int]  # IPU -> index into the devices
    pod_id: str
    infos: list[DeviceInfo]  # each device's ``info`` answer at launch
    started_ray: bool = False
    closed: bool = False

    @classmethod
    def launch(cls, spec: str | Topology = "dss8440x2", *, ray_address: str | None = None,
               link_host: str = "127.0.0.1", deadline_seconds: float = LAUNCH_DEADLINE_SECONDS,
               max_restarts: int = -1, link_tls: LinkTLS | None = None,
               allow_split_server: bool = False, devices_per_process: int = 1,
               link_shared_memory: bool | None = None) -> EmulatedPod:
        """Start one actor per card or machine of ``spec`` and wire their links. Ray
        restarts a dead device up to ``max_restarts`` times (-1: always). With
        ``link_tls`` every link speaks TLS, both ends checking the other's certificate
        (its files must be readable wherever the devices run; ``docs/links.md``). Each
        server's (or rack's) devices share one Ray node unless ``allow_split_server``
        (:mod:`ipu_node.node_placement`). ``devices_per_process`` > 1 runs that many devices
        of a server in each Ray worker process: a faster, lighter launch, but process-mates
        fail and restart together (:mod:`ipu_node.device_process`). Cards on one
        machine move their chunks through shared memory unless ``link_shared_memory`` is
        False (None: unless the environment variable ``IPUPOD_LINK_SHARED_MEMORY`` is ``0``;
        ``docs/real-mode.md``)."""
        topology = load_topology(spec) if isinstance(spec, str) else spec
        specs = device_specs(topology)
        placed = place(topology, specs, ray_address=ray_address, link_host=link_host,
                       deadline_seconds=deadline_seconds, max_restarts=max_restarts,
                       link_tls=link_tls, allow_split_server=allow_split_server,
                       devices_per_process=devices_per_process,
                       link_shared_memory=shared_memory_asked(link_shared_memory))
        roster = Roster.wired(specs, placed.actors, placed.infos, placed.ownership)
        owner = {ipu: i for i, s in enumerate(specs) for ipu in s.ipus}
        return cls(specs, roster, FaultInjector(roster, topology, max_restarts),
                   placed.placement_groups, owner, placed.pod_id, placed.infos,
                   placed.started_ray)

    # -- what the POD is -----------------------------------------------------------------
    @property
    def topology(self) -> Topology:
        return self.fault_injector.topology

    @property
    def facts(self) -> KnownFacts:
        """What the devices last said of their memory and tensors
        (:mod:`ipu_node.known_facts`)."""
        return self.roster.facts

    @property
    def base_topology(self) -> Topology:
        return self.fault_injector.base_topology

    @property
    def actors(self) -> list[DeviceHandle]:
        """Each device's handle: ``actors[i]`` emulates ``specs[i]``."""
        return self.roster.actors

    @property
    def restarts(self) -> list[int]:
        return self.roster.restarts

    @property
    def link_faults(self) -> dict[int, LinkFault]:
        return self.fault_injector.link_faults

    @property
    def fault_counts(self) -> dict[str, int]:
        return self.fault_injector.counts

    @property
    def max_restarts(self) -> int:
        return self.fault_injector.max_restarts

    def nodes(self) -> dict[str, str | None]:
        """Which Ray node each device runs on now, by id (None outside Ray)."""
        with self.roster.lock:
            return dict(zip(self.roster.names, self.roster.nodes))

    def node_of(self, index: int) -> tuple[str, str]:
        """The Ray node device ``index`` runs on now: short id and address ("" unknown)."""
        with self.roster.lock:
            if index >= len(self.roster.nodes):  # a roster built without node information
                return "", ""
            return short_id(self.roster.nodes[index]), self.roster.node_ips[index] or ""

    # -- asking the devices ------------------------------------------------------------
    def stats(self, deadline_seconds: float = 30.0,
              devices: list[int] | None = None) -> list[DeviceStats]:
        """Counters, memory and link bytes of ``devices`` (every device by default), in
        that order. Waits (up to ``deadline_seconds``) for a restarting device, and wires
        restarted ones in again; counters carry on across restarts."""
        answers = self.roster.ask("stats", deadline_seconds, devices)
        self.roster.rejoin(answers, *self.fault_injector.current())
        for index, answer in answers.items():
            if answer["memory"]:
                self.facts.heard_memory(index, answer["memory"])
        return [self.roster.with_offsets(i, a) for i, a in answers.items()]

    def health(self, deadline_seconds: float = HEALTH_DEADLINE_SECONDS) -> list[DeviceHealth]:
        """Every device's state (:mod:`ipu_node.device_health`); restarted ones are wired in."""
        return check_health(self.roster, *self.fault_injector.current(), deadline_seconds)

    def note_down(self, index: int, why: str) -> None:
        self.roster.note_down(index, why)

    def put(self, name: str, arrays: list[np.ndarray], ipus: list[int] | None = None) -> None:
        """Store ``arrays[r]`` on IPU ``ipus[r]`` (IPU r by default) as tensor ``name``."""
        targets = list(range(self.topology.ipu_count)) if ipus is None else list(ipus)
        if len(arrays) != len(targets):
            raise UserError(f"give one array per IPU: {len(targets)} IPUs, {len(arrays)} arrays")
        arrays = [np.asarray(array) for array in arrays]
        refs = [self.actors[self.owner[ipu]].put.remote(ipu, name, array)
                for ipu, array in zip(targets, arrays)]
        devices = [self.owner[ipu] for ipu in targets]
        try:
            wait_all(refs, [self.specs[d] for d in devices], TENSOR_DEADLINE_SECONDS, "put",
                     self._lost_among(devices))
        except BaseException:
            self.facts.forget(devices)
            raise
        for device, ipu, array in zip(devices, targets, arrays):
            self.facts.was_put(device, ipu, name, array.shape, array.dtype.name)

    def get(self, name: str, ipus: list[int] | None = None) -> list[np.ndarray]:
        """Tensor ``name`` from each IPU of ``ipus`` (every IPU by default)."""
        targets = list(range(self.topology.ipu_count)) if ipus is None else list(ipus)
        refs = [self.actors[self.owner[ipu]].get.remote(ipu, name) for ipu in targets]
        devices = [self.owner[ipu] for ipu in targets]
        return wait_all(refs, [self.specs[d] for d in devices], TENSOR_DEADLINE_SECONDS, "get",
                        self._lost_among(devices))

    def tensor_info(self, name: str, deadline_seconds: float = 30.0,
                    ipus: list[int] | None = None) -> dict[int, tuple[tuple[int, ...], str]]:
        """Shape and dtype of tensor ``name`` per IPU holding it (asking only the devices
        of ``ipus``, when given)."""
        devices = None if ipus is None else sorted({self.owner[i] for i in ipus})
        merged: dict[int, tuple[tuple[int, ...], str]] = {}
        for device, part in self.roster.ask("tensor_info", deadline_seconds, devices,
                                            name).items():
            self.facts.heard_tensor(device, name, part)
            merged.update(part)
        return merged

    def call(self, method: str, per_device: dict[int, tuple],
             deadline_seconds: float = 300.0) -> dict[int, Any]:
        """Call ``method(*args)`` on the devices of ``per_device`` (index -> args) at once;
        a dead or late device becomes a DeviceError naming it."""
        indices = sorted(per_device)
        changes = method not in READ_ONLY  # what the devices said may no longer hold
        if changes:
            self.facts.forget(indices)
        refs = [getattr(self.actors[i], method).remote(*per_device[i]) for i in indices]
        try:
            return dict(zip(indices, wait_all(refs, [self.specs[i] for i in indices],
                                              deadline_seconds, method,
                                              self._lost_among(indices))))
        finally:
            if changes:
                self.facts.forget(indices)

    def _lost_among(self, devices: list[int]) -> Callable[[list[int]], str]:
        """For a wait on ``devices`` (a call each): the line naming the lost Ray nodes of
        those still silent (positions in ``devices``), so a gone node is named at once."""
        return lambda silent: self.roster.lost_nodes([devices[i] for i in silent])

    def collective(self, collective: CollectiveName, inputs: list[np.ndarray] | str,
                   **options: Any) -> CollectiveResult:
        """Run a collective on this POD: see :func:`ipu_node.executor.run_collective`. A
        device lost with its Ray node says which node was lost."""
        try:
            return run_collective(self, collective, inputs, **options)
        except DeviceError as error:
            with self.roster.lock:
                nodes, node_ips = list(self.roster.nodes), list(self.roster.node_ips)
            raise with_lost_nodes(error, self.specs, nodes, node_ips) from None

    def link_bytes(self) -> np.ndarray:
        """Bytes sent over every directed link so far, summed over devices."""
        return np.sum([s["link_bytes"] for s in self.stats()], axis=0)

    # -- faults (see :class:`ipu_node.faults.FaultInjector`) ---------------------------
    def kill_card(self, name: str) -> DeviceHealth:
        return self.fault_injector.kill_card(name)

    def degrade_link(self, link: str | int, bandwidth_factor: float = 1.0,
                     added_latency_seconds: float = 0.0) -> LinkFault:
        return self.fault_injector.degrade_link(link, bandwidth_factor, added_latency_seconds)

    def cut_link(self, link: str | int) -> LinkFault:
        return self.fault_injector.cut_link(link)

    def heal(self, link: str | int | None = None) -> list[str]:
        return self.fault_injector.heal(link)

    def faults(self) -> dict[str, LinkFault]:
        """The link faults in force, by link name."""
        return self.fault_injector.by_name()

    # -- the end -------------------------------------------------------------------------
    def shutdown(self, stop_ray: bool = False) -> None:
        """Stop every device (its link server first), remove placement groups."""
        if self.closed:
            return
        refs = [a.shutdown.remote() for a in self.actors]
        try:
            ray.get(refs, timeout=10)
        except Exception:  # noqa: BLE001 - a dead device has nothing left to stop
            pass
        release(self.actors, self.placement_groups)
        self.closed = True
        if stop_ray and self.started_ray:
            ray.shutdown()

    def __enter__(self) -> EmulatedPod:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
