"""A tensor-parallel step (``--tensor-parallel T`` or ``T1xT2``, one stage of ``T`` IPUs a
replica) as per-rank Chakra nodes (``ipupod train --chakra-out``), laid out as the pricing
lays it out (:mod:`cluster.training.tensor_parallel_time`): each IPU waits for the host's
input, then for every micro-batch computes its share of the forward pass, runs that
pass's all-reduces, then the backward's share and the backward's all-reduces (the
recomputed forward's first; :mod:`.step_export_passes`), each kind ``count /
accumulation`` times, in the order the pricing adds them. Each all-reduce is a COMM_COLL
ALL_REDUCE on its tensor group's process group: ``tensor R`` (1-D, replica ``R``'s
group), ``tensor R axis t1 J`` or ``tensor R axis t2 I`` (2-D, the ``J``-th ``t1`` group
or ``I``-th ``t2`` group of replica ``R``), ``comm_size`` its bytes. Every group's
all-reduce starts at once, so the replay prices them together as one schedule, as the
pricing does. Then each IPU's gradients are all-reduced with the same IPU of every other
replica (``replica-ipu P``) and the weights updated (or the sharded reduction's three
collectives around the update).

Refused by name: stages of tensor groups (the pricing takes the busiest stage's
all-reduces as the step's part, which per-IPU nodes do not reproduce). The loss's
float32 all-reduces replay in the gradients' ``--dtype`` at the same bytes, which GCL's
schedule prices the same."""

from __future__ import annotations

from cluster.errors import UserError
from cluster.training.chakra.et_nodes import CommType
from cluster.training.chakra.et_writer import compute_node
from cluster.training.chakra.step_export_columns import gradient_nodes
from cluster.training.chakra.step_export_passes import PassCollective, micro_batch_nodes
from cluster.training.chakra.step_export_sharded import sharded_reduction_nodes
from cluster.training.plan import TrainPlan
from cluster.training.sharded_reduction import shards_across_racks
from cluster.training.step_parts import StepTime
from cluster.training.tensor_parallel.layer_allreduces import Axis, Phase
from cluster.training.tensor_parallel_time import CollectiveKind, tensor_parallel_time
from ipupod_proto import chakra_et_pb2 as et


def tensor_rank_nodes(plan: TrainPlan, step: StepTime) -> list[list[et.Node]]:
    """Each rank's nodes (rank ``r`` on IPU ``r``) for the ``plan``'s tensor-parallel step
    priced as ``step`` (one stage: :func:`check_tensor_exportable` first)."""
    config = plan.config
    kinds = tensor_parallel_time(plan).kinds
    # one stage: every IPU holds its share of every layer (as the pricing pads them)
    params = [sum(layer.parameters for layer in plan.rank_workload.layers)]
    gradient_bytes = max(params) * plan.workload.gradient_dtype.itemsize
    sharded = shards_across_racks(config, plan.chains)
    ranks: dict[int, list[et.Node]] = {}
    for replica, chain in enumerate(plan.chains.tolist()):
        for position, ipu in enumerate(chain):
            forward, backward = (
                [_allreduce(plan, k, replica, position) for phase in phases
                 for k in kinds if k.phase is phase]
                for phases in ((Phase.FORWARD,), (Phase.RECOMPUTE, Phase.BACKWARD)))
            nodes = [compute_node(1, "host input", step.host_io_seconds)]
            nodes += micro_batch_nodes(2, config.accumulation, step.compute_seconds,
                                       forward, backward)
            if sharded:
                nodes += sharded_reduction_nodes(plan, step, params, replica, position,
                                                 first_id=len(nodes) + 1)
            else:
                nodes += gradient_nodes(len(nodes) + 1, gradient_bytes, position, step)
            ranks[ipu] = nodes
    return [ranks[ipu] for ipu in sorted(ranks)]


def _allreduce(plan: TrainPlan, kind: CollectiveKind, replica: int,
               position: int) -> PassCollective:
    """The all-reduces of ``kind`` a micro-batch runs on the IPU at ``position`` of
    ``replica``."""
    return PassCollective(f"allreduce({kind.phase} {kind.role} {kind.what})",
                          CommType.ALL_REDUCE, kind.nbytes,
                          _group_name(plan, replica, position, kind.axis),
                          kind.count // plan.config.accumulation)


def _group_name(plan: TrainPlan, replica: int, position: int, axis: Axis) -> str:
    """The process group of the IPU at ``position`` of ``replica``'s tensor group for an
    all-reduce over ``axis`` (``T1`` innermost: position ``j T1 + i``)."""
    if axis is Axis.TENSOR:
        return f"tensor {replica}"
    t1 = plan.config.tensor_parallel.t1
    if axis is Axis.T1:
        return f"tensor {replica} axis t1 {position // t1}"
    return f"tensor {replica} axis t2 {position % t1}"


def check_tensor_exportable(plan: TrainPlan) -> None:
    """A UserError naming why a replay would price the tensor-parallel step otherwise."""
    config = plan.config
    if config.pipeline_stages > 1:
        raise UserError(f"--chakra-out does not export pipeline stages of tensor groups "
                        f"(--ipus-per-replica {config.ipus_per_replica} with "
                        f"--tensor-parallel {config.tensor_parallel}) yet: the pricing takes "
                        "the busiest stage's all-reduces as the step's part, which a trace "
                        "of each IPU's all-reduces does not reproduce; give --ipus-per-replica "
                        f"{config.tensor_parallel.size}")
