"""The collectives of a training step besides the gradient allreduce, as spans of the parts
they make up (``ipupod train --trace``, :mod:`.step_trace`):

- with the optimiser state sharded across racks (:mod:`.sharded_reduction`): the
  reduce-scatter in each rack (the local allreduce part), the allreduce of each shard
  across the racks (the global part) and the all-gather of the updated weights in each
  rack (the weight gather part), a span each, as long as its part;
- with the widest layer split over each replica's IPUs (:mod:`.sharding`): each of the
  split's collectives over the step's micro-batches (broadcast, all-gather,
  reduce-scatter, allreduce), one after the other, adding up to the shard exchange part;
- with tensor parallelism (:mod:`.tensor_parallel_time`): each kind of all-reduce (and
  an MoE layer's all-gathers and reduce-scatters) over the replicas' tensor groups (what
  it carries, of which layers, in which pass, over which group), all of that kind in the
  step one after another, adding up to the
  tensor-parallel collectives part (with pipeline stages of tensor groups, the busiest
  stage's; :func:`collective_records` lists every stage's for ``--json``);
- with expert parallelism (:mod:`.expert_parallel_time`): each kind of all-to-all
  of the busiest stage's MoE layers over the expert groups, adding up to the
  expert-parallel collectives part.

Each span is priced as the step's pricing prices it, so a part's spans add up to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cluster.training.expert_parallel_time import AllToAllKind, expert_parallel_time
from cluster.training.plan import TrainPlan
from cluster.training.sharding import sharded_time
from cluster.training.step_timing import sharded_reduction_timing
from cluster.training.tensor_parallel_time import CollectiveKind, tensor_parallel_time
from cluster.training.workloads.tensor_shape import TensorRole
from gcl.collectives import CollectiveName

SHARDED_REDUCTION = "gradient reduction (sharded state)"  # the tracks' names
SHARD_EXCHANGE = "shard exchange"
TENSOR_PARALLEL = "tensor-parallel collectives"
EXPERT_PARALLEL = "expert-parallel collectives"


@dataclass(frozen=True)
class PartSpan:
    """``name`` on track ``track``, ``seconds`` long, within part ``part`` (a
    :data:`~.step_parts.STEP_PARTS` key): the spans of a part follow one another from
    the part's start."""

    track: str
    part: str
    name: str
    seconds: float
    args: Mapping[str, Any] = field(default_factory=dict)


def step_collectives(plan: TrainPlan) -> list[PartSpan]:
    """The spans of the ``plan``'s step for its sharded reduction, its column split and
    its tensor-parallel all-reduces and its expert-parallel all-to-alls (none when it
    has none of them)."""
    config, topology = plan.config, plan.topology
    spans = []
    reduction = sharded_reduction_timing(plan)
    if reduction is not None:
        rack = {"group": f"the {config.replicas_per_server} replicas of each rack or server"}
        spans += [
            PartSpan(SHARDED_REDUCTION, "local_allreduce_seconds", "reduce-scatter in each rack",
                     reduction.reduce_scatter_seconds, rack),
            PartSpan(SHARDED_REDUCTION, "global_allreduce_seconds",
                     "allreduce of each shard across racks",
                     reduction.cross_rack_allreduce_seconds,
                     {"group": "the same replica of every rack or server"}),
            PartSpan(SHARDED_REDUCTION, "weight_gather_seconds", "all-gather in each rack",
                     reduction.all_gather_seconds, rack)]
    if config.splits_columns:
        micro = config.accumulation
        spans += [PartSpan(SHARD_EXCHANGE, "shard_exchange_seconds", name.replace("_", "-"),
                           seconds, {"micro_batches": micro,
                                     "group": f"each replica's {config.ipus_per_replica} IPUs"})
                  for name, seconds in sharded_time(config, topology).by_collective.items()
                  if seconds > 0]
    return spans + _tensor_parallel_spans(plan) + _expert_parallel_spans(plan)


def _tensor_parallel_spans(plan: TrainPlan) -> list[PartSpan]:
    """A span per kind of tensor-parallel all-reduce of the ``plan``'s step (the busiest
    pipeline stage's): its count, bytes per IPU each, group and seconds each (simulated)."""
    staged = plan.config.pipeline_stages > 1
    return [PartSpan(TENSOR_PARALLEL, "tensor_parallel_seconds",
                     f"{kind.phase} {_collective_word(kind.collective)} of the "
                     f"{_layers_of(kind.role)} {kind.what}", kind.total_seconds,
                     {"count": kind.count, "bytes": kind.nbytes, "axis": str(kind.axis),
                      "seconds_each": kind.seconds, "group": _tensor_group(plan, kind),
                      **({"stage": kind.stage} if staged else {})})
            for kind in tensor_parallel_time(plan).busiest]


def _collective_word(collective: CollectiveName) -> str:
    """A collective as the spans and ``--json`` name it (``all-reduce``)."""
    return "all-reduce" if collective is CollectiveName.ALLREDUCE else str(collective)


def _layers_of(role: TensorRole) -> str:
    """Whose collective it is, in words: ``attention's``, ``MoE layers'``."""
    return "MoE layers'" if role is TensorRole.EXPERTS else f"{role}'s"


def _tensor_group(plan: TrainPlan, kind: CollectiveKind) -> str:
    """The groups a tensor-parallel all-reduce of ``kind`` runs over, in words."""
    where = (f" of pipeline stage {kind.stage}" if plan.config.pipeline_stages > 1 else "")
    return (f"{kind.axis} groups of {kind.group_size} IPUs{where}, every one of "
            f"{plan.config.replicas} replicas' at once")


def collective_records(plan: TrainPlan) -> list[dict[str, Any]]:
    """Every kind of model-parallel collective of the ``plan``'s step, for ``--json``:
    each pipeline stage's tensor-parallel all-reduces and the busiest stage's
    expert-parallel all-to-alls (what the expert-parallel part prices), with their
    count a step, bytes per IPU each, group and simulated seconds each."""
    tensor = [{"part": "tensor_parallel_seconds",
               "collective": _collective_word(kind.collective),
               "stage": kind.stage, "phase": str(kind.phase), "layers": str(kind.role),
               "what": kind.what, "axis": str(kind.axis), "group_size": kind.group_size,
               "group": _tensor_group(plan, kind), "count": kind.count, "bytes": kind.nbytes,
               "seconds_each": kind.seconds}
              for kind in tensor_parallel_time(plan).kinds]
    return tensor + [{"part": span.part, "collective": "all-to-all", "what": span.name,
                      **span.args} for span in _expert_parallel_spans(plan)]


def _expert_parallel_spans(plan: TrainPlan) -> list[PartSpan]:
    """A span per kind of expert-parallel all-to-all of the ``plan``'s step (the busiest
    stage's): its count, bytes per IPU each, group and seconds each (simulated)."""
    groups = plan.config.replicas // max(1, plan.config.expert_parallel)
    return [PartSpan(EXPERT_PARALLEL, "expert_parallel_seconds",
                     f"{kind.phase} all-to-all: MoE {kind.what}", kind.total_seconds,
                     {"count": kind.count, "bytes": kind.nbytes, "seconds_each": kind.seconds,
                      "group": _expert_group(kind, groups)})
            for kind in expert_parallel_time(plan).kinds]


def _expert_group(kind: AllToAllKind, groups: int) -> str:
    """The expert groups an all-to-all of ``kind`` runs over, in words (``groups`` of
    each tensor rank)."""
    if kind.tensor_ranks == 1:
        return (f"IPU {kind.ipu} of {kind.group_size} consecutive replicas, {groups} groups "
                "at once")
    last = kind.ipu + kind.tensor_ranks - 1
    return (f"the same IPU (tensor rank) of {kind.group_size} consecutive replicas, for each "
            f"of IPUs {kind.ipu}-{last}: {groups * kind.tensor_ranks} groups at once")
