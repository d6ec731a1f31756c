"""The simulated seconds of a step's tensor-parallel collectives.

Every collective of :func:`~.layer_allreduces.micro_batch_collectives` (all-reduces; an
MoE layer's all-gathers and reduce-scatters, :mod:`.tensor_parallel.expert_split`; the
MLP's, in real mode: its Megatron block's two all-reduces,
:func:`~.mlp_block.block_collectives`) runs over its group of each replica's tensor group,
all replicas' groups at once (a group of groups, as the
gradient allreduce runs its replica groups), priced by the same cost model: a GCL
schedule of the run's allreduce algorithm (which runs the all-gathers and
reduce-scatters too), simulated on the topology (links the groups share split their
bandwidth). Collectives of the same kind, group and size cost the same, so each kind is
priced once. They run one after another and do not overlap compute (an
assumption: Poplar can overlap some of them, the cost model does not), once per
micro-batch.

With pipeline stages of tensor groups (``--ipus-per-replica S x T``), a stage's layers
run their all-reduces over that stage's tensor groups (its ``T`` consecutive IPUs of
every replica), priced stage by stage: the stages run side by side as their compute
does, so the step's part is the busiest stage's all-reduces (as expert parallelism's
all-to-alls are), while :attr:`TensorParallelTime.kinds` keeps every stage's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from cluster.model.topology import Topology
from cluster.training.kinds import ModelKind
from cluster.training.per_plan import per_plan
from cluster.training.pipeline.stages import stage_layers
from cluster.training.plan import TrainPlan
from cluster.training.priced_collectives import PricedCollectives
from cluster.training.tensor_parallel.layer_allreduces import (
    Axis,
    Phase,
    TensorCollective,
    micro_batch_collectives,
)
from cluster.training.tensor_parallel.layout import TensorParallel
from cluster.training.tensor_parallel.mlp_block import MegatronSplit, block_collectives
from cluster.training.workloads.tensor_shape import TensorRole
from gcl import plan, simulate
from gcl.collectives import CollectiveName, DType


@dataclass(frozen=True, kw_only=True)
class CollectiveKind(PricedCollectives):
    """Collectives of one kind (``collective``: an all-reduce, or an MoE layer's
    all-gather or reduce-scatter): ``what`` of the ``role``'s layers in ``phase``, over
    ``axis`` groups of ``group_size`` IPUs, ``nbytes`` each per IPU (the buffer each holds
    whole); ``count`` of them a step (every layer's, every micro-batch's), ``seconds``
    each (simulated)."""

    role: TensorRole
    phase: Phase
    axis: Axis
    stage: int = 0  # the pipeline stage whose layers run them
    collective: CollectiveName = CollectiveName.ALLREDUCE


@dataclass(frozen=True)
class TensorParallelTime:
    """A step's tensor-parallel all-reduces by kind, every pipeline stage's;
    ``seconds``: the busiest stage's, one after another (the step's part)."""

    kinds: tuple[CollectiveKind, ...] = ()

    def stage_seconds(self, stage: int) -> float:
        """Simulated seconds of pipeline stage ``stage``'s all-reduces, one after another."""
        return sum(kind.total_seconds for kind in self.kinds if kind.stage == stage)

    @property
    def busiest(self) -> tuple[CollectiveKind, ...]:
        """The kinds of the stage whose all-reduces take longest (the first on a tie)."""
        if not self.kinds:
            return ()
        stage = max(sorted({kind.stage for kind in self.kinds}), key=self.stage_seconds)
        return tuple(kind for kind in self.kinds if kind.stage == stage)

    @property
    def seconds(self) -> float:
        """Simulated seconds of the busiest stage's all-reduces (the step's part)."""
        return sum(kind.total_seconds for kind in self.busiest)


def axis_groups(chains: np.ndarray, layout: TensorParallel, axis: Axis) -> list[np.ndarray]:
    """The IPUs of every ``axis`` group of every replica: ``chains[r]`` is replica ``r``'s
    tensor group, ``T1`` innermost (its IPU ``j T1 + i`` is ``i`` along ``t1``, ``j`` along
    ``t2``)."""
    if axis is Axis.TENSOR:
        return list(chains)
    grid = chains.reshape(len(chains), layout.t2, layout.t1)
    if axis is Axis.T1:
        return [grid[r, j] for r in range(len(chains)) for j in range(layout.t2)]
    return [grid[r, :, i] for r in range(len(chains)) for i in range(layout.t1)]


def group_size(layout: TensorParallel, axis: Axis) -> int:
    """IPUs of an ``axis`` group."""
    return {Axis.TENSOR: layout.size, Axis.T1: layout.t1, Axis.T2: layout.t2}[axis]


def allreduce_seconds(topology: Topology, groups: list[np.ndarray], nbytes: int,
                      itemsize: int, algorithm: str,
                      collective: CollectiveName = CollectiveName.ALLREDUCE) -> float:
    """Simulated seconds of an all-reduce of ``nbytes`` per IPU over every one of
    ``groups`` at once, with ``algorithm`` (the run's); or of an all-gather or
    reduce-scatter whose whole buffer is ``nbytes`` (each IPU's block ``1/G`` of it,
    rounded up), with the same algorithm (every GCL algorithm runs both)."""
    dtype = DType.FLOAT16 if itemsize == 2 else DType.FLOAT32
    count = (max(1, nbytes // itemsize) if collective is CollectiveName.ALLREDUCE
             else max(1, -(-nbytes // (itemsize * len(groups[0])))))
    schedule = plan(collective, topology, count, dtype=dtype, algorithm_name=algorithm,
                    groups=groups)
    return simulate(schedule, topology).sim_seconds


@per_plan
def tensor_parallel_time(run: TrainPlan) -> TensorParallelTime:
    """The ``run``'s tensor-parallel all-reduces for a step, every stage's (none when it
    is off)."""
    config = run.config
    layout = config.tensor_parallel
    if not layout.on:
        return TensorParallelTime()
    stages = stage_layers([layer.training_flops for layer in run.rank_workload.layers],
                          config.pipeline_stages, config.layers_per_ipu)
    kinds: list[CollectiveKind] = []
    for stage, (first, layers) in enumerate(zip(config.stage_ipus, stages)):
        group = run.chains[:, first:first + layout.size]  # every replica's tensor group
        kinds += _stage_kinds(run, stage, group, layers)
    return TensorParallelTime(tuple(kinds))


def _stage_kinds(run: TrainPlan, stage: int, chains: np.ndarray,
                 layers: range) -> list[CollectiveKind]:
    """The all-reduces of pipeline stage ``stage`` (its ``layers``) over its tensor
    groups (``chains[r]``: replica ``r``'s), by kind, each kind priced once."""
    config, layout = run.config, run.config.tensor_parallel
    found = (block_collectives(MegatronSplit.of(config.spec, layout.size))
             if run.kind is ModelKind.MLP else
             micro_batch_collectives(run.workload, layout, config.recomputes, layers))
    counted = Counter(_key(c, config.micro_batch) for c in found)
    priced: dict[tuple[CollectiveName, Axis, int, int], float] = {}
    kinds = []
    for (role, phase, axis, what, nbytes, itemsize, collective), count in counted.items():
        if (collective, axis, nbytes, itemsize) not in priced:
            priced[collective, axis, nbytes, itemsize] = allreduce_seconds(
                run.topology, axis_groups(chains, layout, axis), nbytes, itemsize,
                config.algorithm, collective)
        kinds.append(CollectiveKind(
            role=role, phase=phase, axis=axis, what=what, group_size=group_size(layout, axis),
            nbytes=nbytes, count=count * config.accumulation,
            seconds=priced[collective, axis, nbytes, itemsize], stage=stage,
            collective=collective))
    return kinds


def _key(collective: TensorCollective, micro_batch: int
         ) -> tuple[TensorRole, Phase, Axis, str, int, int, CollectiveName]:
    """What makes two collectives of a step the same kind."""
    return (collective.role, collective.phase, collective.axis, collective.what,
            collective.nbytes(micro_batch), collective.dtype.itemsize, collective.collective)
