"""A priced training step as a Chakra trace (``ipupod train --chakra-out DIR``): rank ``r``
is the replica on IPU ``r``, and its file holds the step as the pricing lays it out, one
part after the other: the host's input, the forward and backward passes, the gradient
all-reduce over every replica (the default process group; ``comm_size`` its bytes in the
gradients' type), the weight update. COMP nodes carry the simulated seconds exactly
(``duration_seconds``), so replaying the trace on the same topology, with the gradients'
type and the run's algorithm, gives the step's time (to rounding).

A pipelined step of one replica is written per IPU by :mod:`.step_export_pipeline`, a
sharded reduction's three collectives by :mod:`.step_export_sharded`, a column split by
:mod:`.step_export_columns`, a tensor-parallel step by :mod:`.step_export_tensor`, an
expert-parallel one by :mod:`.step_export_experts`. Covered: the replicas' IPUs being
IPUs 0 to N-1; what those modules cannot write so that it replays in the step's time is
refused by name (mixture-of-experts layers split over tensor groups among it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cluster.errors import UserError
from cluster.training.chakra.et_nodes import CommType
from cluster.training.chakra.et_writer import collective_node, compute_node
from cluster.training.chakra.step_export_columns import column_rank_nodes
from cluster.training.chakra.step_export_experts import (
    check_experts_exportable,
    expert_rank_nodes,
)
from cluster.training.chakra.step_export_pipeline import (
    check_pipeline_exportable,
    pipeline_rank_nodes,
)
from cluster.training.chakra.step_export_sharded import sharded_rank_nodes
from cluster.training.chakra.step_export_tensor import (
    check_tensor_exportable,
    tensor_rank_nodes,
)
from cluster.training.plan import TrainPlan
from cluster.training.sharded_reduction import shards_across_racks
from cluster.training.step_timing import step_time
from cluster.training.workloads.layers import DType
from ipupod_proto import chakra_et_pb2 as et


@dataclass(frozen=True)
class StepExport:
    """The step's nodes for each rank, and how to replay them as priced: the gradients'
    element type (``--dtype``) and the run's allreduce algorithm (``--algorithm``)."""

    ranks: list[list[et.Node]]
    dtype: DType
    algorithm: str
    sim_seconds: float


def step_export(plan: TrainPlan) -> StepExport:
    """The ``plan``'s step as per-rank Chakra nodes, or a UserError saying what the export
    does not cover yet."""
    config, workload, chains = plan.config, plan.workload, plan.chains
    if not np.array_equal(np.sort(chains.ravel()), np.arange(chains.size)):
        raise UserError("--chakra-out needs the replicas on IPUs 0 to N-1 (a replayed rank "
                        "r runs on IPU r); this run places them elsewhere")
    if config.tensor_parallel.on and any(layer.experts for layer in workload.layers):
        raise UserError(f"--chakra-out does not export mixture-of-experts layers split over "
                        f"tensor groups (--tensor-parallel {config.tensor_parallel}) yet: "
                        "their all-gathers and reduce-scatters, and all-to-alls over each "
                        "tensor rank's expert group, are not written; leave out "
                        "--tensor-parallel to export it")
    if config.splits_columns:
        step = step_time(plan)
        return StepExport(column_rank_nodes(plan, step), workload.gradient_dtype,
                          config.algorithm, step.sim_seconds)
    if config.expert_parallel > 1:
        check_experts_exportable(plan)
        step = step_time(plan)
        return StepExport(expert_rank_nodes(plan, step), workload.gradient_dtype,
                          config.algorithm, step.sim_seconds)
    if config.tensor_parallel.on:
        check_tensor_exportable(plan)
        step = step_time(plan)
        return StepExport(tensor_rank_nodes(plan, step), workload.gradient_dtype,
                          config.algorithm, step.sim_seconds)
    if config.ipus_per_replica > 1:
        check_pipeline_exportable(plan)
        step = step_time(plan)
        return StepExport(pipeline_rank_nodes(plan, step), workload.gradient_dtype,
                          config.algorithm, step.sim_seconds)
    if not np.array_equal(chains[:, 0], np.arange(len(chains))):
        raise UserError("--chakra-out needs replica r on IPU r (a replayed rank r runs on "
                        "IPU r); this run places them in another order")
    ipus = chains[:, 0]
    step = step_time(plan)
    if shards_across_racks(config, chains):
        return StepExport(sharded_rank_nodes(plan, step), workload.gradient_dtype,
                          config.algorithm, step.sim_seconds)
    gradient_bytes = (sum(layer.parameters for layer in workload.layers)
                      * workload.gradient_dtype.itemsize)
    pipeline = (step.compute_seconds + step.pipeline_bubble_seconds
                + step.inter_stage_seconds)
    nodes = [compute_node(1, "host input", step.host_io_seconds),
             compute_node(2, "forward and backward", pipeline, deps=[1]),
             collective_node(3, "allreduce(gradients)", CommType.ALL_REDUCE, gradient_bytes,
                             deps=[2]),
             compute_node(4, "weight update", step.update_seconds, deps=[3])]
    return StepExport([list(nodes) for _ in ipus], workload.gradient_dtype,
                      config.algorithm, step.sim_seconds)
