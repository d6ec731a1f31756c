"""What one training step on the devices left, as every real-mode engine reports it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StepResult:
    """One data-parallel step: the replicas' mean ``loss``, whether every replica's weights
    are still the same (``identical``), and, where the step times its gradients' allreduce
    apart (a PyTorch module's replicas), that allreduce's wall and simulated seconds as the
    devices ran it."""

    loss: float
    identical: bool
    allreduce_wall_seconds: float | None = None
    allreduce_sim_seconds: float | None = None
