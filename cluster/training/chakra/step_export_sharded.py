"""A step with the optimiser state sharded across racks as Chakra nodes (``ipupod train
--chakra-out``): instead of the gradient all-reduce and the update, what PopART runs
(:mod:`cluster.training.sharded_reduction`): a REDUCE_SCATTER of the gradients inside each
rack (process group ``rack K``; with several IPUs a replica, ``rack K ipu P``, the IPU at
place ``P`` of each of the rack's replicas), an ALL_REDUCE of each rank's shard with the
replica at the same place of every other rack (``place I``, or ``place I ipu P``), the
update of the shard, and an ALL_GATHER of the updated weights inside the rack. Sizes as
the replay (and ``ipupod bench``) reads them, in the gradients' type (the replay's
``--dtype``; weights of another type are refused): the reduce-scatter and all-gather the
whole buffer of the rack's shards, the all-reduce one shard. Every rack's (every place's)
collective starts at once, so the replay prices them together, as the pricing does."""

from __future__ import annotations

from collections.abc import Sequence

from cluster.errors import UserError
from cluster.training.chakra.et_nodes import CommType
from cluster.training.chakra.et_writer import collective_node, compute_node
from cluster.training.plan import TrainPlan
from cluster.training.step_parts import StepTime
from ipupod_proto import chakra_et_pb2 as et


def sharded_rank_nodes(plan: TrainPlan, step: StepTime) -> list[list[et.Node]]:
    """Each rank's nodes (rank ``r`` the replica on IPU ``r``, one IPU each, racks of
    ``replicas_per_server`` consecutive replicas) for the ``plan``'s data-parallel step
    priced as ``step``."""
    parameters = [sum(layer.parameters for layer in plan.workload.layers)]
    forward_backward = (step.compute_seconds + step.pipeline_bubble_seconds
                        + step.inter_stage_seconds)
    ranks = []
    for replica in range(len(plan.chains)):
        nodes = [compute_node(1, "host input", step.host_io_seconds),
                 compute_node(2, "forward and backward", forward_backward, deps=[1])]
        nodes += sharded_reduction_nodes(plan, step, parameters, replica, 0, first_id=3)
        ranks.append(nodes)
    return ranks


def sharded_reduction_nodes(plan: TrainPlan, step: StepTime, ipu_parameters: Sequence[int],
                            replica: int, place: int, first_id: int) -> list[et.Node]:
    """The reduce-scatter, shard all-reduce, update and all-gather of IPU ``place`` of
    ``replica`` (each IPU's gradients padded to the largest, ``ipu_parameters``), ids from
    ``first_id``, the first after node ``first_id - 1``."""
    workload, per_rack = plan.workload, plan.config.replicas_per_server
    if workload.weight_dtype != workload.gradient_dtype:
        raise UserError(f"--chakra-out does not export a sharded reduction whose weights "
                        f"({workload.weight_dtype}) and gradients ({workload.gradient_dtype}) "
                        "differ in type yet: a replay moves every collective in one --dtype")
    shard_bytes = -(-max(ipu_parameters) // per_rack) * workload.gradient_dtype.itemsize
    ipu = f" ipu {place}" if plan.config.ipus_per_replica > 1 else ""
    rack, across = f"rack {replica // per_rack}{ipu}", f"place {replica % per_rack}{ipu}"
    i = first_id
    return [collective_node(i, "reduce_scatter(gradients)", CommType.REDUCE_SCATTER,
                            shard_bytes * per_rack, pg_name=rack, deps=[i - 1]),
            collective_node(i + 1, "allreduce(gradient shard)", CommType.ALL_REDUCE,
                            shard_bytes, pg_name=across, deps=[i]),
            compute_node(i + 2, "weight update", step.update_seconds, deps=[i + 1]),
            collective_node(i + 3, "all_gather(weights)", CommType.ALL_GATHER,
                            shard_bytes * per_rack, pg_name=rack, deps=[i + 2])]
