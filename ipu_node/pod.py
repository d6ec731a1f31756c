"""Launch an emulated POD on Ray: one actor per card or machine, wired by gRPC links.

Local embedded Ray by default (nothing to set up), or an existing Ray cluster by address
(``ray_address=`` or ``RAY_ADDRESS``). Every actor asks for the custom resource ``IPU``
(one per IPU it emulates) and is gang-placed: one placement group per server or rack,
packed onto one node where the cluster allows. :meth:`EmulatedPod.shutdown` frees every
actor, placement group and port; launching again in the same process works.

Ray restarts a device that dies (``max_restarts``); the restarted actor is empty and
listens on a new port, so whenever the POD hears from its devices (:meth:`stats`,
:meth:`~ipu_node.faults.PodFaults.health`) it notices new incarnations and wires them
in again. Fault injection lives in :mod:`ipu_node.faults`.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from cluster.errors import UserError
from cluster.model.spec import load_topology
from cluster.model.topology import Topology
from ipu_node.card import CONTROL, CONTROL_THREADS, Device, DeviceSpec
from ipu_node.errors import DeviceError, DeviceRestarting
from ipu_node.faults import PodFaults, incarnation
from ipu_node.host import HostRelay
from ipu_node.memory import available_ram_bytes
from ipu_node.ownership import ownership, relaying_hosts

LOCAL_IPU_SLOTS = 256  # the IPU resource an embedded local Ray offers (or the POD's size)
LAUNCH_DEADLINE_S = 120.0
DEVICE_RSS_BYTES = 160 << 20  # a device actor's resident memory, measured: ~130 MiB
# Collectives at once per device: one per IPU is enough (partitions never share an IPU),
# and more threads cost wall time (measured: 8 threads made a 64 MiB allreduce 1.5x slower).
MIN_DEVICE_THREADS = 2
_pod_ids = itertools.count()


def _ray():
    import ray

    return ray


def ensure_ray(ray_address: str | None, ipus_needed: int) -> bool:
    """Connect to Ray (an address, ``RAY_ADDRESS``, or a new local instance); return whether
    this call started a local one."""
    ray = _ray()
    if ray.is_initialized():
        return False
    address = ray_address or os.environ.get("RAY_ADDRESS")
    common = dict(namespace="ipupod", include_dashboard=False, log_to_driver=False,
                  configure_logging=False)
    if address:
        try:
            ray.init(address=address, **common)
        except Exception as error:  # Ray raises several types for a bad address
            raise UserError(f"cannot join the Ray cluster at {address!r}: {error}") from None
        return False
    ray.init(resources={"IPU": max(LOCAL_IPU_SLOTS, ipus_needed)}, **common)
    return True


def device_specs(topology: Topology) -> list[DeviceSpec]:
    """One device per unit (card or machine), IPUs in no unit one each, then one per
    relaying host (a DSS 8440 cluster's servers), named after the host node."""
    from cluster.model.hardware import ipu_m2000

    streaming = ipu_m2000().streaming_memory_bytes // 4
    specs, covered = [], set()
    for unit in topology.units:
        server = topology.servers[unit.server].name if topology.servers else "server0"
        specs.append(DeviceSpec(unit.name, unit.kind, unit.ipus, server,
                                streaming if unit.kind == "IPU-M2000" else 0))
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


@dataclass
class EmulatedPod(PodFaults):
    """A launched POD: its topology, its device actors and which actor owns each IPU.
    ``topology`` is the one collectives see: the launched one with the link faults
    injected so far (``base_topology``)."""

    topology: Topology
    specs: list[DeviceSpec]
    actors: list
    placement_groups: list
    owner: dict[int, int]  # IPU -> index into actors
    pod_id: str
    started_ray: bool = False
    launch_seconds: float = 0.0
    closed: bool = field(default=False)

    @classmethod
    def launch(cls, spec: str | Topology = "dss8440x2", *, ray_address: str | None = None,
               link_host: str = "127.0.0.1", deadline_s: float = LAUNCH_DEADLINE_S,
               max_restarts: int = -1) -> EmulatedPod:
        """Start one actor per card or machine of ``spec`` and wire their links. Ray
        restarts a dead device up to ``max_restarts`` times (-1: always)."""
        started = time.perf_counter()
        topology = load_topology(spec) if isinstance(spec, str) else spec
        specs = device_specs(topology)
        local = not (ray_address or os.environ.get("RAY_ADDRESS") or _ray().is_initialized())
        if local and len(specs) * DEVICE_RSS_BYTES > available_ram_bytes():
            raise UserError(
                f"{topology.name} needs {len(specs):,} device actors, about "
                f"{len(specs) * DEVICE_RSS_BYTES / 2**30:.0f} GiB, more than this machine has "
                "free: use phantom mode, or a Ray cluster (--ray-address)")
        started_ray = ensure_ray(ray_address, topology.ipu_count)
        ray = _ray()
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        available = ray.available_resources().get("IPU", 0)
        if available < topology.ipu_count:
            raise UserError(
                f"{topology.name} needs {topology.ipu_count} IPU resources but the Ray cluster "
                f"has {available:g} free: start Ray nodes with --resources '{{\"IPU\": N}}' or "
                "shut other PODs down")
        by_server: dict[str, list[int]] = {}
        for index, device in enumerate(specs):
            by_server.setdefault(device.server, []).append(index)
        pod_id = f"pod{os.getpid()}-{next(_pod_ids)}"
        groups, actors = [], [None] * len(specs)
        remote = ray.remote(concurrency_groups={CONTROL: CONTROL_THREADS})(Device)
        relay = ray.remote(concurrency_groups={CONTROL: CONTROL_THREADS})(HostRelay)
        try:
            for server, members in by_server.items():
                group = placement_group([{"IPU": len(specs[i].ipus)} for i in members
                                         if specs[i].ipus],
                                        strategy="PACK", name=f"{pod_id}-{server}")
                groups.append(group)
                if not _ready(ray, group, deadline_s):
                    raise DeviceError(f"Ray could not place server {server} of {topology.name} "
                                      f"within {deadline_s:g} s: not enough IPU resources?")
                cards = [i for i in members if specs[i].ipus]
                for index in members:
                    bundle = cards.index(index) if index in cards else 0
                    kind = remote if specs[index].ipus else relay
                    actors[index] = kind.options(
                        num_cpus=0,
                        resources={"IPU": len(specs[index].ipus)} if specs[index].ipus else {},
                        name=f"{pod_id}-{specs[index].name}", max_restarts=max_restarts,
                        max_concurrency=max(MIN_DEVICE_THREADS, len(specs[index].ipus)),
                        scheduling_strategy=PlacementGroupSchedulingStrategy(group, bundle),
                    ).remote(specs[index], topology, link_host)
            infos = _get(ray, [a.info.remote() for a in actors], deadline_s, specs, "start")
            names = [info["name"] for info in infos]
            addresses = [info.get("link_address", info["address"]) for info in infos]
            owner_of_ipu = np.array([next(i for i, s in enumerate(specs) if ipu in s.ipus)
                                     for ipu in range(topology.ipu_count)])
            hosts = {topology.node_names.index(s.name): i for i, s in enumerate(specs)
                     if not s.ipus}
            owns = ownership(topology, owner_of_ipu, hosts)
            _get(ray, [a.connect.remote(names, addresses, i, owns) for i, a in enumerate(actors)],
                 deadline_s, specs, "connect")
        except BaseException:
            for actor in actors:
                if actor is not None:
                    ray.kill(actor)
            for group in groups:
                remove_placement_group(group)
            raise
        owner = {ipu: i for i, s in enumerate(specs) for ipu in s.ipus}
        pod = cls(topology, specs, actors, groups, owner, pod_id, started_ray,
                  time.perf_counter() - started)
        pod.infos, pod.names, pod.addresses, pod.ownership = infos, names, addresses, owns
        pod._wired(infos)
        pod.max_restarts = max_restarts
        return pod

    def _wired(self, infos: list[dict]) -> None:
        """Fault and recovery state of a freshly launched POD."""
        self.base_topology = self.topology
        self.incarnations = [incarnation(info) for info in infos]
        self.link_faults = {}
        self.restarts = [0] * len(self.specs)
        self.fault_counts = {}
        self.down: dict[int, str] = {}  # device -> why it is known to be down
        self.fault_version = 0
        self._last_stats: dict[int, dict] = {}  # per device, its counters as last heard
        self._offsets: dict[int, dict] = {}  # per device, what its earlier lives counted
        self._state_lock = threading.RLock()
        self._rewire_lock = threading.Lock()

    def device_of(self, ipu: int) -> str:
        return self.specs[self.owner[ipu]].name

    def nodes(self) -> dict[str, str]:
        """Which Ray node each device runs on."""
        return {info["name"]: info["node_id"] for info in self.infos}

    def stats(self, deadline_s: float = 30.0, devices: list[int] | None = None) -> list[dict]:
        """Counters, memory and link bytes of ``devices`` (every device by default), in
        that order. Waits (up to ``deadline_s``) for a restarting device, and wires
        restarted ones in again; counters carry on across restarts."""
        answers = self._ask("stats", deadline_s, devices)
        self._rejoin(answers, deadline_s)
        with self._state_lock:
            return [self._with_offsets(i, a) for i, a in answers.items()]

    def put(self, name: str, arrays: list[np.ndarray], ipus: list[int] | None = None) -> None:
        """Store ``arrays[r]`` on IPU ``ipus[r]`` (IPU r by default) as tensor ``name``."""
        ray = _ray()
        targets = list(range(self.topology.ipu_count)) if ipus is None else list(ipus)
        if len(arrays) != len(targets):
            raise UserError(f"give one array per IPU: {len(targets)} IPUs, {len(arrays)} arrays")
        refs = [self.actors[self.owner[ipu]].put.remote(ipu, name, np.asarray(array))
                for ipu, array in zip(targets, arrays)]
        _get(ray, refs, 120.0, [self.specs[self.owner[i]] for i in targets], "put")

    def get(self, name: str, ipus: list[int] | None = None) -> list[np.ndarray]:
        """Tensor ``name`` from each IPU of ``ipus`` (every IPU by default)."""
        ray = _ray()
        targets = list(range(self.topology.ipu_count)) if ipus is None else list(ipus)
        refs = [self.actors[self.owner[ipu]].get.remote(ipu, name) for ipu in targets]
        return _get(ray, refs, 120.0, [self.specs[self.owner[i]] for i in targets], "get")

    def tensor_info(self, name: str, deadline_s: float = 30.0,
                    ipus: list[int] | None = None) -> dict[int, tuple[tuple[int, ...], str]]:
        """Shape and dtype of tensor ``name`` per IPU holding it (asking only the devices
        of ``ipus``, when given)."""
        devices = None if ipus is None else sorted({self.owner[i] for i in ipus})
        merged: dict[int, tuple[tuple[int, ...], str]] = {}
        for part in self._ask("tensor_info", deadline_s, devices, name).values():
            merged.update(part)
        return merged

    def call(self, method: str, per_device: dict[int, tuple], deadline_s: float = 300.0) -> dict[int, object]:
        """Call ``method(*args)`` on the devices of ``per_device`` (index -> args) at once;
        a dead or late device becomes a DeviceError naming it."""
        ray = _ray()
        indices = sorted(per_device)
        refs = [getattr(self.actors[i], method).remote(*per_device[i]) for i in indices]
        return dict(zip(indices, _get(ray, refs, deadline_s, [self.specs[i] for i in indices],
                                      method)))

    def collective(self, collective: str, inputs, **options):
        """Run a collective on this POD: see :func:`ipu_node.executor.run_collective`."""
        from ipu_node.executor import run_collective

        return run_collective(self, collective, inputs, **options)

    def link_bytes(self) -> np.ndarray:
        """Bytes sent over every directed link so far, summed over devices."""
        return np.sum([s["link_bytes"] for s in self.stats()], axis=0)

    def shutdown(self, stop_ray: bool = False) -> None:
        """Stop every device (its link server first), remove placement groups."""
        if self.closed:
            return
        ray = _ray()
        from ray.util.placement_group import remove_placement_group

        refs = [a.shutdown.remote() for a in self.actors]
        try:
            ray.get(refs, timeout=10)
        except Exception:
            pass  # a dead device has nothing left to stop
        for actor in self.actors:
            ray.kill(actor)
        for group in self.placement_groups:
            remove_placement_group(group)
        self.closed = True
        if stop_ray and self.started_ray:
            ray.shutdown()

    def __enter__(self) -> EmulatedPod:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()


def _ready(ray, group, deadline_s: float) -> bool:
    ready, _ = ray.wait([group.ready()], timeout=deadline_s)
    return bool(ready)


def _get(ray, refs: list, deadline_s: float, specs: list[DeviceSpec], what: str) -> list:
    """``ray.get`` with a deadline; a dead or late actor becomes a DeviceError naming it."""
    done, pending = ray.wait(refs, num_returns=len(refs), timeout=deadline_s)
    if pending:
        late = [specs[refs.index(r)].name for r in pending]
        raise DeviceError(f"{what}: no answer within {deadline_s:g} s from {', '.join(late)}")
    results = []
    for index, ref in enumerate(refs):
        try:
            results.append(ray.get(ref))
        except ray.exceptions.ActorUnavailableError:
            raise DeviceRestarting(f"{what}: device {describe(specs[index])} is restarting after it "
                              "died: try again in a moment") from None
        except ray.exceptions.RayActorError as error:
            raise DeviceError(f"{what}: device {describe(specs[index])} died: {error}") from None
    return results


def describe(spec: DeviceSpec) -> str:
    """``'card3 (IPUs 6, 7)'``: how errors name a device."""
    if not spec.ipus:
        return spec.name
    return f"{spec.name} (IPU{'s' if len(spec.ipus) > 1 else ''} {', '.join(map(str, spec.ipus))})"
