"""The timeline of a training run (``ipupod train --trace FILE``), on simulated time.

Steps run one after another. Process ``step``, track ``parts``: a span per part of each
step that takes time (:data:`~cluster.training.step_parts.STEP_PARTS`, in their order),
each as long as the part ``--json`` prints, so the spans of a step add up to its
``sim_seconds``, as the parts do. Process ``stages``: a track per pipeline stage (the
same IPU of every replica: replicas run alike), whose span is the stage's compute over
the step (every micro-batch's forward and backward, recomputation included) from the
step's start; one replica of one IPU has one stage. Built from the run's record alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cluster.model.trace import Trace
from cluster.training.step_parts import STEP_PARTS

STEP, STAGES = "step", "stages"  # process names
PARTS = "parts"  # the parts' track
MAX_STEPS = 1000  # steps drawn at most (every step of a run costs the same)


def stage_track(stage: int, ipu: int, replicas: int) -> str:
    """The name of stage ``stage``'s track: which IPU of each replica runs it."""
    every = "the replica" if replicas == 1 else f"each of {replicas:,} replicas"
    return f"stage {stage} (IPU {ipu} of {every})"


def run_trace(record: Mapping[str, Any]) -> Trace:
    """The timeline of a run's record (what ``ipupod train --json`` prints)."""
    steps = record["steps"]
    trace = Trace(metadata={
        "tool": "ipupod train", "topology": record["topology"], "model": record["model"],
        "mode": record["mode"], "replicas": record["replicas"],
        "ipus_per_replica": record["ipus_per_replica"],
        "pipeline_schedule": record["pipeline_schedule"], "algorithm": record["algorithm"],
        "steps_drawn": min(len(steps), MAX_STEPS), "steps": len(steps),
        "stages": "each stage's compute as one span from the step's start; the pipeline's "
                  "ops micro-batch by micro-batch are not drawn yet",
    })
    if record["mode"] == "real":
        trace.metadata["wall_clock"] = ("not drawn: the parts are the simulated ones real "
                                        "mode also reports")
    trace.track(STEP, PARTS)
    stage_ipus = record["stage_ipus"] or [0]
    for stage, ipu in enumerate(stage_ipus):
        trace.track(STAGES, stage_track(stage, ipu, record["replicas"]))
    at = 0.0
    for row in steps[:MAX_STEPS]:
        at = _step(trace, row, at, stage_ipus, record["replicas"])
    return trace


def _step(trace: Trace, row: Mapping[str, Any], start: float, stage_ipus: list[int],
          replicas: int) -> float:
    """One step's spans from ``start`` seconds; returns where the next step starts (the
    parts summed in :data:`STEP_PARTS`' order, as ``sim_seconds`` sums them)."""
    at = start
    for part in STEP_PARTS:
        seconds = part.seconds(row)
        if seconds > 0:
            trace.span(STEP, PARTS, part.label, at, seconds, step=row["step"], part=part.key)
        at += seconds
    for stage, seconds in enumerate(row.get("stage_compute_seconds") or []):
        if stage < len(stage_ipus) and seconds > 0:
            trace.span(STAGES, stage_track(stage, stage_ipus[stage], replicas),
                       "forward + backward", start, seconds, step=row["step"], stage=stage)
    return at
