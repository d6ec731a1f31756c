"""Data-parallel training across emulated DSS 8440 servers: the white paper's use case.

One model replica per IPU (``gcd=1``) or per C2 card (``gcd=2``: the card's two IPUs hold
half of the replica's gradient each). Every replica computes gradients on its own
micro-batches; the gradients are averaged by a GCL allreduce on the emulated devices
(real mode: real bytes between card actors), local over IPU-Links then global over
InfiniBand with the default ``hierarchical`` algorithm; every replica then applies the
same SGD-with-momentum update. The replicas live on the devices (``ipu_node/replica.py``):
weights, velocity and gradients are IPU tensors, forward and backward run in the card's
process; this process streams each replica its micro-batches, as the host does. Phantom mode
skips the data and the devices and reports the simulated step time only, at any scale.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from cluster.errors import UserError
from cluster.model.presets import build_preset
from cluster.model.spec import load_topology
from cluster.model.topology import Topology
from cluster.training.data import make_dataset, replica_slice, step_batch, train_reference
from cluster.training.model import MLPSpec, init_params, training_flops
from cluster.training.replica import (
    GRAD,
    GRAD_MEAN,
    apply_update,
    compute_gradients,
    place_replicas,
)
from cluster.training.timing import StepTime, allreduce_parts, compute_seconds, host_io_seconds
from gcl import CommGroup, plan, simulate
from gcl.modes import Mode

if TYPE_CHECKING:
    from ipu_node.pod import EmulatedPod

IPUS_PER_SERVER = 16


@dataclass(frozen=True)
class TrainConfig:
    """A training run. ``micro_batch`` is samples per replica per micro-step; a step takes
    ``replicas x accumulation x micro_batch`` samples."""

    servers: int = 2
    replicas_per_server: int = 16
    gcd: int = 1
    micro_batch: int = 32
    accumulation: int = 1
    steps: int = 20
    lr: float = 0.05
    momentum: float = 0.9
    seed: int = 0
    algorithm: str = "hierarchical"
    input_size: int = 64
    hidden: tuple[int, ...] = (128,)
    classes: int = 10
    samples: int = 16384
    mode: Mode = Mode.REAL  # a plain "real" or "phantom" is taken too
    check: bool = False
    topology: str | None = None  # a preset or YAML file; default: dss8440 x servers

    def validate(self, topology: Topology | None = None) -> None:
        """UserError naming the option to change if this run cannot go ahead (on
        ``topology``, when given: it bounds the replicas per server)."""
        if self.servers < 1:
            raise UserError("--servers must be 1 or more")
        if self.gcd not in (1, 2):
            raise UserError("--gcd is 1 (a replica per IPU) or 2 (a replica per pair of IPUs "
                            "of one card or machine)")
        per_server = (server_ipus(topology)[0].size if topology else IPUS_PER_SERVER) // self.gcd
        if not 1 <= self.replicas_per_server <= per_server:
            raise UserError(f"--replicas-per-server runs from 1 to {per_server} with --gcd "
                            f"{self.gcd} on this topology")
        for name in ("micro_batch", "accumulation", "steps", "input_size", "classes", "samples"):
            if getattr(self, name) < 1:
                raise UserError(f"{name.replace('_', '-')} must be 1 or more")
        if not self.lr > 0 or not 0 <= self.momentum < 1:
            raise UserError("the learning rate must be positive and momentum in [0, 1)")
        if self.mode not in tuple(Mode):
            raise UserError("--mode is real or phantom")
        if self.check and self.mode != Mode.REAL:
            raise UserError("--check compares real training with the reference: use --mode real")

    @property
    def replicas(self) -> int:
        """Model replicas in all: servers times replicas per server."""
        return self.servers * self.replicas_per_server

    @property
    def global_batch(self) -> int:
        """Samples per step, over every replica and micro-step."""
        return self.replicas * self.accumulation * self.micro_batch

    @property
    def spec(self) -> MLPSpec:
        """The shape of the model every replica trains."""
        return MLPSpec(self.input_size, tuple(self.hidden), self.classes)


def topology_for(config: TrainConfig) -> Topology:
    """``config.topology`` if given (a preset or YAML file), else DSS 8440 servers."""
    if config.topology:
        return load_topology(config.topology)
    return build_preset("dss8440" if config.servers == 1 else f"dss8440x{config.servers}")


def server_ipus(topology: Topology) -> list[np.ndarray]:
    """The IPUs of each server (DSS 8440) or rack (POD), in order; a topology without
    servers is one."""
    if not topology.servers:
        return [np.arange(topology.ipu_count)]
    return [np.sort(np.concatenate([np.array(topology.units[u].ipus) for u in server.units]))
            for server in topology.servers]


def replica_ipus(config: TrainConfig, topology: Topology | None = None) -> np.ndarray:
    """IPUs holding gradients, replica by replica: the first replicas-per-server IPUs (or
    pairs, with gcd 2: a C2 card, half an IPU-M2000) of every server or rack."""
    topology = topology or topology_for(config)
    per_server = config.replicas_per_server * config.gcd
    return np.concatenate([ipus[:per_server] for ipus in server_ipus(topology)])


def allreduce_plan(config: TrainConfig, topology: Topology) -> tuple[int, CommGroup]:
    """The gradient allreduce, as (elements per replica, replica group): all replicas
    (gcd 1), or, with gcd 2, the two halves of the gradient each over the IPUs holding it
    (CommGroup ORTHOGONAL)."""
    parameters = config.spec.parameter_count
    if config.gcd == 1:
        return parameters, CommGroup()
    half = -(-parameters // 2)
    return half, CommGroup.parse(f"orthogonal:{config.replicas}")


def step_time(config: TrainConfig, topology: Topology) -> StepTime:
    """Simulated seconds of one step, by part (the same every step)."""
    ipus = replica_ipus(config, topology)
    count, group = allreduce_plan(config, topology)
    schedule = plan("allreduce", topology, count, algorithm_name=config.algorithm, group=group,
                    ipus=ipus)
    spans = len(set(topology.router.domain_of_ipu[ipus].tolist())) > 1
    local, global_ = allreduce_parts(simulate(schedule, topology), spans)
    samples = config.accumulation * config.micro_batch
    flops = training_flops(config.spec, config.micro_batch) * config.accumulation
    input_bytes = samples * (config.input_size * 4 + 4)  # float32 features, int32 label
    first_ipus = ipus[::config.gcd].tolist()  # the host streams to each replica's first IPU
    return StepTime(compute_seconds(topology, flops, config.gcd, first_ipus[0]),
                    host_io_seconds(topology, first_ipus, input_bytes), local, global_)


def train(config: TrainConfig, pod: EmulatedPod | None = None,
          on_step: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run ``config``; return the record ``ipupod train --json`` prints. In real mode
    ``pod`` is a launched :class:`~ipu_node.pod.EmulatedPod` of ``topology_for(config)``."""
    if config.servers < 1 and not config.topology:
        raise UserError("--servers must be 1 or more")
    topology = pod.topology if pod is not None else topology_for(config)
    if config.topology:
        config = replace(config, servers=len(server_ipus(topology)))
    config.validate(topology)
    parts = step_time(config, topology)
    record_steps: list[dict[str, Any]] = []
    identical: bool | None = None
    losses: Sequence[float | None]  # None per step in phantom mode: no data, no loss
    real_losses: list[float] = []
    if config.mode == Mode.REAL:
        if pod is None:
            raise ValueError("real mode trains on the devices: pass pod, a launched "
                             "EmulatedPod of topology_for(config)")
        real_losses, identical = _train_real(config, pod, on_step)
        losses = real_losses
    else:
        losses = [None] * config.steps
        for step in range(config.steps):
            if on_step:
                on_step(step + 1, config.steps)
    for step, loss in enumerate(losses):
        record_steps.append({"step": step, "loss": loss, "sim_seconds": parts.sim_seconds,
                             **{k: v for k, v in asdict(parts).items()}})
    record: dict[str, Any] = {
        "topology": topology.name, "servers": config.servers, "replicas": config.replicas,
        "gcd": config.gcd, "mode": config.mode, "global_batch": config.global_batch,
        "algorithm": config.algorithm, "steps": record_steps,
        "replicas_identical": identical,
        "throughput_samples_per_sim_second": config.global_batch / parts.sim_seconds}
    if config.check:  # real mode only (validate): compare its losses with the reference
        x, y = make_dataset(config.seed, config.samples, config.input_size, config.classes)
        reference = train_reference(config.spec, x, y, replicas=config.replicas,
                                    micro_batch=config.micro_batch,
                                    accumulation=config.accumulation, steps=config.steps,
                                    lr=config.lr, momentum=config.momentum, seed=config.seed)
        record["reference_losses"] = reference
        record["reference_max_rel_error"] = max(
            abs(a - b) / abs(b) for a, b in zip(real_losses, reference))
    return record


def _train_real(config: TrainConfig, pod: EmulatedPod, on_step) -> tuple[list[float], bool]:
    """Train with the replicas on the devices: each device computes its replicas'
    gradients, the gradients are averaged by an allreduce on the devices, each device
    updates its replicas; this process only streams the micro-batches (the host's job)."""
    spec, replicas, gcd = config.spec, config.replicas, config.gcd
    x, y = make_dataset(config.seed, config.samples, config.input_size, config.classes)
    ipus = replica_ipus(config, pod.topology)
    targets = [tuple(ipus[r * gcd:(r + 1) * gcd].tolist()) for r in range(replicas)]
    home = [t[0] for t in targets]  # the IPU holding replica r's weights
    device_of = [pod.owner[ipu] for ipu in home]
    start = init_params(spec, config.seed)
    placed: dict[int, list[int]] = {}
    for r in range(replicas):
        placed.setdefault(device_of[r], []).append(home[r])
    pod.call("execute", {d: (place_replicas, start, h) for d, h in placed.items()})
    _, group = allreduce_plan(config, pod.topology)
    losses, identical = [], True
    for step in range(config.steps):
        batch_x, batch_y = step_batch(x, y, step, config.global_batch)
        work: dict[int, dict] = {}
        for r in range(replicas):
            batches = [replica_slice(batch_x, batch_y, r, replicas, config.micro_batch,
                                     config.accumulation, micro)
                       for micro in range(config.accumulation)]
            work.setdefault(device_of[r], {})[home[r]] = (batches, targets[r])
        replica_losses = {}
        gradients = {d: (compute_gradients, spec, w) for d, w in work.items()}
        for answer in pod.call("execute", gradients).values():
            replica_losses.update(answer)
        pod.collective("allreduce", GRAD, output=GRAD_MEAN, op="mean",
                       algorithm=config.algorithm, group=group, ipus=ipus.tolist())
        updates = {d: (apply_update, {home[r]: (targets[r], config.lr, config.momentum)
                                      for r in range(replicas) if device_of[r] == d})
                   for d in placed}
        digests = set()
        for answer in pod.call("execute", updates).values():
            digests.update(answer.values())
        identical &= len(digests) == 1
        losses.append(float(np.mean([replica_losses[h] for h in home])))
        if on_step:
            on_step(step + 1, config.steps)
    return losses, identical
