"""An expert-parallel step (``--expert-parallel E``, one IPU a replica) as per-rank Chakra
nodes (``ipupod train --chakra-out``), laid out as the pricing lays it out
(:mod:`cluster.training.expert_parallel_time`): each IPU waits for the host's input, then
for every micro-batch computes its share of the forward pass, runs that pass's
all-to-alls (each MoE layer's dispatch and combine), then the backward's share and its
all-to-alls (the recomputed forward's first; :mod:`.step_export_passes`), each kind
``count / accumulation`` times in the order the pricing adds them. Each is a COMM_COLL
ALL_TO_ALL on process group ``experts G`` (the ``G``-th group of ``E`` consecutive
replicas), ``comm_size`` the bytes the replay (and ``ipupod bench``) reads back into the
values the pricing sends each IPU of the group. Every group's all-to-all starts at once, so
the replay prices them together, as the pricing does. Then every replica's gradients (its
IPU's share: the dense layers and its experts) are all-reduced and the weights updated (or
the sharded reduction's three collectives around the update).

Refused by name: expert groups in pipelines (the pricing takes the busiest stage IPU's
all-to-alls as the step's part, which per-IPU nodes do not reproduce), and all-to-alls
the replay would price in another element type (partials of another size than the
gradients: a replay takes one ``--dtype``)."""

from __future__ import annotations

from cluster.errors import UserError
from cluster.training.chakra.et_nodes import CommType
from cluster.training.chakra.et_writer import collective_node, compute_node
from cluster.training.chakra.step_export_passes import PassCollective, micro_batch_nodes
from cluster.training.chakra.step_export_sharded import sharded_reduction_nodes
from cluster.training.expert_parallel_time import AllToAllKind, expert_parallel_time
from cluster.training.plan import TrainPlan
from cluster.training.sharded_reduction import shards_across_racks
from cluster.training.step_parts import StepTime
from gcl.collectives import CollectiveName, collective
from ipupod_proto import chakra_et_pb2 as et

FORWARD_PHASES = ("forward",)
BACKWARD_PHASES = ("recompute", "backward")


def expert_rank_nodes(plan: TrainPlan, step: StepTime) -> list[list[et.Node]]:
    """Each rank's nodes (rank ``r`` the replica on IPU ``r``, whatever its place) for the
    ``plan``'s expert-parallel step priced as ``step`` (:func:`check_experts_exportable`
    first)."""
    config = plan.config
    kinds = expert_parallel_time(plan).kinds
    params = [sum(layer.parameters for layer in plan.rank_workload.layers)]
    gradient_bytes = params[0] * plan.workload.gradient_dtype.itemsize
    sharded = shards_across_racks(config, plan.chains)
    ranks: dict[int, list[et.Node]] = {}
    for replica, ipu in enumerate(plan.chains[:, 0].tolist()):
        group = f"experts {replica // config.expert_parallel}"
        forward, backward = ([_all_to_all(plan, k, group) for phase in phases
                              for k in kinds if k.phase == phase]
                             for phases in (FORWARD_PHASES, BACKWARD_PHASES))
        nodes = [compute_node(1, "host input", step.host_io_seconds)]
        nodes += micro_batch_nodes(2, config.accumulation, step.compute_seconds,
                                   forward, backward)
        i = len(nodes) + 1
        if sharded:
            nodes += sharded_reduction_nodes(plan, step, params, replica, 0, first_id=i)
        else:
            nodes += [collective_node(i, "allreduce(gradients)", CommType.ALL_REDUCE,
                                      gradient_bytes, deps=[i - 1]),
                      compute_node(i + 1, "weight update", step.update_seconds, deps=[i])]
        ranks[ipu] = nodes
    return [ranks[ipu] for ipu in sorted(ranks)]


def _all_to_all(plan: TrainPlan, kind: AllToAllKind, group: str) -> PassCollective:
    """The all-to-alls of ``kind`` a micro-batch runs on process group ``group``, sized so
    the replay sends each IPU of the group the values the pricing does."""
    degree, itemsize = plan.config.expert_parallel, plan.workload.partials_dtype.itemsize
    block = max(1, -(-kind.nbytes // (itemsize * degree)))
    size = collective(CollectiveName.ALL_TO_ALL).bytes_for_count(block, degree, itemsize)
    return PassCollective(f"all_to_all({kind.phase} {kind.what})", CommType.ALL_TO_ALL,
                          size, group, kind.count // plan.config.accumulation)


def check_experts_exportable(plan: TrainPlan) -> None:
    """A UserError naming why a replay would price the expert-parallel step otherwise."""
    config, workload = plan.config, plan.workload
    if config.ipus_per_replica > 1:
        raise UserError(f"--chakra-out does not export expert parallelism in a pipeline "
                        f"(--ipus-per-replica {config.ipus_per_replica}) yet: the pricing "
                        "takes the busiest stage IPU's all-to-alls as the step's part, which "
                        "a trace of each IPU's all-to-alls does not reproduce")
    if workload.partials_dtype.itemsize != workload.gradient_dtype.itemsize:
        raise UserError(f"--chakra-out does not export expert parallelism whose all-to-alls "
                        f"({workload.partials_dtype}) and gradients "
                        f"({workload.gradient_dtype}) differ in size yet: a replay moves "
                        "every collective in one --dtype")
