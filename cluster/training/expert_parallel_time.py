"""The all-to-alls of expert parallelism, and their simulated seconds.

Each mixture-of-experts layer runs, for every micro-batch, four all-to-alls over its
expert group (:mod:`.expert_parallel.expert_groups`): forward, the dispatch (each
token's hidden state to the IPUs holding its ``top_k`` experts) and the combine (the
experts' outputs back); backward, their gradients the other way (the combine's, then the
dispatch's). With recomputation
the forward two run again in the backward pass. Bytes each IPU sends and receives in one
of them (its whole buffer, of which ``1/E`` stays on the IPU), by hand::

    micro-batch x tokens x top_k x hidden x bytes per value x capacity factor

from the layer's output (``tokens x hidden`` values per sample in the partials' format),
rounded up: each expert's buffer of ``capacity factor x top_k x tokens / experts``
tokens, padding included, as the layer's FLOPs count it (equal to it when that share is
whole, as for ``moe-8x7b``: 1,280 tokens of 4,096). With tensor parallelism of ``T``
(:mod:`.tensor_parallel.expert_split`) each IPU of a tensor group sends its ``1/T`` of
the tokens, over the expert group of its tensor rank (the same IPU of ``E`` replicas):
that count divided by ``T``, rounded up; all ``T`` ranks' groups run at once.

Priced by the same cost model as every collective: a GCL all-to-all schedule (the fastest
algorithm that runs one, ``auto``) over every replica's expert group at once, simulated
on the topology. A layer's all-to-alls run over the groups of its pipeline stage's IPUs;
each stage's run one after another and do not overlap its compute (an assumption), and
the stages' run side by side as their compute does: the step's part is the busiest
stage IPU's, for all of the step's micro-batches.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from cluster.training.per_plan import per_plan
from cluster.training.pipeline.stages import stage_layers
from cluster.training.plan import TrainPlan
from cluster.training.priced_collectives import PricedCollectives
from cluster.training.workloads.layers import Layer, Workload
from gcl import plan, simulate
from gcl.collectives import CollectiveName, DType
from gcl.planner import AUTO

FORWARD = ("forward", ("dispatch", "combine"))
BACKWARD = ("backward", ("combine gradient", "dispatch gradient"))
RECOMPUTE = ("recompute", ("dispatch", "combine"))


@dataclass(frozen=True)
class ExpertCollective:
    """One all-to-all of MoE layer ``layer``: ``what`` it moves in ``phase``, ``nbytes``
    per IPU for a micro-batch."""

    layer: str
    phase: str
    what: str
    nbytes: int


def all_to_all_bytes(layer: Layer, micro_batch: int, tensor_ranks: int = 1) -> int:
    """Bytes per IPU of one all-to-all of MoE ``layer`` for a micro-batch, each IPU of a
    tensor group of ``tensor_ranks`` sending its share of the tokens (the module's hand
    count)."""
    assert layer.experts is not None
    routed = micro_batch * layer.output_bytes * layer.experts.top_k
    return -(-math.ceil(routed * layer.experts.capacity_factor) // tensor_ranks)


def layer_all_to_alls(layer: Layer, micro_batch: int, recomputes: bool,
                      tensor_ranks: int = 1) -> list[ExpertCollective]:
    """The all-to-alls ``layer`` runs for a micro-batch on each IPU of a tensor group of
    ``tensor_ranks``: 4 for a MoE layer (6 when it ``recomputes``), none for any other."""
    if layer.experts is None:
        return []
    nbytes = all_to_all_bytes(layer, micro_batch, tensor_ranks)
    phases = [FORWARD, BACKWARD] + ([RECOMPUTE] if recomputes else [])
    return [ExpertCollective(layer.name, phase, what, nbytes)
            for phase, whats in phases for what in whats]


@dataclass(frozen=True, kw_only=True)
class AllToAllKind(PricedCollectives):
    """All-to-alls of one kind on the replicas' IPU ``ipu`` (a pipeline stage's first;
    with tensor groups of ``tensor_ranks``, on each of them, ``ipu`` to ``ipu +
    tensor_ranks - 1``): ``what`` in ``phase``, ``nbytes`` each per IPU over groups of
    ``group_size``; ``count`` a step (every MoE layer's there, every micro-batch's),
    ``seconds`` each (simulated)."""

    ipu: int
    phase: str
    tensor_ranks: int = 1


@dataclass(frozen=True)
class ExpertParallelTime:
    """A step's all-to-alls on the busiest stage IPU, by kind (``seconds``: their sum,
    the step's part), and the capacity factor: the busiest expert's tokens over the mean
    (each expert computes that many times its even share, the imbalance priced)."""

    kinds: tuple[AllToAllKind, ...] = ()
    capacity_factor: float = 1.0

    @property
    def seconds(self) -> float:
        """Simulated seconds of all of them, one after another."""
        return sum(kind.total_seconds for kind in self.kinds)


def expert_groups(chains: np.ndarray, degree: int, ipu: int,
                  tensor_ranks: int = 1) -> list[np.ndarray]:
    """IPU ``ipu`` of every ``degree`` consecutive replicas: each expert group's IPUs
    there (``chains[r]``: replica ``r``'s IPUs); with a tensor group of ``tensor_ranks``
    from ``ipu`` on, each of its IPUs' groups (rank by rank)."""
    return [chains[start:start + degree, ipu + rank]
            for rank in range(tensor_ranks) for start in range(0, len(chains), degree)]


def all_to_all_seconds(run: TrainPlan, ipu: int, nbytes: int) -> float:
    """Simulated seconds of an all-to-all of ``nbytes`` per IPU over every expert group
    of IPU ``ipu`` (every IPU of its tensor group) of the ``run``'s replicas at once."""
    degree, itemsize = run.config.expert_parallel, run.workload.partials_dtype.itemsize
    block = max(1, -(-nbytes // (itemsize * degree)))  # values to each IPU of the group
    groups = expert_groups(run.chains, degree, ipu, run.config.tensor_parallel.size)
    schedule = plan(CollectiveName.ALL_TO_ALL, run.topology, block,
                    dtype=DType(run.workload.partials_dtype.value), algorithm_name=AUTO,
                    groups=groups)
    return simulate(schedule, run.topology).sim_seconds


def stage_ipu_of_layers(run: TrainPlan) -> dict[int, int]:
    """The replica's IPU each layer runs on (by layer index), as the step's pipeline
    places them."""
    config, workload = run.config, run.rank_workload
    stages = stage_layers([layer.training_flops for layer in workload.layers],
                          config.pipeline_stages, config.layers_per_ipu)
    return {i: ipu for ipu, layers in zip(config.stage_ipus, stages) for i in layers}


@per_plan
def expert_parallel_time(run: TrainPlan) -> ExpertParallelTime:
    """The ``run``'s all-to-alls for a step (none when expert parallelism is off)."""
    config, workload = run.config, run.workload  # whole layers: the bytes are the tokens'
    if config.expert_parallel == 1:
        return ExpertParallelTime()
    on_ipu, ranks = stage_ipu_of_layers(run), config.tensor_parallel.size
    counted = Counter((on_ipu[i], c.phase, c.what, c.nbytes)
                      for i, layer in enumerate(workload.layers)
                      for c in layer_all_to_alls(layer, config.micro_batch, config.recomputes,
                                                 ranks))
    priced: dict[tuple[int, int], float] = {}
    by_ipu: dict[int, list[AllToAllKind]] = {}
    for (ipu, phase, what, nbytes), count in counted.items():
        if (ipu, nbytes) not in priced:
            priced[ipu, nbytes] = all_to_all_seconds(run, ipu, nbytes)
        by_ipu.setdefault(ipu, []).append(AllToAllKind(
            ipu=ipu, phase=phase, what=what, group_size=config.expert_parallel, nbytes=nbytes,
            count=count * config.accumulation, seconds=priced[ipu, nbytes],
            tensor_ranks=ranks))
    busiest = max(by_ipu.values(), key=lambda kinds: sum(k.total_seconds for k in kinds))
    return ExpertParallelTime(tuple(busiest), capacity_factor(workload))


def capacity_factor(workload: Workload) -> float:
    """The largest capacity factor of ``workload``'s MoE layers (1: it has none)."""
    return max((layer.experts.capacity_factor for layer in workload.layers
                if layer.experts is not None), default=1.0)
