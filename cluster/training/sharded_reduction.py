"""The gradient's way through a step when the optimiser state is sharded over the replicas
of each rack (or server) and the replicas span several of them.

What the published multi-rack run does (Graphcore's MLPerf Training v1.1 BERT on an
IPU-POD128, PopART in Poplar SDK 2.3, ``poprun --num-instances 2``: one program instance
per rack):

- ``bert.py`` L448-458 (mlcommons/training_results_v1.1,
  ``Graphcore/benchmarks/bert/implementations/popart``): with popdist the optimiser
  state's sharding domain is ``popart.CommGroup(popart.CommGroupType.Consecutive,
  args.replication_factor)``, the instance's own replicas: one rack's. PopART cannot shard
  over every instance's replicas ("CommGroupType.All ... not supported for multiple
  program instances, since each host instance requires the full tensor": PopART user
  guide, tensor locations).
- PopART's streaming-memory transform (``willow/src/transforms/
  streamingmemoryopinserter.cpp`` L941-974, PopART ``sdk/poplar/2.3.0``,
  ``RTSAllReduceToScatter``) turns the gradient allreduce into a ReplicatedReduceScatter
  over the sharding domain and, when the complement of that domain holds more than one
  replica, keeps a ReplicatedAllReduce of the scattered shard over the complement. The
  complement of ``Consecutive k`` is ``CommGroup(Orthogonal, numReplicas / k)``
  (``getComplementCommGroup``, ``willow/src/op/collectives/collectives.cpp`` L101-115):
  replica ``i`` of every rack. The optimiser then updates the shard, and an AllGather over
  the rack's replicas restores the full weights.

So a step's gradient reduction is, in order:

1. a reduce-scatter of each gradient inside each rack, every rack at once (IPU-Links);
2. an allreduce of each 1/R shard between the replicas at the same position of every rack,
   every position at once (over each IPU's PCIe to its IPU-M2000's gateway and the
   GW-Links);
3. the update of the shard (:func:`cluster.training.step_timing.stage_update_seconds`, with
   ``config.optimizer_shards``);
4. an all-gather of the updated shards inside each rack, every rack at once.

On one rack or server, or with the state not sharded, the reduce-scatter and all-gather
are the allreduce's own two halves and the step costs one allreduce instead (the
complement group is one replica, so there is no step 2).

With pipelined replicas (``ipus_per_replica`` K > 1) every collective runs per stage: the
same stage of the replicas, each stage's gradient padded to the largest stage's
(``max(ipu_params)`` elements), as the full allreduce is. The shard is
``ceil(max(ipu_params) / replicas_per_server)`` elements; the reduce-scatter and the
cross-rack allreduce carry the workload's gradient dtype, the all-gather its weight dtype.
Every collective uses ``config.algorithm`` and is timed by the phantom cost model; all
times are simulated seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cluster.model.topology import Topology
from cluster.training.config import TrainConfig
from cluster.training.workloads import Workload
from cluster.training.workloads.layers import DType as ComputeDType
from gcl import CommGroup, plan, simulate
from gcl.collectives import CollectiveName, DType


@dataclass(frozen=True)
class ShardedReduction:
    """Simulated seconds of the three collectives of a sharded step across racks (module
    docstring): the in-rack reduce-scatter, the cross-rack allreduce of each shard, the
    in-rack all-gather of the updated weights."""

    reduce_scatter_seconds: float
    cross_rack_allreduce_seconds: float
    all_gather_seconds: float


def shards_across_racks(config: TrainConfig, chains: np.ndarray) -> bool:
    """Whether the optimiser state is sharded (over each rack's or server's replicas) and
    the replicas (the rows of ``chains``) span more than one rack or server: the case the
    module docstring describes."""
    return config.optimizer_shards > 1 and len(chains) > config.replicas_per_server


def sharded_reduction(config: TrainConfig, topology: Topology, workload: Workload,
                      chains: np.ndarray, ipu_params: list[int]) -> ShardedReduction:
    """The three collectives' simulated seconds, for replicas on ``chains`` (replica ``r``'s
    IPU ``s`` is ``chains[r, s]``, ``replicas_per_server`` replicas per rack, rack after
    rack) whose IPU ``s`` holds ``ipu_params[s]`` parameters (its stages')."""
    per_rack = config.replicas_per_server
    shard = -(-max(ipu_params) // per_rack)  # elements of one replica's 1/R
    gradient, weight = workload.gradient_dtype, workload.weight_dtype
    in_rack = _in_rack_order(chains, per_rack)
    by_rack = CommGroup.consecutive(per_rack)  # a stage of one rack's replicas
    scatter = _seconds(CollectiveName.REDUCE_SCATTER, config, topology, shard, gradient, by_rack,
                       in_rack)
    # PopART's complement group: replica i (stage s) of every rack
    across = CommGroup.orthogonal(len(chains) // per_rack)
    allreduce = _seconds(CollectiveName.ALLREDUCE, config, topology, shard, gradient, across,
                         chains.ravel())
    gather = _seconds(CollectiveName.ALL_GATHER, config, topology, shard, weight, by_rack, in_rack)
    return ShardedReduction(scatter, allreduce, gather)


def rack_all_gather_seconds(config: TrainConfig, topology: Topology, count: int,
                            dtype: ComputeDType, chains: np.ndarray) -> float:
    """Simulated seconds of an all-gather of ``count`` elements a replica (its shard) over
    each rack's replicas, every rack at once: the step's weight gather (phased execution
    runs one a phase, :mod:`.phased`)."""
    per_rack = config.replicas_per_server
    return _seconds(CollectiveName.ALL_GATHER, config, topology, count, dtype,
                    CommGroup.consecutive(per_rack), _in_rack_order(chains, per_rack))


def _in_rack_order(chains: np.ndarray, per_rack: int) -> np.ndarray:
    """The IPUs of ``chains`` ordered rack, then stage, then replica, so that
    ``consecutive:per_rack`` groups the same stage of one rack's replicas: PopART's sharding
    domain ``CommGroup(Consecutive, local replicas)``, per stage."""
    racks, stages = len(chains) // per_rack, chains.shape[1]
    return chains.reshape(racks, per_rack, stages).transpose(0, 2, 1).ravel()


def _seconds(collective: CollectiveName, config: TrainConfig, topology: Topology, count: int,
             dtype: ComputeDType, group: CommGroup, ipus: np.ndarray) -> float:
    """Simulated seconds of ``collective`` of ``count`` elements (per block for the
    reduce-scatter and all-gather) over every group of ``ipus`` at once, with
    ``config.algorithm``."""
    schedule = plan(collective, topology, count, dtype=DType(dtype.value),
                    algorithm_name=config.algorithm, group=group, ipus=ipus)
    return simulate(schedule, topology).sim_seconds
