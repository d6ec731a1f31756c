"""Calibration as users do it: one measured step time fixes the compute efficiency.

Every part of a simulated step but compute comes from the catalogue and the cost model;
compute is FLOPs over the IPU's peak times an efficiency per layer kind
(:class:`~cluster.training.workloads.Efficiencies`). Given one measured step time of one
configuration, :func:`calibrate` finds the single factor that scales every kind's
efficiency alike so that the simulated step equals the measurement, and nothing else:
the network, the host, the update and the pipeline keep their documented figures. Other
configurations of the same model and software are then predicted with that factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cluster.errors import SettingError, UserError
from cluster.training.kinds import ModelKind
from cluster.training.plan import TrainPlan
from cluster.training.step_timing import step_time
from cluster.training.workloads import DEFAULT_EFFICIENCIES, Efficiencies

BISECTIONS = 60  # halvings of the bracket on log(scale): far below any step's precision
LOWEST_SCALE = 1e-6  # one millionth of the default efficiencies: slower is not an IPU


@dataclass(frozen=True)
class Calibration:
    """The factor found (``efficiency_scale``), the efficiencies it gives, and the step
    it predicts for the calibration point (equal to the measurement, within rounding)."""

    efficiency_scale: float
    efficiencies: Efficiencies
    measured_step_seconds: float
    predicted_step_seconds: float


def simulated_step_seconds(plan: TrainPlan, scale: float) -> float:
    """The simulated step of the ``plan`` with every efficiency times ``scale``."""
    return step_time(plan.changed(efficiency_scale=scale)).sim_seconds


def calibrate(plan: TrainPlan, measured_step_seconds: float) -> Calibration:
    """The efficiency scale at which the ``plan``'s simulated step takes
    ``measured_step_seconds`` (bisection on its logarithm: the step only shrinks as the
    efficiencies grow)."""
    if plan.kind is ModelKind.MLP:
        raise SettingError("model", "calibration prices a workload's compute: give {model} "
                           "(resnet50, bert-large, ... or a workload file), not the MLP")
    if not (isinstance(measured_step_seconds, (int, float)) and measured_step_seconds > 0
            and math.isfinite(measured_step_seconds)):
        raise UserError(f"the measured step time must be a positive number of seconds, not "
                        f"{measured_step_seconds!r}")
    highest = 1 / max(vars(DEFAULT_EFFICIENCIES).values())  # every kind at most peak
    fastest = simulated_step_seconds(plan, highest)
    if fastest > measured_step_seconds:
        raise UserError(
            f"a step of {measured_step_seconds * 1e3:.4g} ms is faster than this "
            f"configuration can run even at the IPU's peak ({fastest * 1e3:.4g} ms, of "
            "which the network, host and update take the rest): check that the options "
            "match the measured run (micro-batch, accumulation, IPUs per replica)")
    if simulated_step_seconds(plan, LOWEST_SCALE) < measured_step_seconds:
        raise UserError(f"a step of {measured_step_seconds * 1e3:.4g} ms is slower than this "
                        "configuration at a millionth of its default efficiency: check the "
                        "units (milliseconds) and the options")
    low, high = math.log(LOWEST_SCALE), math.log(highest)
    for _ in range(BISECTIONS):
        middle = (low + high) / 2
        if simulated_step_seconds(plan, math.exp(middle)) > measured_step_seconds:
            low = middle
        else:
            high = middle
    scale = math.exp((low + high) / 2)
    return Calibration(scale, DEFAULT_EFFICIENCIES.scaled(scale), measured_step_seconds,
                       simulated_step_seconds(plan, scale))
