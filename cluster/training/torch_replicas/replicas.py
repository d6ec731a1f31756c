"""PyTorch replicas on a launched POD, driven from this process (the host's job).

:class:`TorchReplicas` places one replica of a module on each of the given IPUs (their
cards run :mod:`.replica_tasks`), and runs a data-parallel step: each card computes its
replicas' gradients on the micro-batches this process streams to it, GCL's allreduce
averages them over the emulated links (real bytes between the card actors), and every
replica applies its optimiser step to its own weights.
"""

from __future__ import annotations

import sys
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np

from cluster.errors import UserError
from cluster.training.step_result import StepResult
from cluster.training.torch_replicas import replica_tasks
from cluster.training.torch_replicas.replica_tasks import tensor_names
from gcl.collectives import CollectiveName, ReduceOp
from gcl.groups import CommGroup

if TYPE_CHECKING:
    from ipu_node.pod import EmulatedPod

MicroBatches = list[tuple[np.ndarray, np.ndarray]]  # a replica's (inputs, labels), in order


def pickled(module: Any, optimizer_class: type, settings: dict[str, Any],
            loss_kind: str) -> bytes:
    """What a card needs to build a replica, pickled once for every card. Classes from a
    file loaded by :func:`~cluster.training.importers.torch_factory.load_factory` (a module
    no card can import) travel by value."""
    from ray import cloudpickle  # Ray's pickler: the cards unpickle with the same

    for part in module.modules():
        home = sys.modules.get(type(part).__module__)
        if home is not None and home.__name__ != "__main__" and getattr(
                home.__spec__, "loader", True) is None:
            cloudpickle.register_pickle_by_value(home)
    return bytes(cloudpickle.dumps((module, optimizer_class, settings, loss_kind)))


class TorchReplicas:
    """Replicas of one module on ``ipus`` of ``pod`` (replica r on ``ipus[r]``)."""

    def __init__(self, pod: EmulatedPod, ipus: list[int], payload: bytes,
                 algorithm: str = "auto") -> None:
        self.pod, self.ipus, self.algorithm = pod, list(ipus), algorithm
        self.run = uuid.uuid4().hex[:12]
        self.placed: dict[int, list[int]] = {}
        for ipu in self.ipus:
            self.placed.setdefault(pod.owner[ipu], []).append(ipu)
        self._on_cards({device: (replica_tasks.place, self.run, payload, ipus)
                        for device, ipus in self.placed.items()})

    def _on_cards(self, tasks: dict[int, tuple]) -> dict[int, Any]:
        """Run each device's task; a UserError a task raised on its card (the user's model
        failing there) arrives here as itself: one line, without the card's traceback."""
        try:
            return self.pod.call("execute", tasks)
        except UserError as error:
            cause = getattr(error, "cause", None)  # Ray's wrapper of a task's exception
            if isinstance(cause, UserError):
                raise UserError(str(cause)) from None
            raise

    def step(self, work: list[MicroBatches]) -> StepResult:
        """One step: replica r computes on ``work[r]``; allreduce; every replica updates."""
        per_device: dict[int, dict[int, MicroBatches]] = {}
        for ipu, batches in zip(self.ipus, work):
            per_device.setdefault(self.pod.owner[ipu], {})[ipu] = batches
        losses: dict[int, float] = {}
        for answer in self._on_cards({
                device: (replica_tasks.gradients, self.run, replicas)
                for device, replicas in per_device.items()}).values():
            losses.update(answer)
        _, grad, mean = tensor_names(self.run)
        wall = sim = 0.0
        if len(self.ipus) > 1:
            result = self.pod.collective(CollectiveName.ALLREDUCE, grad, output=mean,
                                         op=ReduceOp.MEAN, algorithm=self.algorithm,
                                         group=CommGroup(), ipus=self.ipus)
            wall, sim = result.wall_seconds, result.sim_seconds
        digests: set[str] = set()
        for answer in self._on_cards({
                device: (replica_tasks.update, self.run, ipus, len(self.ipus) > 1)
                for device, ipus in self.placed.items()}).values():
            digests.update(answer.values())
        return StepResult(float(np.mean([losses[ipu] for ipu in self.ipus])),
                          len(digests) == 1, wall, sim)

    def weights(self, replica: int = 0) -> np.ndarray:
        """The flat weights of replica ``replica`` (``parameters()`` order, float32)."""
        ipu = self.ipus[replica]
        answer = self.pod.call("execute", {self.pod.owner[ipu]: (replica_tasks.weights,
                                                                 self.run, ipu)})
        return np.array(next(iter(answer.values())))  # a writable copy

    def close(self) -> None:
        """Forget the replicas on the cards and free their tensors."""
        self.pod.call("execute", {device: (replica_tasks.drop, self.run, ipus)
                                  for device, ipus in self.placed.items()})
