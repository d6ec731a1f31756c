"""The validation report: published step times against the emulator's predictions.

For each model and MLPerf round, the smallest published system (an IPU-POD16) is the
calibration point: its measured step fixes the compute efficiency (:mod:`.calibration`),
and every larger system of the same model and round is predicted with it. Only that one
figure per group is read; the larger systems' published steps are compared, never used,
so changing them changes no prediction.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import groupby, pairwise
from typing import Any

from cluster.errors import UserError
from cluster.training.fidelity.calibration import calibrate
from cluster.training.fidelity.published import PublishedStep, train_config
from cluster.training.fit import check_fits
from cluster.training.memory_plan import stage_memory
from cluster.training.plan import TrainPlan, plan_for
from cluster.training.step_timing import StepTime, step_time

ERROR_BAR = 0.05
"""How close a prediction should come to the published step: 5% either way, the bar
``docs/fidelity.md`` holds every system from IPU-POD64 to IPU-POD256 to."""


@dataclass(frozen=True)
class Prediction:
    """One published configuration, the emulator's step for it, and the calibration."""

    published: PublishedStep
    calibration_point: bool
    efficiency_scale: float
    step: StepTime

    @property
    def error(self) -> float:
        """(predicted - published) / published: negative when the emulator is faster."""
        return self.step.sim_seconds / self.published.step_seconds - 1

    @property
    def within_bar(self) -> bool:
        """Whether the prediction is within :data:`ERROR_BAR` of the published step."""
        return abs(self.error) <= ERROR_BAR

    def as_record(self) -> dict[str, Any]:
        """For ``--json``: the entry, the prediction by part, the error."""
        return {**asdict(self.published), "calibration_point": self.calibration_point,
                "efficiency_scale": self.efficiency_scale,
                "predicted_step_seconds": self.step.sim_seconds, "error": self.error,
                "predicted_parts": self.step.parts()}


def _group(entry: PublishedStep) -> tuple[str, str]:
    return entry.round, entry.model


def _checked(entry: PublishedStep, scale: float = 1.0) -> TrainPlan:
    """``entry``'s run planned and checked as ``ipupod train`` checks its options; a
    UserError naming the entry if the emulator cannot run it."""
    try:
        plan = plan_for(train_config(entry, scale))
        check_fits(plan, stage_memory(plan))
    except UserError as error:
        raise UserError(f"published entry {entry.label}: {error} (the table's fields "
                        "layers_per_ipu, final_stage_on_first_ipu, ... are those options)"
                        ) from None
    return plan


def predict(published: list[PublishedStep]) -> list[Prediction]:
    """Every entry predicted from its group's calibration point (the fewest IPUs)."""
    predictions = []
    for (round_, model), members in groupby(sorted(published, key=_group), key=_group):
        group = sorted(members, key=lambda entry: entry.ipus)
        anchor = group[0]
        if anchor.ipus != 16:
            raise UserError(f"{round_} {model}: the calibration point is an IPU-POD16 run, "
                            f"and the table has none (smallest: {anchor.topology})")
        scale = calibrate(_checked(anchor), anchor.step_seconds).efficiency_scale
        for entry in group:
            step = step_time(_checked(entry, scale))
            predictions.append(Prediction(entry, entry is anchor, scale, step))
    return predictions


@dataclass(frozen=True)
class Growth:
    """Two published systems of one model and round at equal work per IPU (the same
    micro-batch, accumulation and IPUs per replica), the smaller and the next larger: how
    the step changed (seconds), published and predicted."""

    smaller: Prediction
    larger: Prediction

    @property
    def published_seconds(self) -> float:
        """The published step's change from the smaller system to the larger."""
        return self.larger.published.step_seconds - self.smaller.published.step_seconds

    @property
    def predicted_seconds(self) -> float:
        """The predicted step's change from the smaller system to the larger."""
        return self.larger.step.sim_seconds - self.smaller.step.sim_seconds

    @property
    def label(self) -> str:
        """``v1.1 resnet50 pod128 -> pod256``."""
        return f"{self.smaller.published.label} -> {self.larger.published.topology}"


def growths(predictions: list[Prediction]) -> list[Growth]:
    """Every pair of successive systems (by IPUs) of one model and round whose work per
    IPU is equal: only the system's size differs between them."""
    def work(p: Prediction) -> tuple[str, str, int, int, int]:
        entry = p.published
        return (entry.round, entry.model, entry.micro_batch, entry.gradient_accumulation,
                entry.ipus_per_replica)

    ordered = sorted(predictions, key=lambda p: (work(p), p.published.ipus))
    return [Growth(a, b) for a, b in pairwise(ordered) if work(a) == work(b)]
