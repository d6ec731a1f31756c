"""A step of an MLP whose widest layer is split by columns over each replica's IPUs
(``--split shard``) as per-rank Chakra nodes (``ipupod train --chakra-out``), laid out as
the pricing lays it out (:mod:`cluster.training.sharding.cost`): each IPU waits for the
host's input (it reaches the replica's other IPUs through IPU 0's broadcast), computes
its share of every micro-batch (a COMP node of its seconds), then each micro-batch's
exchanges run as collectives on process group ``replica R`` (the replica's IPUs): the
layer input's BROADCAST, the output slices' ALL_GATHER, the output gradient's
REDUCE_SCATTER and, unless the layer is the first, the partial input gradients'
ALL_REDUCE (:mod:`cluster.training.sharding.exchange`), float32, sized as the replay
(and ``ipupod bench``) reads them. Then each IPU's gradients are all-reduced with the same
IPU of every other replica (``replica-ipu P``, the largest IPU's share, as the pricing
pads them), and the weights updated (with the optimiser state sharded across racks, the
three collectives of :mod:`.step_export_sharded` around the update instead). Every
replica's exchange starts at once (each waits for its slowest IPU, and every replica's
slowest is as slow), so the replay prices them together as the pricing does."""

from __future__ import annotations

from cluster.errors import UserError
from cluster.training.chakra.et_nodes import CommType
from cluster.training.chakra.et_writer import collective_node, compute_node
from cluster.training.chakra.step_export_sharded import sharded_reduction_nodes
from cluster.training.plan import TrainPlan
from cluster.training.sharded_reduction import shards_across_racks
from cluster.training.sharding import ColumnSplit, sharded_time
from cluster.training.sharding.exchange import (
    ALGORITHM,
    Exchange,
    backward_exchanges,
    forward_exchanges,
)
from cluster.training.step_parts import StepTime
from gcl.collectives import CollectiveName, DType, collective
from ipupod_proto import chakra_et_pb2 as et

COMM_TYPES = {CollectiveName.BROADCAST: CommType.BROADCAST,
              CollectiveName.ALL_GATHER: CommType.ALL_GATHER,
              CollectiveName.REDUCE_SCATTER: CommType.REDUCE_SCATTER,
              CollectiveName.ALLREDUCE: CommType.ALL_REDUCE}
EXCHANGE_DTYPE = DType.FLOAT32  # what the split's exchanges move


def column_rank_nodes(plan: TrainPlan, step: StepTime) -> list[list[et.Node]]:
    """Each rank's nodes (rank ``r`` on IPU ``r``) for the ``plan``'s column-split step,
    priced as ``step``; a UserError when the replay could not price it so."""
    config = plan.config
    _check_replayable(plan)
    split = ColumnSplit.of(config.spec, config.ipus_per_replica)
    compute = sharded_time(config, plan.topology).ipu_compute_seconds
    exchanges = [_exchange_size(exchange, split, config.micro_batch)
                 for _ in range(config.accumulation)
                 for exchange in (*forward_exchanges(), *backward_exchanges(split))]
    gradient_bytes = max(split.ipu_parameters) * EXCHANGE_DTYPE.itemsize
    sharded = shards_across_racks(config, plan.chains)
    ranks: dict[int, list[et.Node]] = {}
    for replica, chain in enumerate(plan.chains.tolist()):
        for position, ipu in enumerate(chain):
            nodes = [compute_node(1, "host input", step.host_io_seconds),
                     compute_node(2, "forward and backward (its columns)", compute[position],
                                  deps=[1])]
            for comm_type, size in exchanges:
                nodes.append(collective_node(len(nodes) + 1, f"{comm_type}(shard exchange)",
                                             comm_type, size, pg_name=f"replica {replica}",
                                             deps=[len(nodes)]))
            if sharded:
                nodes += sharded_reduction_nodes(plan, step, split.ipu_parameters, replica,
                                                 position, first_id=len(nodes) + 1)
            else:
                nodes += gradient_nodes(len(nodes) + 1, gradient_bytes, position, step)
            ranks[ipu] = nodes
    return [ranks[ipu] for ipu in sorted(ranks)]


def gradient_nodes(first_id: int, gradient_bytes: int, position: int,
                    step: StepTime) -> list[et.Node]:
    """The gradient all-reduce of the IPU at ``position`` with that of every other replica,
    then the update; ids from ``first_id``, the first after node ``first_id - 1``."""
    return [collective_node(first_id, "allreduce(gradients)", CommType.ALL_REDUCE,
                            gradient_bytes, pg_name=f"replica-ipu{position}",
                            deps=[first_id - 1]),
            compute_node(first_id + 1, "weight update", step.update_seconds,
                         deps=[first_id])]


def _check_replayable(plan: TrainPlan) -> None:
    """A UserError naming why a replay would price the split otherwise: one algorithm and
    one element type for every collective, a process group's IPUs in rank order."""
    config, gradient = plan.config, plan.workload.gradient_dtype
    if config.algorithm != ALGORITHM:
        raise UserError(f"--chakra-out exports a column split with --algorithm {ALGORITHM} "
                        f"only: its exchanges run {ALGORITHM} and its gradient all-reduce "
                        f"{config.algorithm}, and a replay takes one --algorithm: give "
                        f"--algorithm {ALGORITHM}")
    if gradient.value != EXCHANGE_DTYPE.value:
        raise UserError(f"--chakra-out exports a column split with {EXCHANGE_DTYPE} gradients "
                        f"only: its exchanges move {EXCHANGE_DTYPE} and its gradients are "
                        f"{gradient}, and a replay takes one --dtype")
    for chain in plan.chains.tolist():
        if chain != sorted(chain):
            raise UserError(f"--chakra-out does not export a column split whose replica's "
                            f"IPUs, in IPU-Link order ({', '.join(map(str, chain))}), are not "
                            "in rank order: a replay runs a process group's collectives in "
                            "rank order, so the times would differ; use --ipus-per-replica 2")


def _exchange_size(exchange: Exchange, split: ColumnSplit,
                   micro_batch: int) -> tuple[CommType, int]:
    """An exchange's Chakra type and ``comm_size``: its elements per IPU (per block) as the
    bytes a replay reads back into them."""
    count = exchange.count(split, micro_batch)
    size = collective(exchange.collective).bytes_for_count(count, split.shards,
                                                           EXCHANGE_DTYPE.itemsize)
    return COMM_TYPES[exchange.collective], size
