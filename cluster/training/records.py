"""A training run's record: what :func:`cluster.training.trainer.train` returns, what
``ipupod train --json`` prints and what the reports read (:mod:`cluster.training.reports`).

Typed dictionaries, not classes, because the record *is* the JSON: these say which keys it
has and what each holds. A step's parts are :data:`~cluster.training.step_parts.STEP_PARTS`
(read them with :meth:`~cluster.training.step_parts.StepPart.seconds`); every time is
simulated seconds on the emulated hardware.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, TypedDict, cast

from cluster.training.step_parts import StepTime


class _StepParts(TypedDict):
    """Each part of :class:`~cluster.training.step_parts.StepTime`, simulated seconds
    (their keys are :data:`~cluster.training.step_parts.STEP_PARTS`' keys: a test holds
    the two the same), and each stage's compute."""

    compute_seconds: float
    pipeline_bubble_seconds: float
    inter_stage_seconds: float
    tensor_parallel_seconds: float
    expert_parallel_seconds: float
    phase_load_seconds: float
    host_io_seconds: float
    local_allreduce_seconds: float
    global_allreduce_seconds: float
    update_seconds: float
    shard_exchange_seconds: float
    weight_gather_seconds: float
    stage_compute_seconds: list[float]


class StepRecord(_StepParts):
    """One training step: its index, its loss (None in phantom mode: no data), its whole
    simulated seconds and its parts."""

    step: int
    loss: float | None
    sim_seconds: float


def step_record(step: int, loss: float | None, time: StepTime) -> StepRecord:
    """The record of step ``step`` that took ``time``, in the parts' order."""
    parts: dict[str, Any] = asdict(time)
    parts["stage_compute_seconds"] = list(time.stage_compute_seconds)
    return cast(StepRecord, {"step": step, "loss": loss, "sim_seconds": time.sim_seconds,
                             **parts})


class _RunRecord(TypedDict):
    """The keys every run's record has."""

    topology: str
    machines: str
    model: str
    servers: int
    optimizer_state: str
    replicas: int
    micro_batch: int
    ipus_per_replica: int
    gcd: int  # the same as ipus_per_replica: a replica's Graph Compile Domain
    split: str | None
    tensor_parallel: str  # "1" (off), "T" (1-D) or "T1xT2" (2-D)
    expert_parallel: int  # IPUs each MoE layer's experts spread over (1: off)
    pipeline_schedule: str
    recompute: bool
    stage_ipus: list[int]
    gradient_accumulation: int
    mode: str
    global_batch: int
    algorithm: str
    steps: list[StepRecord]
    replicas_identical: bool | None
    throughput_samples_per_sim_second: float
    memory_per_ipu: list[dict[str, Any]]


class RunRecord(_RunRecord, total=False):
    """A run: its set-up, every step, its throughput and each IPU's memory; with
    ``check``, the single-process reference's losses and the largest relative difference
    from them. ``ipupod train`` adds ``made_by`` and ``settings``
    (:mod:`cluster.training.reports.settings`)."""

    reference_losses: list[float]
    reference_max_rel_error: float
