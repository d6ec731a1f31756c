"""Real mode: a run's steps on the emulated devices, every step loop behind one interface.

:class:`~.base.StepEngine` is the interface and the loop (:meth:`~.base.StepEngine.run`:
place the weights, then per step draw the batch, run it on the devices, tell the caller);
one engine per way of splitting a replica: :mod:`.data_parallel` (replicas of one IPU,
their tasks in :mod:`.data_parallel_tasks`), :mod:`.pipelined` (stages, :mod:`.stage_tasks`),
:mod:`.sharded` (a layer's columns, :mod:`.shard_tasks`), :mod:`.tensor_parallel` (the
MLP's Megatron block, :mod:`.tensor_parallel_tasks`), :mod:`.decoder_engine` (``gpt-tiny``
over tensor groups, :mod:`.decoder_tasks`) and :mod:`.torch_data_parallel` (a user's
PyTorch module; ``train --torch``'s run and record in :mod:`.torch_training`).
:func:`~.choice.engine_for` picks one from the plan. The pricing these engines are
checked against is pure and lives outside this package (``cluster.training``'s other
modules import neither ``ipu_node`` nor ``ray``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cluster.training import trainer
from cluster.training.engines.base import EngineRun, StepEngine
from cluster.training.engines.choice import engine_for
from cluster.training.records import RunRecord
from cluster.training.step_result import StepResult
from cluster.training.trainer import OnStep

if TYPE_CHECKING:
    from cluster.training.plan import TrainPlan
    from ipu_node.pod import EmulatedPod

__all__ = ["EngineRun", "StepEngine", "StepResult", "engine_for", "train"]


def train(plan: TrainPlan, pod: EmulatedPod | None = None,
          on_step: OnStep | None = None) -> RunRecord:
    """Run the ``plan``; return the record ``ipupod train --json`` prints. In real mode
    ``pod`` is a launched :class:`~ipu_node.pod.EmulatedPod` of the plan's topology and
    the plan's engine (:func:`engine_for`) runs its steps there."""
    if pod is None:
        return trainer.train(plan, on_step)

    def on_devices(told: OnStep | None) -> tuple[list[float], bool]:
        ran = engine_for(plan, pod).run(told)
        return ran.losses, ran.identical

    return trainer.train(plan, on_step, on_devices)
