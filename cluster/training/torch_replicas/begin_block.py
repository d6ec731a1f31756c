"""Pipeline stages marked on a PyTorch module, PopTorch's ``BeginBlock`` way.

``BeginBlock(module, ipu_id=k)`` says: this submodule, and every one registered after it
until the next mark, is stage ``k`` on the replica's IPU ``k``. Here the marks are recorded
on the modules and do two things: a replica spans as many IPUs as the highest ``ipu_id``
plus one (:func:`replica_ipus_needed`, the placement: replicas take that many IPUs each,
along the IPU-Links), and the step is priced as a pipeline of those stages, each starting
at the workload layer its mark names (:func:`layers_per_stage`, the ``--layers-per-ipu``
of phantom mode). The arithmetic of a replica still runs in one process, on its first IPU's
card: the marks place and price the pipeline, they do not split the module's execution.
"""

from __future__ import annotations

from typing import Any

from cluster.errors import UserError
from cluster.training.config import IPUS_PER_REPLICA
from cluster.training.workloads import Workload

STAGE_MARK = "_ipupod_begin_block"  # the attribute BeginBlock sets on a module


def BeginBlock(module: Any, user_id: str | None = None,  # PopTorch's name
               ipu_id: int | None = None) -> Any:
    """Mark ``module`` as the first of pipeline stage ``ipu_id`` (PopTorch's
    ``poptorch.BeginBlock``; ``user_id`` is kept as a label). Returns the module."""
    if isinstance(ipu_id, bool) or not isinstance(ipu_id, int) or ipu_id < 0:
        raise UserError(f"BeginBlock needs ipu_id, the stage's IPU: 0 or more, not {ipu_id!r}")
    setattr(module, STAGE_MARK, (ipu_id, user_id))
    return module


def stage_marks(model: Any) -> list[tuple[str, int]]:
    """``(qualified name, ipu_id)`` of every marked submodule, in registration order
    (the order ``named_modules`` walks: PopTorch's execution order for a model whose
    layers run as they are declared)."""
    return [(name, getattr(part, STAGE_MARK)[0]) for name, part in model.named_modules()
            if hasattr(part, STAGE_MARK)]


def replica_ipus_needed(marks: list[tuple[str, int]]) -> int:
    """IPUs a replica spans: one without marks, else stages ``0, 1, ... K-1`` in order, and
    K one of this tool's replica sizes."""
    if not marks:
        return 1
    ids = [ipu for _, ipu in marks]
    if ids[0] != 0 and marks[0][0] != "":
        ids = [0, *ids]  # what comes before the first mark is stage 0, as in PopTorch
    if ids != list(range(len(ids))):
        raise UserError(f"BeginBlock ipu_ids must run 0, 1, 2, ... in the order the modules "
                        f"are declared (one stage per IPU), not {ids}")
    if len(ids) not in IPUS_PER_REPLICA:
        raise UserError(f"{len(ids)} pipeline stages: a replica spans "
                        f"{', '.join(map(str, IPUS_PER_REPLICA))} IPUs; mark that many stages")
    return len(ids)


def layers_per_stage(workload: Workload, marks: list[tuple[str, int]],
                     stages: int) -> tuple[int, ...] | None:
    """The workload's layers on each stage: stage ``k`` starts at the first layer named as
    its mark's module (or a submodule of it). None (balanced on FLOPs) when there is one
    stage or a mark names no layer."""
    if stages == 1:
        return None
    starts = [0]
    for name, ipu in marks:
        if ipu == 0:
            continue
        found = next((i for i, layer in enumerate(workload.layers)
                      if layer.name == name or layer.name.startswith(name + ".")), None)
        if found is None or found <= starts[-1]:
            return None
        starts.append(found)
    ends = [*starts[1:], len(workload.layers)]
    return tuple(end - start for start, end in zip(starts, ends))
