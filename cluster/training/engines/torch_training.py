"""``ipupod train --torch``'s run: the user's module trained by its engine
(:class:`~.torch_data_parallel.TorchEngine`, chosen by :func:`~.choice.engine_for`), the
record ``--json`` prints, and with ``--check`` the single-process reference beside it."""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from cluster.training.engines.base import EngineRun, OnStep
from cluster.training.engines.choice import engine_for
from cluster.training.placement import machines

if TYPE_CHECKING:
    from cluster.model.topology import Topology
    from cluster.training.config import TrainConfig
    from cluster.training.plan import TrainPlan
    from cluster.training.step_parts import StepTime
    from cluster.training.torch_replicas.run import TorchModel
    from ipu_node.pod import EmulatedPod


def train_torch(model: TorchModel, plan: TrainPlan, pod: EmulatedPod, parts: StepTime,
                on_step: OnStep | None = None) -> dict[str, Any]:
    """Train ``model`` as ``plan`` places it on ``pod``, its step priced as ``parts``
    (:func:`~cluster.training.torch_replicas.run.price`); the record ``--json`` prints."""
    engine = engine_for(plan, pod, model)
    ran = engine.run(on_step)
    record = _record(model, plan.config, pod.topology, parts, ran)
    if plan.config.check:
        record["reference_losses"], record["reference_max_rel_error"] = \
            engine.reference_error()
    engine.close()
    return record


def _record(model: TorchModel, config: TrainConfig, topology: Topology, parts: StepTime,
            ran: EngineRun) -> dict[str, Any]:
    """What ``ipupod train --torch ... --json`` prints."""
    steps: list[dict[str, Any]] = [
        {"step": step, "loss": stepped.result.loss, "wall_seconds": stepped.wall_seconds,
         "sim_seconds": parts.sim_seconds,
         "allreduce_wall_seconds": stepped.result.allreduce_wall_seconds,
         "allreduce_sim_seconds": stepped.result.allreduce_sim_seconds}
        for step, stepped in enumerate(ran.steps)]
    return {
        "topology": topology.name, "machines": machines(topology), "model": model.spec,
        "sample_shape": list(model.sample_shape), "classes": model.classes,
        "parameters": model.parameters, "servers": config.servers,
        "replicas": config.replicas, "micro_batch": config.micro_batch,
        "gradient_accumulation": config.accumulation, "global_batch": config.global_batch,
        "mode": "real", "algorithm": config.algorithm, "steps": steps,
        "replicas_identical": ran.identical,
        "wall_step_seconds": statistics.median(s["wall_seconds"] for s in steps),
        "sim_step_seconds": parts.sim_seconds, "sim_step_parts": asdict(parts),
        "throughput_samples_per_sim_second": config.global_batch / parts.sim_seconds}
