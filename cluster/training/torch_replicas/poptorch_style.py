"""A PopTorch-shaped API: train your PyTorch model on the emulated POD as you would on IPUs.

    opts = Options().replicationFactor(4).deviceIterations(2)
    opts.Training.gradientAccumulation(2)
    model = training_model(MyModelWithLoss(), opts, torch.optim.SGD(...))
    loss = model(inputs, labels)          # one step on every replica, per device iteration

As ``poptorch.trainingModel``, the model's ``forward(inputs, labels)`` returns the loss, or a
tuple ending with it; one call takes ``device iterations x replicas x accumulation``
micro-batches (PopTorch's combined batch) and runs one optimiser step per device iteration:
every replica computes its micro-batches' gradients on its card, GCL's allreduce averages
them over the emulated links, every replica steps its own optimiser. The call returns the
last iteration's loss, averaged over the replicas (PopTorch's default output mode for
training, ``Final``; the model's other outputs are not returned). ``BeginBlock`` marks
pipeline stages (:mod:`.stages`). Differences from PopTorch are stated where they apply.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from cluster.errors import UserError
from cluster.training.config import MLP, TrainConfig
from cluster.training.data import replica_slice
from cluster.training.importers.torch_factory import require_torch
from cluster.training.placement import replica_ipus, server_ipus, topology_for
from cluster.training.plan import plan_for
from cluster.training.torch_replicas.begin_block import (
    BeginBlock,
    layers_per_stage,
    replica_ipus_needed,
    stage_marks,
)
from cluster.training.torch_replicas.pricing import simulated_step_time
from cluster.training.torch_replicas.replica_tasks import MODEL_LOSS
from cluster.training.torch_replicas.replicas import TorchReplicas, pickled
from cluster.training.torch_replicas.workload import torch_workload
from gcl.modes import Mode

if TYPE_CHECKING:
    from cluster.model.topology import Topology
    from ipu_node.pod import EmulatedPod

__all__ = ["BeginBlock", "Options", "TrainingModel", "trainingModel", "training_model"]


def _count(name: str, value: object) -> int:
    """``value`` if a whole number of 1 or more, else a UserError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{name} takes a whole number of 1 or more, not {value!r}")
    return value


@dataclass(frozen=True)
class Settings:
    """What an :class:`Options` said, frozen when the model is wrapped."""

    replication_factor: int = 1
    gradient_accumulation: int = 1
    device_iterations: int = 1
    topology: str | None = None  # default: as many DSS 8440 servers as the replicas fill
    algorithm: str = "hierarchical"
    ray_address: str | None = None


class _Training:
    """``Options().Training``, as PopTorch's ``opts.Training``."""

    def __init__(self, options: Options) -> None:
        self._options = options

    def gradientAccumulation(self, count: int) -> _Training:  # PopTorch's name
        """Micro-batches each replica accumulates before the allreduce and update."""
        self._options.settings = replace(self._options.settings, gradient_accumulation=_count(
            "gradientAccumulation", count))
        return self


class Options:
    """PopTorch's ``poptorch.Options`` builder: each setter checks its value and returns
    the options. ``topology`` and ``allreduceAlgorithm`` are this tool's own."""

    def __init__(self) -> None:
        self.settings = Settings()
        self.Training = _Training(self)  # PopTorch's attribute name

    def replicationFactor(self, count: int) -> Options:  # PopTorch's name
        """Data-parallel replicas."""
        self.settings = replace(self.settings, replication_factor=_count(
            "replicationFactor", count))
        return self

    def deviceIterations(self, count: int) -> Options:  # PopTorch's name
        """Optimiser steps one call of the model runs."""
        self.settings = replace(self.settings, device_iterations=_count(
            "deviceIterations", count))
        return self

    def topology(self, spec: str) -> Options:
        """Run on this topology (a preset such as ``pod16``, or a YAML file)."""
        self.settings = replace(self.settings, topology=str(spec))
        return self

    def allreduceAlgorithm(self, name: str) -> Options:  # as the setters above
        """GCL's algorithm for the gradient allreduce (default ``hierarchical``)."""
        self.settings = replace(self.settings, algorithm=str(name))
        return self

    def rayAddress(self, address: str) -> Options:  # as the setters above
        """Start the devices on this Ray cluster instead of a private local one."""
        self.settings = replace(self.settings, ray_address=str(address))
        return self


def placement(settings: Settings, ipus_per_replica: int,
              on: Topology | None = None) -> tuple[TrainConfig, Topology]:
    """Where the replicas go, and on what (``on``, a launched POD's; else the options'
    topology; else as many DSS 8440 servers of 16 IPUs as the replicas fill): evenly over
    its servers or racks."""
    replicas = settings.replication_factor
    config = TrainConfig(servers=max(1, math.ceil(replicas * ipus_per_replica / 16)),
                         topology=settings.topology, ipus_per_replica=ipus_per_replica,
                         micro_batch=1, accumulation=settings.gradient_accumulation,
                         mode=Mode.REAL, model=MLP, algorithm=settings.algorithm)
    topology = on if on is not None else topology_for(config)  # to count its servers
    servers = len(server_ipus(topology))
    if replicas % servers:
        raise UserError(f"replicationFactor {replicas} does not spread evenly over the "
                        f"{servers} servers or racks of {topology.name}: use a multiple of "
                        f"{servers}")
    config = replace(config, servers=servers, replicas_per_server=replicas // servers)
    return plan_for(config, topology).config, topology


def _checked_optimizer(model: Any, optimizer: Any) -> tuple[type, dict[str, Any]]:
    """The optimiser's class and settings, for every replica to build its own."""
    torch = require_torch()
    if not isinstance(model, torch.nn.Module):
        raise UserError(f"training_model wraps a torch.nn.Module, not a "
                        f"{type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise UserError("training_model needs the optimizer (a torch.optim.Optimizer over "
                        "the model's parameters), as poptorch.trainingModel does")
    if len(optimizer.param_groups) != 1:
        raise UserError("the optimizer has several parameter groups: the replicas build "
                        "theirs with one group of the model's parameters")
    return type(optimizer), {key: value for key, value in optimizer.param_groups[0].items()
                             if key != "params"}


def _numpy(values: Any, name: str) -> np.ndarray:
    """A batch (a torch tensor or an array) as a NumPy array."""
    detach = getattr(values, "detach", None)
    array = np.asarray(values if detach is None else detach().cpu().numpy())
    if array.ndim == 0:
        raise UserError(f"{name} must have a batch dimension, got a scalar")
    return array


class TrainingModel:
    """``model`` trained on the emulated POD: what :func:`training_model` returns."""

    def __init__(self, model: Any, options: Options, optimizer: Any,
                 pod: EmulatedPod | None = None) -> None:
        optimizer_class, optimizer_settings = _checked_optimizer(model, optimizer)
        self.model, self.settings = model, options.settings
        self.marks = stage_marks(model)
        self.config, self.topology = placement(self.settings, replica_ipus_needed(self.marks),
                                               None if pod is None else pod.topology)
        if pod is None:
            from ipu_node.pod import EmulatedPod  # Ray: only when devices start

            pod = EmulatedPod.launch(self.topology, ray_address=self.settings.ray_address)
            self._owned: EmulatedPod | None = pod
        else:
            self._owned = None
        self.pod = pod
        firsts = replica_ipus(self.config, pod.topology)[::self.config.ipus_per_replica]
        self.replicas: TorchReplicas | None = TorchReplicas(
            pod, firsts.tolist(), pickled(model, optimizer_class, optimizer_settings,
                                          MODEL_LOSS), self.settings.algorithm)
        self.last_step: dict[str, Any] = {}
        self._priced: dict[tuple[int, ...], float] = {}

    def __call__(self, inputs: Any, labels: Any) -> Any:
        """One optimiser step per device iteration on every replica; the last one's loss
        (mean over the replicas) as a scalar tensor."""
        if self.replicas is None:
            raise UserError("the model was detached from the device: wrap it again")
        x, y = _numpy(inputs, "inputs"), _numpy(labels, "labels")
        s = self.settings
        per_call = s.device_iterations * s.replication_factor * s.gradient_accumulation
        if len(x) != len(y) or len(x) % per_call:
            raise UserError(f"a call takes device iterations x replicas x accumulation = "
                            f"{per_call} micro-batches of equal size, and one label per "
                            f"input: {len(x)} inputs and {len(y)} labels do not split so")
        micro = len(x) // per_call
        rows = len(x) // s.device_iterations
        started = time.perf_counter()
        for i in range(s.device_iterations):
            bx, by = x[i * rows:(i + 1) * rows], y[i * rows:(i + 1) * rows]
            result = self.replicas.step([
                [replica_slice(bx, by, r, s.replication_factor, micro,
                               s.gradient_accumulation, m)
                 for m in range(s.gradient_accumulation)]
                for r in range(s.replication_factor)])
        self.last_step = {"loss": result.loss, "replicas_identical": result.identical,
                          "wall_seconds": (time.perf_counter() - started) / s.device_iterations,
                          "sim_seconds": self._step_price(x.shape[1:], micro)}
        return require_torch().tensor(result.loss)

    def _step_price(self, sample_shape: tuple[int, ...], micro_batch: int) -> float:
        """Simulated seconds of one step with micro-batches of ``micro_batch`` samples of
        ``sample_shape``: the model's imported workload, its stages as ``BeginBlock`` marks
        them."""
        key = (micro_batch, *sample_shape)
        if key not in self._priced:
            workload = torch_workload(self.model, tuple(sample_shape),
                                      type(self.model).__name__)
            self._priced[key] = simulated_step_time(
                workload, replace(self.config, micro_batch=micro_batch), self.topology,
                layers_per_stage(workload, self.marks, self.config.ipus_per_replica)
            ).sim_seconds
        return self._priced[key]

    def copyWeightsToHost(self) -> None:  # PopTorch's name
        """Copy replica 0's weights into the wrapped model's parameters."""
        if self.replicas is None:
            raise UserError("the model was detached from the device: nothing to copy")
        torch = require_torch()
        weights, offset = torch.from_numpy(self.replicas.weights()), 0
        with torch.no_grad():
            for parameter in self.model.parameters():
                count = parameter.numel()
                parameter.copy_(weights[offset:offset + count].view(parameter.shape))
                offset += count

    def detachFromDevice(self) -> None:  # PopTorch's name
        """Copy the weights to the host model, free the replicas, and stop the devices
        if this model started them."""
        if self.replicas is not None:
            self.copyWeightsToHost()
            self.replicas.close()
            self.replicas = None
        if self._owned is not None:
            self._owned.shutdown()
            self._owned = None

    def __enter__(self) -> TrainingModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detachFromDevice()


def training_model(model: Any, options: Options | None = None, optimizer: Any = None,
                   pod: EmulatedPod | None = None) -> TrainingModel:
    """Wrap ``model`` for training on the emulated POD (``poptorch.trainingModel``):
    replicas placed on their cards now, on ``pod`` or on devices it launches."""
    return TrainingModel(model, options or Options(), optimizer, pod)


trainingModel = training_model  # PopTorch's spelling
