"""The timeline of a training run (``ipupod train --trace FILE``), on simulated time.

Steps run one after another. Process ``step``, track ``parts``: a span per part of each
step that takes time (:data:`~cluster.training.step_parts.STEP_PARTS`, in their order),
each as long as the part ``--json`` prints, so the spans of a step add up to its
``sim_seconds``, as the parts do. Process ``stages``: a track per pipeline stage (the
same IPU of every replica: replicas run alike). With the pipeline's op times
(:func:`pipeline_ops`), a span per op of each micro-batch (``forward``, then
``recompute`` and ``backward`` for a backward pass that recomputes), from the step's
start; a lock-step schedule's ops cycle by cycle, and track ``pipeline cycles`` of
process ``step`` holds each cycle's compute and copies (they add up to the pipeline's
parts). Otherwise (one IPU per replica, a column split) one span, the stage's compute
over the step from the step's start. Track ``gradient allreduce`` of process ``step``:
the phases of the gradient allreduce (:func:`gradient_phases`), in the order they run,
from where the local allreduce part starts; the parts track sums them by scope (local,
then global), this track shows their order and what each moves. The step's other
collectives (a sharded optimiser state's three, a column split's) are spans of tracks of
their own, each from its part's start, adding up to it (:mod:`.step_collectives`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cluster.model.trace import Trace
from cluster.training.pipeline.lock_step import lock_step_op_times
from cluster.training.pipeline.pass_schedule import Op, Pass
from cluster.training.pipeline.timing import op_times
from cluster.training.plan import TrainPlan
from cluster.training.step_collectives import PartSpan, step_collectives
from cluster.training.step_parts import STEP_PARTS
from cluster.training.step_timing import gradient_allreduce_timing, pipeline_costs
from gcl.phantom import Timing

STEP, STAGES = "step", "stages"  # process names
PARTS = "parts"  # the parts' track
ALLREDUCE = "gradient allreduce"  # the allreduce phases' track
FIRST_ALLREDUCE_PART = "local_allreduce_seconds"  # where the allreduce's phases start
CYCLES = "pipeline cycles"  # a lock-step pipeline's cycles' track
END = ""  # the key, among the parts' starts, of where the step ends
MAX_STEPS = 1000  # steps drawn at most (every step of a run costs the same)
MAX_SPANS = 300_000  # and no more steps than this many spans hold


@dataclass(frozen=True)
class PipelineOps:
    """When each op of a replica's pipeline starts and ends (seconds from the pipeline's
    start), each stage's IPU, one micro-batch's forward per stage (what a recomputing
    backward pass does first), and whether it recomputes."""

    times: Mapping[Op, tuple[float, float]]
    stage_ipus: Sequence[int]
    forward_seconds: Sequence[float]
    recomputes: bool
    cycles: Sequence[tuple[float, float]] = ()  # lock-step: each cycle's start, compute
    copy_seconds: float = 0.0  # lock-step: each cycle's copies, after its compute


def pipeline_ops(plan: TrainPlan) -> PipelineOps | None:
    """The op times of the ``plan``'s pipeline as the step's pricing runs it (a lock-step
    schedule cycle by cycle, :mod:`.pipeline.lock_step`), or None when it has none to
    draw: one stage per replica (one IPU, or one tensor group), or a column split."""
    config, topology = plan.config, plan.topology
    if config.pipeline_stages == 1 or config.splits_columns:
        return None
    costs = pipeline_costs(config, topology, plan.workload, plan.chains)
    if costs.schedule.cycles is not None:
        times, cycles = lock_step_op_times(costs.schedule, costs.forward, costs.backward,
                                           costs.cycle_copy, config.stage_ipus)
        return PipelineOps(times, config.stage_ipus, costs.forward, config.recomputes,
                           cycles, costs.cycle_copy)
    times = op_times(costs.schedule, costs.forward, costs.backward, costs.ahead, costs.back,
                     config.stage_ipus)
    return PipelineOps(times, config.stage_ipus, costs.forward, config.recomputes)


def gradient_phases(plan: TrainPlan) -> Timing | None:
    """The gradient allreduce's phases as the step's pricing costs them, or None when the
    optimiser state is sharded across racks (three collectives instead:
    :func:`~.step_collectives.step_collectives`)."""
    return gradient_allreduce_timing(plan)


def stage_track(stage: int, ipu: int, replicas: int) -> str:
    """The name of stage ``stage``'s track: which IPU of each replica runs it."""
    every = "the replica" if replicas == 1 else f"each of {replicas:,} replicas"
    return f"stage {stage} (IPU {ipu} of {every})"


def run_trace(record: Mapping[str, Any], ops: PipelineOps | None = None,
              allreduce: Timing | None = None, collectives: Sequence[PartSpan] = ()) -> Trace:
    """The timeline of a run's record (what ``ipupod train --json`` prints), with its
    pipeline's ``ops`` if it has them (:func:`pipeline_ops`), its gradient
    ``allreduce``'s phases (:func:`gradient_phases`) and its other ``collectives``
    (:func:`~.step_collectives.step_collectives`)."""
    steps = record["steps"]
    per_step = (len(STEP_PARTS) + (3 * len(ops.times) if ops else len(record["stage_ipus"]))
                + (len(allreduce.phases) if allreduce else 0) + len(collectives)
                + (2 * len(ops.cycles) if ops else 0))
    drawn = min(len(steps), MAX_STEPS, max(1, MAX_SPANS // per_step))
    trace = Trace(metadata={
        "tool": "ipupod train", "topology": record["topology"], "model": record["model"],
        "mode": record["mode"], "replicas": record["replicas"],
        "ipus_per_replica": record["ipus_per_replica"],
        "pipeline_schedule": record["pipeline_schedule"], "algorithm": record["algorithm"],
        "steps_drawn": drawn, "steps": len(steps),
        "stages": ("each op of the pipeline, micro-batch by micro-batch" if ops else
                   "each stage's compute over the step as one span from the step's start "
                   "(no op times: one IPU per replica, or a column split)"),
    })
    trace.track(STEP, PARTS)
    if ops is not None and ops.cycles:
        trace.track(STEP, CYCLES)
    for track in dict.fromkeys(span.track for span in collectives):
        trace.track(STEP, track)
    if allreduce is not None:
        trace.track(STEP, ALLREDUCE)
        trace.metadata["allreduce"] = (f"{record['algorithm']}: {len(allreduce.phases)} "
                                       "phases, in the order they run")
    stage_ipus = record["stage_ipus"] or [0]
    for stage, ipu in enumerate(stage_ipus):
        trace.track(STAGES, stage_track(stage, ipu, record["replicas"]))
    at = 0.0
    for row in steps[:drawn]:
        tracks = [stage_track(stage, ipu, record["replicas"])
                  for stage, ipu in enumerate(stage_ipus)]
        if ops is not None:
            _ops(trace, ops, tracks, at, row["step"])
            _cycles(trace, ops, at, row["step"])
        else:
            _busy(trace, row, tracks, at)
        starts = _parts(trace, row, at)
        _collectives(trace, collectives, starts, row["step"])
        at, allreduce_at = starts[END], starts[FIRST_ALLREDUCE_PART]
        for phase in allreduce.phases if allreduce else ():
            trace.span(STEP, ALLREDUCE, phase.label, allreduce_at, phase.seconds,
                       step=row["step"], scope=phase.scope, steps=phase.steps,
                       step_seconds=phase.step_seconds,
                       bytes_per_step=dict(phase.step_link_type_bytes))
            allreduce_at += phase.seconds
    return trace


def config_trace(record: Mapping[str, Any], plan: TrainPlan) -> Trace:
    """:func:`run_trace` of a run of the ``plan``, with everything its pricing works out:
    the pipeline's ops, the gradient allreduce's phases and the other collectives."""
    return run_trace(record, pipeline_ops(plan), gradient_phases(plan),
                     step_collectives(plan))


def _parts(trace: Trace, row: Mapping[str, Any], start: float) -> dict[str, float]:
    """One step's parts from ``start`` seconds; returns where each part starts, by key,
    and (:data:`END`) where the next step starts: the parts summed in
    :data:`STEP_PARTS`' order, as ``sim_seconds`` sums them."""
    at, starts = start, {}
    for part in STEP_PARTS:
        starts[part.key] = at
        seconds = part.seconds(row)
        if seconds > 0:
            trace.span(STEP, PARTS, part.label, at, seconds, step=row["step"], part=part.key)
        at += seconds
    starts[END] = at
    return starts


def _collectives(trace: Trace, collectives: Sequence[PartSpan], starts: Mapping[str, float],
                 step: int) -> None:
    """Each of ``collectives`` from its part's start, a part's one after the other."""
    at = dict(starts)
    for span in collectives:
        trace.span(STEP, span.track, span.name, at[span.part], span.seconds, step=step,
                   part=span.part, **span.args)
        at[span.part] += span.seconds


def _cycles(trace: Trace, ops: PipelineOps, start: float, step: int) -> None:
    """A lock-step pipeline's cycles from ``start``: each cycle's compute (its busiest
    IPU's), then its copies."""
    for cycle, (begin, seconds) in enumerate(ops.cycles):
        trace.span(STEP, CYCLES, f"cycle {cycle}", start + begin, seconds, step=step)
        if ops.copy_seconds > 0:
            trace.span(STEP, CYCLES, "copies", start + begin + seconds, ops.copy_seconds,
                       step=step, cycle=cycle)


def _busy(trace: Trace, row: Mapping[str, Any], tracks: list[str], start: float) -> None:
    """Each stage's compute over the step, as one span from ``start``."""
    for stage, seconds in enumerate(row.get("stage_compute_seconds") or []):
        if stage < len(tracks) and seconds > 0:
            trace.span(STAGES, tracks[stage], "forward + backward", start, seconds,
                       step=row["step"], stage=stage)


def _ops(trace: Trace, ops: PipelineOps, tracks: list[str], start: float, step: int) -> None:
    """Each op of the pipeline from ``start``: a recomputing backward pass as its
    recomputation (one forward) and then the backward proper."""
    for op, (begin, end) in sorted(ops.times.items(), key=lambda item: item[1]):
        track, at = tracks[op.stage], start + begin
        if op.pass_ is Pass.BACKWARD and ops.recomputes:
            recompute = ops.forward_seconds[op.stage]
            trace.span(STAGES, track, "recompute", at, recompute, step=step, micro=op.micro)
            at += recompute
        trace.span(STAGES, track, op.pass_.value, at, start + end - at, step=step,
                   micro=op.micro)
