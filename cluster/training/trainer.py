"""Training across emulated DSS 8440 servers or IPU-PODs: the white papers' use case.

Data parallel with model parallel inside: one replica per ``ipus_per_replica`` IPUs (its
Graph Compile Domain). A replica of one IPU computes its gradients on its micro-batches
(:mod:`.replica`); a replica of several IPUs is a pipeline of as many stages, with
``accumulation`` micro-batches in flight (:mod:`.pipeline`). The gradients are averaged by
a GCL allreduce on the emulated devices (real mode: real bytes between card actors), local
over IPU-Links then global over InfiniBand with the default ``hierarchical`` algorithm;
every replica then applies the same SGD-with-momentum update. Weights, velocity and
gradients are IPU tensors; this process streams the micro-batches, as the host does.
Phantom mode skips the data and the devices and reports the simulated step time only, at
any scale.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from cluster.training.config import IPUS_PER_SERVER, TrainConfig
from cluster.training.data import make_dataset, replica_slice, step_batch, train_reference
from cluster.training.fit import check_fits
from cluster.training.memory_plan import StageMemory, stage_memory
from cluster.training.numpy_mlp import init_params
from cluster.training.pipeline.real_pipeline import train_pipelined
from cluster.training.placement import gradient_group, machines, replica_ipus, server_ipus
from cluster.training.plan import TrainPlan
from cluster.training.records import RunRecord, step_record
from cluster.training.replica import (
    GRAD,
    GRAD_MEAN,
    apply_update,
    compute_gradients,
    place_replicas,
)
from cluster.training.sharding import train_sharded
from cluster.training.step_parts import StepTime
from cluster.training.step_timing import step_time
from gcl.collectives import CollectiveName, ReduceOp
from gcl.modes import Mode

if TYPE_CHECKING:
    from cluster.model.topology import Topology
    from ipu_node.pod import EmulatedPod

__all__ = ["IPUS_PER_SERVER", "StepTime", "TrainConfig", "TrainPlan", "server_ipus",
           "step_time", "train"]


def train(plan: TrainPlan, pod: EmulatedPod | None = None,
          on_step: Callable[[int, int], None] | None = None) -> RunRecord:
    """Run the ``plan``; return the record ``ipupod train --json`` prints. In real mode
    ``pod`` is a launched :class:`~ipu_node.pod.EmulatedPod` of the plan's topology."""
    config, topology = plan.config, plan.topology
    memory = stage_memory(plan)
    check_fits(plan, memory)
    parts = step_time(plan)
    identical: bool | None = None
    losses: Sequence[float | None]  # None per step in phantom mode: no data, no loss
    if config.mode == Mode.REAL:
        if pod is None:
            raise ValueError("real mode trains on the devices: pass pod, a launched "
                             "EmulatedPod of the plan's topology")
        train_on_devices = (_train_real if config.ipus_per_replica == 1 else
                            train_sharded if config.splits_columns else train_pipelined)
        losses, identical = train_on_devices(config, pod, on_step)
    else:
        losses = [None] * config.steps
        for step in range(config.steps):
            if on_step:
                on_step(step + 1, config.steps)
    record = _record(config, topology, parts, losses, identical, memory)
    if config.check:  # real mode only (validate): compare its losses with the reference
        x, y = make_dataset(config.seed, config.samples, config.input_size, config.classes)
        reference = train_reference(config.spec, x, y, replicas=config.replicas,
                                    micro_batch=config.micro_batch,
                                    accumulation=config.accumulation, steps=config.steps,
                                    lr=config.lr, momentum=config.momentum, seed=config.seed)
        record["reference_losses"] = reference
        record["reference_max_rel_error"] = max(
            abs(a - b) / abs(b) for a, b in zip(losses, reference)  # type: ignore[operator]
        )
    return record


def _record(config: TrainConfig, topology: Topology, parts: StepTime,
            losses: Sequence[float | None], identical: bool | None,
            memory: list[StageMemory]) -> RunRecord:
    """What ``ipupod train --json`` prints: the set-up, every step, the throughput."""
    return {
        "topology": topology.name, "machines": machines(topology), "model": config.model,
        "servers": config.servers, "optimizer_state": config.optimizer_state,
        "replicas": config.replicas, "micro_batch": config.micro_batch,
        "ipus_per_replica": config.ipus_per_replica, "gcd": config.ipus_per_replica,
        "split": (config.split if config.pipeline_stages > 1 or config.splits_columns
                  else None),
        "tensor_parallel": str(config.tensor_parallel),
        "expert_parallel": config.expert_parallel,
        "pipeline_schedule": config.pipeline_schedule, "recompute": config.recomputes,
        "stage_ipus": list(config.stage_ipus),  # IPU of the replica each stage runs on
        "gradient_accumulation": config.accumulation, "mode": config.mode,
        "global_batch": config.global_batch, "algorithm": config.algorithm,
        "steps": [step_record(step, loss, parts) for step, loss in enumerate(losses)],
        "replicas_identical": identical,
        "throughput_samples_per_sim_second": config.global_batch / parts.sim_seconds,
        "memory_per_ipu": [stage.as_record() for stage in memory]}


def _train_real(config: TrainConfig, pod: EmulatedPod,
                on_step: Callable[[int, int], None] | None) -> tuple[list[float], bool]:
    """Train replicas of one IPU on the devices: each device computes its replicas'
    gradients, the gradients are averaged by an allreduce on the devices, each device
    updates its replicas; this process only streams the micro-batches (the host's job)."""
    spec, replicas = config.spec, config.replicas
    x, y = make_dataset(config.seed, config.samples, config.input_size, config.classes)
    home = replica_ipus(config, pod.topology).tolist()  # replica r's IPU
    device_of = [pod.owner[ipu] for ipu in home]
    start = init_params(spec, config.seed)
    placed: dict[int, list[int]] = {}
    for r in range(replicas):
        placed.setdefault(device_of[r], []).append(home[r])
    pod.call("execute", {d: (place_replicas, start, h) for d, h in placed.items()})
    losses, identical = [], True
    for step in range(config.steps):
        batch_x, batch_y = step_batch(x, y, step, config.global_batch)
        work: dict[int, dict] = {}
        for r in range(replicas):
            work.setdefault(device_of[r], {})[home[r]] = [
                replica_slice(batch_x, batch_y, r, replicas, config.micro_batch,
                              config.accumulation, micro)
                for micro in range(config.accumulation)]
        replica_losses = {}
        for answer in pod.call("execute", {d: (compute_gradients, spec, w)
                                           for d, w in work.items()}).values():
            replica_losses.update(answer)
        pod.collective(CollectiveName.ALLREDUCE, GRAD, output=GRAD_MEAN, op=ReduceOp.MEAN,
                       algorithm=config.algorithm, group=gradient_group(config), ipus=home)
        updates = {d: (apply_update, {h: (config.lr, config.momentum) for h in ipus})
                   for d, ipus in placed.items()}
        digests = set()
        for answer in pod.call("execute", updates).values():
            digests.update(answer.values())
        identical &= len(digests) == 1
        losses.append(float(np.mean([replica_losses[h] for h in home])))
        if on_step:
            on_step(step + 1, config.steps)
    return losses, identical
