"""Sharding: the MLP's widest layer split by columns over the IPUs of a replica's Graph
Compile Domain, every other layer on its first IPU (docs/hardware.md, "Model parallelism":
sharding across the GCD).

- :mod:`.columns`: the arithmetic, pure NumPy, equal to the whole model's;
- :mod:`.exchange`: the four collectives a micro-batch needs between the IPUs;
- :mod:`.cost`: phantom mode, each IPU's compute and the exchanges in simulated seconds;
- real mode, the shards on the devices: :mod:`cluster.training.engines.sharded` and its
  cards' tasks (:mod:`cluster.training.engines.shard_tasks`).
"""

from cluster.training.sharding.columns import (
    ColumnSplit,
    head_backward,
    head_forward,
    shard_backward,
    shard_columns,
    shard_forward,
    sharded_loss_and_grad,
    tail_forward_backward,
    widest_layer,
)
from cluster.training.sharding.cost import ShardedTime, sharded_time

__all__ = ["ColumnSplit", "ShardedTime", "head_backward", "head_forward", "shard_backward",
           "shard_columns", "shard_forward", "sharded_loss_and_grad", "sharded_time",
           "tail_forward_backward", "widest_layer"]
