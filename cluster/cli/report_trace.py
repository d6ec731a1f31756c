"""``--trace FILE`` on the reports (``scaling-report``, ``pipeline-report``,
``train-report``): the timeline of one configuration the report ran, written to FILE
(:mod:`cluster.training.step_trace`) and drawn as :data:`TRACE_PNG` in the report's
folder (:func:`cluster.cli.trace.draw`), which the README shows with the command that
opens the trace. Which configuration: each report says (the largest POD that fits, the
fastest pipeline, the most servers)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from cluster.cli.trace import draw
from cluster.cli.trace_option import save_trace
from cluster.training.plan import TrainPlan
from cluster.training.records import RunRecord
from cluster.training.step_trace import config_trace
from cluster.training.trainer import train

if TYPE_CHECKING:
    from ipu_node.wall_trace import WallRecorder

TRACE_PNG = "trace.png"


def trace_run(record: RunRecord, plan: TrainPlan, trace_path: Path, out_dir: Path,
              what: str, wall: WallRecorder | None = None) -> list[str]:
    """Write the trace of ``record`` (a run of the ``plan``; with ``wall``, real mode's wall
    clock too) to ``trace_path``, draw it into ``out_dir``; the README's lines for it,
    which say it is of ``what``."""
    trace = config_trace(record, plan)
    if wall is not None:
        wall.add_to(trace)
    save_trace(trace, trace_path)
    draw(trace.document(), out_dir / TRACE_PNG)
    return ["## Timeline of a step", "",
            f"Of {what}: each part of the step, each pipeline stage's work and the gradient "
            f"allreduce's phases (`docs/traces.md`). The trace is `{trace_path}`; open it "
            "in ui.perfetto.dev, or draw it again with "
            f"`ipupod trace show {trace_path} --out {TRACE_PNG}`.", "",
            f"![A step's timeline]({TRACE_PNG})", ""]


def trace_phantom(plan: TrainPlan, trace_path: Path, out_dir: Path, what: str) -> list[str]:
    """:func:`trace_run` of one phantom step of the ``plan``."""
    plan = plan.changed(steps=1)
    return trace_run(train(plan), plan, trace_path, out_dir, what)
