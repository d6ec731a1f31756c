"""A data-parallel step with the optimiser state sharded across racks as per-rank Chakra
nodes (``ipupod train --chakra-out``): instead of the gradient all-reduce, what PopART runs
(:mod:`cluster.training.sharded_reduction`): a REDUCE_SCATTER of the gradients inside each
rack (process group ``rack K``), an ALL_REDUCE of each rank's shard with the replica at the
same place of every other rack (``place I``), the update of the shard, and an ALL_GATHER
of the updated weights inside the rack (``rack K`` again). Sizes as the replay (and
``ipupod bench``) reads them, in the gradients' type (the replay's ``--dtype``; weights of
another type are refused): the reduce-scatter and all-gather the whole buffer of the
rack's shards, the all-reduce one shard.
Every rack's (every place's) collective starts at once, so the replay prices them
together, as the pricing does."""

from __future__ import annotations

from cluster.errors import UserError
from cluster.training.chakra.et_nodes import CommType
from cluster.training.chakra.et_writer import collective_node, compute_node
from cluster.training.plan import TrainPlan
from cluster.training.step_parts import StepTime
from ipupod_proto import chakra_et_pb2 as et


def sharded_rank_nodes(plan: TrainPlan, step: StepTime) -> list[list[et.Node]]:
    """Each rank's nodes (rank ``r`` the replica on IPU ``r``, one IPU each, racks of
    ``replicas_per_server`` consecutive replicas) for the ``plan``'s step priced as
    ``step``."""
    config, workload = plan.config, plan.workload
    if workload.weight_dtype != workload.gradient_dtype:
        raise UserError(f"--chakra-out does not export a sharded reduction whose weights "
                        f"({workload.weight_dtype}) and gradients ({workload.gradient_dtype}) "
                        "differ in type yet: a replay moves every collective in one --dtype")
    per_rack = config.replicas_per_server
    shard = -(-sum(layer.parameters for layer in workload.layers) // per_rack)
    gradient = workload.gradient_dtype.itemsize
    forward_backward = (step.compute_seconds + step.pipeline_bubble_seconds
                        + step.inter_stage_seconds)
    ranks = []
    for replica in range(len(plan.chains)):
        rack, place = f"rack {replica // per_rack}", f"place {replica % per_rack}"
        ranks.append([
            compute_node(1, "host input", step.host_io_seconds),
            compute_node(2, "forward and backward", forward_backward, deps=[1]),
            collective_node(3, "reduce_scatter(gradients)", CommType.REDUCE_SCATTER,
                            shard * per_rack * gradient, pg_name=rack, deps=[2]),
            collective_node(4, "allreduce(gradient shard)", CommType.ALL_REDUCE,
                            shard * gradient, pg_name=place, deps=[3]),
            compute_node(5, "weight update", step.update_seconds, deps=[4]),
            collective_node(6, "all_gather(weights)", CommType.ALL_GATHER,
                            shard * per_rack * gradient,
                            pg_name=rack, deps=[5])])
    return ranks
