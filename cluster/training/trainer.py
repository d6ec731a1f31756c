"""Training across emulated DSS 8440 servers or IPU-PODs: the white papers' use case.

Data parallel with model parallel inside: one replica per ``ipus_per_replica`` IPUs (its
Graph Compile Domain). A replica of one IPU computes its gradients on its micro-batches;
a replica of several IPUs is a pipeline of as many stages, with ``accumulation``
micro-batches in flight (:mod:`.pipeline`), or splits its widest layer (:mod:`.sharding`).
This module prices a run and writes its record; real mode's steps run on the devices
by an engine (:mod:`cluster.training.engines`, which this module does not import). The
gradients are averaged by
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

from cluster.training.config import IPUS_PER_SERVER, TrainConfig
from cluster.training.data import make_dataset, train_reference
from cluster.training.decoder.tokens import make_token_dataset, train_decoder_reference
from cluster.training.fit import check_fits
from cluster.training.memory_plan import StageMemory, stage_memory
from cluster.training.placement import machines, server_ipus
from cluster.training.plan import TrainPlan
from cluster.training.records import RunRecord, step_record
from cluster.training.step_parts import StepTime
from cluster.training.step_timing import step_time
from gcl.modes import Mode

if TYPE_CHECKING:
    from cluster.model.topology import Topology

__all__ = ["IPUS_PER_SERVER", "StepTime", "TrainConfig", "TrainPlan", "server_ipus",
           "step_time", "train"]


OnStep = Callable[[int, int], None]
"""Told ``(steps done, steps in all)`` after each step."""

DeviceRun = Callable[[OnStep | None], tuple[Sequence[float], bool]]
"""Real mode's steps on the devices, told of each step: each step's mean loss and whether
the replicas' weights stayed identical (:func:`cluster.training.engines.train` gives it)."""


def train(plan: TrainPlan, on_step: OnStep | None = None,
          devices: DeviceRun | None = None) -> RunRecord:
    """Price the ``plan`` and run it; return the record ``ipupod train --json`` prints.
    Phantom mode runs here; real mode runs its steps by ``devices`` (its engine on a
    launched POD: :func:`cluster.training.engines.train`)."""
    config, topology = plan.config, plan.topology
    memory = stage_memory(plan)
    check_fits(plan, memory)
    parts = step_time(plan)
    identical: bool | None = None
    losses: Sequence[float | None]  # None per step in phantom mode: no data, no loss
    if config.mode == Mode.REAL:
        if devices is None:
            raise ValueError("real mode trains on the devices: pass a launched EmulatedPod of "
                             "the plan's topology to cluster.training.engines.train")
        losses, identical = devices(on_step)
    else:
        losses = [None] * config.steps
        for step in range(config.steps):
            if on_step:
                on_step(step + 1, config.steps)
    record = _record(config, topology, parts, losses, identical, memory)
    if config.check:  # real mode only (validate): compare its losses with the reference
        reference = _reference_losses(config)
        record["reference_losses"] = reference
        record["reference_max_rel_error"] = max(
            abs(a - b) / abs(b) for a, b in zip(losses, reference)  # type: ignore[operator]
        )
    return record


def _reference_losses(config: TrainConfig) -> list[float]:
    """Each step's loss of single-process training on the same batches: what a real run
    must equal (``--check``)."""
    decoder = config.model.decoder
    if decoder is not None:
        x, y = make_token_dataset(config.seed, config.samples,
                                  config.sequence_length or decoder.context, decoder.vocabulary)
        return train_decoder_reference(decoder, x, y, global_batch=config.global_batch,
                                       steps=config.steps, lr=config.lr,
                                       momentum=config.momentum, seed=config.seed)
    x, y = make_dataset(config.seed, config.samples, config.input_size, config.classes)
    return train_reference(config.spec, x, y, replicas=config.replicas,
                           micro_batch=config.micro_batch, accumulation=config.accumulation,
                           steps=config.steps, lr=config.lr, momentum=config.momentum,
                           seed=config.seed)


def _record(config: TrainConfig, topology: Topology, parts: StepTime,
            losses: Sequence[float | None], identical: bool | None,
            memory: list[StageMemory]) -> RunRecord:
    """What ``ipupod train --json`` prints: the set-up, every step, the throughput."""
    return {
        "topology": topology.name, "machines": machines(topology), "model": config.model.text,
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
