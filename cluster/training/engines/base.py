"""The one interface every real-mode step loop sits behind, and the loop itself, written once.

An engine trains a :class:`~cluster.training.plan.TrainPlan` on a launched
:class:`~ipu_node.pod.EmulatedPod`: :meth:`StepEngine.begin` places the starting weights on
the devices, :meth:`StepEngine.batch` draws a step's global batch on this process (the
host's job), :meth:`StepEngine.step` runs that step on the devices (compute, the gradients'
allreduce, the update) and says its mean loss and whether the replicas stayed identical.
:meth:`StepEngine.run` is the loop: every step in order, its wall time, the caller told.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cluster.training.step_result import StepResult
from cluster.training.trainer import OnStep

if TYPE_CHECKING:
    from cluster.training.plan import TrainPlan
    from ipu_node.pod import EmulatedPod


@dataclass(frozen=True)
class Stepped:
    """A step's :class:`StepResult` and the wall seconds it took (the batch drawn aside)."""

    result: StepResult
    wall_seconds: float


@dataclass(frozen=True)
class EngineRun:
    """Every step of a run, in order."""

    steps: tuple[Stepped, ...]

    @property
    def losses(self) -> list[float]:
        """The mean loss of each step."""
        return [stepped.result.loss for stepped in self.steps]

    @property
    def identical(self) -> bool:
        """Whether the replicas' weights stayed the same after every step."""
        return all(stepped.result.identical for stepped in self.steps)


class StepEngine(ABC):
    """A plan's steps on a POD's devices (one subclass per way of splitting a replica)."""

    def __init__(self, plan: TrainPlan, pod: EmulatedPod) -> None:
        self.plan, self.pod = plan, pod

    @abstractmethod
    def begin(self) -> None:
        """Place every replica's starting weights (and zero velocity) on its IPUs."""

    @abstractmethod
    def batch(self, step: int) -> Any:
        """Step ``step``'s global batch, as :meth:`step` takes it."""

    @abstractmethod
    def step(self, batch: Any) -> StepResult:
        """One step on ``batch``: compute, average the gradients, apply the update."""

    def run(self, on_step: OnStep | None = None) -> EngineRun:
        """:meth:`begin`, then every step of the plan in order; ``on_step`` told after each."""
        self.begin()
        steps, total = [], self.plan.config.steps
        for step in range(total):
            batch = self.batch(step)
            started = time.perf_counter()
            result = self.step(batch)
            steps.append(Stepped(result, time.perf_counter() - started))
            if on_step:
                on_step(step + 1, total)
        return EngineRun(tuple(steps))
