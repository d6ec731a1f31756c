"""Real mode: run a collective's schedule on a launched POD's device actors with real data.

Everything a request could get wrong is checked before any byte moves: one array per
replica, equal shapes and dtypes, a dtype and op GCL knows, room in every IPU's memory and
in this machine's RAM. The shapes of tensors the IPUs hold and their free memory are what
the devices last said (:mod:`ipu_node.known_facts`), asked again only when the POD may not
know them, so starting a collective is one round trip: each device gets its IPUs' inputs
and runs its share of the schedule; tensor bytes go peer to peer over the links, never
through this process. Host relays are asked what they relayed for it once it ended. The
simulated time is :func:`gcl.phantom.simulate` of the same schedule, so real and phantom
mode agree by construction.

Failures end fast: a collective has a deadline (``deadline_seconds``, 10 s by default) within
which a failure is named. Each wait on a link gets most of it; when one device fails, dies
or hangs, the others are told to abort at once and get a moment to stop, and the devices
are asked who is alive, each step from the rest of the deadline (:func:`split_deadline`),
so the error names the dead or hung card and its IPUs within the deadline, never a hang.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import ray

from cluster.errors import UserError
from cluster.model.topology import Topology
from gcl.collectives import BROADCAST, DTYPES, CollectiveName, DType, ReduceOp, check_op
from gcl.collectives import collective as lookup
from gcl.groups import CommGroup
from gcl.local_executor import BLOCKED
from gcl.phantom import Timing
from gcl.planner import AUTO, plan_timed, replica_groups
from gcl.schedule import Schedule
from ipu_node.answers import DeviceStats, HealthState, RunAnswer
from ipu_node.calls import ABORT_GRACE_SECONDS, died_during, gather
from ipu_node.device_errors import DeviceDied, DeviceError, OutOfMemory
from ipu_node.device_handle import DeviceHandle
from ipu_node.device_health import HEALTH_DEADLINE_SECONDS, DeviceHealth
from ipu_node.device_spec import DeviceSpec, describe
from ipu_node.ipu_memory import available_ram_bytes
from ipu_node.known_facts import KnownFacts

DEFAULT_DEADLINE_SECONDS = 10.0  # a failed collective is named within this (split_deadline)
DEADLINE_SHARE = 0.2  # of a deadline, at most, for each of the abort grace and the probe
_RAM_FACTOR = 4  # inputs, device buffers, results in flight, results returned
_ids = itertools.count()


class Pod(Protocol):
    """What :func:`run_collective` uses of the POD that calls it
    (:class:`ipu_node.pod.EmulatedPod`, which imports this module: naming the class here
    would make the two modules import each other)."""

    @property
    def topology(self) -> Topology: ...
    @property
    def specs(self) -> list[DeviceSpec]: ...
    @property
    def owner(self) -> dict[int, int]: ...  # IPU -> index into the devices
    @property
    def pod_id(self) -> str: ...
    @property
    def actors(self) -> list[DeviceHandle]: ...
    @property
    def restarts(self) -> list[int]: ...
    @property
    def facts(self) -> KnownFacts: ...

    def stats(self, deadline_seconds: float = ...,
              devices: list[int] | None = ...) -> list[DeviceStats]: ...
    def health(self, deadline_seconds: float = ...) -> list[DeviceHealth]: ...
    def note_down(self, index: int, why: str) -> None: ...
    def tensor_info(self, name: str, deadline_seconds: float = ..., ipus: list[int] | None = ...
                    ) -> dict[int, tuple[tuple[int, ...], str]]: ...
    def call(self, method: str, per_device: dict[int, tuple],
             deadline_seconds: float = ...) -> dict[int, Any]: ...


@dataclass(frozen=True)
class CollectiveResult:
    """Results in replica order, and where the time went (simulated and wall)."""

    results: list[np.ndarray]
    schedule: Schedule
    timing: Timing  # simulated seconds, per phase
    wall_seconds: float
    link_type_bytes: dict[str, float]  # measured on the devices

    @property
    def sim_seconds(self) -> float:
        return self.timing.sim_seconds

    @property
    def algorithm(self) -> str:
        return self.schedule.algorithm


def check_replicas(shapes: list[tuple[int, ...]], dtypes: list[str], replicas: int,
                   group_size: int, collective: CollectiveName) -> tuple[DType, int]:
    """The dtype and per-replica element count, or a UserError saying what is wrong."""
    if len(shapes) != replicas:
        raise UserError(f"give one array per replica: {replicas} replicas, {len(shapes)} arrays")
    for index, (shape, dtype) in enumerate(zip(shapes, dtypes)):
        if shape != shapes[0] or dtype != dtypes[0]:
            raise UserError(f"replica {index} has shape {shape} and dtype {dtype}, replica 0 has "
                            f"{shapes[0]} and {dtypes[0]}: all must match")
    names = {np.dtype(t).name: n for n, t in DTYPES.items()}
    if dtypes[0] not in names:
        raise UserError(f"dtype {dtypes[0]} is not supported: use {', '.join(DTYPES)}")
    size = int(np.prod(shapes[0], dtype=np.int64))
    if size == 0:
        raise UserError("the arrays are empty: a collective needs at least one element")
    if collective in BLOCKED and size % group_size:
        raise UserError(f"{collective} splits each array into {group_size} equal blocks; "
                        f"{size} elements do not split: pad to a multiple of {group_size}")
    total = size * np.dtype(dtypes[0]).itemsize * replicas
    if total * _RAM_FACTOR > available_ram_bytes():
        raise UserError(f"{total:,} bytes of inputs would not fit in this machine's RAM in real "
                        "mode: use phantom mode (sizes only) for this size")
    return DType(names[dtypes[0]]), size // group_size if collective in BLOCKED else size


def run_collective(pod: Pod, collective: CollectiveName, inputs: list[np.ndarray] | str, *,
                   output: str | None = None, algorithm: str = AUTO,
                   group: CommGroup | str = CommGroup(), op: ReduceOp = ReduceOp.SUM, root: int = 0,
                   ipus: list[int] | None = None,
                   deadline_seconds: float = DEFAULT_DEADLINE_SECONDS) -> CollectiveResult:
    """Run ``collective`` on the devices of ``pod``, replica r on ``ipus[r]`` (IPU r by
    default). ``inputs`` are arrays (one per replica) or the name of a tensor the IPUs hold
    (:meth:`ipu_node.pod.EmulatedPod.put`); with ``output`` the results stay on the IPUs
    under that name and ``results`` is empty."""
    started = time.perf_counter()
    coll = lookup(collective)
    op = check_op(op)  # a Python caller's text too: a clear error here, not in a device
    group = CommGroup.parse(group) if isinstance(group, str) else group
    topology = pod.topology
    replica_ipus = np.arange(topology.ipu_count) if ipus is None else np.asarray(ipus)
    groups = replica_groups(topology, group, replica_ipus)
    if not isinstance(inputs, str):
        inputs = [np.asarray(a) for a in inputs]
    shapes, dtypes = _shapes_and_dtypes(pod, inputs, replica_ipus.tolist(), deadline_seconds)
    dtype, count = check_replicas(shapes, dtypes, len(replica_ipus), len(groups[0]), coll.name)
    schedule, timing = plan_timed(coll, topology, count, dtype=dtype, algorithm_name=algorithm,
                                  group=group, ipus=replica_ipus,
                                  root=root if coll is BROADCAST else 0)
    _check_memory(pod, schedule, deadline_seconds)
    replica_of_ipu = {int(ipu): i for i, ipu in enumerate(replica_ipus.tolist())}
    collective_id = f"{pod.pod_id}-c{next(_ids)}"
    answers = _run_on_devices(pod, schedule, timing, inputs, replica_of_ipu, output, op,
                              deadline_seconds, collective_id)
    results: list[np.ndarray] = [None] * len(replica_ipus)  # type: ignore[list-item]
    link_bytes = _relayed_bytes(pod, collective_id, deadline_seconds)
    for answer in answers:
        link_bytes += answer.link_bytes
        for ipu, result in (answer.results or {}).items():
            results[replica_of_ipu[ipu]] = result
    per_type = np.bincount(topology.directed_type, weights=link_bytes,
                           minlength=len(topology.link_types))
    measured = {t.name: float(v) for t, v in zip(topology.link_types, per_type) if v}
    return CollectiveResult(results if output is None else [], schedule, timing,
                            time.perf_counter() - started, measured)


def _shapes_and_dtypes(pod: Pod, inputs: list[np.ndarray] | str, replica_ipus: list[int],
                       deadline_seconds: float) -> tuple[list[tuple[int, ...]], list[str]]:
    """Each replica's input shape and dtype: of the arrays, or of the tensor the IPUs hold."""
    if not isinstance(inputs, str):
        return [a.shape for a in inputs], [a.dtype.name for a in inputs]
    held: dict[int, tuple[tuple[int, ...], str]] = {}
    unknown = []
    for device in sorted({pod.owner[i] for i in replica_ipus}):
        known = pod.facts.tensor(device, inputs)
        if known is None:
            unknown += [i for i in replica_ipus if pod.owner[i] == device]
        else:
            held.update(known)
    if unknown:
        held.update(pod.tensor_info(inputs, deadline_seconds, unknown))
    missing = [pod.topology.ipu_name(i) for i in replica_ipus if i not in held]
    if missing:
        raise UserError(f"no tensor {inputs!r} on IPU {missing[0]}: put it there first")
    return [held[i][0] for i in replica_ipus], [held[i][1] for i in replica_ipus]


def _run_on_devices(pod: Pod, schedule: Schedule, timing: Timing,
                    inputs: list[np.ndarray] | str, replica_of_ipu: dict[int, int],
                    output: str | None, op: ReduceOp, deadline_seconds: float,
                    collective_id: str) -> list[RunAnswer]:
    """Each device's share of ``schedule`` at once; its answers, device by device (what
    they say of their memory and output is kept). A failure anywhere aborts the others
    and names the device to blame; what the devices said before is forgotten."""
    ranks: dict[int, dict[int, tuple[int, int]]] = {}
    for g, members in enumerate(schedule.groups):
        for r, ipu in enumerate(members.tolist()):
            ranks.setdefault(pod.owner[ipu], {})[ipu] = (g, r)
    devices = sorted(ranks)
    wait_seconds, grace_seconds, probe_seconds = split_deadline(deadline_seconds)
    what = f"{schedule.collective} {collective_id}"
    restarts_before = list(pod.restarts)
    pod.facts.started(devices)  # their memory is in use until it ends
    try:
        shared = ray.put(schedule)  # stored once, not once per device (138 kB at 256 IPUs)
        refs = [pod.actors[d].run.remote(
            shared, collective_id, ranks[d], inputs if isinstance(inputs, str) else
            {ipu: inputs[replica_of_ipu[ipu]] for ipu in ranks[d]}, output, op, wait_seconds,
            timing.sim_seconds, dict(pod.topology.faults)) for d in devices]
        answers: list[RunAnswer] = gather(
            refs, [pod.specs[d] for d in devices], deadline_seconds * max(1, schedule.supersteps),
            abort=lambda reason: _abort(pod, devices, collective_id, reason),
            on_death=lambda i, why: pod.note_down(devices[i], why), what=what,
            grace_seconds=grace_seconds)
    except BaseException as error:
        pod.facts.forget(devices)
        if not isinstance(error, DeviceError) or isinstance(error, DeviceDied):
            raise
        raise _blame_the_dead(pod, devices, restarts_before, what, probe_seconds) or error from None
    finally:
        pod.facts.ended(devices)
    for device, answer in zip(devices, answers):
        pod.facts.heard_memory(device, answer.memory)
        if output is not None:
            pod.facts.heard_tensor(device, output, answer.output_info)
    return answers


def split_deadline(deadline_seconds: float) -> tuple[float, float, float]:
    """A collective's deadline, split so that a failure is named within it: each wait on a
    link gets the rest of it after the time the other devices get to stop (at most
    :data:`~ipu_node.calls.ABORT_GRACE_SECONDS`) and the time to ask who is alive (at most
    :data:`~ipu_node.device_health.HEALTH_DEADLINE_SECONDS`), each at most a fifth of it.
    Seconds."""
    grace_seconds = min(ABORT_GRACE_SECONDS, DEADLINE_SHARE * deadline_seconds)
    probe_seconds = min(HEALTH_DEADLINE_SECONDS, DEADLINE_SHARE * deadline_seconds)
    return deadline_seconds - grace_seconds - probe_seconds, grace_seconds, probe_seconds


def _relayed_bytes(pod: Pod, collective_id: str, deadline_seconds: float) -> np.ndarray:
    """Bytes the host relays counted on their links for the collective ``collective_id``
    (asked once it ended), per directed link."""
    total = np.zeros(2 * pod.topology.link_count_physical)
    hosts = [i for i, spec in enumerate(pod.specs) if not spec.ipus]
    if hosts:
        for relayed in pod.call("relayed", {h: (collective_id,) for h in hosts},
                                deadline_seconds).values():
            total += relayed
    return total


def _check_memory(pod: Pod, schedule: Schedule, deadline_seconds: float) -> None:
    """Each IPU must have room for the collective's buffers (input, and output if any): by
    what the devices last said, asking those the POD knows nothing of, and asking again
    before refusing."""
    copies = 2 if schedule.collective == CollectiveName.ALL_TO_ALL else 1
    buffers = schedule.buffer_elements * schedule.itemsize * copies
    devices = sorted({pod.owner[ipu] for members in schedule.groups for ipu in members.tolist()})
    ipus = [ipu for members in schedule.groups for ipu in members.tolist()]
    free, asked_all = _free_bytes(pod, devices, deadline_seconds)
    if not asked_all and any(buffers > free[ipu] for ipu in ipus):  # what it said may be old
        free, _ = _free_bytes(pod, devices, deadline_seconds, ask=True)
    _refuse_short_memory(pod, schedule, buffers, free)


def _free_bytes(pod: Pod, devices: list[int], deadline_seconds: float,
                ask: bool = False) -> tuple[dict[int, int], bool]:
    """Free bytes per IPU of ``devices``: as they last said, asking those the POD knows
    nothing of (every one, with ``ask``); and whether every one was asked."""
    known = {d: None if ask else pod.facts.free_bytes(d) for d in devices}
    unknown = [d for d, free in known.items() if free is None]
    free = {ipu: m["free_bytes"] for s in (pod.stats(deadline_seconds, unknown) if unknown
                                           else []) for ipu, m in s["memory"].items()}
    for said in known.values():
        free.update(said or {})
    return free, len(unknown) == len(devices)


def _refuse_short_memory(pod: Pod, schedule: Schedule, buffers: int,
                         free: dict[int, int]) -> None:
    """An OutOfMemory naming the first IPU with fewer than ``buffers`` bytes ``free``."""
    for members in schedule.groups:
        for ipu in members.tolist():
            if buffers > free[ipu]:
                raise OutOfMemory(
                    f"IPU {pod.topology.ipu_name(ipu)}: the collective needs {buffers:,} bytes "
                    f"but only {free[ipu]:,} bytes are free: use a smaller size or more IPUs")


def _blame_the_dead(pod: Pod, devices: list[int], restarts_before: list[int],
                    what: str, probe_seconds: float) -> DeviceError | None:
    """After a failure that named no dead device (a peer saw a link drop, or waited in
    vain): if one of the collective's devices died meanwhile (it is restarting, or came
    back as a new process) or does not answer, that is the cause to report."""
    health = pod.health(probe_seconds)
    for index in devices:
        spec, state = describe(pod.specs[index]), health[index].state
        if state == HealthState.DEAD:
            return DeviceDied(f"device {spec} died during {what} and Ray will not restart it "
                              "(no restarts left): launch the POD again")
        if state == HealthState.RESTARTING or pod.restarts[index] > restarts_before[index]:
            return died_during(pod.specs[index], what)
    for index in devices:
        if health[index].state == HealthState.UNREACHABLE:
            spec = describe(pod.specs[index])
            return DeviceError(f"device {spec} stopped answering during {what} (hung, or "
                               "still restarting)")
    return None


def _abort(pod: Pod, devices: list[int], collective_id: str, reason: str) -> None:
    """Tell every device of the collective to stop waiting for it."""
    for index in devices:
        pod.actors[index].abort.remote(collective_id, reason)
