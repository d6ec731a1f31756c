"""Where a sharded replica's step time goes: each IPU's compute and the exchanges.

A micro-batch runs as a chain: the head on IPU 0, the broadcast, the shards on every IPU,
the all-gather, the tail and loss on IPU 0 (forward and backward), the reduce-scatter,
the shards' backward, the allreduce of the partials, the head's backward on IPU 0
(:mod:`.exchange`). IPU 0 holds every unsplit layer and the widest shard, so it is the
busiest and its compute is on the chain: a step's span is its compute plus the
exchanges, one micro-batch after the other (no overlap: BSP, compute then exchange).
All simulated seconds, from the catalogue and the cost model; no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cluster.model.topology import Topology
from cluster.training.config import TrainConfig
from cluster.training.placement import replica_ipus
from cluster.training.sharding.columns import ColumnSplit
from cluster.training.sharding.exchange import (
    ALGORITHM,
    ALL_GATHER,
    ALLREDUCE,
    BROADCAST,
    REDUCE_SCATTER,
    Exchange,
    backward_exchanges,
    forward_exchanges,
    shard_group,
)
from cluster.training.workloads import BACKWARD_FLOPS_FACTOR, mlp_workload
from gcl import plan, simulate


@dataclass(frozen=True)
class ShardedTime:
    """Simulated seconds of one step's forward and backward passes of sharded replicas
    (every micro-batch of the step; the gradient allreduce between replicas and the host's
    input are not included). ``compute_seconds`` is the busiest IPU's (IPU 0's);
    ``ipu_compute_seconds`` each IPU position's of a replica; the four ``*_seconds``
    exchanges sum to ``exchange_seconds``."""

    compute_seconds: float
    exchange_seconds: float
    broadcast_seconds: float
    all_gather_seconds: float
    reduce_scatter_seconds: float
    allreduce_seconds: float
    ipu_compute_seconds: tuple[float, ...]

    @property
    def span_seconds(self) -> float:
        """The step's forward and backward passes: the busiest IPU's compute plus the
        exchanges (they alternate; IPU 0 is on the critical path)."""
        return self.compute_seconds + self.exchange_seconds

    @property
    def by_collective(self) -> dict[str, float]:
        """The exchange seconds per step, by collective."""
        return {BROADCAST.label: self.broadcast_seconds,
                ALL_GATHER.label: self.all_gather_seconds,
                REDUCE_SCATTER.label: self.reduce_scatter_seconds,
                ALLREDUCE.label: self.allreduce_seconds}


def sharded_time(config: TrainConfig, topology: Topology) -> ShardedTime:
    """Simulated seconds of a step of ``config`` with the widest layer of each replica
    split over its ``ipus_per_replica`` IPUs (:func:`replica_ipus`, replica after
    replica), on ``topology``."""
    split = ColumnSplit.of(config.spec, config.ipus_per_replica)
    chains = replica_ipus(config, topology).reshape(config.replicas, split.shards)
    per_micro = {exchange.label: exchange_seconds(exchange, split, topology, chains,
                                                  config.micro_batch)
                 for exchange in forward_exchanges() + backward_exchanges(split)}
    seconds = {label: config.accumulation * value for label, value in per_micro.items()}
    ipus = ipu_compute_seconds(split, topology, chains, config.micro_batch, config.accumulation)
    return ShardedTime(
        compute_seconds=max(ipus), exchange_seconds=sum(seconds.values()),
        broadcast_seconds=seconds[BROADCAST.label],
        all_gather_seconds=seconds[ALL_GATHER.label],
        reduce_scatter_seconds=seconds[REDUCE_SCATTER.label],
        allreduce_seconds=seconds.get(ALLREDUCE.label, 0.0), ipu_compute_seconds=ipus)


def exchange_seconds(exchange: Exchange, split: ColumnSplit, topology: Topology,
                     chains: np.ndarray, micro_batch: int) -> float:
    """Simulated seconds of ``exchange`` for one micro-batch of every replica at once
    (replica ``r`` on ``chains[r]``): the schedule real mode runs
    (:func:`gcl.plan`, the same algorithm), costed by :func:`gcl.simulate`."""
    schedule = plan(exchange.collective, topology, exchange.count(split, micro_batch),
                    algorithm_name=ALGORITHM, group=shard_group(split),
                    ipus=chains.ravel(), root=0)
    return simulate(schedule, topology).sim_seconds


def ipu_compute_seconds(split: ColumnSplit, topology: Topology, chains: np.ndarray,
                        micro_batch: int, micro_batches: int) -> tuple[float, ...]:
    """Each IPU position's compute for a step: its shard's FLOPs (IPU 0's plus every other
    layer's) at the IPU's float32 peak (GC2 31.1 TFLOPS, GC200 62.5 TFLOPS: public docs,
    see cluster/model/hardware.py), backward twice the forward (BACKWARD_FLOPS_FACTOR), the
    slowest replica at each position."""
    workload = mlp_workload(split.spec)
    rest = sum(layer.forward_flops for i, layer in enumerate(workload.layers)
               if i != split.layer)
    flops = np.array([2 * split.fan_in * len(cols) + (rest if k == 0 else 0)
                      for k, cols in enumerate(split.columns)], dtype=np.float64)
    peak = np.array([[topology.ipu_processors[int(ipu)].fp32_flops_per_second for ipu in chain]
                     for chain in chains])
    per_sample = (1 + BACKWARD_FLOPS_FACTOR) * flops / peak  # (replicas, K)
    return tuple(float(s) for s in micro_batches * micro_batch * per_sample.max(axis=0))
