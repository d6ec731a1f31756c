"""The parts of a training step's simulated time: their one definition.

:class:`StepTime` is a step priced by part (:func:`cluster.training.step_timing.step_time`);
each of its part fields carries a :class:`StepPart`, the part's names in every view.
:data:`STEP_PARTS` lists them in the order a step spends them, and everything that shows
or adds up a step reads it: :attr:`StepTime.sim_seconds`, the run record and
``--json`` (:mod:`cluster.training.records`), the reports' tables and stacked bars
(:mod:`cluster.training.reports`) and the commands' text tables. A new part is one field
here. Every value is simulated seconds on the emulated hardware.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

_PART = "step_part"  # the metadata key of a StepTime field that is a part


@dataclass(frozen=True)
class StepPart:
    """One part of a step: its ``key`` (the :class:`StepTime` field and the run record's
    key, seconds), its ``label`` in plots and the workload reports' tables, its ``title``
    in the text tables' headers (``host-io``), and whether every table shows it
    (``always``) or only one in which a run spends time in it."""

    key: str
    label: str
    title: str
    always: bool = False

    def seconds(self, record: Mapping[str, Any]) -> float:
        """This part's seconds in a step record or table row (0 when it has none)."""
        return record.get(self.key, 0.0)


def _part(label: str, title: str, always: bool = False) -> Any:
    """A :class:`StepTime` field that is a part of the step (0 simulated seconds unless
    given)."""
    return field(default=0.0, metadata={_PART: StepPart("", label, title, always)})


@dataclass(frozen=True)
class StepTime:
    """Simulated seconds of one training step, by part, in the order the step spends them
    (their sum is :attr:`sim_seconds`). ``compute_seconds`` is the busiest IPU's (its
    pipeline stage's, or both of IPU 0's when the last stage goes back to it; a
    replica's, on one IPU); ``pipeline_bubble_seconds`` and ``inter_stage_seconds`` are
    what pipelining adds (:mod:`.pipeline.timing`, or :mod:`.pipeline.lock_step` for a
    lock-step schedule's cycles); ``tensor_parallel_seconds`` the all-reduces of each
    layer over a replica's tensor group (:mod:`.tensor_parallel_time`, after the compute: they
    do not overlap it); ``expert_parallel_seconds`` each MoE layer's all-to-alls
    over its expert group (:mod:`.expert_parallel_time`, the busiest stage's);
    ``phase_load_seconds`` the Streaming Memory traffic of phased execution that compute
    does not hide (:mod:`.phased`);
    ``shard_exchange_seconds`` is a column split's
    collectives (:mod:`.sharding`); ``weight_gather_seconds`` the all-gather of sharded
    optimiser state's weights (:mod:`.sharded_reduction`). ``stage_compute_seconds``
    lists each stage's compute (not a part: the busiest is ``compute_seconds``)."""

    compute_seconds: float = _part("compute", "compute", always=True)
    pipeline_bubble_seconds: float = _part("pipeline bubble", "bubble")
    inter_stage_seconds: float = _part("between stages", "stages-io")
    tensor_parallel_seconds: float = _part("tensor-parallel collectives", "tensor-io")
    expert_parallel_seconds: float = _part("expert-parallel collectives", "expert-io")
    phase_load_seconds: float = _part("phase loads", "phase-io")
    host_io_seconds: float = _part("host I/O", "host-io", always=True)
    local_allreduce_seconds: float = _part("local allreduce", "local-AR", always=True)
    global_allreduce_seconds: float = _part("global allreduce", "global-AR", always=True)
    update_seconds: float = _part("update", "update")
    shard_exchange_seconds: float = _part("shard exchange", "shard-io")
    weight_gather_seconds: float = _part("weight gather", "gather")
    stage_compute_seconds: tuple[float, ...] = ()

    @property
    def sim_seconds(self) -> float:
        """The whole step's simulated seconds: the parts summed (they run one after the
        other: host input, the pipeline, the gradient allreduce, the weight update)."""
        return sum(getattr(self, part.key) for part in STEP_PARTS)

    def parts(self) -> dict[str, float]:
        """Each part's simulated seconds by key, in :data:`STEP_PARTS`' order; their sum
        is :attr:`sim_seconds`."""
        return {part.key: getattr(self, part.key) for part in STEP_PARTS}


STEP_PARTS: tuple[StepPart, ...] = tuple(
    StepPart(f.name, f.metadata[_PART].label, f.metadata[_PART].title,
             f.metadata[_PART].always)
    for f in fields(StepTime) if _PART in f.metadata)
"""Every part of a step, in the order a step spends them (and they are summed)."""


def parts_spent(rows: Iterable[Mapping[str, Any]]) -> list[StepPart]:
    """The parts a table or plot of ``rows`` (step records or table rows) shows, in
    :data:`STEP_PARTS`' order: those every table shows, and each other part some row
    spends time in (so the parts shown add up to every step, and no column is empty)."""
    rows = list(rows)
    return [part for part in STEP_PARTS
            if part.always or any(part.seconds(row) > 0 for row in rows)]
